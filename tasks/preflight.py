"""Preflight: every read-only check, before any change, and the plan. A refused host gets no change at all."""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from pyinfra import host, logger, state
from pyinfra.operations import python

from facts.history import DeployHistory
from facts.preflight import HostSnapshot, snapshot_args
from fleet.core import hosts
from fleet.core import bounds
from fleet.rollout import guards, intent, lock
from fleet.tune import search as tune
from fleet.spec.load import SpecError, validate_host
from fleet.rollout.history import choose_backup, rollback_files
from fleet.weights.hub import pin_branches
from fleet.rollout.parse import HostFacts
from fleet.rollout.gpus import NvidiaSmiStatus
from fleet.rollout.plan import Plan, declared_files, describe_diff, plan
from fleet.rollout.pending import read_pending
from fleet.rollout.render import JOURNAL_FILTER_SYSTEMD, SERVER_ARGS_LINE
from fleet.core.outcome import HostVerdict
from fleet.core.report import describe_gpu_list
from fleet.rollout.commands import ManagedFile
from fleet.spec.secrets import SecretError, Secrets, resolve
from fleet.spec import ClassSpec
from fleet.core.wire import LINE, excerpt, shown
from adapter import run as runs

# make rollback: `--data sglang_fleet_rollback=STAMP` on that one pyinfra run's command line, the backup
# set to put back on the hosts of its --limit (fleet.rollout.history.PREVIOUS: the set before the last successful
# change). Read from the command line only: no environment variable or data file makes a deploy a rollback.
ROLLBACK_DATA = "sglang_fleet_rollback"


@dataclass
class Preflight:
    group: str
    spec: ClassSpec
    facts: HostFacts
    secrets: Secrets  # the class's, read where the deploy runs
    plan: Plan
    stamp: str  # names this run's backup and records
    rollback: Rollback | None = None  # make rollback: the backup set this run puts back


def _refuse(state, host, reasons):
    # Returning False fails the host cleanly: pyinfra runs nothing after it there.
    host.log_styled(f"refused, nothing changed ({len(reasons)} failed checks)", fg="red")
    return False


def check(group_dir: str = "group_data") -> Preflight | None:
    """Gather the host's facts in one round trip, judge them, refuse the host if anything
    fails, else plan what to do (nothing, if it is already as declared)."""
    report = runs.of(host.state).report.host(host.name)
    return contained(report, "preflight", lambda: _check(report, group_dir))


def contained(report, stage: str, work):
    """`work()`, or the host refused if it raises: pyinfra re-raises any exception at planning
    time for the whole run, and one host's odd answer must stop that host only."""
    try:
        return work()
    except Exception as e:  # noqa: BLE001 - whatever it was, it was about this host
        logger.debug(traceback.format_exc())
        return refused(report, [f"{host.name}: {stage}: could not judge what the host answered "
                                f"({type(e).__name__}: {excerpt(str(e), 300)})"])


def requested_rollback(command_line_data: dict) -> str | None:
    """The backup set this run puts back, from pyinfra's --data (its inventory's override data); None: a deploy."""
    to = command_line_data.get(ROLLBACK_DATA)
    return None if to is None else str(to)  # pyinfra reads a --data value as JSON where it can


def _check(report, group_dir: str) -> Preflight | None:
    classes = hosts.gpu_classes(host, Path(group_dir))
    report.gpu_class = ",".join(classes) or "-"
    rollback_to = requested_rollback(host.inventory.get_override_data())
    rollback = None
    try:
        asked = intent.requested(host.inventory.get_override_data())  # what the run is asked beyond group_data
    except ValueError as e:
        return refused(report, [f"{host.name}: {e}; nothing was touched"])
    runs.of(host.state).outcome = asked.outcome  # where its caller reads the hosts' outcomes (make tune)
    try:
        if len(classes) != 1:
            raise SpecError([f"{host.name}: gpu class: expected exactly one GPU class group, found {classes or 'none'}"])
        group = classes[0]
        spec = validate_host(f"{group_dir}/{group}.py", host.data.dict())
        if asked.overlay and rollback_to is not None:
            raise SpecError([f"{host.name}: a rollback takes no overlay ({asked.says or asked.overlay}); nothing was "
                             "touched"])
        try:
            spec = intent.applied(spec, asked)
        except ValueError as e:
            raise SpecError([f"{host.name}: {e}; nothing was touched"]) from None
        # this class only: a missing one refuses its hosts; a rollback copies its files, reads none
        secrets = Secrets() if rollback_to is not None else resolve(spec, f"{group_dir}/{group}.py")
        if rollback_to is not None:  # make rollback: the files of a backup set, and the spec they came from
            rollback = _rollback_target(spec, rollback_to)
            spec, group = rollback.spec, rollback.group
        elif spec.branches:  # models declared by branch: at the commit the endpoint names now, once per run
            spec, problems = pin_branches(spec, secrets.hub_token, runs.of(host.state).resolved)
            if problems:
                raise SpecError([f"{host.name}: {p}; nothing was touched" for p in problems])
            for m in spec.hub_models.values():
                if m.branch:
                    host.log(f"{m.repo}: branch {m.branch} is commit {m.revision} (this run's, on every host)")
    except (SpecError, SecretError) as e:
        return refused(report, e.problems)

    facts = host.get_fact(HostSnapshot, **snapshot_args(spec), _timeout=bounds.snapshot_s(spec))
    if facts is None:  # the one command answered nothing at all (the connection broke, say)
        return refused(report, [f"{host.name}: preflight: expected the host's facts, found no answer to the "
                                 "preflight command (see pyinfra's error above)"])
    report.gpus = describe_gpu_list(facts.gpus.gpus) if facts.gpus.status is NvidiaSmiStatus.OK else facts.gpus.status
    report.engine = spec.engine.name if spec.engine else facts.engine.version or "-"  # declared, else found
    for warning in facts.gpus.warnings:  # harmless to the rollout, worth an operator's look
        _warn(report, f"{host.name}: nvidia-smi said: {warning}")
    for warning in guards.drain_warnings(host.name, spec, facts):
        _warn(report, warning)
    violations = [str(v) for v in guards.preflight(host.name, spec, facts)]
    held_by = tune.under_way(tune.read_mark(facts.deployed.tune), time.time(), asked.owner or None)
    if held_by:
        violations.append(f"{host.name}: make tune: {held_by}")
    held = lock.judge(facts.deployed.lock, spec.lock_file, time.time(), lock.stale_after(spec))
    if not held.free_to_take:
        violations.append(f"{host.name}: deploy lock: expected no other deploy, found {held.message}")
    if violations:
        return refused(report, violations)
    if held.kind == "stale":
        host.log_styled(f"{held.message}; taking it over", fg="yellow")
    if spec.service.server_secrets and facts.systemd_version < JOURNAL_FILTER_SYSTEMD:
        _warn(report, f"{host.name}: systemd {facts.systemd_version or '(version unknown)'} has no "
                      f"LogFilterPatterns= ({JOURNAL_FILTER_SYSTEMD}+): SGLang will write its keys to the journal "
                      f"at every start (its `{SERVER_ARGS_LINE}` line; sglang issue 37457)")

    interrupted = read_pending(facts.deployed.pending, spec) if facts.deployed.pending else None
    now = time.time()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    want = rollback.files if rollback else declared_files(spec, group, facts, secrets)
    pf = Preflight(group, spec, facts, secrets, plan(spec, want, facts, interrupted, stamp, int(now),
                                                     lock.owner()["holder"], asked), stamp, rollback)
    _show(pf)
    return pf


def _warn(report, warning: str) -> None:
    """Said once per host, and again in the summary, whatever the verdict."""
    report.warnings.append(warning)
    host.log_styled(f"warning: {warning}", fg="yellow", log_func=logger.warning)


@dataclass(frozen=True)
class Rollback:
    stamp: str
    spec: ClassSpec  # the spec the backed-up files came from: the gate and smoke test use it
    group: str
    files: list[ManagedFile]


def _rollback_target(declared: ClassSpec, to: str) -> Rollback:
    """The backup set `to` names (PREVIOUS: the set before the last successful change), read from
    the host, or SpecError saying why there is none to put back (listing those there are)."""
    history = host.get_fact(DeployHistory, records_file=declared.records_file,
                            backups_dir=declared.backups_dir)
    backup, problem = choose_backup(history, to)
    spec, group = None, ""
    if backup is not None:
        spec, group, problem = backup.spec()
        if spec is not None and spec.service_unit != declared.service_unit:
            problem = f"it is of {spec.service_unit}, not of the declared {declared.service_unit}"
        problem = problem and f"backups/{backup.stamp}: {problem}"
    if spec is None or problem:
        raise SpecError([f"{host.name}: rollback: {problem}"])
    host.log_styled(f"rolling back to backups/{backup.stamp}: {backup.summary()}", fg="yellow")
    return Rollback(backup.stamp, spec, group, rollback_files(spec, group, backup))


def refused(report, reasons: list[str]) -> None:
    """Refuse the host: the reasons in its row and on the terminal, and no operation but the refusal."""
    report.verdict = HostVerdict.REFUSED
    report.action = "none"
    report.reasons = reasons
    for r in reasons:
        host.log_styled(r, fg="red", log_func=logger.error)
    python.call(name="Refuse host (preflight failed)", function=_refuse, reasons=reasons)
    return None


def _show(pf: Preflight) -> None:
    """The plan in the report, what drifted, and with --diff the files' diffs (secrets never shown)."""
    report = runs.of(host.state).report.host(host.name)
    report.action = pf.plan.action()
    if pf.rollback:
        report.action = f"roll back to backups/{pf.rollback.stamp}: " + (
            report.action if pf.plan.has_work else "none (the host has those files already)")
    report.verdict = HostVerdict.PASSED_PREFLIGHT if pf.plan.has_work else HostVerdict.OK
    if pf.plan.interrupted:
        host.log_styled(f"an earlier rollout was interrupted: {shown(pf.plan.action(), LINE)}", fg="yellow")
    for why in pf.plan.why:
        host.log_styled(f"drift: {shown(why, LINE)}", fg="yellow")
    if not state.config.DIFF:
        return
    for f in pf.plan.swap:
        if f.copied_from:
            host.log(f"Will put back {f.path} from {f.copied_from}")
            continue
        if f.secret or f.path not in pf.facts.deployed.contents:
            host.log(f"Will write {f.path} (content not shown)")
            continue
        host.log(describe_diff(f.path, pf.facts.deployed.contents[f.path], f.content or ""))
