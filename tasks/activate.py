"""Activate: restart only if a file changed, wait for real readiness, smoke-test, or roll back.

Runs at execution time inside one python.call, so the gate sees the unit as it is
after the restart: a crash or a restart ends the wait at the next poll.
"""

from __future__ import annotations

import time

from pyinfra.operations import python

from fleet import gate, rollout
from fleet.report import RUN
from fleet.spec import ClassSpec
from tasks.common import fail, run
from tasks.preflight import Preflight


def service(pf: Preflight, file_ops: list, backup_stamp: str | None) -> None:
    python.call(
        name=f"Activate {pf.spec.service_unit} (restart if changed, wait for /health, smoke test)",
        function=_activate,
        pf=pf,
        file_ops=file_ops,
        backup_stamp=backup_stamp,
    )


def take_lock(pf: Preflight) -> None:
    python.call(name="Take the deploy lock", function=_take_lock, pf=pf)


def _take_lock(state, host, pf: Preflight) -> bool:
    ok, out = run(host, rollout.lock_command(pf.spec, rollout.lock_owner(), pf.take_over_stale_lock))
    if ok:
        return True
    # Another deploy got here between our preflight and now.
    owner = out.split("locked:", 1)[-1]
    held = rollout.judge_lock(owner, time.time(), rollout.stale_after(pf.spec), lambda pid: True)
    return fail(host, pf.spec, f"{host.name}: deploy lock: expected no other deploy, found {held.message}", ours=False)


def wait_ready(host, spec: ClassSpec) -> gate.Verdict:
    """Poll the unit and /health from the host until ready, failed, or the load timeout."""
    r = spec.readiness
    started = time.monotonic()
    command = gate.poll_command(spec)
    _, out = run(host, command)
    first = gate.parse_observation(out)
    last_progress = started
    while True:
        _, out = run(host, command)
        now = gate.parse_observation(out)
        elapsed = time.monotonic() - started
        verdict = gate.judge(first, now, elapsed, r.load_timeout_s)
        if verdict.done:
            return verdict
        if time.monotonic() - last_progress >= r.progress_every_s:
            host.log(f"waiting for /health: {elapsed:.0f}s of {r.load_timeout_s:g}s, {now.describe()}")
            last_progress = time.monotonic()
        time.sleep(r.poll_interval_s)


def _restart(host, spec: ClassSpec) -> bool:
    unit = spec.service_unit
    ok, out = run(host, f"systemctl daemon-reload && systemctl enable --quiet {unit} && systemctl restart {unit}")
    if not ok:
        host.log_styled(f"systemctl could not start {unit}: {out}", fg="red")
    return ok


def _journal(host, spec: ClassSpec) -> None:
    _, out = run(host, rollout.journal_command(spec))
    host.log_styled(f"last journal lines of {spec.service_unit}:", fg="yellow")
    for line in rollout.redact(out, spec).splitlines():
        host.log(f"  | {line}")


def _activate(state, host, pf: Preflight, file_ops: list, backup_stamp: str | None) -> bool:
    spec, report = pf.spec, RUN.host(host.name)
    record = {"time": int(time.time()), "by": rollout.lock_owner()["holder"], "group": pf.group,
              "algorithm": spec.speculative.algorithm}
    try:
        changed = any(op.did_change() for op in file_ops)
        # Asked now, not at preflight: a deploy that held the lock before us may have started it.
        active = run(host, f"systemctl is-active {spec.service_unit}")[1].strip() == "active"
        if not changed and active:
            report.action += " (no restart: unit, environment and secret unchanged)"
            report.verdict = "OK"
            return True
        host.log(f"{'restart' if changed else 'start'} {spec.service_unit}: "
                 "waiting for /health (not 'active', not /v1/models)")
        verdict = wait_ready(host, spec) if _restart(host, spec) else gate.Verdict(True, False, "systemctl failed")
        if verdict.ready:
            report.ready_s = verdict.elapsed_s
            _, out = run(host, gate.smoke_command(spec), timeout=spec.smoke.timeout_s + 15)
            smoke = gate.parse_smoke(out)
            report.smoke = smoke.summary()
            record.update(result="ok" if smoke.ok else "smoke-failed", ready=verdict.reason, smoke=smoke.summary())
            if smoke.ok:
                host.log_styled(f"serving: {verdict.reason}; smoke test {smoke.summary()}: {smoke.text!r}", fg="green")
                report.verdict = "OK"
                return True
            verdict = gate.Verdict(True, False, f"smoke test failed: {smoke.reason}")
        host.log_styled(f"{spec.service_unit} did not become ready: {verdict.reason}", fg="red")
        record.update(result="failed", reason=verdict.reason)
        _journal(host, spec)
        report.reasons.append(verdict.reason)
        report.verdict = _roll_back(host, pf, backup_stamp, report)
        record["rollback"] = report.verdict
        return False
    finally:
        run(host, rollout.record_command(spec, record))
        run(host, rollout.unlock_command(spec))


def _roll_back(host, pf: Preflight, backup_stamp: str | None, report) -> str:
    spec = pf.spec
    unit = spec.service_unit
    backup = f"{rollout.state_dir(spec)}/backups/{backup_stamp}" if backup_stamp else None
    has_backup = backup is not None and run(host, f"test -e {backup}/{unit}")[0]
    if not has_backup:
        # A first install (or a start with no file changed): nothing to return to.
        # Free the GPUs, keep the files for inspection.
        run(host, f"systemctl stop {unit}; systemctl disable --quiet {unit}")
        host.log_styled(f"nothing to roll back to: {unit} stopped and disabled, GPUs released", fg="red")
        report.action += ", stopped: nothing to roll back to"
        return "FAILED (stopped)"
    host.log_styled(f"rolling back to {backup}", fg="yellow")
    ok, out = run(host, rollout.restore_command(spec, backup))
    if ok and _restart(host, spec):
        verdict = wait_ready(host, spec)
        if verdict.ready:
            _, previous = run(host, f"grep -o -e '--speculative-algorithm [A-Za-z0-9]*' {backup}/{unit} || true")
            what = previous.split()[-1] if previous.strip() else "no speculative decoding"
            host.log_styled(
                f"rolled back to the service backed up at {backup_stamp} ({what}): serving again, {verdict.reason}",
                fg="yellow",
            )
            report.action = f"rolled back to {backup_stamp} ({what})"
            return "FAILED (rolled back)"
        report.reasons.append(f"the restored service did not come back either: {verdict.reason}")
    else:
        report.reasons.append(f"restore failed: {out}")
    host.log_styled("ROLLBACK FAILED: the previous service is not serving", fg="red")
    return "FAILED (rollback failed)"
