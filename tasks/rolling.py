"""A class's rollout, one turn at a time: no class restarts all its hosts at once.

pyinfra runs an operation on every host at once; activate's restart would take a whole class down
together (a bad spec: all of it, for a load, a failure and a rollback). So each host's activation
waits for its turn here: the class's first host to restart (inventory order: the canary) goes
alone; after it passed its gate and smoke test, at most `rolling.max_unavailable` at a time
(fleet.spec.Rolling). The first failure stops the class: the hosts whose turn has not come are
left as they are, serving, and their begun rollouts end without a change. A host's workloads (the
training) stop in its own turn, just before its restart (fleet/rollout/activation.py).

A class that a gateway in the inventory routes is also drained out of smg around each restart:
fleet/turns/rolling.py decides, Gateway here does the talking to the gateway (its hosts) and the replica.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gevent.event import Event
from gevent.lock import BoundedSemaphore, Semaphore

from fleet.core import bounds
from fleet.rollout import activation, gate
from fleet.tune import measure, search as tune
from fleet.turns import canary, drains
from fleet.turns.canary import Baseline, Figures
from fleet.gateway.models import Gateway as GatewaySpec
from fleet.gateway.smg import Replica, merged, parse_workers, workers_command
from fleet.core.hosts import group_name, routing
from fleet.core.outcome import HostVerdict
from fleet.turns.rolling import GatewayError, Turns, put_back, serves, through_gateway, turns
from fleet.rollout.status import parse_metrics
from fleet.rollout.render import server_argv
from fleet.spec import NoSpeculation
from fleet.core.wire import BLOCK_LIMIT, Unreadable, excerpt, load_json
from adapter import run as runs
from tasks.common import PeerError, on_peer, run
from tasks.silences import Monitor, monitor_of, silenced, turn_over

IDLE_METRICS = ("sglang:num_running_reqs", "sglang:num_queue_reqs")


@dataclass
class Gateway:
    """The gateway of a class's rollout, its one host or every host of its group behind gateway.floating: what
    each says of the replicas (/workers, merged: out when none routes to it, back when ready in all) and the
    discovery file each routes by, shared by the class's replicas' turns. A gateway that cannot be read or
    written stops the turn (GatewayError), as a lost host does."""

    spec: GatewaySpec
    hosts: list  # pyinfra Hosts, inventory order
    replicas: list[Replica]
    out: set[str] = field(default_factory=set)  # replicas out of the discovery file now
    file_lock: Semaphore = field(default_factory=Semaphore)
    connect_lock: Semaphore = field(default_factory=Semaphore)

    @property
    def name(self) -> str:
        return group_name([h.name for h in self.hosts])

    def command(self, host, command: str, what: str) -> str:
        try:
            return on_peer(host, self.connect_lock, command, f"gateway {host.name}", what)
        except PeerError as e:
            raise GatewayError(str(e)) from None

    def statuses(self) -> dict[str, str]:
        views = {}
        for h in self.hosts:
            try:
                views[h.name] = parse_workers(self.command(h, workers_command(self.spec), "GET /workers"))
            except Unreadable as e:
                raise GatewayError(f"gateway {h.name}: {e}") from None
        return merged(views)

    def change(self, op: str, name: str, owner: str, lease_s: float = 0.0, why: str = "",
               peers: tuple[str, ...] = ()) -> drains.Answer:
        """`op` on `name`'s drain on every gateway host of the group, each its discovery file rewritten under the
        drains' lock there (fleet/turns/drains.py); a refusal on one undoes a drain taken on the ones before it."""
        with self.file_lock:  # one of this run's turns at a time: the undo below is never another turn's
            done = []
            for h in self.hosts:
                answer = drains.parse(self.command(h, drains.command(
                    self.spec.python, self.spec.unit, self.spec.discovery_file, self.replicas, op, name, owner,
                    lease_s, why, peers), f"the drains ({op} {name})"))
                if answer.result in (drains.DrainResult.NO_ANSWER, drains.DrainResult.BUSY):
                    raise GatewayError(f"gateway {h.name}: {answer.describe()}")
                if not answer.ok:
                    for d in done:
                        self.command(d, drains.command(self.spec.python, self.spec.unit, self.spec.discovery_file,
                                                       self.replicas, drains.IN, name, owner), f"undoing {name}'s drain")
                    return answer
                done.append(h)
            (self.out.add if op == drains.OUT else self.out.discard)(name)
            return answer


class ReplicaThrough:
    """fleet.turns.rolling.Through for one replica's turn: the gateway, the replica's /metrics, the clock."""

    def __init__(self, gateway: Gateway, host, pf, steps, turn_s: float):
        self.gateway, self.host, self.pf, self.steps, self.turn_s = gateway, host, pf, steps, turn_s
        self.name = gateway.name

    def statuses(self) -> dict[str, str]:
        return self.gateway.statuses()

    def owner(self) -> tuple[str, float]:
        """Its drain's owner and lease: the run's intent's (a make tune's), else its rollout's: the pending record
        this run wrote or took over, so a run finishing a killed one's rollout ends the drain the killed run took."""
        if self.pf.plan.intent.owned is not None:
            return self.pf.plan.intent.owned
        record = self.pf.plan.interrupted or self.pf.plan.record
        return f"the rollout of {self.host.name} begun {record.since} by {record.by}", self.turn_s

    def take_out(self, peers: tuple[str, ...]) -> drains.Answer:
        owner, lease_s = self.owner()
        why = self.pf.plan.intent.says or "its turn in a rollout"
        return self.gateway.change(drains.OUT, self.host.name, owner, lease_s, why, peers)

    def put_in(self) -> None:
        answer = self.gateway.change(drains.IN, self.host.name, self.owner()[0])
        if not answer.ok:
            raise GatewayError(f"gateway {self.name}: {self.host.name} not put back: {answer.describe()}")

    def load(self) -> float | None:
        values = parse_metrics(run(self.host, gate.metrics_command(self.pf.spec),
                                   bounds.gateway(f"{self.host.name}'s /metrics"))[1])
        return sum(values[m] for m in IDLE_METRICS) if all(m in values for m in IDLE_METRICS) else None

    def log(self, message: str, color: str | None = None) -> None:
        self.steps.log(message, color)

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


CANARY_POLL_S = 1  # how often a host waiting for the canary looks whether it failed before its turn


@dataclass
class ClassRoll:
    """One class's rollout, shared by its hosts' activations."""

    gpu_class: str
    at_once: int  # hosts restarting at once after the canary
    turn_s: float  # the most one host's turn can take (fleet.core.bounds.turn_s): what a wait for turns is bounded by
    gateway: Gateway | None = None  # a gateway in the inventory routes the class
    monitor: Monitor | None = None  # the inventory's monitoring host: each turn is silenced there
    order: list[str] = field(default_factory=list)  # hosts that restart, inventory order
    mid_change: set[str] = field(default_factory=set)  # of them, those taking over a rollout left mid-change
    stopped: str = ""  # why the class's rollout stopped; '' while it goes on
    first_done: set[str] = field(default_factory=set)  # of turns().first, those whose turn has ended
    canary_done: Event = field(default_factory=Event)  # all of turns().first have
    now: Callable[[], float] = time.monotonic  # the clock of the wait for the canary

    def __post_init__(self) -> None:
        self.slots = BoundedSemaphore(self.at_once)  # turns after the canary's

    def turns(self) -> Turns:
        return turns([(h, h in self.mid_change) for h in self.order])

    def ended_first(self, name: str) -> None:
        self.first_done.add(name)
        if self.first_done >= set(self.turns().first):
            self.canary_done.set()


def enlist(host, pf, group_dir: str = "group_data") -> None:
    """At prepare time (pyinfra prepares the hosts in any order): a host whose service restarts takes
    part in its class's rollout, and so does one that takes over an interrupted rollout. One left
    mid-change goes first, at once (fleet.turns.rolling.turns): waiting for a turn (or a stopped class) would
    keep it there; but out of its gateway around the restart all the same (take_turn), and back in once
    it serves: even with no restart left to do (its new server loads already), a run given up may have
    left it out. One whose interrupted rollout had only begun waits for its turn as any other."""
    if not pf.plan.restart and pf.plan.interrupted is None:
        return
    rolls = runs.of(host.state).rolls
    roll = rolls.get(pf.group)
    if roll is None:
        roll = rolls[pf.group] = _class_roll(host.state, pf, group_dir)
    if pf.plan.interrupted is not None and pf.plan.interrupted.mid_change:
        roll.mid_change.add(host.name)
    roll.order.append(host.name)
    inventory = [h.name for h in host.state.inventory]
    roll.order.sort(key=inventory.index)  # hosts are prepared in any order


def _class_roll(state, pf, group_dir: str) -> ClassRoll:
    hosts = sum(1 for h in state.inventory if pf.group in h.groups)
    gateway = gateway_of(state, pf.group, group_dir)
    return ClassRoll(pf.group, pf.spec.rolling.at_once(hosts),
                     bounds.turn_s(pf.spec, gateway.spec.rolling if gateway else None), gateway,
                     monitor_of(state, group_dir))


def gateway_of(state, gpu_class: str, group_dir: str = "group_data") -> Gateway | None:
    """The gateway in the inventory that routes `gpu_class` (fleet.core.hosts.routing), or None. One object per
    gateway, whatever classes it routes: it alone writes its discovery files, so no class's turn can
    list another's drained replica."""
    found = routing(state.inventory, gpu_class, Path(group_dir))
    if found is None:
        return None  # no gateway in this inventory routes it: no drain around the restarts
    gateways = runs.of(state).gateways
    if found.name not in gateways:
        gateways[found.name] = Gateway(found.spec, found.hosts, found.replicas)
    return gateways[found.name]


def take_turn(host, pf, steps, go: Callable[[], activation.Outcome],
              leave: Callable[[str], activation.Outcome]) -> activation.Outcome:
    """Run `go` (the activation) in the host's turn, drained out of the gateway around it where one
    routes the class; or `leave` (end the begun rollout without a change) if the class's rollout
    stopped first."""
    roll = runs.of(host.state).rolls.get(pf.group)
    if roll is None:
        return go()
    t = roll.turns()
    if host.name in t.first:
        return _first(roll, t, host, pf, steps, go, leave)
    deadline = roll.now() + roll.turn_s
    while not roll.canary_done.wait(timeout=CANARY_POLL_S):
        failed = [h for h in t.first if h in {f.name for f in host.state.failed_hosts}]
        if failed:  # failed before its turn came
            roll.stopped = roll.stopped or (f"the interrupted rollout of {failed[0]} could not be taken over"
                                            if failed[0] in t.mid_change else f"the canary {failed[0]} failed")
            break
        if roll.now() >= deadline:  # every command has its bound: a backstop, never the way a turn ends
            roll.stopped = roll.stopped or (f"the canary {', '.join(t.first)} did not end its turn within "
                                            f"{roll.turn_s:g}s, the most a turn can take")
            break
    if roll.stopped:
        return _left(leave, roll, host, pf, steps)
    wait_s = len(roll.order) * roll.turn_s  # every turn of the class before this one
    if not roll.slots.acquire(timeout=wait_s):
        roll.stopped = roll.stopped or f"{host.name}'s turn did not come within {wait_s:g}s, the most its class's turns take"
        return _left(leave, roll, host, pf, steps)
    try:
        if roll.stopped:
            return _left(leave, roll, host, pf, steps)
        return _stopping_on_failure(roll, host, lambda: _one(roll, host, pf, steps, go, leave))
    finally:
        roll.slots.release()


def _first(roll: ClassRoll, t: Turns, host, pf, steps, go, leave) -> activation.Outcome:
    """The canary's turn, or a takeover's left mid-change (at once, wherever its peers are)."""
    def at_once(why: str) -> activation.Outcome:  # kept in (its peers not ready): as it ever went, at once
        steps.log(f"{why}; it takes over its interrupted rollout all the same", "yellow")
        return go()

    if host.name not in t.mid_change and len(roll.order) > 1:
        steps.log(f"canary of {roll.gpu_class}: the other hosts wait for it", "cyan")
    if canary.judged(pf.spec, len(roll.order), host.name in t.mid_change):
        go = _analysed(host, pf, steps, go)
    held_back = at_once if host.name in t.mid_change else leave
    try:
        return _stopping_on_failure(roll, host, lambda: _one(roll, host, pf, steps, go, held_back))
    finally:
        roll.ended_first(host.name)


def _analysed(host, pf, steps, go: Callable[[], activation.Outcome]) -> Callable[[], activation.Outcome]:
    """The canary's activation with its analysis (fleet/turns/canary.py): the baseline first, while the old spec still
    serves (out of its gateway already, where one routes the class: no client sees the load), unless a make tune
    record has one; after its smoke test, the same load on the new spec, judged against it."""
    spec = pf.spec
    load = canary.load(spec.canary, spec)
    baseline = tuned_baseline(spec, pf.group)

    def measured(what: str):
        _, out = run(host, measure.command(spec, load), measure.bound(load, what))
        return measure.parse(out, load)

    def analyse() -> canary.Analysis:
        steps.log(f"canary analysis: {load.requests} requests of {load.max_tokens} tokens, {load.concurrency} at a "
                  "time", "cyan")
        try:
            figures = Figures.of(measured("the canary analysis's load"))
        except Unreadable as e:
            analysis = canary.unmeasured(str(e))
        else:
            analysis = canary.judge(figures, baseline, spec.canary, not isinstance(spec.speculative, NoSpeculation),
                                    spec.service.enable_metrics)
        steps.log(analysis.summary, "green" if analysis.passed else "red")
        if analysis.passed:
            runs.of(host.state).report.host(host.name).notes.append(analysis.summary)
        return analysis

    def analysed() -> activation.Outcome:
        nonlocal baseline
        if baseline is None and pf.plan.before.serving:
            steps.log("canary analysis: no make tune record for this spec at its concurrency: the load on the old "
                      "spec first", "cyan")
            try:
                baseline = canary.before_turn(measured("the canary analysis's load on the old spec"),
                                              pf.facts.runtime.cmdline, server_argv(spec))
            except Unreadable as e:
                steps.log(f"canary analysis: the old spec's load could not be measured ({e}): no baseline", "yellow")
        steps.analysis = analyse
        return go()
    return analysed


def tuned_baseline(spec, group: str) -> Baseline | None:
    """The class's make tune record's figures for this spec at the analysis's concurrency (fleet.turns.canary.from_record),
    read from the controller's tuning/ directory; none there, or unreadable: None."""
    path = Path(tune.RECORDS_DIR) / f"{group}.json"
    try:
        with open(path, "rb") as f:
            text = f.read(BLOCK_LIMIT + 1).decode()
        record = load_json(text, str(path)) if len(text) <= BLOCK_LIMIT else None
    except (OSError, UnicodeDecodeError, Unreadable):
        return None
    return canary.from_record(record, spec, group, spec.canary.concurrency, str(path))


def _stopping_on_failure(roll: ClassRoll, host, turn: Callable[[], activation.Outcome]) -> activation.Outcome:
    try:
        outcome = turn()
    except BaseException as e:
        roll.stopped = roll.stopped or f"after {host.name}: an error"
        _left_out(roll, host, e)
        raise
    if not outcome.ok:
        roll.stopped = roll.stopped or f"after {host.name}: {outcome.verdict}"
    return outcome


def _left_out(roll: ClassRoll, host, e: BaseException) -> None:
    """The row of a replica whose rollout broke off out of its gateway says so."""
    if roll.gateway is not None:
        runs.of(host.state).report.host(host.name).reasons.append(
            f"{host.name}: left out of gateway {roll.gateway.name}: its rollout broke off "
            f"({type(e).__name__}: {excerpt(str(e), 200)}); a later run that serves it puts it back")


def _one(roll: ClassRoll, host, pf, steps, go, leave) -> activation.Outcome:
    with silenced(host, roll.monitor, roll.gpu_class, roll.turn_s, steps):  # from before the drain to the turn's end
        if roll.gateway is None:
            return go()
        me = next(r for r in roll.gateway.replicas if r.host == host.name)
        return through_gateway(me, roll.gateway.replicas, roll.gateway.spec.rolling,
                               ReplicaThrough(roll.gateway, host, pf, steps, roll.turn_s), go, leave,
                               stay_out=pf.plan.intent.stay_out)


def after_rollback(host, pf, steps, outcome: activation.Outcome) -> None:
    """A replica rolled back outside its turn (a failed operation): back in the gateway if it serves."""
    roll = runs.of(host.state).rolls.get(pf.group)
    if roll is None or roll.gateway is None or host.name not in roll.gateway.out:
        return
    if serves(outcome):
        put_back(ReplicaThrough(roll.gateway, host, pf, steps, roll.turn_s))
        steps.log(f"rolled back and serving: back in gateway {roll.gateway.name}", "yellow")


def _left(leave, roll: ClassRoll, host, pf, steps) -> activation.Outcome:
    if roll.monitor is not None and pf.plan.interrupted is not None:  # a killed run's turn may have left its silence
        turn_over(host, roll.monitor, roll.gpu_class, steps)
    outcome = leave(f"not rolled: the rollout of {roll.gpu_class} stopped ({roll.stopped})")
    if outcome.verdict is HostVerdict.UNTOUCHED:
        outcome.verdict = HostVerdict.NOT_ROLLED
        outcome.next = f"fix what stopped the rollout (above), then make deploy rolls {roll.gpu_class} again"
    return outcome
