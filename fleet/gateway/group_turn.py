"""A gateway's turn in a group behind a floating address: the decisions of rolling the gateways one at a
time without failing a request (out of the election, handing the address on with its connections routed back,
restarted, ready, let back in; undone should it fail), over an abstract group (tasks/gateway_turns.py over SSH,
a simulation in the tests). Apart from the floating address's model and commands (fleet/gateway/floating.py)
so each reads on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fleet.gateway.floating import Vrrp

# --- a gateway's turn: the decisions, over an abstract group -------------------------------------

@dataclass(frozen=True)
class Member:
    """One gateway of the group, as its facts read now."""

    name: str
    address: str  # where the others reach it (its inventory address), the handoff's route
    priority: int
    vrrp: Vrrp
    ready: bool  # smg's /readiness is 200

    @property
    def eligible(self) -> bool:
        """keepalived could give it the address: running, not held out, smg ready and running."""
        return self.vrrp.active and not self.vrrp.handoff and not self.vrrp.stopped and self.ready


class TurnError(Exception):
    """A gateway's turn cannot go on: what is read or done on a gateway failed, or a wait ran out."""


class Group(Protocol):
    """The gateway group as one gateway's turn needs it (tasks/gateway_turns.py over SSH; a simulation in the tests)."""

    def members(self) -> list[Member]: ...  # every gateway of the group, priority order, read now; TurnError
    def hold(self, m: Member, on: bool) -> None: ...  # the floating address on its loopback, or not
    def forward(self, m: Member, to: Member | None) -> None: ...  # its route for old connections to `to`, or none
    def handoff(self, m: Member, on: bool) -> None: ...  # held out of the election, or let back in
    def restart(self, m: Member) -> None: ...  # its smg restarted (SIGTERM: in-flight requests end first)
    def wait_ready(self, m: Member, like: Member | None) -> None: ...  # ready, every replica `like` has ready too
    def wait_holder(self, m: Member) -> None: ...  # until it holds the address, within the failover bound
    def wait_idle(self, m: Member) -> None: ...  # until no client connection is left on it, within a bound
    def log(self, message: str, color: str | None = None) -> None: ...


@dataclass
class Turn:
    """What became of one gateway's turn."""

    restarted: bool = False
    handed_to: str = ""  # the gateway it gave the address to, where it held it
    took_back: str = ""  # the gateway it took the address back from (preempt)


def holder(members: list[Member]) -> Member | None:
    held = [m for m in members if m.vrrp.holds]
    return held[0] if len(held) == 1 else None


def successor(me: Member, members: list[Member]) -> Member | None:
    """Who takes the address from `me`: the eligible other gateway keepalived would elect (highest priority)."""
    return next((m for m in sorted(members, key=lambda m: -m.priority) if m.name != me.name and m.eligible), None)


def gateway_turn(me_name: str, group: Group, restart: bool, preempt: bool, later: frozenset[str] = frozenset()) -> Turn:
    """One gateway's turn: out of the election (handing the address to a successor first, where it holds
    it, its connections routed back to it), restarted where `restart`, ready again with every replica the
    holder routes, the routes to it and its hold cleared, back in the election. Where it then takes the
    address back (preempt, and it outranks the holder), that move is a handoff too: the route to the other
    stays until the other's own turn (`later`: the gateways whose turns come after this one) or, where it has
    none, until it has no connection left. A turn that finds its gateway held out or routed to (a run lost
    mid-turn) finishes it. Any exception (TurnError, a bug, Ctrl-C, a timeout) undoes the handoff before it
    goes on up: every route and loopback hold the turn put or found is cleared, the gateway let back into the
    election (requests still in flight on the old connections may end: the turn failed); the address is where
    keepalived put it."""
    turn = Turn()
    members = group.members()
    me = _named(members, me_name)
    to = successor(me, members) if me.vrrp.holds else None
    if me.vrrp.holds and to is None:
        raise TurnError(f"{me.name} holds the floating address and no other gateway is ready to take it "
                        "(keepalived running, not held out, smg ready): it is not restarted")
    left = _Left({m.name: m for m in members if m.vrrp.forwards_to == me.address},
                {me.name: me} if me.vrrp.on_loopback else {})
    try:
        if to is not None:
            group.log(f"hands the floating address to {to.name}: its requests in flight end here", "cyan")
            left.holds[me.name] = me
            group.hold(me, True)
            left.routes[to.name] = to
            group.forward(to, me)
            group.handoff(me, True)
            group.wait_holder(to)
            turn.handed_to = to.name
        elif not me.vrrp.handoff:
            group.handoff(me, True)  # no address to give: held out all the same, so it takes none while restarting
        if restart:
            group.restart(me)
            turn.restarted = True
        members = group.members()
        me, now = _named(members, me_name), holder(members)
        group.wait_ready(me, now if now is not None and now.name != me.name else None)
        _release(me, members, group, left, drained=restart)
        takes = now is not None and now.name != me.name and preempt and me.priority > now.priority
        if takes:  # it takes the address back once let in: that move keeps the holder's requests in flight too
            group.log(f"takes the floating address back from {now.name} (preempt): its requests in flight end there",
                      "cyan")
            left.holds[now.name] = now
            group.hold(now, True)
            left.routes[me.name] = me
            group.forward(me, now)
        group.handoff(me, False)
        if takes:
            group.wait_holder(me)
            turn.took_back = now.name
            if now.name not in later:  # no turn of its own to end its connections: wait for them
                _release(now, group.members(), group, left, drained=False)
    except BaseException:
        _undo(me, group, left)
        raise
    return turn


@dataclass
class _Left:
    """What a turn has in place on the group's gateways (or found a lost run's), taken away should it fail."""

    routes: dict[str, Member]  # the gateways routing old connections on
    holds: dict[str, Member]  # the gateways holding the floating address on their loopback


def _undo(me: Member, group: Group, left: _Left) -> None:
    """Each route, then each hold, then the gateway's handoff, ended whatever the others do: one failing
    (its host gone too) is logged and the next tried; the turn's own exception is the one that goes up."""
    steps = [(f"{m.name}'s route for old connections", lambda m=m: group.forward(m, None))
             for m in left.routes.values()]
    steps += [(f"the floating address on {m.name}'s loopback", lambda m=m: group.hold(m, False))
              for m in left.holds.values()]
    steps.append((f"{me.name} held out of the election", lambda: group.handoff(me, False)))
    for what, step in steps:
        try:
            step()
        except Exception as e:  # the undo goes on; a second Ctrl-C or a timeout still ends it
            try:
                group.log(f"the turn's undo could not end {what}: {e}", "yellow")
            except Exception:  # a log that fails tells nothing more
                pass


def _named(members: list[Member], name: str) -> Member:
    found = [m for m in members if m.name == name]
    if not found:
        raise TurnError(f"{name} is not among the gateways read ({', '.join(m.name for m in members)})")
    return found[0]


def _release(me: Member, members: list[Member], group: Group, left: _Left, drained: bool) -> None:
    """The routes to `me` and its hold gone: at once where its restart ended its connections (drained),
    else once it has none left (within the wait's bound)."""
    routes = [m for m in members if m.vrrp.forwards_to == me.address]
    if (routes or me.vrrp.on_loopback) and not drained:
        group.wait_idle(me)
    for m in routes:
        group.forward(m, None)
        left.routes.pop(m.name, None)
    if me.vrrp.on_loopback:
        group.hold(me, False)
        left.holds.pop(me.name, None)
