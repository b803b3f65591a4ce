"""fleet.rollout.commands's shell (begin, apply, restore, finish, backups, records, the workloads' stop and
give-back) and fleet.core.report, no hosts; the workloads' tasks (tasks/workloads.py, HostSteps.give_back)
over a scripted host.

The commands are run for real with `sh` (pyinfra's shell; dash on Debian) and bash in a tmp
dir: the command string built from the spec is taken as is, and only its absolute prefixes
(/etc/, /var/lib/, /run/) are moved under tmp. systemctl is a stand-in that logs its calls
and answers `show -p ActiveState|UnitFileState --value -- U` with the states a test gave U
(Host.unit; inactive and no unit file otherwise); chown and install take no owner (the tests
need not run as root).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleet.rollout import lock
from fleet.rollout.pending import RUNNING_STATES, SERVING_STATES
from fleet.core.report import HostReport, RunReport, describe_gpus, table
from fleet.core.layout import staged_path
from fleet.rollout.commands import (
    BEGUN_MARK,
    KEEP_BACKUPS,
    RESTORED,
    BeginAnswer,
    ManagedFile,
    UnitSeen,
    apply_command,
    backup_command,
    begin_command,
    desired_files,
    finish_command,
    give_back_command,
    journal_command,
    managed_dirs,
    managed_paths,
    read_begin,
    record_command,
    restore_command,
    service_files,
    spec_record,
    stop_workloads_command,
    watched_files,
)
from fleet.rollout.gpus import start_of_stat
from fleet.rollout.pending import Before, FoundProcess, Held, UnitBefore
from fleet.spec.secrets import Secrets
from fleet.spec import ClassSpec
from fleet.core.wire import frames
from tasks import activate as tasks_activate
from tasks import workloads as tasks_workloads

KEY = "sk-Fleet0123456789abcdef"
SHELLS = ["sh", "bash"]
PREFIXES = ("/etc/", "/var/lib/", "/run/")
WHO = {"holder": "alice@laptop", "pid": 4242, "since": 1_796_040_000}
PENDING = {"phase": "rolling-out", "before": {"files": {}}}


def make_spec(**service) -> ClassSpec:
    return ClassSpec.model_validate(
        {
            "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
            "service": {"model_path": "/root/models/Qwen3.6-27B", "served_model_name": "qwen3.6-27b", **service},
            "speculative": {"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash"},
        }
    )


SPEC = make_spec(api_key={"env": "SGLANG_API_KEY_TEST"}, secret_environment={"HF_TOKEN": {"env": "HF_TOKEN"}})
SECRETS = Secrets({"api-key": KEY}, {"HF_TOKEN": "hf_Fleet0123"})
UNIT, ENV, CONFIG, SECRET, AUTH, RECORD = managed_paths(SPEC)


class Host:
    """A tmp root: real paths map to root/<path>; commands are run with their prefixes moved there."""

    def __init__(self, root: Path, shell: str):
        self.root, self.shell = root, shell
        self.bin = root / "bin"
        self.bin.mkdir()
        self.log = root / "systemctl.log"
        self.units = root / "units"  # U.ActiveState, U.UnitFileState: what `systemctl show` answers
        self.units.mkdir()
        self._stand_in("systemctl", f'if [ "$1" = show ]; then cat "{self.units}/$6.$3" 2>/dev/null || '
                                    f'{{ [ "$3" != ActiveState ] || echo inactive; }}; exit 0; fi; echo "$*" >> {self.log}')
        self._stand_in("chown", "exit 0")
        self._stand_in("install", 'args=""; while [ $# -gt 0 ]; do case "$1" in -o|-g) shift 2;; '
                                  '*) args="$args $1"; shift;; esac; done; exec /usr/bin/install $args')

    def _stand_in(self, name: str, body: str) -> None:
        p = self.bin / name
        p.write_text(f"#!/bin/sh\n{body}\n")
        p.chmod(0o755)

    def path(self, real: str) -> Path:
        return self.root / real.lstrip("/")

    def run(self, command: str, check: bool = True) -> subprocess.CompletedProcess:
        for p in PREFIXES:
            command = command.replace(p, f"{self.root}{p}")
        env = {**os.environ, "PATH": f"{self.bin}:{os.environ['PATH']}"}
        r = subprocess.run([self.shell, "-c", command], capture_output=True, text=True, timeout=30, env=env)
        if check:
            assert r.returncode == 0, (command, r.stdout, r.stderr)
        return r

    def write(self, real: str, text: str, mode: int = 0o644) -> None:
        p = self.path(real)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        p.chmod(mode)

    def read(self, real: str) -> str | None:
        p = self.path(real)
        return p.read_text() if p.exists() else None

    def mode(self, real: str) -> int:
        return stat.S_IMODE(self.path(real).stat().st_mode)

    def backups(self, spec: ClassSpec) -> list[str]:
        d = self.path(spec.backups_dir)
        return sorted(p.name for p in d.iterdir()) if d.exists() else []

    def systemctl(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def sha1s(self, paths: list[str] | None = None) -> dict[str, str | None]:
        """The managed files' sha1 (or those of `paths`), None where absent."""
        import hashlib

        return {p: (hashlib.sha1(self.path(p).read_bytes()).hexdigest() if self.path(p).exists() else None)
                for p in (managed_paths(SPEC) if paths is None else paths)}

    def unit(self, name: str, active: str, enabled: str) -> None:
        (self.units / f"{name}.ActiveState").write_text(active + "\n")
        (self.units / f"{name}.UnitFileState").write_text(enabled + "\n")

    def said(self, r: subprocess.CompletedProcess, units=()) -> BeginAnswer:
        """begin's answer as read_begin reads it, the tmp root taken out of the paths it names."""
        return read_begin(r.stdout.replace(str(self.root), ""), SPEC, units)


@pytest.fixture(params=SHELLS)
def host(tmp_path, request) -> Host:
    return Host(tmp_path, request.param)


def test_paths():
    assert SPEC.state_dir == "/var/lib/sglang-fleet/sglang"
    assert SPEC.deployed_spec_file == "/var/lib/sglang-fleet/sglang/spec.json"
    assert SPEC.pending_file == "/var/lib/sglang-fleet/sglang/pending.json"
    assert SPEC.lock_file == "/run/sglang-fleet/sglang.lock"
    assert managed_paths(SPEC) == [  # secrets are backed up and restored too
        "/etc/systemd/system/sglang.service",
        "/etc/sglang/sglang.env",
        "/etc/sglang/sglang.yaml",
        "/etc/sglang/sglang.secret",
        "/etc/sglang/sglang.auth",
        "/var/lib/sglang-fleet/sglang/spec.json",
    ]
    assert service_files(SPEC) == managed_paths(SPEC)[:4]
    assert managed_dirs(SPEC) == ["/etc/sglang", "/var/lib/sglang-fleet/sglang", "/var/lib/sglang-fleet/sglang/backups"]
    # backups are stored by base name: the names must not collide
    assert len({Path(f).name for f in managed_paths(SPEC)}) == len(managed_paths(SPEC))
    # staged files are hidden (systemd ignores them) and beside the live file (an atomic rename)
    assert staged_path(UNIT) == "/etc/systemd/system/.sglang.service.sglang-fleet-new"


def test_desired_files_modes_and_restarts():
    files = desired_files(SPEC, "pro6000", SECRETS, journal_filter=False)
    assert [(f.path, f.mode, f.restarts, f.secret) for f in files] == [
        (UNIT, "644", True, False), (ENV, "644", True, False), (CONFIG, "600", True, True),
        (SECRET, "600", True, True), (AUTH, "600", False, True), (RECORD, "600", False, False)]
    for value in SECRETS.values():  # each secret is in the 0600 files only
        assert [f.path for f in files if value in f.content] == [f.path for f in files if f.secret and value in f.content]
        assert any(value in f.content for f in files)
    assert all(f.mode == "600" for f in files if f.secret)
    # no secret declared: no secret file at all
    assert [f.path for f in desired_files(make_spec(), "pro6000", Secrets(), False) if f.content is None] == \
        [CONFIG, SECRET, AUTH]


# --- backups -----------------------------------------------------------------------

def test_first_install_backs_up_nothing(host):
    r = host.run(backup_command(SPEC, "20250101T000000Z"))
    assert r.stdout == ""
    assert host.backups(SPEC) == []


def test_backup_copies_what_exists_keeping_modes(host):
    host.write(UNIT, "unit v1\n")
    host.write(SECRET, f'SGLANG_API_KEY="{KEY}"\n', 0o600)
    host.path(SPEC.backups_dir).mkdir(parents=True)
    r = host.run(backup_command(SPEC, "20250101T000000Z"))
    d = f"{SPEC.backups_dir}/20250101T000000Z"
    assert r.stdout.strip() == f"{host.root}{d}"
    assert sorted(p.name for p in host.path(d).iterdir()) == ["sglang.secret", "sglang.service"]
    assert host.read(f"{d}/sglang.service") == "unit v1\n" and host.mode(f"{d}/sglang.secret") == 0o600


def test_only_keep_backups_are_kept(host):
    host.write(UNIT, "unit\n")
    stamps = [f"2025010{i}T000000Z" for i in range(1, 9)]
    for i, s in enumerate(stamps):
        host.run(backup_command(SPEC, s))
        assert host.backups(SPEC) == stamps[max(0, i + 1 - KEEP_BACKUPS): i + 1]
    assert KEEP_BACKUPS == 5


def test_a_failed_copy_fails_the_backup_and_leaves_no_partial_set(host):
    # a partial set would make a restore delete the file it failed to copy
    host.write(UNIT, "unit\n")
    host.path(ENV).mkdir(parents=True)  # cp without -r fails on it
    r = host.run(backup_command(SPEC, "s1"), check=False)
    assert r.returncode != 0 and host.backups(SPEC) == []


# --- begin ----------------------------------------------------------------------------

def begin(host, seen=lock.LockFacts(), files=None, stamp="s1", secret_uploads=(), units=(), check=True):
    """files: the sha1s preflight read (default: those there now, of every watched file)."""
    files = host.sha1s(watched_files(SPEC)) if files is None else files
    return host.run(begin_command(SPEC, WHO, seen, files, stamp, PENDING, list(secret_uploads), units=units),
                    check=check)


def test_begin_takes_the_lock_backs_up_and_writes_the_pending_record(host):
    host.write(UNIT, "unit v1\n")
    r = begin(host, secret_uploads=[CONFIG, AUTH])
    assert r.stdout.strip().endswith(BEGUN_MARK) and host.said(r) == BeginAnswer(begun=True)
    owner = json.loads(host.read(SPEC.lock_file))
    assert owner == {**WHO, "session": None, "session_start": None}  # no sshd above a local shell
    assert json.loads(host.read(SPEC.pending_file)) == PENDING and host.mode(SPEC.pending_file) == 0o600
    assert host.backups(SPEC) == ["s1"] and host.read(f"{SPEC.backups_dir}/s1/sglang.service") == "unit v1\n"
    assert all(host.mode(d) == 0o700 for d in managed_dirs(SPEC))
    for path in (CONFIG, AUTH):  # the uploads write into files that are 0600 from the start
        assert host.read(staged_path(path)) == "" and host.mode(staged_path(path)) == 0o600


def test_begin_is_refused_when_another_deploy_holds_the_lock_and_changes_nothing(host):
    host.write(SPEC.lock_file, json.dumps({"holder": "bob@desk", "pid": 1, "since": 2}) + "\n")
    r = begin(host, check=False)
    assert r.returncode == lock.REFUSED_EXIT
    assert "bob@desk" in host.said(r).lock_taken and not host.said(r).begun
    assert BEGUN_MARK not in r.stdout and host.read(SPEC.pending_file) is None and host.backups(SPEC) == []
    assert "bob@desk" in host.read(SPEC.lock_file)


def test_begin_takes_over_exactly_the_stale_lock_it_judged(host):
    stale = json.dumps({"holder": "bob@desk", "pid": 1, "since": 2, "session": 99, "session_start": 5})
    host.write(SPEC.lock_file, stale + "\n")
    assert begin(host, seen=lock.LockFacts(True, stale, "")).stdout.strip().endswith(BEGUN_MARK)
    assert json.loads(host.read(SPEC.lock_file))["holder"] == "alice@laptop"


def test_two_deploys_that_judged_the_same_lock_stale_cannot_both_take_it(host):
    stale = json.dumps({"holder": "bob@desk", "pid": 1, "since": 2})
    host.write(SPEC.lock_file, stale + "\n")
    first = begin(host, seen=lock.LockFacts(True, stale, ""))
    second = begin(host, seen=lock.LockFacts(True, stale, ""), check=False)
    said = {f.marker: f.text for f in frames(second.stdout)}
    assert BEGUN_MARK in first.stdout and second.returncode == lock.REFUSED_EXIT and "alice@laptop" in said[lock.REFUSED_MARK]


def test_begin_refuses_files_changed_since_preflight_and_frees_the_lock(host):
    seen = host.sha1s(watched_files(SPEC))
    host.write(UNIT, "edited meanwhile\n")
    r = begin(host, files=seen, check=False)
    assert r.returncode == 1 and f"@@changed={host.root}{UNIT}" in r.stdout
    assert host.said(r).changed == f"{UNIT} changed since preflight (another deploy, or a hand edit)"
    assert host.read(SPEC.lock_file) is None and host.read(SPEC.pending_file) is None


def test_begin_refuses_a_deploy_record_written_since_preflight(host):
    """A rollout that ran and ended between this one's preflight and its begin leaves the lock
    as it was; its record does not."""
    host.write(UNIT, "unit v1\n")
    host.write(SPEC.records_file, '{"result": "ok"}\n')
    seen = host.sha1s(watched_files(SPEC))
    host.run(record_command(SPEC, {"result": "ok", "by": "bob@desk"}))
    r = begin(host, files=seen, check=False)
    assert host.said(r).changed == (f"the deploy records ({SPEC.records_file}) changed since preflight "
                                    "(another deploy ended meanwhile, or a hand edit)")
    assert host.read(SPEC.lock_file) is None and host.read(SPEC.pending_file) is None
    assert host.backups(SPEC) == [] and host.read(UNIT) == "unit v1\n"


TRAIN = "dflash-train.service"


def test_begin_refuses_a_workload_started_since_preflight_and_changes_nothing(host):
    """The stale "before" of issue 18: preflight saw the training stopped, so the plan stops
    nothing and a rollback would start nothing; meanwhile it was started."""
    host.write(UNIT, "unit v1\n")
    host.unit(SPEC.service_unit, "active", "enabled")
    host.unit(TRAIN, "inactive", "disabled")
    units = [UnitSeen(SPEC.service_unit, "enabled", "active", SERVING_STATES),
             UnitSeen(TRAIN, "disabled", "inactive", RUNNING_STATES)]
    seen = host.sha1s()
    host.unit(TRAIN, "active", "disabled")  # systemctl start dflash-train, by hand or by another deploy
    r = begin(host, units=units, check=False)
    assert r.returncode == 1 and BEGUN_MARK not in r.stdout
    assert host.said(r, units).changed == (
        "dflash-train.service became active since preflight (it was inactive: another deploy, or a hand change)")
    assert host.read(SPEC.lock_file) is None and host.read(SPEC.pending_file) is None
    assert host.backups(SPEC) == [] and host.sha1s() == seen and host.systemctl() == []
    assert not list(host.path("/etc/systemd/system").glob(".*"))  # nothing staged


# What counts as the same: the question the plan and the rollback ask of the state (fleet.rollout.plan.units_as_read).
@pytest.mark.parametrize("unit, alike, then, now, changed", [
    (TRAIN, RUNNING_STATES, ("activating", "enabled"), ("active", "enabled"), None),  # still starting then: running
    (TRAIN, RUNNING_STATES, ("inactive", "disabled"), ("failed", "disabled"), None),  # stopped either way
    (TRAIN, RUNNING_STATES, ("active", "enabled"), ("deactivating", "enabled"),
     "dflash-train.service became deactivating since preflight (it was active: another deploy, or a hand change)"),
    (TRAIN, RUNNING_STATES, ("inactive", "enabled"), ("inactive", "disabled"),
     "dflash-train.service became disabled since preflight (it was enabled: another deploy, or a hand change)"),
    ("sglang.service", SERVING_STATES, ("inactive", "enabled"), ("failed", "enabled"), None),
    ("sglang.service", SERVING_STATES, ("activating", "enabled"), ("active", "enabled"),  # a rollback would stop it
     "sglang.service became active since preflight (it was activating: another deploy, or a hand change)"),
    ("sglang.service", SERVING_STATES, ("inactive", ""), ("active", "enabled"),
     "sglang.service became active and enabled since preflight (it was inactive and without a unit file: another "
     "deploy, or a hand change)"),
    ("train\\x2d1.service", RUNNING_STATES, ("inactive", "disabled"), ("active", "disabled"),  # an escaped name
     "train\\x2d1.service became active since preflight (it was inactive: another deploy, or a hand change)"),
])
def test_begin_compares_unit_states_as_the_rollback_reads_them(host, unit, alike, then, now, changed):
    units = [UnitSeen(unit, then[1], then[0], alike)]
    host.unit(unit, *now)
    r = begin(host, units=units, check=False)
    assert host.said(r, units) == (BeginAnswer(begun=True) if changed is None else BeginAnswer(changed=changed))
    assert (host.read(SPEC.lock_file) is None) == (changed is not None)


def test_a_failure_after_the_backup_removes_the_set_it_took(host):
    """A set without its pending record would pass for an interrupted rollout's (fleet.rollout.history)."""
    host.write(UNIT, "unit\n")
    host.path(SPEC.pending_file + ".tmp").mkdir(parents=True)  # the pending record cannot be written
    r = begin(host, check=False)
    assert r.returncode == 1 and BEGUN_MARK not in r.stdout
    assert host.backups(SPEC) == [] and host.read(SPEC.lock_file) is None


def test_a_failed_backup_frees_the_lock_and_writes_no_pending_record(host):
    host.write(UNIT, "unit\n")
    seen = host.sha1s()
    host.path(ENV).mkdir(parents=True)  # cp fails on it; sha1sum reads it as absent, as preflight saw
    r = begin(host, files=seen, check=False)
    assert r.returncode == 1 and BEGUN_MARK not in r.stdout
    assert host.read(SPEC.lock_file) is None and host.read(SPEC.pending_file) is None
    assert host.backups(SPEC) == []


# --- apply ------------------------------------------------------------------------------

def test_apply_renames_staged_files_into_place_with_their_modes_then_systemctl(host):
    host.write(UNIT, "old\n")
    host.write(SECRET, "old key\n", 0o644)
    new_unit = ManagedFile(UNIT, "644", "new\n", True)
    host.write(staged_path(UNIT), "new\n", 0o600)
    gone = ManagedFile(ENV, "644", None, True)
    host.write(ENV, "env\n")
    repair = ManagedFile(SECRET, "600", "old key\n", True, True)
    host.run(apply_command(SPEC, [new_unit, gone], [repair], daemon_reload=True, enable=True, restart=True))
    assert host.read(UNIT) == "new\n" and host.mode(UNIT) == 0o644 and host.read(staged_path(UNIT)) is None
    assert host.read(ENV) is None and host.mode(SECRET) == 0o600
    assert host.systemctl() == ["daemon-reload", "enable --quiet -- sglang.service", "reset-failed -- sglang.service",
                                "restart -- sglang.service"]


def test_apply_with_nothing_to_restart_calls_no_systemctl(host):
    host.run(apply_command(SPEC, [], [], daemon_reload=False, enable=False, restart=False))
    assert host.systemctl() == []


# --- restore ------------------------------------------------------------------------------

def deployed_then_changed(host) -> dict:
    """v1 files backed up as s1, then the rollout's v2 files live; returns the v1 sha1s."""
    host.write(UNIT, "unit v1\n")
    host.write(ENV, "env v1\n")
    host.write(RECORD, '{"v": 1}\n', 0o600)
    before = host.sha1s()
    host.run(backup_command(SPEC, "s1"))
    host.write(UNIT, "unit v2\n")
    host.path(ENV).unlink()
    host.write(SECRET, "SGLANG_API_KEY=x\n", 0o600)  # did not exist before
    host.write(RECORD, '{"v": 2}\n', 0o600)
    return before


def restore(host, before, stop=False, enabled="enabled", stamp="s1"):
    host.path(SPEC.state_dir).mkdir(parents=True, exist_ok=True)  # begin made it
    return host.run(restore_command(SPEC, before, stamp, stop, enabled, {"phase": "rolling-back"}))


def test_restore_puts_back_every_file_as_it_was_and_says_which(host):
    before = deployed_then_changed(host)
    r = restore(host, before)
    assert host.read(UNIT) == "unit v1\n" and host.read(ENV) == "env v1\n" and host.read(SECRET) is None
    assert host.read(RECORD) == '{"v": 1}\n' and host.mode(RECORD) == 0o600
    changed = [UNIT, ENV, SECRET, RECORD]  # the config and header files were absent before and after
    assert sorted(r.stdout.split(RESTORED, 1)[1].split()) == sorted(f"{host.root}{p}" for p in changed)
    assert json.loads(host.read(SPEC.pending_file)) == {"phase": "rolling-back"}
    # its own files changed: stopped first; then systemd rereads them, the enabled state as it was
    assert host.systemctl() == ["stop -- sglang.service", "daemon-reload", "enable --quiet -- sglang.service"]


def test_restore_of_the_spec_record_alone_leaves_the_service_running(host):
    host.write(UNIT, "unit v1\n")
    host.write(RECORD, '{"v": 1}\n')
    before = host.sha1s()
    host.run(backup_command(SPEC, "s1"))
    host.write(RECORD, '{"v": 2}\n')
    r = restore(host, before)
    assert r.stdout.split(RESTORED, 1)[1].split() == [f"{host.root}{RECORD}"]
    assert "stop -- sglang.service" not in host.systemctl()


def test_restore_with_nothing_changed_is_a_no_op_unless_asked_to_stop(host):
    host.write(UNIT, "unit v1\n")
    before = host.sha1s()
    assert restore(host, before, enabled="disabled").stdout.strip().endswith(RESTORED)
    assert host.systemctl() == ["disable --quiet -- sglang.service"]
    restore(host, before, stop=True, enabled="")
    assert host.systemctl()[-1] == "stop -- sglang.service"


def test_restore_is_repeatable(host):
    before = deployed_then_changed(host)
    restore(host, before)
    restore(host, before)
    assert host.read(UNIT) == "unit v1\n" and host.read(SECRET) is None


def test_restore_without_the_backup_it_needs_fails_loudly(host):
    before = deployed_then_changed(host)
    r = host.run(restore_command(SPEC, before, None, False, "enabled", {}), check=False)
    assert r.returncode != 0 and RESTORED not in r.stdout


def test_restore_removes_leftover_staged_files(host):
    host.write(staged_path(UNIT), "half an upload")
    restore(host, host.sha1s())
    assert host.read(staged_path(UNIT)) is None


# --- finish and the deploy record ------------------------------------------------------

def records(host: Host) -> list[dict]:
    text = host.read(f"{SPEC.state_dir}/deploys.jsonl")
    return [json.loads(line) for line in text.splitlines()]


def test_finish_records_and_leaves_no_pending_record_no_staged_file_no_lock(host):
    begin(host)
    host.write(staged_path(ENV), "x")
    host.run(finish_command(SPEC, {"result": "ok"}))
    assert records(host) == [{"result": "ok"}]
    assert host.read(SPEC.pending_file) is None and host.read(staged_path(ENV)) is None
    assert host.read(SPEC.lock_file) is None


def test_record_command_appends_json_lines(host):
    r1 = {"time": 1735689600, "by": "root@deployer", "group": "pro6000", "algorithm": "DFLASH", "result": "ok"}
    r2 = {"time": 1735689700, "result": "failed", "reason": 'smoke test failed: HTTP 500: {"detail": "a\\nb"}\nC:\\p\tx',
          "quote": "it's \"x\" $HOME `id`", "unicode": "Grüße"}
    host.run(record_command(SPEC, r1))
    host.run(record_command(SPEC, r2))
    assert records(host) == [r1, r2]


def test_spec_record_names_where_secrets_come_from_never_their_values():
    text = spec_record(SPEC, "pro6000")
    assert all(value not in text for value in SECRETS.values())
    data = json.loads(text)
    assert data["group"] == "pro6000"
    assert data["spec"]["service"]["api_key"] == {"env": "SGLANG_API_KEY_TEST", "file": None}


# --- the workloads' stop and give-back ----------------------------------------------------

STUCK = 'case "$1" in stop) [ "$3" != stuck.scope ];; is-active) [ "$4" = stuck.scope ];; *) true;; esac'


def test_the_stop_disables_services_and_stops_scopes_each_with_its_verb(host):
    host._stand_in("systemctl", f'echo "$*" >> {host.log}; {STUCK}')
    host.run(stop_workloads_command(["dflash-train.service", "b.service"], ["docker-ab.scope", "gone.scope"]))
    assert host.systemctl() == ["disable --now -- dflash-train.service b.service", "stop -- docker-ab.scope",
                                "stop -- gone.scope"]
    # a scope that would not stop fails the command; the others are stopped all the same
    r = host.run(stop_workloads_command([], ["stuck.scope", "after.scope"]), check=False)
    assert r.returncode != 0 and host.systemctl()[-3:] == ["stop -- stuck.scope", "is-active --quiet -- stuck.scope",
                                                           "stop -- after.scope"]


def test_a_scope_that_ended_before_its_stop_is_stopped(host):
    # systemctl stop of a scope gone meanwhile fails ("not loaded"); it is not active: fine
    host._stand_in("systemctl", f'echo "$*" >> {host.log}; case "$1" in stop) exit 5;; *) exit 3;; esac')
    assert host.run(stop_workloads_command([], ["gone.scope"])).returncode == 0
    assert host.systemctl() == ["stop -- gone.scope", "is-active --quiet -- gone.scope"]


def test_a_service_that_will_not_stop_fails_the_command(host):
    host._stand_in("systemctl", "exit 1")
    assert host.run(stop_workloads_command(["dflash-train.service"]), check=False).returncode != 0


def _started(*argv: str) -> tuple[subprocess.Popen, int]:
    """A real process and its start time, once it runs what it was given."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while "sleep" not in Path(f"/proc/{p.pid}/cmdline").read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    return p, start_of_stat(Path(f"/proc/{p.pid}/stat").read_text())


def test_processes_get_sigterm_then_sigkill_after_their_bound_and_a_reused_pid_is_left_alone(host):
    polite, polite_start = _started("sleep", "30")
    stubborn, stubborn_start = _started("sh", "-c", "trap '' TERM; sleep 30; :")
    other, other_start = _started("sleep", "30")  # as if its pid had been another process's: a start of its own
    try:
        t = time.monotonic()
        host.run(stop_workloads_command([], [], [(polite.pid, polite_start, 30), (stubborn.pid, stubborn_start, 1),
                                                 (other.pid, other_start + 1, 1)]))
        took = time.monotonic() - t
        assert polite.wait(5) == -signal.SIGTERM and stubborn.wait(5) == -signal.SIGKILL
        assert 1 <= took < 5, took  # the stubborn one had its second; the polite one's 30 s were not waited for
        assert other.poll() is None
    finally:
        for p in (polite, stubborn, other):
            p.kill()
            p.wait()


def test_a_process_gone_before_its_stop_is_stopped_at_once(host):
    gone, start = _started("sleep", "30")
    gone.kill()
    gone.wait()
    t = time.monotonic()
    host.run(stop_workloads_command([], [], [(gone.pid, start, 30)]))
    assert time.monotonic() - t < 5


def give_back_spec(*argv: str) -> ClassSpec:
    return ClassSpec.model_validate({
        "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
        "service": {"model_path": "/root/models/Qwen3.6-27B", "served_model_name": "qwen3.6-27b"},
        "readiness": {"workload_release_timeout_s": 2},
        "workloads": ["dflash-train", {"name": "trainer", "scope": "docker-*.scope", "give_back": list(argv)}]})


def test_the_give_back_enables_and_starts_services_and_runs_a_declared_command_quoted(host):
    job = host.bin / "job"
    job.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "[%s]" "$a"; done > {host.root}/args; '
                   f'cat > {host.root}/stdin\necho its output\n')
    job.chmod(0o755)
    spec = give_back_spec(str(job), "start", "a b", "$HOME", "'")
    host.path(spec.state_dir).mkdir(parents=True)
    host.run(give_back_command(spec, ["dflash-train.service"], ["dflash-train.service"], ["trainer"]))
    assert host.systemctl() == ["enable --quiet -- dflash-train.service", "start -- dflash-train.service"]
    assert (host.root / "args").read_text() == "[start][a b][$HOME][']" and (host.root / "stdin").read_text() == ""
    log = host.path(spec.give_back_log("trainer"))
    assert log.read_text() == "its output\n" and stat.S_IMODE(log.stat().st_mode) == 0o600
    assert give_back_command(spec, [], []) == "true"


def test_a_give_back_command_that_fails_says_so_with_its_output(host):
    spec = give_back_spec("/bin/sh", "-c", "echo no such container >&2; exit 3")
    host.path(spec.state_dir).mkdir(parents=True)
    r = host.run(give_back_command(spec, [], [], ["trainer"]), check=False)
    assert r.returncode != 0 and r.stdout == "the give-back command of trainer exited 3: no such container\n"


def test_a_give_back_command_is_bounded_and_a_child_it_leaves_holds_nothing_up(host):
    spec = give_back_spec("/bin/sh", "-c", "sleep 30 & echo started")  # a job that forks and returns
    host.path(spec.state_dir).mkdir(parents=True)
    t = time.monotonic()
    host.run(give_back_command(spec, [], [], ["trainer"]))
    assert time.monotonic() - t < 5
    hung = give_back_spec("/bin/sleep", "30")  # killed after readiness.workload_release_timeout_s (2 s)
    r = host.run(give_back_command(hung, [], [], ["trainer"]), check=False)
    assert r.returncode != 0 and "exited 124" in r.stdout and time.monotonic() - t < 15


# ... as the tasks run them: the stop's verbs from the plan, the waits on nvidia-smi (a scripted host)

TASK_SPEC = ClassSpec.model_validate({
    "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
    "service": {"model_path": "/root/models/Qwen3.6-27B", "served_model_name": "qwen3.6-27b"},
    "readiness": {"workload_release_timeout_s": 3},
    "workloads": ["dflash-train", {"name": "trainer", "scope": "docker-*.scope", "give_back": ["/usr/bin/docker",
                                                                                              "start", "trainer"]},
                  {"name": "torchrun", "command_line": "*torchrun*", "kill_after_s": 5, "give_back": False}]})


def smi_answer(*rows: tuple[int, str, str]) -> str:
    """nvidia-smi's process list and the cgroup and cmdline records of (pid, cgroup path, command line)."""
    text = "\n".join(f"{pid}, python, 1024, GPU-0" for pid, _, _ in rows)
    records = [f"@@nvidia-smi=0\n{base64.b64encode(text.encode()).decode()}"]
    for pid, cgroup, command_line in rows:
        for key, content in (("cgroup", f"0::{cgroup}\n"), ("cmdline", command_line.replace(" ", "\0"))):
            records.append(f"@@{key}={pid}\n{base64.b64encode(content.encode()).decode()}")
    return "\n".join(records) + "\n"


class ScriptedHost:
    """A host whose GPU process lists are scripted, one a read (the last one again when they run out);
    every other command succeeds. The clock moves 1 s a sleep."""

    name = "h1"

    def __init__(self, *lists: str):
        self.lists, self.commands, self.now = list(lists), [], 0.0

    def run(self, host, command: str, timeout=None) -> tuple[bool, str]:
        if "--query-compute-apps" in command:
            return True, self.lists.pop(0) if len(self.lists) > 1 else self.lists[0]
        self.commands.append(command)
        return True, ""

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def log(self, message: str) -> None:
        pass

    def log_styled(self, message: str, **style) -> None:
        pass


@pytest.fixture
def scripted(monkeypatch):
    def make(*lists: str) -> ScriptedHost:
        host = ScriptedHost(*lists)
        for module in (tasks_workloads, tasks_activate):
            monkeypatch.setattr(module, "run", host.run)
        monkeypatch.setattr(tasks_workloads, "time", host)
        monkeypatch.setattr(tasks_activate, "time", host)
        return host
    return make


FOUND = {"trainer": Held(scopes=("docker-ab.scope",)),
         "torchrun": Held(processes=(FoundProcess(20, 7, "torchrun a"),), given_back=False)}
STOPPING = SimpleNamespace(spec=TASK_SPEC, plan=SimpleNamespace(
    stop_workloads=("dflash-train.service", "trainer", "torchrun"), found=FOUND))


def test_the_stop_acts_on_what_the_plan_found_and_waits_until_no_workload_holds_a_gpu(scripted):
    host = scripted(smi_answer((10, "/system.slice/docker-ab.scope", "python train.py")),
                    smi_answer((20, "/user.slice/user-0.slice/session-1.scope", "torchrun a")), smi_answer())
    assert tasks_workloads.stop_and_wait(host, STOPPING) == []
    assert host.commands == [stop_workloads_command(["dflash-train.service"], ["docker-ab.scope"], [(20, 7, 5)])]
    assert host.now == 2  # two reads found a workload's process still there


def test_a_workload_that_holds_its_gpu_past_the_release_timeout_is_named(scripted):
    host = scripted(smi_answer((10, "/system.slice/docker-ab.scope", "python train.py")))
    assert tasks_workloads.stop_and_wait(host, STOPPING) == [
        "h1: workloads: expected trainer to release GPU memory within 3s, found pid 10 (in docker-ab.scope) still "
        "holding 1024 MiB"]


def test_what_else_holds_a_gpu_once_the_workloads_are_gone_fails_the_stop(scripted):
    host = scripted(smi_answer((30, "/system.slice/batch.scope", "python x.py")))
    (problem,) = tasks_workloads.stop_and_wait(host, STOPPING)
    assert problem.startswith("h1: GPUs busy: expected GPUs free of processes outside sglang.service, found pid 30")


def steps_giving_back(host: ScriptedHost) -> tasks_activate.HostSteps:
    before = Before({}, None, UnitBefore("enabled", "active"), {"dflash-train.service": UnitBefore("enabled", "active"),
                                                                **FOUND})
    pf = SimpleNamespace(spec=TASK_SPEC, plan=SimpleNamespace(before=before))
    return tasks_activate.HostSteps(host, SimpleNamespace(pf=pf))


def test_the_give_back_starts_a_scope_workload_by_its_command_and_waits_until_it_holds_its_gpu(scripted):
    trainer = (11, "/system.slice/docker-ab.scope", "python train.py")
    service = (12, "/system.slice/dflash-train.service", "python dflash.py")
    host = scripted(smi_answer(), smi_answer(service), smi_answer(service, trainer))
    assert steps_giving_back(host).give_back(["dflash-train.service", "trainer"]) == []
    assert host.commands == [give_back_command(TASK_SPEC, ["dflash-train.service"], ["dflash-train.service"],
                                               ["trainer"])]
    assert host.now == 1


def test_a_scope_workload_that_holds_its_gpu_already_is_not_started_twice(scripted):
    host = scripted(smi_answer((11, "/system.slice/docker-ab.scope", "python train.py")))
    assert steps_giving_back(host).give_back(["trainer"]) == []
    assert host.commands == [give_back_command(TASK_SPEC, [], [], [])]


def test_a_workload_given_back_that_holds_no_gpu_is_reported(scripted):
    host = scripted(smi_answer())
    assert steps_giving_back(host).give_back(["trainer"]) == [
        "trainer runs again but holds no GPU memory after 3s"]


def test_journal_command():
    assert journal_command(SPEC, 5) == "journalctl --unit=sglang.service -n 5 --no-pager -o short-iso"


def test_redact_hides_every_secret_value_sglang_may_log():
    line = f"server_args=ServerArgs(model_path='/m', api_key='{KEY}', port=30000) HF_TOKEN=hf_Fleet0123"
    assert SECRETS.redact(line) == "server_args=ServerArgs(model_path='/m', api_key='***', port=30000) HF_TOKEN=***"
    # nothing read: the server_args field is still hidden, the rest left as it is
    assert Secrets().redact(line) == "server_args=ServerArgs(model_path='/m', api_key='***', port=30000) HF_TOKEN=hf_Fleet0123"


# --- the report table --------------------------------------------------------------

def test_table_has_every_host_and_reason():
    reports = [
        HostReport("gpu-b", "pro6000", "1x NVIDIA RTX PRO 6000 Blackwell Server Edition", "restart", "OK", 312.4,
                   "250 ms, 20.0 tok/s, accept length 3.25"),
        HostReport("gpu-a", "a6000", "2x NVIDIA RTX A6000", "restart", "FAILED (rolled back)",
                   reasons=["the unit stopped: failed (failed, result exit-code)", "second reason"]),
        HostReport("gpu-c", verdict="REFUSED", reasons=["another deploy holds the lock"]),
    ]
    lines = table(reports).splitlines()
    assert lines[0].split() == ["host", "class", "GPUs", "found", "engine", "action", "verdict", "ready", "smoke"]
    hosts = [line.split()[0] for line in lines[2:] if not line.startswith("    - ")]
    assert hosts == ["gpu-a", "gpu-b", "gpu-c"]
    assert lines.index("    - the unit stopped: failed (failed, result exit-code)") == lines.index(
        next(line for line in lines if line.startswith("gpu-a"))) + 1
    gpu_b = next(line for line in lines if line.startswith("gpu-b"))
    assert "312.4s" in gpu_b and "accept length 3.25" in gpu_b


def test_table_columns_line_up():
    t = table([HostReport("h", "c", "g", "a", "OK", 1.0, "s"), HostReport("a-much-longer-host-name", verdict="x")])
    head, rule, *rows = t.splitlines()
    col = head.index("class")
    assert rule.index(" ") + 2 == col
    assert all(row[col - 2: col] == "  " for row in rows)


def test_what_hosts_said_is_shown_printable_and_bounded_in_the_summary():
    said = "\x1b]0;owned\x07\x1b[2J" + "x" * (4 << 20)
    t = table([HostReport("h", "c", said, said, "OK", smoke=said, reasons=[said] * 100, warnings=[said],
                          notes=["\u202eevil\nline"])])
    assert "\x1b" not in t and "\x07" not in t and "\u202e" not in t
    lines = t.splitlines()
    assert max(map(len, lines)) < 4 * 400 + 2100 and len(lines) == 2 + 1 + 50 + 1 + 1 + 1
    assert lines[-3] == "    - ... and 50 more" and lines[-1] == "    . \ufffdevil\ufffdline"


def test_describe_gpus():
    assert describe_gpus([]) == "none"
    assert describe_gpus(["NVIDIA RTX A6000", "NVIDIA RTX A6000"]) == "2x NVIDIA RTX A6000"


def test_run_report_prints_to_stderr(capsys):
    run = RunReport("title")  # printed at the end of its pyinfra run (adapter/run.py)
    run.host("x").reasons.append("why")
    assert run.host("x") is run.host("x")
    run.print()
    err = capsys.readouterr().err
    assert err.startswith("\n--> title\n") and "    - why" in err
    RunReport("empty").print()
    assert capsys.readouterr().err == ""


def test_begin_stages_a_rollbacks_copies_before_its_own_backup_can_prune_their_source(host):
    """A rollback to the oldest of KEEP_BACKUPS sets: this run's backup prunes that set, so the
    files are copied beside their live paths first."""
    host.write(UNIT, "unit now\n")
    stamps = [f"2025010{i}T000000Z" for i in range(1, KEEP_BACKUPS + 1)]
    for s in stamps:
        host.write(f"{SPEC.backups_dir}/{s}/sglang.service", f"unit of {s}\n", 0o644)
    oldest = f"{SPEC.backups_dir}/{stamps[0]}/sglang.service"
    r = host.run(begin_command(SPEC, WHO, lock.LockFacts(), host.sha1s(), "20260101T000000Z", PENDING, [],
                               copies={UNIT: oldest}))
    assert r.stdout.strip().endswith(BEGUN_MARK)
    assert host.read(staged_path(UNIT)) == f"unit of {stamps[0]}\n"
    assert stamps[0] not in host.backups(SPEC) and "20260101T000000Z" in host.backups(SPEC)  # pruned after the copy


def test_a_missing_copy_source_fails_begin_and_leaves_no_lock_and_nothing_staged(host):
    host.write(UNIT, "unit now\n")
    r = host.run(begin_command(SPEC, WHO, lock.LockFacts(), host.sha1s(), None, PENDING, [],
                               copies={UNIT: f"{SPEC.backups_dir}/gone/sglang.service"}), check=False)
    assert r.returncode != 0 and BEGUN_MARK not in r.stdout
    assert host.read(SPEC.lock_file) is None and host.read(staged_path(UNIT)) is None
    assert host.read(SPEC.pending_file) is None
