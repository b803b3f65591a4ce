"""A replica's way out of the gateway and back around its restart: plain decisions over an abstract
interface (tasks/rolling.py talks to the gateway and the replica; a script in the tests).

In its class's turn (tasks/rolling.py: the canary alone, then at most rolling.max_unavailable), a
replica of a class the gateway routes:
  1. goes out only if a peer of the same served model is `ready` in smg and not drained (a replica smg does not
     route to needs none), checked again and taken under the drains' lock on the gateway host (fleet/turns/drains.py):
     else its rollout ends without a change
  2. leaves the discovery file (its drain recorded on the gateway host, its owner and lease), and is drained: smg no longer routes to it and SGLang's /metrics
     shows nothing running or queued, or drain_timeout_s passes (SGLang's own SIGTERM drain then
     finishes what is left, KillMode=mixed)
  3. is activated (restart, gate, smoke test, or roll back: fleet/rollout/activation.py)
  4. serving again, new spec or old: back in the file, `ready` in smg within ready_timeout_s (a make
     tune candidate stays out); not serving: left out, and its row says so. Whatever raises in
     between, it is put back if it serves, or its row says why not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from fleet.rollout.activation import Outcome
from fleet.turns.drains import Answer, DrainResult
from fleet.gateway.models import GatewayRolling
from fleet.gateway.smg import READY, Replica, peer_problem, ready_peers, routed
from fleet.core.outcome import HostVerdict


@dataclass(frozen=True)
class Turns:
    """The order of a class's restarts this run (tasks/rolling.py waits for them)."""

    first: tuple[str, ...]  # alone, before any other: the canary, or the rollouts an interrupted run left mid-change
    rest: tuple[str, ...]  # once all of `first` passed: at most rolling.max_unavailable at a time
    mid_change: frozenset[str]  # of `first`: each goes at once, wherever its peers are (it is down or half-way)


def turns(hosts: list[tuple[str, bool]]) -> Turns:
    """hosts: (name, mid_change) for each of the class's hosts whose service restarts this run (or that
    takes over an interrupted rollout), in inventory order. mid_change: its interrupted rollout's turn had
    come (fleet.rollout.pending.Pending.mid_change): it may be down now, so it goes first, at once, and stands for the
    canary; a host whose interrupted rollout had only begun waits for its turn like any other, so a run
    killed during the canary does not restart the rest of the class together."""
    mid = tuple(name for name, mid_change in hosts if mid_change)
    waiting = tuple(name for name, mid_change in hosts if not mid_change)
    return Turns(mid, waiting, frozenset(mid)) if mid else Turns(waiting[:1], waiting[1:], frozenset())


class GatewayError(Exception):
    """The gateway could not be read or written: the replica does not go out (or stays out)."""


class Through(Protocol):
    """The gateway and the replica, as a replica's turn needs them."""

    name: str  # the gateway host, for messages

    def statuses(self) -> dict[str, str]: ...  # smg's /workers: url -> status; GatewayError
    def take_out(self, peers: tuple[str, ...]) -> Answer: ...  # drained unless a peer counted is; GatewayError
    def put_in(self) -> None: ...  # its drain ended, back in the discovery file; GatewayError
    def load(self) -> float | None: ...  # running + queued requests on the replica; None: no counts
    def log(self, message: str, color: str | None = None) -> None: ...
    def now(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


PROGRESS_EVERY_S = 15  # how often a wait says where it is


def wait_for(gw: Through, good: Callable[[dict], bool], timeout_s: float, poll_s: float, what: str) -> dict[str, str]:
    """smg's worker statuses once `good` holds, or as they are when timeout_s has passed."""
    started = said = gw.now()
    while True:
        statuses = gw.statuses()
        now = gw.now()
        if good(statuses) or now - started >= timeout_s:
            return statuses
        if now - said >= PROGRESS_EVERY_S:
            gw.log(f"waiting for {what}: {now - started:.0f}s of {timeout_s:g}s")
            said = now
        gw.sleep(poll_s)


def drain(gw: Through, me: Replica, r: GatewayRolling) -> None:
    """Until smg no longer routes to it and SGLang has nothing running or queued, or the drain
    timeout: then the stop's SIGTERM lets SGLang finish what is left (KillMode=mixed)."""
    started = said = gw.now()
    while True:
        still_routed = routed(gw.statuses(), me.url)
        busy = gw.load()
        # no counts: not serving, or service.enable_metrics false; then only SGLang's own drain can tell
        load = "no request counts on its /metrics" if busy is None else f"{busy:g} requests running or queued"
        elapsed = gw.now() - started
        if not still_routed and not busy:
            gw.log(f"drained in {elapsed:.1f}s: not routed, " + ("nothing running or queued" if busy == 0 else
                   f"{load} (SGLang's SIGTERM drain finishes whatever still runs)"), "cyan")
            return
        if elapsed >= r.drain_timeout_s:
            gw.log(f"drain timeout {r.drain_timeout_s:g}s: " + ("still routed by smg, " if still_routed else "")
                   + f"{load}; stopping it anyway (SGLang drains them on SIGTERM)", "yellow")
            return
        if gw.now() - said >= PROGRESS_EVERY_S:
            gw.log(f"draining: {'routed' if still_routed else 'not routed'}, {load}, "
                   f"{elapsed:.0f}s of {r.drain_timeout_s:g}s")
            said = gw.now()
        gw.sleep(r.poll_interval_s)


def serves(outcome: Outcome) -> bool:
    """After its activation the replica serves: the new spec, or the old one rolled back."""
    return outcome.verdict.serves


def go_out(me: Replica, replicas: list[Replica], r: GatewayRolling, gw: Through) -> str | None:
    """Out of the gateway once a peer of its model is ready there: counted from smg's view, then taken on the gateway
    host only if none of the peers counted is drained by then (another class's turn, a make tune). None: out; else why
    not, once ready_timeout_s has passed or another owner holds the replica itself."""
    started, said = gw.now(), False
    while True:
        statuses = gw.statuses()
        problem = peer_problem(me, replicas, statuses)
        if problem is None:
            answer = gw.take_out(ready_peers(me, replicas, statuses))
            if answer.ok:
                return None
            if answer.result is not DrainResult.PEER:  # held by another owner, or a drains file not ours: no wait helps
                return answer.describe()
            problem = answer.describe()
            if not said:
                gw.log(f"waiting for another peer in gateway {gw.name}: {problem}", "yellow")
                said = True
        if gw.now() - started >= r.ready_timeout_s:
            return problem
        gw.sleep(r.poll_interval_s)


def through_gateway(me: Replica, replicas: list[Replica], r: GatewayRolling, gw: Through,
                    go: Callable[[], Outcome], leave: Callable[[str], Outcome], stay_out: bool = False) -> Outcome:
    """The replica's turn: out of the gateway, drained, `go` (its activation), back in; or `leave`
    (its begun rollout ended without a change) when it may not go out. stay_out: a make tune candidate,
    measured alone and kept out until the tune's last run (no candidate) puts it back."""
    try:
        problem = go_out(me, replicas, r, gw)
    except GatewayError as e:  # it may be out of some gateway hosts of the group
        put_back(gw)
        return leave(str(e))
    if problem:
        return leave(f"{me.host}: gateway {gw.name}: {problem}")
    try:
        gw.log(f"out of gateway {gw.name}; draining (up to {r.drain_timeout_s:g}s)", "cyan")
        drain(gw, me, r)
    except GatewayError as e:
        put_back(gw)
        return leave(str(e))
    try:
        outcome = go()
    except BaseException:
        # the activation broke off (a lost link, say): what the host serves now is unknown, so it
        # stays out; its row says so (tasks/rolling.py), and a later run puts it back
        gw.log(f"left out of gateway {gw.name}: its rollout broke off", "red")
        raise
    if not serves(outcome):
        gw.log(f"left out of gateway {gw.name}: not serving", "red")
        outcome.reasons.append(f"{me.host}: left out of gateway {gw.name}: it does not serve "
                               "(the next run that serves it puts it back)")
        return outcome
    if stay_out:
        gw.log(f"kept out of gateway {gw.name}: a make tune candidate", "cyan")
        return outcome
    return back_in(me, r, gw, outcome)


def back_in(me: Replica, r: GatewayRolling, gw: Through, outcome: Outcome) -> Outcome:
    """A replica that serves again, back in the discovery file and `ready` in smg."""
    try:
        gw.put_in()
        statuses = wait_for(gw, lambda s: s.get(me.url) == READY, r.ready_timeout_s, r.poll_interval_s,
                            f"{me.url} ready in the gateway")
        if statuses.get(me.url) != READY:
            raise GatewayError(f"gateway {gw.name}: expected {me.url} ready within {r.ready_timeout_s:g}s, "
                               f"found {statuses.get(me.url, 'not registered')}")
    except GatewayError as e:
        outcome.verdict = HostVerdict.NOT_READY_IN_GATEWAY if outcome.ok else outcome.verdict
        outcome.reasons.append(str(e))
        return outcome
    gw.log(f"back in gateway {gw.name}: ready", "green")
    return outcome


def put_back(gw: Through) -> None:
    try:
        gw.put_in()
    except GatewayError:
        pass  # the next run's gateway step writes the whole file again
