"""Preflight: every read-only check, before any change. A refused host gets no change at all."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.operations import python

from facts.preflight import HostSnapshot
from fleet import guards, rollout
from fleet.groupdata import SpecError, class_files, validate_class
from fleet.parse import HostFacts
from fleet.report import RUN, describe_gpus
from fleet.spec import ClassSpec


@dataclass
class Preflight:
    group: str
    spec: ClassSpec
    facts: HostFacts
    take_over_stale_lock: bool


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _refuse(state, host, reasons):
    # Returning False fails the host cleanly: pyinfra runs nothing after it there.
    host.log_styled(f"refused, nothing changed ({len(reasons)} failed checks)", fg="red")
    return False


def check(group_dir: str = "group_data") -> Preflight | None:
    """Gather the host's facts in one round trip, judge them, and refuse the host if anything fails."""
    report = RUN.host(host.name)
    run_state = state._get_module()  # the object itself: the context is gone when the table prints
    RUN.failed_hosts = lambda: {h.name for h in run_state.failed_hosts}
    classes = [g for g in host.groups if g in class_files(Path(group_dir))]
    report.gpu_class = ",".join(classes) or "-"
    try:
        if len(classes) != 1:
            raise SpecError([f"{host.name}: gpu class: expected exactly one GPU class group, found {classes or 'none'}"])
        group = classes[0]
        spec = validate_class(f"{group_dir}/{group}.py", host.data.dict())
    except SpecError as e:
        return _refused(report, e.problems)

    facts = host.get_fact(
        HostSnapshot,
        launcher=spec.service.launcher,
        model_paths=spec.model_paths,
        units=spec.watched_units,
        files=rollout.managed_files(spec),
        lock_owner=rollout.lock_owner_file(spec),
    )
    report.gpus = describe_gpus([g.name for g in facts.gpus.gpus]) if facts.gpus.status == "ok" else facts.gpus.status
    violations = [str(v) for v in guards.preflight(host.name, spec, facts)]

    lock = rollout.judge_lock(
        facts.deployed.lock_owner,
        time.time(),
        rollout.stale_after(spec),
        _pid_alive,
    )
    if lock.held and not lock.stale:
        violations.append(f"{host.name}: deploy lock: expected no other deploy, found {lock.message}")
    elif lock.stale:
        host.log_styled(f"{lock.message}; taking it over", fg="yellow")

    if violations:
        return _refused(report, violations)
    report.verdict = "passed preflight"
    return Preflight(group, spec, facts, take_over_stale_lock=lock.stale)


def _refused(report, reasons: list[str]) -> None:
    report.verdict = "REFUSED"
    report.action = "none"
    report.reasons = reasons
    for r in reasons:
        host.log_styled(r, fg="red", log_func=logger.error)
    python.call(name="Refuse host (preflight failed)", function=_refuse, reasons=reasons)
    return None


def _serving(pf: Preflight) -> bool:
    unit = pf.facts.units.get(pf.spec.service_unit)
    return unit is not None and unit.active_state == "active" and unit.unit_file_state == "enabled"


def planned(pf: Preflight, changes: list[str], to_stop: list[str]) -> bool:
    """Whether the host has work to do; what it is goes into the report (--dry shows it as is,
    activate amends it with what happened)."""
    report = RUN.host(host.name)
    if not (changes or to_stop or not _serving(pf)):
        report.action, report.verdict = "none (already as declared)", "OK"
        return False
    parts = [f"stop {', '.join(to_stop)}"] if to_stop else []
    if pf.facts.deployed.file_sha1.get(pf.spec.unit_file) is None:
        parts.append("install")
    elif changes:
        parts.append(f"update {', '.join(Path(c).name for c in changes)}")
    else:
        parts.append("start")
    report.action = ", ".join(parts)
    return True
