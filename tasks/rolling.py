"""The rolling rollout of a class behind the gateway: no request fails while its replicas restart.

pyinfra runs an operation on every host at once; activate's restart would take the whole class
down together. For a class a gateway routes, each host's activation waits for its turn here:
the class's first host to restart (the canary) goes alone; after it, at most
gateway.rolling.max_unavailable at a time. Per replica:

  1. a peer of the same served model is `ready` in smg's /workers (else it does not go out)
  2. out of the discovery file; wait until smg no longer routes to it and SGLang's /metrics shows
     nothing running or queued (bounded by drain_timeout_s; SGLang drains the rest on SIGTERM)
  3. the usual activation: restart, gate, smoke test, or roll back
  4. serving (new spec, or the old one rolled back): back in the file; wait until smg says `ready`

A failure stops the class: the hosts whose turn has not come are left as they are, serving, and
their begun rollouts end without a change. The decisions are in fleet/gateway.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gevent.event import Event
from gevent.lock import BoundedSemaphore, Semaphore

from fleet import activation, gate
from fleet.gate import url_host
from fleet.gateway import (
    READY,
    Gateway,
    Replica,
    discovery_file,
    parse_workers,
    peer_problem,
    routed,
    workers_command,
)
from fleet.groupdata import SpecError, load_class_specs, load_gateways, validate_host
from fleet.rollout import write_command
from fleet.status import parse_metrics
from tasks.common import run

IDLE_METRICS = ("sglang:num_running_reqs", "sglang:num_queue_reqs")


class GatewayError(Exception):
    """The gateway could not be read or written: the replica does not go out (or stays out)."""


def replicas(state, gw: Gateway, group_dir: str = "group_data") -> list[Replica]:
    """Every inventory host of the classes `gw` routes (limited or not), in inventory order, at the
    address pyinfra connects to."""
    out = []
    for h in state.inventory:
        cls = next((g for g in h.groups if g in gw.routes), None)
        if cls is None:
            continue
        spec = validate_host(f"{group_dir}/{cls}.py", h.data.dict())
        address = url_host(h.data.get("ssh_hostname") or h.name)
        out.append(Replica(h.name, cls, spec.service.served_model_name, f"http://{address}:{spec.service.port}"))
    return out


@dataclass
class ClassRoll:
    """One class's rollout behind its gateway, shared by its hosts' activations."""

    gpu_class: str
    gw: Gateway
    gw_host: object  # pyinfra Host
    replicas: list[Replica]
    order: list[str] = field(default_factory=list)  # hosts that restart, inventory order; [0] is the canary
    stopped: str = ""  # why the class's rollout stopped; '' while it goes on
    out: set[str] = field(default_factory=set)
    canary_done: Event = field(default_factory=Event)
    file_lock: Semaphore = field(default_factory=Semaphore)
    connect_lock: Semaphore = field(default_factory=Semaphore)

    def __post_init__(self) -> None:
        self.slots = BoundedSemaphore(self.gw.rolling.max_unavailable)  # turns after the canary's

    def replica(self, name: str) -> Replica:
        return next(r for r in self.replicas if r.host == name)


ROLLS: dict[str, ClassRoll] = {}


def enlist(host, pf, group_dir: str = "group_data") -> None:
    """At prepare time (pyinfra prepares the hosts in any order): a host whose service restarts takes
    part in its class's rollout, if a gateway in the inventory routes that class."""
    if not pf.plan.restart or pf.plan.finish_rollback:
        return
    roll = ROLLS.get(pf.group)
    if roll is None:
        roll = _class_roll(host.state, pf.group, group_dir)
        if roll is None:
            return
        ROLLS[pf.group] = roll
    roll.order.append(host.name)
    roll.order.sort(key=[r.host for r in roll.replicas].index)  # hosts are prepared in any order


def _class_roll(state, gpu_class: str, group_dir: str) -> ClassRoll | None:
    try:
        gateways = load_gateways(Path(group_dir), load_class_specs(Path(group_dir)))
    except SpecError:
        return None  # the inventory's own check has refused the run already
    for group, gw in gateways.items():
        hosts = [h for h in state.inventory if group in h.groups]
        if gpu_class in gw.routes and hosts:
            return ClassRoll(gpu_class, gw, hosts[0], replicas(state, gw, group_dir))
    return None  # no gateway in this inventory routes it: today's behaviour


def take_turn(host, pf, steps, go: Callable[[], activation.Outcome],
              leave: Callable[[str], activation.Outcome]) -> activation.Outcome:
    """Run `go` (the activation) in the host's turn, drained out of the gateway around it; or
    `leave` (end the begun rollout without a change) if the class's rollout stopped first."""
    roll = ROLLS.get(pf.group)
    if roll is None or host.name not in roll.order:
        return go()
    canary = roll.order[0]
    if host.name != canary:
        while not roll.canary_done.wait(timeout=1):
            if canary in {h.name for h in host.state.failed_hosts}:  # failed before its turn came
                roll.stopped = roll.stopped or f"the canary {canary} failed"
                break
    if roll.stopped:
        return _left(leave, roll)
    with roll.slots:
        try:
            if roll.stopped:
                return _left(leave, roll)
            if host.name == canary:
                steps.log(f"canary of {roll.gpu_class}: the other replicas wait for it", "cyan")
            outcome = _roll_one(roll, host, pf, steps, go, leave)
            if not outcome.ok:
                roll.stopped = roll.stopped or f"after {host.name}: {outcome.verdict}"
            return outcome
        except BaseException:
            roll.stopped = roll.stopped or f"after {host.name}: an error"
            raise
        finally:
            if host.name == canary:
                roll.canary_done.set()


def _left(leave, roll: ClassRoll) -> activation.Outcome:
    outcome = leave(f"not rolled: the rollout of {roll.gpu_class} stopped ({roll.stopped})")
    if outcome.verdict == "FAILED (service untouched)":
        outcome.verdict = "NOT ROLLED (serving as before)"
        outcome.next = f"fix what stopped the rollout (above), then make deploy rolls {roll.gpu_class} again"
    return outcome


def _roll_one(roll: ClassRoll, host, pf, steps, go, leave) -> activation.Outcome:
    me, r = roll.replica(host.name), roll.gw.rolling
    try:
        statuses = _wait_for(roll, steps, lambda s: peer_problem(me, roll.replicas, s) is None,
                             r.ready_timeout_s, "a peer ready in the gateway")
    except GatewayError as e:
        return leave(str(e))
    problem = peer_problem(me, roll.replicas, statuses)
    if problem:
        return leave(f"{host.name}: gateway {roll.gw_host.name}: {problem}")
    try:
        _set_out(roll, host.name, True)
        steps.log(f"out of gateway {roll.gw_host.name}; draining (up to {r.drain_timeout_s:g}s)", "cyan")
        _drain(roll, me, host, pf, steps)
    except GatewayError as e:
        _put_back_quietly(roll, host.name)
        return leave(str(e))
    outcome = go()
    if not (outcome.ok or outcome.verdict == "FAILED (rolled back)"):
        steps.log(f"left out of gateway {roll.gw_host.name}: not serving", "red")
        return outcome
    try:
        _set_out(roll, host.name, False)
        statuses = _wait_for(roll, steps, lambda s: s.get(me.url) == READY, r.ready_timeout_s,
                             f"{me.url} ready in the gateway")
        if statuses.get(me.url) != READY:
            raise GatewayError(f"gateway {roll.gw_host.name}: expected {me.url} ready within {r.ready_timeout_s:g}s, "
                               f"found {statuses.get(me.url, 'not registered')}")
    except GatewayError as e:
        outcome.verdict = "FAILED (serving, not ready in the gateway)" if outcome.ok else outcome.verdict
        outcome.reasons.append(str(e))
        return outcome
    steps.log(f"back in gateway {roll.gw_host.name}: ready", "green")
    return outcome


def _put_back_quietly(roll: ClassRoll, name: str) -> None:
    try:
        _set_out(roll, name, False)
    except GatewayError:
        pass  # the next run's gateway step writes the whole file again


def _gateway(roll: ClassRoll, command: str, timeout: float = 30) -> str:
    h = roll.gw_host
    with roll.connect_lock:  # --limit a replica: the gateway is not among pyinfra's connected hosts
        if not h.connected:
            h.connect(reason=f"the gateway of {roll.gpu_class}", show_errors=False)
    if not h.connected:
        raise GatewayError(f"gateway {h.name}: cannot connect")
    ok, out = run(h, command, timeout=timeout)
    if not ok:
        raise GatewayError(f"gateway {h.name}: {out.strip()[-300:]}")
    return out


def _statuses(roll: ClassRoll) -> dict[str, str]:
    out = _gateway(roll, workers_command(roll.gw))
    try:
        return parse_workers(out)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise GatewayError(f"gateway {roll.gw_host.name}: /workers answered {out.strip()[:200]!r}") from None


def _set_out(roll: ClassRoll, name: str, out: bool) -> None:
    with roll.file_lock:  # two replicas' turns must not write the file over each other
        (roll.out.add if out else roll.out.discard)(name)
        _gateway(roll, write_command(roll.gw.discovery_file, discovery_file(roll.replicas, roll.out)))


def _wait_for(roll: ClassRoll, steps, good: Callable[[dict], bool], timeout_s: float, what: str) -> dict[str, str]:
    """smg's worker statuses once `good` holds, or as they are when timeout_s has passed."""
    started = said = time.monotonic()
    while True:
        statuses = _statuses(roll)
        now = time.monotonic()
        if good(statuses) or now - started >= timeout_s:
            return statuses
        if now - said >= 15:
            steps.log(f"waiting for {what}: {now - started:.0f}s of {timeout_s:g}s")
            said = now
        time.sleep(roll.gw.rolling.poll_interval_s)


def _drain(roll: ClassRoll, me: Replica, host, pf, steps) -> None:
    """Until smg no longer routes to it and SGLang has nothing running or queued, or the drain
    timeout: then the stop's SIGTERM lets SGLang finish what is left (KillMode=mixed)."""
    r = roll.gw.rolling
    started = said = time.monotonic()
    metrics = gate.metrics_command(pf.spec)
    while True:
        still_routed = routed(_statuses(roll), me.url)
        values = parse_metrics(run(host, metrics, timeout=30)[1])
        # no counts: not serving, or service.enable_metrics false; then only SGLang's own drain can tell
        busy = sum(values[m] for m in IDLE_METRICS) if all(m in values for m in IDLE_METRICS) else None
        load = "no request counts on its /metrics" if busy is None else f"{busy:g} requests running or queued"
        elapsed = time.monotonic() - started
        if not still_routed and not busy:
            steps.log(f"drained in {elapsed:.1f}s: not routed, " + ("nothing running or queued" if busy == 0 else
                      f"{load} (SGLang's SIGTERM drain finishes whatever still runs)"), "cyan")
            return
        if elapsed >= r.drain_timeout_s:
            steps.log(f"drain timeout {r.drain_timeout_s:g}s: " + ("still routed by smg, " if still_routed else "")
                      + f"{load}; stopping it anyway (SGLang drains them on SIGTERM)", "yellow")
            return
        if time.monotonic() - said >= 15:
            steps.log(f"draining: {'routed' if still_routed else 'not routed'}, {load}, "
                      f"{elapsed:.0f}s of {r.drain_timeout_s:g}s")
            said = time.monotonic()
        time.sleep(r.poll_interval_s)
