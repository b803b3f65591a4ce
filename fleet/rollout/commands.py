"""What a rollout writes on a host and the shell that writes it, built from the spec so it is
tested without hosts; the task files only run these commands.

Where each file lives on the host: fleet/core/layout.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from fleet.core import controller, layout
from fleet.rollout import lock
from fleet.rollout.render import render_auth_header, render_config, render_env, render_secret_env, render_unit
from fleet.spec.secrets import Secrets
from fleet.spec import ClassSpec
from fleet.core.wire import BLOCK_LIMIT, clipped, frames

KEEP_BACKUPS = 5
OWNER = "root:root"  # every managed file and directory
DIR_MODE = "700"  # config and state directories: the secret and its backups live there


@dataclass(frozen=True)
class ManagedFile:
    path: str
    mode: str  # octal, as `stat -c %a` prints it
    content: str | None  # what the spec wants there; None: must not exist (unless copied_from)
    restarts: bool  # a change of content needs a restart of the service
    secret: bool = False  # never shown, not even in a diff
    copied_from: str | None = None  # a file on the host to copy (a rollback's backup): content unknown here
    copied_sha1: str | None = None  # ... and the sha1 the host reported for it

    @property
    def present(self) -> bool:
        return self.content is not None or self.copied_from is not None

    @property
    def sha1(self) -> str | None:
        return self.copied_sha1 if self.copied_from is not None else sha1(self.content)


def sha1(content: str | None) -> str | None:
    """As sha1sum prints it (what the host reports of its files); None for no file."""
    return hashlib.sha1(content.encode()).hexdigest() if content is not None else None


def service_files(spec: ClassSpec) -> list[str]:
    """The files the service runs from: a change to any of them needs a restart."""
    return [spec.unit_file, spec.env_file, spec.config_file, spec.secret_file]


def managed_paths(spec: ClassSpec) -> list[str]:
    """Everything a rollout replaces and a rollback puts back: the service's files, secrets
    included, then the header file and the spec record (which change with them but restart nothing)."""
    return [*service_files(spec), spec.auth_header_file, spec.deployed_spec_file]


def watched_files(spec: ClassSpec) -> list[str]:
    """The files preflight reads and begin checks are still as read: the managed ones, and the
    deploy records (a rollout that ended meanwhile appended one, whatever else it changed)."""
    return [*managed_paths(spec), spec.records_file]


def desired_files(spec: ClassSpec, group: str, secrets: Secrets, journal_filter: bool) -> list[ManagedFile]:
    """The managed files as the spec wants them, in managed_paths order. secrets: the values of
    the class's declared secrets; journal_filter: the host's systemd has LogFilterPatterns=."""
    return [
        ManagedFile(spec.unit_file, "644", render_unit(spec, group, journal_filter), restarts=True),
        ManagedFile(spec.env_file, "644", render_env(spec), restarts=True),
        ManagedFile(spec.config_file, "600", render_config(spec, secrets), restarts=True, secret=True),
        ManagedFile(spec.secret_file, "600", render_secret_env(spec, secrets), restarts=True, secret=True),
        ManagedFile(spec.auth_header_file, "600", render_auth_header(spec, secrets), restarts=False, secret=True),
        ManagedFile(spec.deployed_spec_file, "600", spec_record(spec, group), restarts=False),
    ]


def managed_dirs(spec: ClassSpec) -> list[str]:
    return [str(PurePosixPath(spec.env_file).parent), spec.state_dir, spec.backups_dir]


def spec_record(spec: ClassSpec, group: str) -> str:
    """The spec as deployed, for the host's record: secrets appear as where they come from, never as values."""
    data = json.loads(spec.model_dump_json(exclude={"tune", "canary"}))  # read by make tune, the analysis: no host
    return json.dumps({"group": group, "spec": data}, indent=2, sort_keys=True) + "\n"


def _q(text: str) -> str:
    return shlex.quote(text)


def write_command(path: str, text: str) -> str:
    """Write a file atomically: a reader sees the old content or the new, never half (printf, not
    echo: dash's echo would turn escapes into characters)."""
    return f"printf '%s' {_q(text)} > {_q(path + '.tmp')} && mv -f {_q(path + '.tmp')} {_q(path)}"


def _write_json(path: str, data: dict) -> str:
    return write_command(path, json.dumps(data, sort_keys=True) + "\n")


def _drop_staged(spec: ClassSpec) -> str:
    return "rm -f " + " ".join(_q(layout.staged_path(p)) for p in managed_paths(spec))


def backup_command(spec: ClassSpec, stamp: str, prune: bool = True) -> str:
    """Copy the current files to backups/STAMP, keep the last KEEP_BACKUPS (prune: a make tune's run,
    whose set goes at its end, prunes none); prints the dir or nothing (nothing there yet). A failed
    copy fails the command and leaves no partial set: fleet/programs/begin.sh's backup."""
    return controller.shell("begin.sh", "backup", *_backup_args(spec, stamp, prune))


def _backup_args(spec: ClassSpec, stamp: str, prune: bool) -> list[str | int]:
    return [spec.backups_dir, stamp, "yes" if prune else "no", KEEP_BACKUPS, "\n".join(managed_paths(spec))]


BEGUN_MARK = "@@begun"
CHANGED, UNIT_CHANGED = "changed", "unit-changed"  # begin's records of a file, a unit not as preflight read it


@dataclass(frozen=True)
class UnitSeen:
    """A unit as preflight read it, for begin to check again (fleet.rollout.plan.units_as_read): its
    UnitFileState exactly, and of its ActiveState only whether it is one of `alike`: the states
    the plan and the rollback treat as one (serving, or running)."""

    unit: str
    enabled: str  # UnitFileState ('': no unit file)
    active: str  # ActiveState
    alike: tuple[str, ...]

    @property
    def inside(self) -> bool:
        return self.active in self.alike


def begin_command(
    spec: ClassSpec,
    who: dict,
    lock_seen: lock.LockFacts,
    files_seen: dict[str, str | None],
    backup_stamp: str | None,
    pending: dict,
    secret_uploads: list[str],
    copies: dict[str, str] | None = None,
    units: Sequence[UnitSeen] = (),
    overlay_mark: dict | None = None,
    prune_backups: bool = True,
) -> str:
    """Before the first change: take the lock, check that the files (watched_files) and the units'
    states are still what preflight read, fix the directories, stage the files a rollback copies
    (path -> its backup, before this run's backup can prune that one), back up, write the
    pending-rollout record (fleet/programs/begin.sh). Prints BEGUN_MARK at the end, or a CHANGED record
    naming the path that changed, or a UNIT_CHANGED record (read_begin reads them). units: the states
    preflight read (none given: none checked); overlay_mark: the mark of the overlay the run deploys
    (fleet.tune.search.mark, a make tune candidate's), written with the pending record, before anything changes;
    prune_backups: False for a run whose backup set is not kept (fleet.rollout.intent.Intent.keep_backup).
    Whatever fails after the lock is taken releases it and changes nothing else: a backup set this
    command took is removed again."""
    program = controller.shell(
        "begin.sh", "begin", *_backup_args(spec, backup_stamp or "", prune_backups),
        "\n".join(f"{sha1 or ''} {path}" for path, sha1 in files_seen.items()),
        "\n".join(f"{u.unit} {'yes' if u.inside else 'no'} {u.enabled or '-'} {' '.join(u.alike)}" for u in units),
        BLOCK_LIMIT + 1, "\n".join(managed_dirs(spec)), DIR_MODE,
        "\n".join(layout.staged_path(p) for p in managed_paths(spec)),
        "\n".join(f"{source}\n{layout.staged_path(path)}" for path, source in (copies or {}).items()),
        spec.pending_file, json.dumps(pending, sort_keys=True) + "\n",
        *((spec.tune_file, json.dumps(overlay_mark, sort_keys=True) + "\n") if overlay_mark is not None else ("", "")),
        "\n".join(layout.staged_path(path) for path in secret_uploads))
    return (f"umask 077; {lock.take_command(spec, who, lock_seen)} || exit $?; "
            f"{program} || {{ {lock.release_command(spec)}; exit 1; }}; echo {BEGUN_MARK}")


@dataclass(frozen=True)
class BeginAnswer:
    """What begin_command said: begun, or refused because the lock or the host changed since preflight."""

    begun: bool = False
    lock_taken: str | None = None  # another deploy took the lock since preflight: the lock's text ('' gone again)
    changed: str = ""  # what is no longer as preflight read it, in words ('' if nothing)


def read_begin(answer: str, spec: ClassSpec, units: Sequence[UnitSeen] = ()) -> BeginAnswer:
    """begin_command's answer; units: those it was given, to say what they were."""
    said = frames(answer)
    if any(f.marker == BEGUN_MARK for f in said):
        return BeginAnswer(begun=True)
    refused = next((f for f in said if f.marker == lock.REFUSED_MARK), None)
    if refused is not None:
        return BeginAnswer(lock_taken=(refused.text or "").strip())
    seen = {u.unit: u for u in units}
    for f in said:
        if f.key == CHANGED and f.value == spec.records_file:
            return BeginAnswer(changed=f"the deploy records ({f.value}) changed since preflight (another deploy "
                                       "ended meanwhile, or a hand edit)")
        if f.key == CHANGED:
            return BeginAnswer(changed=f"{f.value} changed since preflight (another deploy, or a hand edit)")
        if f.key == UNIT_CHANGED and f.value in seen:
            return BeginAnswer(changed=_unit_change(seen[f.value], f.text))
    return BeginAnswer()


def _unit_change(u: UnitSeen, text: str | None) -> str:
    """'U became X since preflight (it was Y: ...)', X and Y what differs: ActiveState, UnitFileState or both."""
    if text is None:
        return f"{u.unit}'s state changed since preflight (its answer could not be read)"
    active, _, rest = text.partition("\n")
    active, enabled = clipped(active, 40), clipped(rest.partition("\n")[0], 40)
    became, was = [], []
    if (active in u.alike) != u.inside:
        became.append(active or "(no answer from systemctl)")
        was.append(u.active or "(no answer from systemctl)")
    if enabled != u.enabled:
        became.append(enabled or "without a unit file")
        was.append(u.enabled or "without a unit file")
    return (f"{u.unit} became {' and '.join(became)} since preflight (it was {' and '.join(was)}: "
            "another deploy, or a hand change)")


def apply_command(
    spec: ClassSpec,
    swap: list[ManagedFile],
    repairs: list[ManagedFile],
    daemon_reload: bool,
    enable: bool,
    restart: bool,
) -> str:
    """Put the staged files live (atomic renames), repair modes and owners, then systemctl."""
    unit = _q(spec.service_unit)
    parts = ["set -e"]
    for f in swap:
        staged = _q(layout.staged_path(f.path))
        if not f.present:
            parts.append(f"rm -f {_q(f.path)}")
        else:
            parts.append(f"chown {OWNER} {staged}; chmod {f.mode} {staged}; mv -f {staged} {_q(f.path)}")
    for f in repairs:
        parts.append(f"chown {OWNER} {_q(f.path)}; chmod {f.mode} {_q(f.path)}")
    if daemon_reload:
        parts.append("systemctl daemon-reload")
    if enable:
        parts.append(f"systemctl enable --quiet -- {unit}")
    if restart:
        parts.append(restart_command(spec))
    return "; ".join(parts)


def restart_command(spec: ClassSpec) -> str:
    # reset-failed also clears the start limit, which every start counts towards, manual ones too
    unit = _q(spec.service_unit)
    return f"systemctl reset-failed -- {unit} 2>/dev/null || true; systemctl restart -- {unit}"


def stop_and_disable_command(spec: ClassSpec) -> str:
    """No crash loop, not at boot either; the files stay for inspection."""
    unit = _q(spec.service_unit)
    return f"systemctl stop -- {unit}; systemctl disable --quiet -- {unit}"


TICK_S = 0.2  # how often a process stop looks whether its processes are gone


def _signal_processes(processes: list[tuple[int, int, float]]) -> str:
    """SIGTERM to each (pid, start, kill_after_s), then SIGKILL to one still running after its
    kill_after_s, each only while the pid is still that process: fleet/programs/stop_processes.sh."""
    return controller.shell("stop_processes.sh", TICK_S,
                            *[n for pid, start, after in processes for n in (pid, start, math.ceil(after / TICK_S))])


def stop_workloads_command(services: list[str], scopes: list[str] = (),
                           processes: list[tuple[int, int, float]] = ()) -> str:
    """Services stopped and disabled too: a reboot must not hand the GPUs back to the training job.
    Scopes stopped (a transient unit: nothing to disable; one gone meanwhile is stopped). Processes
    (pid, start time, kill_after_s) signalled (_signal_processes). Fails if a service or a scope did
    not stop; whether the GPUs are free, the caller reads from nvidia-smi."""
    steps = ["ok=yes"]
    if services:
        steps.append("systemctl disable --now -- " + " ".join(_q(u) for u in services) + " || ok=no")
    steps += [f"{{ systemctl stop -- {_q(s)} || ! systemctl is-active --quiet -- {_q(s)}; }} || ok=no" for s in scopes]
    if processes:
        steps.append(_signal_processes(list(processes)))
    return "; ".join([*steps, "[ $ok = yes ]"])


def give_back_command(spec: ClassSpec, enable: list[str], start: list[str], commands: list[str] = ()) -> str:
    """Workloads as they were before the rollout: these services enabled, those started, and the scope
    or process workloads named in `commands` started by their declared give_back command (an argv from
    group_data, each element quoted, run directly with stdin from /dev/null, its output to its log,
    killed after readiness.workload_release_timeout_s). Stops at the first that fails, saying which."""
    timeout = math.ceil(spec.readiness.workload_release_timeout_s)
    steps = [f"systemctl enable --quiet -- {_q(w)}" for w in enable] + [f"systemctl start -- {_q(w)}" for w in start]
    for name in commands:
        argv, log = " ".join(_q(a) for a in spec.workload(name).give_back), _q(spec.give_back_log(name))
        steps.append(f"( umask 077; timeout -k 5 {timeout} {argv} < /dev/null > {log} 2>&1 || {{ rc=$?; "
                     f"printf '%s exited %s: ' {_q('the give-back command of ' + name)} $rc; head -c 2000 {log}; "
                     "exit 1; } )")
    return " && ".join(steps) or "true"


def phase_command(spec: ClassSpec, pending: dict) -> str:
    """Rewrite the pending record with how far the rollout got, as begin wrote it: private, atomic."""
    return f"umask 077; {_write_json(spec.pending_file, pending)}"


RESTORED = "@@restored="


def restore_command(spec: ClassSpec, before_files: dict[str, str | None], backup_stamp: str | None, stop: bool,
                    enabled: str, pending: dict) -> str:
    """Mark the pending record as rolling back, then put back the files that differ from before
    (from backups/STAMP; a file that did not exist is removed). The service is stopped first if one
    of its own files comes back, or if `stop`. Its enabled state ("enabled"/"disabled") is put
    back where its unit file exists. Prints RESTORED and the paths put back: fleet/programs/restore.sh."""
    return "umask 077; " + controller.shell(
        "restore.sh", spec.pending_file, json.dumps(pending, sort_keys=True) + "\n", "yes" if stop else "no",
        spec.service_unit, spec.unit_file, enabled if enabled in ("enabled", "disabled") else "",
        f"{spec.backups_dir}/{backup_stamp}" if backup_stamp else "",
        "\n".join(f"{sha1 or '-'} {path}" for path, sha1 in before_files.items()),
        "\n".join(service_files(spec)), "\n".join(layout.staged_path(p) for p in managed_paths(spec)))


def finish_command(spec: ClassSpec, record: dict, drop_backup: str | None = None, returned: bool = False) -> str:
    """The end of every rollout that ran: the record, the pending record and the lock gone. drop_backup: the
    backup set a run that keeps none took (a make tune's), dropped: it holds a candidate's files, or files
    group_data declares, never a set to roll back to (fleet.rollout.history.before_last_change passes such runs over),
    and five candidates would push the real sets out. returned: the host serves its declared spec again after
    an overlay, so the overlay's mark goes."""
    drop = [f"rm -rf {_q(spec.backups_dir + '/' + drop_backup)}"] if drop_backup else []
    return "; ".join(
        [
            record_command(spec, record),
            f"rm -f {_q(spec.pending_file)}" + (f" {_q(spec.tune_file)}" if returned else ""),
            *drop,
            _drop_staged(spec),
            lock.release_command(spec),
        ]
    )


def record_command(spec: ClassSpec, record: dict) -> str:
    line = _q(json.dumps(record, sort_keys=True))
    return f"mkdir -p {_q(spec.state_dir)}; printf '%s\\n' {line} >> {_q(spec.records_file)}"


def journal_command(spec: ClassSpec, lines: int = 30) -> str:
    return f"journalctl --unit={_q(spec.service_unit)} -n {lines} --no-pager -o short-iso"
