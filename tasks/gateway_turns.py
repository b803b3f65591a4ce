"""A gateway group's turns: its gateways restarted one at a time (inventory order), each handing the floating
address over first where it holds it (fleet.gateway.group_turn.gateway_turn decides; Ssh here does the talking to the
group's hosts), so a change to smg fails no request. One turn at a time: a turn waits for the turns before
it to end; the first that fails stops the group's roll, and the gateways after it keep serving as they are.

A turn whose gateway a lost run left held out of the election finishes it, before the other turns (its
restart only where its smg does not run what its files say)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gevent.event import Event
from gevent.lock import Semaphore

from adapter import run as runs
from facts.gateway import host_command
from fleet.gateway import floating
from fleet.core.bounds import MARGIN_S, Bound
from fleet.gateway.floating import handoff_command, interface_for, priority, set_handoff
from fleet.gateway.group_turn import Member, TurnError, gateway_turn
from fleet.gateway.models import Gateway
from fleet.gateway.smg import READY, parse_gateway_host, parse_workers, workers_command
from fleet.core.outcome import HostVerdict
from fleet.turns.rolling import PROGRESS_EVERY_S
from fleet.core.wire import Unreadable, excerpt
from tasks.common import HostLost, PeerError, fail, on_peer

POLL_S = 0.5  # between the reads of a wait


@dataclass
class GroupTurns:
    """One gateway group's turns this run, shared by its hosts' operations."""

    order: list[str] = field(default_factory=list)  # who takes a turn: a lost run's first, then inventory order
    first: set[str] = field(default_factory=set)  # of them, those a lost run left mid-turn
    ended: dict[str, Event] = field(default_factory=dict)
    stopped: str = ""  # why the group's roll stopped; '' while it goes on
    connect_lock: Semaphore = field(default_factory=Semaphore)


def enlist(host, group: str, first: bool) -> None:
    """At prepare time: the host takes a turn in its group's roll (hosts are prepared in any order). first: a
    lost run left it mid-turn (held out of the election): it goes before the others, which may need it to
    take the address."""
    turns = runs.of(host.state).gateway_turns.setdefault(group, GroupTurns())
    turns.order.append(host.name)
    turns.ended[host.name] = Event()
    if first:
        turns.first.add(host.name)
    inventory = [h.name for h in host.state.inventory]
    turns.order.sort(key=lambda name: (name not in turns.first, inventory.index(name)))


def turn_s(gw: Gateway) -> float:
    """The most one turn can take: the handoff, the restart, the wait for ready, a wait for connections to end
    (twice, with preempt), each with its commands."""
    f = gw.floating
    waits = (f.failover_s + f.preempt_delay_s + floating.TRACK_RISE * floating.TRACK_INTERVAL_S) if f else 0
    return restart_bound(gw).seconds + gw.rolling.ready_timeout_s + 2 * waits + 2 * gw.shutdown_grace_period_s \
        + 20 * MARGIN_S


def restart_bound(gw: Gateway) -> Bound:
    return Bound(f"the restart of {gw.service_unit}", gw.shutdown_grace_period_s + 15 + MARGIN_S,
                 f"gateway.shutdown_grace_period_s {gw.shutdown_grace_period_s} + 15 (TimeoutStopSec) + {MARGIN_S}")


def take_turn(state, host, gw: Gateway, group: str, restart: bool) -> bool:
    """pyinfra's python.call: the host's turn, once every turn before it has ended."""
    turns = runs.of(state).gateway_turns[group]
    report = runs.of(state).report.host(host.name)
    mine = turns.order.index(host.name)
    try:
        deadline = time.monotonic() + turn_s(gw) * mine  # a backstop: every command of a turn has its bound
        for earlier in turns.order[:mine]:
            while not turns.ended[earlier].wait(timeout=POLL_S) and not turns.stopped:
                if earlier in {h.name for h in state.failed_hosts}:  # failed before its turn came
                    turns.stopped = f"{earlier} failed before its turn"
                elif time.monotonic() > deadline:
                    turns.stopped = f"{earlier}'s turn did not end within its bound"
        if turns.stopped:
            report.verdict = HostVerdict.NOT_ROLLED
            report.reasons.append(f"{host.name}: not restarted: the roll of gateway group {group} stopped "
                                  f"({turns.stopped}); the next deploy rolls it")
            return True
        ssh = Ssh(gw, group, [h for h in state.inventory if group in h.groups], host, turns.connect_lock)
        try:
            turn = gateway_turn(host.name, ssh, restart, gw.floating.preempt, frozenset(turns.order[mine + 1:]))
        except (TurnError, PeerError, HostLost) as e:
            why = getattr(e, "why", None) or str(e)
            turns.stopped = f"{host.name}'s turn failed"
            return fail(host, f"{host.name}: gateway turn: {why}; its handoff undone, back in the floating address's "
                              "election (what the undo could not end, the next deploy's turn does)")
        except BaseException:  # its handoff undone by the turn; the gateways after it keep serving as they are
            turns.stopped = f"{host.name}'s turn failed"
            raise
        if turn.handed_to:
            report.notes.append(f"handed the floating address {gw.floating.address} to {turn.handed_to} for its "
                                "restart, its requests in flight ended here")
        if turn.took_back:
            report.notes.append(f"took the floating address back from {turn.took_back} (preempt)")
        report.verdict = HostVerdict.OK
        return True
    finally:
        turns.ended[host.name].set()


class Ssh:
    """fleet.gateway.group_turn.Group over SSH: every command on the group's hosts through on_peer (the turn's own host
    too), each within its bound; the waits poll with their own bounds."""

    def __init__(self, gw: Gateway, group: str, hosts: list, me, connect_lock: Semaphore):
        self.gw, self.group, self.hosts, self.me, self.lock = gw, group, hosts, me, connect_lock
        self.by_name = {h.name: h for h in hosts}

    def _on(self, m: Member | str, command: str, what: str, bound: Bound | None = None) -> str:
        name = m if isinstance(m, str) else m.name
        try:
            return on_peer(self.by_name[name], self.lock, command, f"gateway {name}", what, bound)
        except PeerError as e:
            raise TurnError(str(e)) from None

    def members(self) -> list[Member]:
        out = []
        for i, h in enumerate(self.hosts):
            read = parse_gateway_host(self._on(h.name, host_command(self.gw, self.group), "reading its keepalived"))
            iface, why = interface_for(self.gw.floating.address, list(read.interfaces))
            if read.vrrp is None or iface is None or read.problem:
                raise TurnError(f"gateway {h.name}: {why or read.problem or 'no keepalived answer'}")
            out.append(Member(h.name, str(iface.network.ip), priority(i), read.vrrp, read.ready))
        return out

    def hold(self, m: Member, on: bool) -> None:
        self._on(m, handoff_command("hold", self.gw.floating.address, "on" if on else "off"),
                 "the floating address on its loopback" if on else "the floating address off its loopback")

    def forward(self, m: Member, to: Member | None) -> None:
        self._on(m, handoff_command("forward", self.gw.floating.address, str(self.gw.port), to.address if to else "-"),
                 f"routing old connections to {to.name}" if to else "no more routing of old connections")

    def handoff(self, m: Member, on: bool) -> None:
        self._on(m, set_handoff(self.gw.unit, on), "held out of the election" if on else "back in the election")

    def restart(self, m: Member) -> None:
        self.log(f"restarts {self.gw.service_unit} on {m.name} (its requests in flight end first)", "cyan")
        self._on(m, f"systemctl restart {self.gw.service_unit}", "its restart", restart_bound(self.gw))

    def wait_ready(self, m: Member, like: Member | None) -> None:
        def missing() -> str:
            try:
                mine = self._workers(m)
            except TurnError as e:  # starting: not answering yet
                return str(e)
            wanted = self._workers(like) if like is not None else {}
            lacking = sorted(u for u, s in wanted.items() if s == READY and mine.get(u) != READY)
            return f"{', '.join(lacking)} ready in {like.name}, not in it" if lacking else ""
        self._until(f"{m.name}'s smg answering" + (f", every replica ready in {like.name} ready in it" if like else ""),
                    missing, self.gw.rolling.ready_timeout_s)

    def wait_holder(self, m: Member) -> None:
        f = self.gw.floating
        self._until(f"{m.name} holding {f.address}",
                    lambda: "" if self._holds(m) else "not yet",
                    f.failover_s + f.preempt_delay_s + floating.TRACK_RISE * floating.TRACK_INTERVAL_S)
        self.log(f"{m.name} holds the floating address {f.address}", "cyan")

    def wait_idle(self, m: Member) -> None:
        def open_ones() -> str:
            said = self._on(m, floating.connections_command(self.gw.port), "its client connections")
            count = floating.connection_count(said)
            if count is None:  # ss did not run: not "0 connections"
                raise TurnError(f"gateway {m.name}: expected a count of its client connections (ss), found "
                                f"{excerpt(said) or 'nothing'}")
            return f"{count} open" if count else ""
        self._until(f"the client connections left on {m.name} to end", open_ones,
                    self.gw.shutdown_grace_period_s, give_up=False)

    def log(self, message: str, color: str | None = None) -> None:
        self.me.log_styled(message, fg=color)

    def _holds(self, m: Member) -> bool:
        out = self._on(m, f"ip -o -4 addr show to {self.gw.floating.address}/32 | awk '{{print $2}}'",
                       "where the floating address is")
        return any(dev != "lo" for dev in out.split()[:16])

    def _workers(self, m: Member) -> dict[str, str]:
        try:
            return parse_workers(self._on(m, workers_command(self.gw), "GET /workers"))
        except Unreadable as e:
            raise TurnError(f"gateway {m.name}: {e}") from None

    def _until(self, what: str, why_not, timeout_s: float, give_up: bool = True) -> None:
        """Poll why_not() ('' once done) until done or timeout_s: TurnError then, or (give_up False) on."""
        started = said = time.monotonic()
        while True:
            why = why_not()
            if not why:
                return
            now = time.monotonic()
            if now - started >= timeout_s:
                if give_up:
                    raise TurnError(f"expected {what} within {timeout_s:g}s, found {why}")
                self.log(f"{what}: not within {timeout_s:g}s ({why}); going on", "yellow")
                return
            if now - said >= PROGRESS_EVERY_S:
                self.log(f"waiting for {what}: {now - started:.0f}s of {timeout_s:g}s ({why})")
                said = now
            time.sleep(POLL_S)
