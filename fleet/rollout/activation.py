"""Activate and roll back: the small state machine that ends every rollout that has begun.

    [stop workloads] ──ok──> apply ──ok──> [wait] gate: /health ──200──> generation ──ok──> [canary analysis] ──passed──> finish: OK
           │                   │                          └─failed─┐           └─failed─┐         └─failed─┐
           └─failed────────────┴─failed──────────────────────────> roll back <──────────┴──────────────────┘

    The gate's last step is a real generation (the smoke test's request, fleet/rollout/gate.py): a host is
    ready only when it returned tokens and, for a speculative service, proved speculation ran.
    The canary analysis (fleet/turns/canary.py) runs on the canary of a class whose other hosts follow it: a
    measured load against the class's baseline; below it, the canary rolls back as after a failed generation.

    The workloads (the training) stop here, in the host's own turn of its class's rollout
    (tasks/rolling.py), just before its restart: a host whose turn never comes keeps them.

    roll back: restore the files that differ from before (stopping the service first if its
      files change, or if the rollout started a service that was not running), its enabled
      state as it was, then
        it was serving, and its files came back (or the rollout had replaced and started them)
                                                 -> restart, /health: serving again (as preflight
                                                    judged it serving), or ROLLBACK FAILED
        it was not serving                       -> left stopped (or not installed), as it was
        it was serving, its files were already the declared ones
                                                 -> the rollout (re)started it: stopped, nothing to
                                                    roll back to; else it is untouched
      then, if this run (or the interrupted one it took over) may have stopped them, every
      workload that ran (or was enabled) before is given back and must hold its GPUs again;
      then finish: record, no pending record, no lock.
    A failed rollback stops and disables the service (no crash loop) and keeps every file.

No I/O here: `steps` does the work (tasks/activate.py over SSH; a script in the tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from fleet.turns.canary import Analysis
from fleet.rollout.gate import SmokeResult, Verdict
from fleet.core.outcome import HostVerdict, RecordResult
from fleet.rollout.plan import Plan


class Steps(Protocol):
    def go_live(self) -> tuple[bool, str]: ...  # the pending record says its turn came (ROLLING_OUT)
    def stop_workloads(self) -> list[str]: ...  # stop the plan's workloads, wait for their GPU memory; problems
    def apply(self) -> tuple[bool, str]: ...  # swap files, repairs, systemctl (restart if planned)
    def wait_ready(self) -> Verdict: ...
    def smoke(self) -> SmokeResult: ...  # the gate's last step: a generation, judged (fleet.rollout.gate.judge_generation)
    def analyse(self) -> Analysis | None: ...  # the canary analysis; None: this host's turn has none
    def show_journal(self) -> None: ...
    def restore(self, reason: str, stop: bool) -> tuple[bool, bool, str]: ...  # (ok, a service file came back, message)
    def restart(self) -> bool: ...
    def stop_and_disable(self) -> None: ...
    def give_back(self, workloads: list[str]) -> list[str]: ...  # problems, [] if all hold their GPUs
    def finish(self, record: dict) -> None: ...
    def log(self, message: str, color: str | None = None) -> None: ...


@dataclass
class Outcome:
    verdict: HostVerdict  # OK, or a FAILED one saying what the host was left with
    reasons: list[str] = field(default_factory=list)
    left: str = ""  # the state the host is in now, when it is not the declared one
    next: str = ""  # what the operator runs next
    ready: Verdict | None = None
    smoke: SmokeResult | None = None

    def __post_init__(self) -> None:
        self.verdict = HostVerdict(self.verdict)  # its words, read back: an unknown one raises

    @property
    def ok(self) -> bool:
        return self.verdict.ok


def activate(plan: Plan, steps: Steps, unit: str, record: dict) -> Outcome:
    """Run the plan's activation on a host whose rollout has begun (lock, backup, pending record)."""
    started = plan.record.restart
    if plan.finish_rollback:
        steps.log(f"an interrupted run was rolling back ({plan.interrupted.reason}): finishing that rollback", "yellow")
        return roll_back(plan, steps, unit, record, plan.interrupted.reason, started=started, workloads_stopped=True)
    if not plan.record.mid_change:  # before the first change: a run cut off from here on left it mid-change
        ok, message = steps.go_live()
        if not ok:
            return roll_back(plan, steps, unit, record, f"recording its turn failed: {message}", started=False,
                             workloads_stopped=False)
    if plan.stop_workloads:
        problems = steps.stop_workloads()
        if problems:
            return roll_back(plan, steps, unit, record, "; ".join(problems), started=False, workloads_stopped=True)
    ok, message = steps.apply()
    if not ok:
        return roll_back(plan, steps, unit, record, f"applying the files failed: {message}", started=started,
                         workloads_stopped=True)
    ready = smoke = None
    if plan.wait:
        ready = steps.wait_ready()
        if not ready.ready:
            steps.show_journal()
            return roll_back(plan, steps, unit, record, ready.reason, started=started, workloads_stopped=True)
        smoke = steps.smoke()
        if not smoke.ok:  # /health 200 but no generation: not ready (the outcome keeps no ready time)
            steps.show_journal()
            return roll_back(plan, steps, unit, record, smoke.reason, started=started, workloads_stopped=True)
        steps.log(f"serving: {ready.reason}; smoke test {smoke.summary()}: {smoke.text!r}", "green")
        analysis = steps.analyse()
        if analysis is not None and not analysis.passed:
            return roll_back(plan, steps, unit, record, analysis.summary, started=started, workloads_stopped=True,
                             ready=ready)
        if analysis is not None:
            record = {**record, "canary": analysis.summary}
    steps.finish({**record, "result": RecordResult.OK, "ready": ready.reason if ready else None,
                  "smoke": smoke.summary() if smoke else None})
    return Outcome(HostVerdict.OK, ready=ready, smoke=smoke)


def roll_back(plan: Plan, steps: Steps, unit: str, record: dict, reason: str, started: bool,
              workloads_stopped: bool, ready: Verdict | None = None) -> Outcome:
    """Return the host to plan.before, whatever this run (or the interrupted one) got to.
    started: the service was (re)started with the new files; workloads_stopped: this run may have
    stopped the workloads (an interrupted run it takes over may have, whatever this says)."""
    before = plan.before
    steps.log(f"{reason}: rolling back", "red")
    where = f"backups/{before.backup}" if before.backup else "no backup"
    ok, restored, message = steps.restore(reason, stop=started and not before.serving)
    if not ok:
        steps.stop_and_disable()
        out = Outcome(HostVerdict.ROLLBACK_FAILED, [reason, f"restoring the files failed: {message}"],
                      left=f"{unit} stopped and disabled, its files as the failed restore left them ({where})")
    elif before.serving and (restored or (started and plan.replaces_service)):
        # its files are back (now, or by an interrupted rollback), but the process may not be theirs
        again = steps.wait_ready() if steps.restart() else Verdict(True, False, "systemctl could not start it")
        if again.ready:
            steps.log(f"rolled back: the previous service is serving again, {again.reason}", "yellow")
            out = Outcome(HostVerdict.ROLLED_BACK, [reason], left=f"the previous {unit} serving again ({where})")
        else:
            steps.show_journal()
            steps.stop_and_disable()
            out = Outcome(HostVerdict.ROLLBACK_FAILED, [reason, f"the previous service did not come back: {again.reason}"],
                          left=f"{unit} stopped and disabled with the previous files ({where}), kept for inspection")
    elif not before.serving and (restored or started):
        installed = any(before.files.values())
        out = Outcome(HostVerdict.ROLLED_BACK, [reason],
                      left=f"{unit} stopped, as it was" if installed else f"{unit} not installed, as it was")
    elif started and before.serving:
        steps.stop_and_disable()
        out = Outcome(HostVerdict.STOPPED, [reason],
                      left=f"{unit} stopped and disabled: its files were already the declared ones, "
                           "so there is no earlier service to return to")
    else:
        out = Outcome(HostVerdict.UNTOUCHED, [reason], left=f"{unit} as it was: this run did not restart it")
    may_have_stopped = workloads_stopped or plan.interrupted is not None
    give_back = sorted(before.workloads_to_give_back) if may_have_stopped else []
    if give_back:
        problems = steps.give_back(give_back)
        out.left += f"; {', '.join(give_back)} given back" + (f" ({'; '.join(problems)})" if problems else "")
        out.reasons += problems
    if may_have_stopped:  # group_data says how each is given back, or that it is not
        out.left += "".join(f"; {w} was not restarted (declared so)" for w in before.workloads_not_given_back)
    out.next = _next(out, unit)
    out.ready = ready  # a canary that failed its analysis was ready: its row keeps when
    steps.finish({**record, "result": RecordResult.ROLLED_BACK if out.verdict is HostVerdict.ROLLED_BACK else RecordResult.FAILED,
                  "reason": reason, "rollback": out.verdict, "left": out.left})
    return out


def _next(out: Outcome, unit: str) -> str:
    if out.verdict is HostVerdict.ROLLBACK_FAILED:
        return f"read `journalctl -u {unit}` on the host, repair it by hand or fix group_data, then make deploy"
    return f"read the journal lines above (`journalctl -u {unit}` on the host), fix group_data, then make dry"
