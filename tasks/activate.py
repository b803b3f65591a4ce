"""Activate: put the new files live, restart if the plan says so, wait for real readiness,
smoke-test; or roll back to the state recorded before the rollout (fleet/rollout/activation.py
decides, HostSteps does it over SSH). Runs at execution time inside one python.call, so the
gate sees the unit as it is after the restart: a crash or a restart ends the wait at once.
"""

from __future__ import annotations

import time
from typing import Callable

from pyinfra import host
from pyinfra.operations import python

from fleet.core import bounds
from fleet.rollout import activation, commands as rollout, gate, lock
from fleet.turns.canary import Analysis
from fleet.rollout.history import new_record
from fleet.core.outcome import HostVerdict, RecordKind, RecordResult
from fleet.rollout.pending import RUNNING_STATES
from fleet.rollout.plan import workload_of
from fleet.spec import ClassSpec
from tasks import rolling, workloads
from adapter import run as runs
from tasks.common import Begun, HostLost, connected, give_up, given_up, repo_state, run
from tasks.preflight import Preflight

def service(pf: Preflight) -> None:
    rolling.enlist(host, pf)  # its turn in its class: the canary first, then rolling.max_unavailable at a time
    python.call(
        name=f"Activate {pf.spec.service_unit} (files live, restart if needed, the gate: /health, then a generation)",
        function=_activate,
        pf=pf,
    )


def wait_ready(host, spec: ClassSpec, first: str | None = None) -> gate.Verdict:
    """Wait until the unit serves (/health 200), fails, or the load timeout passes. One SSH
    command per change of state (the host polls), at least one per progress_every_s.
    first: an observation already made (the restart command prints one)."""
    r = spec.readiness
    started = time.monotonic()
    out = first if first is not None else run(host, gate.observe_command(spec), bounds.reading(
        spec, f"the observation of {spec.service_unit}"))[1]
    start = gate.parse_observation(out)
    while True:
        now = gate.parse_observation(out)
        elapsed = time.monotonic() - started
        verdict = gate.judge(start, now, elapsed, r.load_timeout_s)
        if verdict.done:
            return verdict
        if elapsed >= r.progress_every_s:
            host.log(f"waiting for /health: {elapsed:.0f}s of {r.load_timeout_s:g}s, {now.describe()}")
        budget = min(r.progress_every_s, max(0.0, r.load_timeout_s - elapsed))
        out = run(host, gate.wait_command(spec, gate.observation_text(out), budget), bounds.waiting(spec, budget))[1]


class HostSteps:
    """activation.Steps over a pyinfra host."""

    def __init__(self, host, begun: Begun):
        self.host, self.begun = host, begun
        self.pf = pf = begun.pf
        self.spec = pf.spec
        self.first: str | None = None  # the observation the restart command ended with
        self.analysis: Callable[[], Analysis] | None = None  # the canary's turn: its analysis (tasks/rolling.py)

    def log(self, message: str, color: str | None = None) -> None:
        if color:
            self.host.log_styled(message, fg=color)
        else:
            self.host.log(message)

    def go_live(self) -> tuple[bool, str]:
        ok, out = run(self.host, rollout.phase_command(self.spec, self.pf.plan.record.rolling_out().to_json()),
                      bounds.disk("the pending record's phase"))
        return ok, out.strip()

    def stop_workloads(self) -> list[str]:
        self.log(f"stopping {', '.join(self.pf.plan.stop_workloads)} (its turn) and waiting for the GPUs")
        self.begun.workloads_stopped = True  # from here a failure gives them back
        return workloads.stop_and_wait(self.host, self.pf)

    def apply(self) -> tuple[bool, str]:
        p = self.pf.plan
        command = rollout.apply_command(self.spec, list(p.swap), list(p.repairs), p.daemon_reload, p.enable, p.restart)
        if p.wait:
            action = "restart" if p.restart else "check"
            self.log(f"{action} {self.spec.service_unit}: waiting for /health (not 'active', not /v1/models)")
        self.begun.applied = True  # from here a failure may have started the new service
        what = "putting the files live" + (f" and restarting {self.spec.service_unit}" if p.restart else "")
        ok, out = run(self.host, f"{command}; {gate.observe_command(self.spec)}", bounds.stopping(self.spec, what))
        self.first = out if ok else None
        return ok, out.strip()

    def wait_ready(self) -> gate.Verdict:
        first, self.first = self.first, None
        return wait_ready(self.host, self.spec, first)

    def smoke(self) -> gate.SmokeResult:
        _, out = run(self.host, gate.smoke_command(self.spec), bounds.smoke(self.spec))
        return gate.judge_generation(self.host.name, self.spec, gate.parse_smoke(out))

    def analyse(self) -> Analysis | None:
        return self.analysis() if self.analysis is not None else None

    def show_journal(self) -> None:
        _, out = run(self.host, rollout.journal_command(self.spec), bounds.reading(self.spec, "the journal"))
        self.host.log_styled(f"last journal lines of {self.spec.service_unit}:", fg="yellow")
        for line in self.pf.secrets.redact(out).splitlines():
            self.host.log(f"  | {line}")

    def restore(self, reason: str, stop: bool) -> tuple[bool, bool, str]:
        p = self.pf.plan
        ok, out = run(self.host, rollout.restore_command(
            self.spec, p.before.files, p.before.backup, stop, p.before.service.enabled,
            p.record.rolling_back(reason).to_json()), bounds.stopping(self.spec, "the rollback's restore of the files"))
        restored = out.rsplit(rollout.RESTORED, 1)[-1].split() if ok else []
        if restored:
            self.log(f"restored {', '.join(restored)}" + (f" from backups/{p.before.backup}" if p.before.backup else ""),
                     "yellow")
        return ok, any(path in rollout.service_files(self.spec) for path in restored), out.strip()

    def restart(self) -> bool:
        ok, out = run(self.host, f"{rollout.restart_command(self.spec)}; {gate.observe_command(self.spec)}",
                      bounds.stopping(self.spec, f"the restart of the previous {self.spec.service_unit}"))
        self.first = out if ok else None
        if not ok:
            self.log(f"systemctl could not start {self.spec.service_unit}: {out.strip()}", "red")
        return ok

    def stop_and_disable(self) -> None:
        run(self.host, rollout.stop_and_disable_command(self.spec),
            bounds.stopping(self.spec, f"the stop of {self.spec.service_unit}"))

    def give_back(self, names: list[str]) -> list[str]:
        """Enable and start the service workloads as they were, start the scope and process ones by their
        declared command, then wait until each that ran holds GPU memory. A scope or process workload
        that holds GPUs already is not started again (its stop may never have come: its command, unlike
        `systemctl start`, may start a second one)."""
        spec, before = self.spec, self.pf.plan.before.workloads
        services = [w for w in names if w in spec.service_workloads]
        held = [w for w in names if w not in services]
        holding = {workload_of(spec, p) for p in workloads.gpu_processes(self.host, spec).processes} if held else set()
        start = [w for w in services if before[w].active in RUNNING_STATES]
        enabled = [w for w in services if before[w].enabled == "enabled"]
        ok, out = run(self.host, rollout.give_back_command(spec, enabled, start, [w for w in held if w not in holding]),
                      bounds.workloads(spec, f"the start of {', '.join(names)} again"))
        if not ok:
            return [f"could not start {', '.join(names)} again: {out.strip()}"]
        running = start + held
        deadline = time.monotonic() + spec.readiness.workload_release_timeout_s
        while running:
            holding = {workload_of(spec, p) for p in workloads.gpu_processes(self.host, spec).processes}
            running = [w for w in running if w not in holding]
            if not running:
                break
            if time.monotonic() > deadline:
                return [f"{w} runs again but holds no GPU memory after "
                        f"{spec.readiness.workload_release_timeout_s:g}s" for w in running]
            time.sleep(1)
        self.log(f"gave back {', '.join(names)}: running and holding the GPUs as before", "yellow")
        return []

    def finish(self, record: dict) -> None:
        self.begun.end()  # no renewal after its release: it would find the lock gone
        p = self.pf.plan
        drop = None if p.intent.keep_backup else p.before.backup
        returned = p.overlaid is not None and not p.intent.overlay and record.get("result") == RecordResult.OK
        run(self.host, rollout.finish_command(self.spec, record, drop, returned), bounds.finish(self.spec))
        runs.of(self.host.state).begun.pop(self.host.name, None)


def _record(pf: Preflight) -> dict:
    kind = RecordKind.ROLLBACK if pf.rollback else pf.plan.intent.record
    return new_record(kind=kind, spec=pf.spec, group=pf.group, stamp=pf.stamp,
                      now=int(time.time()), by=lock.owner()["holder"], action=pf.plan.action(),
                      sglang=pf.facts.engine.version, repo=repo_state(), to=pf.rollback.stamp if pf.rollback else "")


def _report(host, outcome: activation.Outcome) -> bool:
    report = runs.of(host.state).report.host(host.name)
    report.verdict = outcome.verdict
    if outcome.ready is not None and outcome.ready.ready:
        report.ready_s = outcome.ready.elapsed_s
    if outcome.smoke is not None:
        report.smoke = outcome.smoke.summary()
    report.reasons += outcome.reasons
    if outcome.left:
        report.reasons.append(f"left: {outcome.left}")
    if outcome.next:
        report.reasons.append(f"next: {outcome.next}")
    return outcome.ok


def _activate(state, host, pf: Preflight) -> bool:
    begun = runs.of(state).begun[host.name]
    steps, unit, record = HostSteps(host, begun), pf.spec.service_unit, _record(pf)

    def go() -> activation.Outcome:
        return _or_lost(host, begun, lambda: activation.activate(pf.plan, steps, unit, record))

    def leave(reason: str) -> activation.Outcome:
        return _or_lost(host, begun, lambda: activation.roll_back(pf.plan, steps, unit, record, reason,
                                                                  started=False, workloads_stopped=False))

    # given up in its activation, in its leave, or behind a gateway in its drain before either
    outcome = _or_lost(host, begun, lambda: rolling.take_turn(host, pf, steps, go=go, leave=leave))
    if outcome.ok and pf.rollback:
        outcome.left = (f"backups/{pf.rollback.stamp} serving; the host now differs from group_data: the next "
                        "make deploy brings it back to the declared spec (make dry shows the difference)")
    return _report(host, outcome)


def _or_lost(host, begun: Begun, work) -> activation.Outcome:
    """work()'s outcome, or the host's as given up (HostLost) on the way."""
    try:
        return work()
    except HostLost as e:
        return lost(host, begun, e)


def lost(host, begun: Begun, e: HostLost) -> activation.Outcome:
    """The host given up mid-rollout: what it was doing, what it keeps, what the next run does."""
    begun.end()
    runs.of(host.state).begun.pop(host.name, None)
    return activation.Outcome(
        HostVerdict.LOST, [e.why, f"{host.name}: given up at: {e.doing}"],
        left="its pending-rollout record and this run's lock, no longer renewed: nothing more was run on it "
             "(no rollback over a lost link)",
        next=f"once it answers again, make deploy (from any machine: the lock's lease runs out "
             f"{begun.pf.spec.readiness.link_timeout_s:g}s after its last renewal) finishes this rollout or rolls "
             "it back to the state recorded before it")


def after_failure(host, begun: Begun, reason: str) -> None:
    """A pyinfra operation failed after the rollout began: roll back, free the lock; over a lost
    link, nothing (the host's row says LOST)."""
    pf = begun.pf
    if not connected(host):  # an upload over a link the kernel dropped, say
        give_up(host, f"{host.name}: link lost: expected its connection up, found it closed")
    if given_up(host):
        _report(host, lost(host, begun, HostLost(runs.of(host.state).lost[host.name], reason)))
        return
    try:
        steps = HostSteps(host, begun)
        outcome = _or_lost(host, begun, lambda: activation.roll_back(
            pf.plan, steps, pf.spec.service_unit, _record(pf), reason, started=begun.applied and pf.plan.record.restart,
            workloads_stopped=begun.workloads_stopped))
        rolling.after_rollback(host, pf, steps, outcome)
    except Exception as e:  # noqa: BLE001 - whatever it was: the next run finishes the job
        runs.of(host.state).report.host(host.name).reasons.append(
            f"{host.name}: could not roll back ({e}); the host keeps its pending-rollout record: "
            "the next run finishes this rollout or rolls it back")
        return
    _report(host, outcome)
