"""The rollout as a plan over facts: (spec, the host's facts, what the host recorded of an
unfinished rollout) in, what to do out. No I/O here; tasks/ only executes the plan.

A host is "already as declared" only when its files (content, mode, owner), directories,
unit state and running process all match the spec AND its service answers /health 200 now.
Anything else is work, named in the operator's words ("sglang.secret mode 644, want 600").

Before its first change a rollout writes a pending-rollout record on the host: what the host
looked like (files, backup, the service's and each service workload's enabled/active state, the
scopes and processes found holding GPUs for the other workloads). A
record found at preflight means an earlier run was interrupted: this run takes it over, so
its rollback target stays the state from before the interrupted run, and it ends with the
gate and smoke test passed, or with that state restored. An interrupted rollback of the
same spec is finished, not retried.

The record and its reader are in fleet/rollout/pending.py.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from fleet.rollout.gate import base_url
from fleet.weights.hub import to_fetch
from fleet.rollout.gpus import GpuProcess, GpuProcessList
from fleet.engine.parse import EngineStatus
from fleet.rollout.parse import HostFacts, UnitState
from fleet.rollout.pending import (
    BEGUN,
    ROLLING_BACK,
    ROLLING_OUT,
    RUNNING_STATES,
    SERVING_STATES,
    Before,
    FoundProcess,
    Held,
    Pending,
    UnitBefore,
    target_of,
)
from fleet.rollout.render import JOURNAL_FILTER_SYSTEMD, server_argv
from fleet.rollout.commands import DIR_MODE, OWNER, ManagedFile, UnitSeen, desired_files, managed_dirs, managed_paths
from fleet.spec.secrets import Secrets
from fleet.spec import SECRET_FLAGS, ClassSpec, ProcessWorkload, ScopeWorkload, workload_name
from fleet.rollout.intent import PLAIN, Intent
from fleet.tune.search import TuneMark, read_mark
from fleet.core.wire import LINE, capped, shown


def masked_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    """argv after the interpreter, secret flags' values as '***' (as the runtime fact reads it)."""
    out = list(argv[1:])
    for i, a in enumerate(out):
        flag = a.split("=", 1)[0]
        if i and out[i - 1] in SECRET_FLAGS:
            out[i] = "***"
        elif flag in SECRET_FLAGS and "=" in a:
            out[i] = f"{flag}=***"
    return out


@dataclass(frozen=True)
class Plan:
    before: Before
    swap: tuple[ManagedFile, ...] = ()  # content differs: staged, then renamed into place
    repairs: tuple[ManagedFile, ...] = ()  # content right, mode or owner wrong
    dirs: tuple[str, ...] = ()  # managed directories with the wrong mode or owner (begin fixes them)
    stop_workloads: tuple[str, ...] = ()  # the workloads this run stops (their names)
    found: dict[str, Held] = field(default_factory=dict)  # the scope and process workloads' GPU holders now:
    #                                                       what their stop acts on
    daemon_reload: bool = False
    enable: bool = False
    restart: bool = False
    wait: bool = False  # through the gate and the smoke test before the rollout counts as done
    backup: bool = False  # back up the current files first (into backups/<before.backup>)
    interrupted: Pending | None = None  # the unfinished rollout found on the host, which this run takes over
    finish_rollback: bool = False  # ... which was rolling back the same spec: finish that only
    record: Pending | None = None  # the pending-rollout record this rollout keeps on the host (set by plan())
    replaces_service: bool = False  # the service's files before differ from the declared ones: a rollback
    #                                 has a previous service to return to
    why: tuple[str, ...] = ()  # the drift found, in words
    install_engine: str | None = None  # the declared engine is not on the host: installed before anything stops
    fetch_models: tuple[tuple[str, str], ...] = ()  # (directory, repo@revision) of each declared revision missing or
    #                                                 damaged: fetched before anything stops
    intent: Intent = PLAIN  # what the run was asked beyond group_data (fleet/rollout/intent.py), as it holds for this host
    overlaid: TuneMark | None = None  # an earlier run's overlay the host still serves (its mark); a run without one
    #                                   returns it (restarted, whatever its files say)

    @property
    def has_work(self) -> bool:
        return bool(self.install_engine or self.fetch_models or self.interrupted or self.swap or self.repairs or self.dirs or self.stop_workloads
                    or self.daemon_reload or self.enable or self.restart or self.wait)

    def action(self) -> str:
        """What the run does, as the summary table and the dry run say it."""
        if not self.has_work:
            return "none (already as declared)"
        parts = [f"install engine {self.install_engine}"] if self.install_engine else []
        parts += [f"fetch {model}" for _, model in self.fetch_models]
        if self.intent.overlay:
            parts.append(self.intent.says or f"overlay {self.intent.overlay}")
        elif self.overlaid:
            parts.append(f"return from make {self.overlaid.record}")
        if self.interrupted:
            started = f"started {_utc(self.interrupted.since)} by {self.interrupted.by}"
            if self.finish_rollback:
                return f"finish the rollback of an interrupted rollout ({started}; it failed: {self.interrupted.reason})"
            parts.append(f"take over an interrupted rollout ({started}; "
                         + ("mid-change: at once)" if self.interrupted.mid_change else "its turn had not come)"))
        if self.stop_workloads:
            parts.append(f"stop {', '.join(self.stop_workloads)}")
        if self.swap and not any(self.before.files.values()):
            parts.append("install")
        elif self.swap:
            parts.append(f"update {', '.join(PurePosixPath(f.path).name for f in self.swap)}")
        if self.repairs or self.dirs:
            parts.append(f"fix mode/owner of {', '.join([PurePosixPath(f.path).name for f in self.repairs] + list(self.dirs))}")
        if self.daemon_reload and not any(f.restarts for f in self.swap):
            parts.append("daemon-reload")
        if self.enable:
            parts.append("enable")
        if self.restart:
            parts.append("restart" if self.before.serving else "start")
        elif self.wait:
            parts.append("wait for /health")
        return ", ".join(parts)


def _utc(ts: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _unit_before(unit: UnitState | None) -> UnitBefore:
    return UnitBefore(unit.unit_file_state if unit else "", unit.active_state if unit else "")


def workload_of(spec: ClassSpec, process: GpuProcess) -> str | None:
    """The declared workload a GPU process is of (its name), None if none: never for the service's own,
    nor for one without a pid (nvidia-smi's [N/A]: nothing to stop it by); a service workload by its
    unit, before the others; then the first scope or process workload that matches it, in declared order."""
    if process.unit == spec.service_unit or process.pid is None:
        return None
    if process.unit in spec.service_workloads:
        return process.unit
    return next((w.name for w in spec.held_workloads
                 if w.matches(process.unit, process.name, process.command_line)), None)


def found_workloads(spec: ClassSpec, processes: GpuProcessList) -> dict[str, Held]:
    """The scope and process workloads holding GPUs now, each with its scopes or processes. Left out, so
    never signalled (and still holding its GPU after the stop, which then fails): a process whose start
    time could not be read (it cannot be told from a later one of its pid), and pid 1, the host's init."""
    scopes: dict[str, dict[str, None]] = {}
    found: dict[str, dict[int, FoundProcess]] = {}
    for p in processes.processes:
        name = workload_of(spec, p)
        w = spec.workload(name) if name else None
        if isinstance(w, ScopeWorkload):
            scopes.setdefault(name, {})[p.unit] = None
        elif isinstance(w, ProcessWorkload) and p.pid is not None and p.pid > 1 and p.start is not None:
            found.setdefault(name, {})[p.pid] = FoundProcess(p.pid, p.start, p.command_line or "")
    return {w.name: Held(tuple(scopes.get(w.name, ())), tuple(found.get(w.name, {}).values()),
                         given_back=w.give_back is not False)
            for w in spec.held_workloads if w.name in scopes or w.name in found}


def before_of(spec: ClassSpec, facts: HostFacts) -> Before:
    """The host as preflight read it (no backup yet)."""
    return Before(
        files={p: facts.deployed.sha1(p) for p in managed_paths(spec)},
        backup=None,
        service=_unit_before(facts.units.get(spec.service_unit)),
        workloads={**{w: _unit_before(facts.units.get(w)) for w in spec.service_workloads},
                   **found_workloads(spec, facts.gpu_processes)},
    )


def units_as_read(spec: ClassSpec, facts: HostFacts, taken_over: bool = False) -> list[UnitSeen]:
    """The service's and each service workload's state as preflight read it, for begin to check
    again (a scope or a process has no unit state to compare). UnitFileState must be the same word.
    Of ActiveState only what the plan and the rollback ask counts: of the service, serving or not
    (SERVING_STATES); of a workload, running or not (RUNNING_STATES). So a training job that was
    activating and is active now is the same, one deactivating now is not; a service that was
    activating (loading) and serves now is not: a rollback would have left it stopped. taken_over: the
    service is not compared: its state is the interrupted run's doing (a server it left loading serves
    by now), and the rollback returns to the record's before-state, not to what preflight read."""
    seen = before_of(spec, facts)
    service = [] if taken_over else [UnitSeen(spec.service_unit, seen.service.enabled, seen.service.active,
                                              SERVING_STATES)]
    return [*service,
            *(UnitSeen(w, u.enabled, u.active, RUNNING_STATES) for w, u in seen.workloads.items()
              if isinstance(u, UnitBefore))]


def running_workloads(spec: ClassSpec, units: dict[str, UnitState], found: dict[str, Held]) -> list[str]:
    """Declared workloads that are running (or, a service, enabled: it would come back at boot), in
    declared order; found: found_workloads()."""
    return [workload_name(w) for w in spec.workloads
            if ((w in units and _unit_before(units[w]).ran) if isinstance(w, str) else w.name in found)]


def declared_files(spec: ClassSpec, group: str, facts: HostFacts, secrets: Secrets) -> list[ManagedFile]:
    """The files group_data declares for this host (its systemd decides the journal filter)."""
    return desired_files(spec, group, secrets, journal_filter=facts.systemd_version >= JOURNAL_FILTER_SYSTEMD)


def plan(spec: ClassSpec, want: list[ManagedFile], facts: HostFacts, interrupted: Pending | None, stamp: str,
         now: int, by: str, intent: Intent = PLAIN) -> Plan:
    """What to do on a host that passed preflight. want: the files it is to have (declared_files,
    or a backup set a rollback puts back); interrupted: the record of its unfinished rollout;
    stamp: the name a backup taken now gets; now, by: when and who, for the record; intent: what the run
    was asked beyond group_data (spec has its overlay already)."""
    deployed, runtime = facts.deployed, facts.runtime
    unit = facts.units.get(spec.service_unit)
    why: list[str] = []

    swap = tuple(f for f in want if deployed.sha1(f.path) != f.sha1)
    repairs = []
    for f in want:
        state = deployed.files.get(f.path)
        if f not in swap and state is not None and (state.mode, state.owner) != (f.mode, OWNER):
            repairs.append(f)
            why.append(f"{f.path}: mode/owner {state.mode} {state.owner}, want {f.mode} {OWNER}")
    dirs = []
    for d in managed_dirs(spec):
        state = deployed.dirs.get(d)  # a missing one is made with the first file it holds
        if state is not None and (state.mode, state.owner) != (DIR_MODE, OWNER):
            dirs.append(d)
            why.append(f"{d}: mode/owner {state.mode} {state.owner}, want {DIR_MODE} {OWNER}")

    active = unit is not None and unit.active_state == "active"
    restarts_for_files = any(f.restarts for f in swap)
    stale_unit = unit is not None and unit.need_daemon_reload == "yes"
    if stale_unit:
        why.append(f"systemd's copy of {spec.service_unit} is older than its file (daemon-reload pending)")
    args_differ = (
        active and not restarts_for_files and runtime.cmdline is not None
        and masked_argv(runtime.cmdline) != masked_argv(server_argv(spec))
    )
    if args_differ:
        why.append(f"the running server's arguments differ from {spec.service_unit}'s ExecStart")
    if unit is not None and not active and unit.load_state != "not-found":
        why.append(f"{spec.service_unit} is {unit.active_state} ({unit.sub_state})")
    enable = unit is None or unit.unit_file_state != "enabled"
    if unit is not None and unit.unit_file_state not in ("enabled", ""):
        why.append(f"{spec.service_unit} is {unit.unit_file_state}, want enabled")
    overlaid = read_mark(deployed.tune)
    intent = intent.returning(overlaid)
    if overlaid is not None and not intent.overlay:
        why.append(f"make {overlaid.record} left it serving an overlay ({overlaid.candidate}; since "
                   f"{_utc(overlaid.since)}, by {overlaid.by}): restarted")
    restart = restarts_for_files or not active or args_differ or bool(intent.overlay) or overlaid is not None
    if active and not restart and runtime.health != 200:
        why.append(f"{spec.service_unit} is active but not serving: /health "
                   f"{runtime.health or 'no answer'} at {base_url(spec)}")
    wait = restart or runtime.health != 200 or interrupted is not None

    found = found_workloads(spec, facts.gpu_processes)
    recorded = interrupted.before if interrupted else before_of(spec, facts)
    live = {p: deployed.sha1(p) for p in recorded.files}
    # back up once per rollout, while the files are still the ones from before it
    backup = bool(swap) and recorded.backup is None and live == recorded.files and any(live.values())
    before = Before(recorded.files, stamp, recorded.service, recorded.workloads) if backup else recorded
    target = target_of(want)
    finish_rollback = interrupted is not None and interrupted.phase == ROLLING_BACK and interrupted.target == target
    if finish_rollback:
        record = interrupted
    else:  # a taken-over rollout keeps its start, its before-state and how far it got, and heads for this spec
        record = Pending(ROLLING_OUT if interrupted and interrupted.mid_change else BEGUN,
                         interrupted.since if interrupted else now, interrupted.by if interrupted else by,
                         target, restart or bool(interrupted and interrupted.restart), "", before)
    return Plan(
        before=before,
        swap=swap,
        repairs=tuple(repairs),
        dirs=tuple(dirs),
        stop_workloads=tuple(running_workloads(spec, facts.units, found)),
        found=found,
        daemon_reload=spec.unit_file in [f.path for f in swap] or stale_unit,
        enable=enable,
        restart=restart,
        wait=wait,
        backup=backup,
        interrupted=interrupted,
        finish_rollback=finish_rollback,
        record=record,
        replaces_service=any(before.files.get(f.path) != f.sha1 for f in want if f.restarts),
        why=tuple(why),
        install_engine=spec.engine.name if spec.engine is not None and facts.engine.status is EngineStatus.NO_LAUNCHER else None,
        fetch_models=tuple((p, spec.hub_models[p].describe()) for p in to_fetch(spec, facts.models)),
        intent=intent,
        overlaid=overlaid,
    )


DIFF_SHOWN = 200  # lines of one file's diff make dry shows: the host's file may be of any length


def describe_diff(path: str, on_host: str, declared: str) -> str:
    """make dry's diff of a managed file, the host's text against the declared: each line printable and bounded
    (wire.shown; a tab as four spaces), at most DIFF_SHOWN of them."""
    diff = difflib.unified_diff(on_host.splitlines(), declared.splitlines(), fromfile=f"{path} (on the host)",
                                tofile=f"{path} (declared)", lineterm="")
    return "\n".join([f"Will change {path}", *capped(list(diff), DIFF_SHOWN,
                                                      lambda line: shown(line[:LINE].replace("\t", "    "), LINE,
                                                                         strip=False))])
