"""fleet.rollout (backups, restore, deploy record, lock) and fleet.report, no hosts.

The shell snippets are run for real with `sh` (pyinfra's shell; dash on Debian) and bash,
in a tmp dir: the command string built from the spec is taken as is, and only its
absolute prefixes (/etc/, /var/lib/, /run/) are moved under tmp. Every managed path is
asserted to be in the command first, so nothing is left pointing at the real root.
"""

from __future__ import annotations

import json
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from fleet.report import HostReport, RunReport, describe_gpus, table
from facts.deploy import DeployedFiles
from fleet.parse import parse_deploy_state
from fleet.rollout import (
    redact,
    KEEP_BACKUPS,
    backup_command,
    deployed_spec_file,
    journal_command,
    judge_lock,
    lock_command,
    lock_dir,
    lock_owner,
    lock_owner_file,
    managed_files,
    record_command,
    restore_command,
    spec_record,
    stale_after,
    state_dir,
    unlock_command,
)
from fleet.spec import ClassSpec

KEY = "sk-Fleet0123456789abcdef"
SHELLS = ["sh", "bash"]
PREFIXES = ("/etc/", "/var/lib/", "/run/")


def make_spec(**service) -> ClassSpec:
    return ClassSpec.model_validate(
        {
            "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
            "service": {"model_path": "/root/models/Qwen3.6-27B", "served_model_name": "qwen3.6-27b", **service},
            "speculative": {"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash"},
        }
    )


SPEC = make_spec(api_key=KEY)


class Host:
    """A tmp root: real paths map to root/<path>; commands are run with their prefixes moved there."""

    def __init__(self, root: Path, shell: str):
        self.root, self.shell = root, shell

    def path(self, real: str) -> Path:
        return self.root / real.lstrip("/")

    def run(self, command: str, check: bool = True) -> subprocess.CompletedProcess:
        for p in PREFIXES:
            command = command.replace(p, f"{self.root}{p}")
        r = subprocess.run([self.shell, "-c", command], capture_output=True, text=True, timeout=30)
        if check:
            assert r.returncode == 0, (command, r.stdout, r.stderr)
        return r

    def write(self, real: str, text: str) -> None:
        p = self.path(real)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def read(self, real: str) -> str | None:
        p = self.path(real)
        return p.read_text() if p.exists() else None

    def backups(self, spec: ClassSpec) -> list[str]:
        d = self.path(f"{state_dir(spec)}/backups")
        return sorted(p.name for p in d.iterdir()) if d.exists() else []


@pytest.fixture(params=SHELLS)
def host(tmp_path, request) -> Host:
    return Host(tmp_path, request.param)


def test_paths():
    assert state_dir(SPEC) == "/var/lib/sglang-fleet/sglang"
    assert deployed_spec_file(SPEC) == "/var/lib/sglang-fleet/sglang/spec.json"
    assert lock_dir(SPEC) == "/run/sglang-fleet/sglang.lock"
    assert managed_files(SPEC) == [
        "/etc/systemd/system/sglang.service",
        "/etc/sglang/sglang.env",
        "/etc/sglang/sglang.secret",  # the secret is backed up and restored too
        "/var/lib/sglang-fleet/sglang/spec.json",
    ]
    # backups are stored by base name: the names must not collide
    assert len({Path(f).name for f in managed_files(SPEC)}) == len(managed_files(SPEC))


def test_commands_name_every_managed_path():
    cmd = backup_command(SPEC, "20250101T000000Z")
    for f in managed_files(SPEC):
        assert f in cmd
        assert f in restore_command(SPEC, "/var/lib/sglang-fleet/sglang/backups/20250101T000000Z")
    for c in (cmd, restore_command(SPEC, "/x"), record_command(SPEC, {}), lock_command(SPEC, {}, False)):
        assert any(p in c for p in PREFIXES)


# --- backups -----------------------------------------------------------------------

def test_first_install_backs_up_nothing(host):
    r = host.run(backup_command(SPEC, "20250101T000000Z"))
    assert r.stdout == ""
    assert host.backups(SPEC) == []


def test_backup_copies_what_exists(host):
    host.write(SPEC.unit_file, "unit v1\n")
    host.write(SPEC.env_file, "env v1\n")
    host.write(deployed_spec_file(SPEC), '{"v": 1}\n')
    r = host.run(backup_command(SPEC, "20250101T000000Z"))
    d = f"{state_dir(SPEC)}/backups/20250101T000000Z"
    assert r.stdout.strip() == f"{host.root}{d}"
    assert host.backups(SPEC) == ["20250101T000000Z"]
    saved = host.path(d)
    assert sorted(p.name for p in saved.iterdir()) == ["sglang.env", "sglang.service", "spec.json"]
    assert (saved / "sglang.service").read_text() == "unit v1\n"
    assert stat.S_IMODE(saved.stat().st_mode) == 0o700


def test_backup_keeps_the_secret_private(host):
    host.write(SPEC.secret_file, f'SGLANG_API_KEY="{KEY}"\n')
    host.path(SPEC.secret_file).chmod(0o600)
    host.run(backup_command(SPEC, "20250101T000000Z"))
    saved = host.path(f"{state_dir(SPEC)}/backups/20250101T000000Z/sglang.secret")
    assert saved.read_text() == f'SGLANG_API_KEY="{KEY}"\n'
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600


def test_restore_puts_back_and_removes_what_was_not_there(host):
    host.write(SPEC.unit_file, "unit v1\n")
    host.write(SPEC.env_file, "env v1\n")
    host.write(deployed_spec_file(SPEC), '{"v": 1}\n')
    backup = host.run(backup_command(SPEC, "20250101T000000Z")).stdout.strip()
    # the rollout: new unit, env deleted, a secret that did not exist before, new spec record
    host.write(SPEC.unit_file, "unit v2\n")
    host.path(SPEC.env_file).unlink()
    host.write(SPEC.secret_file, "SGLANG_API_KEY=x\n")
    host.write(deployed_spec_file(SPEC), '{"v": 2}\n')
    real_backup = backup.replace(str(host.root), "", 1)
    assert real_backup == f"{state_dir(SPEC)}/backups/20250101T000000Z"
    host.run(restore_command(SPEC, real_backup))
    assert host.read(SPEC.unit_file) == "unit v1\n"
    assert host.read(SPEC.env_file) == "env v1\n"
    assert host.read(SPEC.secret_file) is None
    assert host.read(deployed_spec_file(SPEC)) == '{"v": 1}\n'


def test_restore_puts_back_modes(host):
    host.write(SPEC.secret_file, "SGLANG_API_KEY=old-key-123\n")
    host.path(SPEC.secret_file).chmod(0o600)
    host.run(backup_command(SPEC, "s1"))
    host.write(SPEC.secret_file, "SGLANG_API_KEY=new-key-456\n")
    host.path(SPEC.secret_file).chmod(0o644)
    host.run(restore_command(SPEC, f"{state_dir(SPEC)}/backups/s1"))
    assert host.read(SPEC.secret_file) == "SGLANG_API_KEY=old-key-123\n"
    assert stat.S_IMODE(host.path(SPEC.secret_file).stat().st_mode) == 0o600


def test_restore_is_repeatable(host):
    host.write(SPEC.unit_file, "unit v1\n")
    host.run(backup_command(SPEC, "s1"))
    host.write(SPEC.unit_file, "unit v2\n")
    cmd = restore_command(SPEC, f"{state_dir(SPEC)}/backups/s1")
    host.run(cmd)
    host.run(cmd)
    assert host.read(SPEC.unit_file) == "unit v1\n"
    assert host.read(SPEC.env_file) is None


def test_only_keep_backups_are_kept(host):
    host.write(SPEC.unit_file, "unit\n")
    stamps = [f"2025010{i}T000000Z" for i in range(1, 9)]
    for i, s in enumerate(stamps):
        host.run(backup_command(SPEC, s))
        assert host.backups(SPEC) == stamps[max(0, i + 1 - KEEP_BACKUPS): i + 1]
    assert KEEP_BACKUPS == 5
    assert host.backups(SPEC) == stamps[-KEEP_BACKUPS:]


def test_empty_backup_does_not_evict_older_ones(host):
    host.write(SPEC.unit_file, "unit\n")
    host.run(backup_command(SPEC, "20250101T000000Z"))
    host.path(SPEC.unit_file).unlink()
    assert host.run(backup_command(SPEC, "20250102T000000Z")).stdout == ""
    assert host.backups(SPEC) == ["20250101T000000Z"]


def test_backup_fails_loudly_when_a_copy_fails(host):
    # a partial backup would make restore_command delete the file it failed to copy
    host.path(SPEC.unit_file).mkdir(parents=True)  # cp without -r fails on it
    r = host.run(backup_command(SPEC, "s1"), check=False)
    assert r.returncode != 0


# --- the deploy record ---------------------------------------------------------------

def records(host: Host) -> list[dict]:
    text = host.read(f"{state_dir(SPEC)}/deploys.jsonl")
    return [json.loads(line) for line in text.splitlines()]


def test_record_command_appends_json_lines(host):
    r1 = {"time": 1735689600, "by": "root@deployer", "group": "pro6000", "algorithm": "DFLASH", "result": "ok",
          "smoke": "250 ms, 20.0 tok/s, accept length 3.25"}
    r2 = {"time": 1735689700, "result": "failed", "reason": "the unit stopped: failed (failed, result exit-code)",
          "rollback": "FAILED (rolled back)", "quote": "it's \"x\" $HOME `id`", "unicode": "Grüße"}
    host.run(record_command(SPEC, r1))
    host.run(record_command(SPEC, r2))
    assert records(host) == [r1, r2]


def test_record_with_escapes_under_sh(tmp_path):
    # pyinfra runs `sh -c` (dash on Debian), whose echo would turn the JSON escapes into raw characters
    h = Host(tmp_path, "sh")
    rec = {"result": "failed", "reason": 'smoke test failed: HTTP 500: {"detail": "a\\nb"}\nC:\\path\tx'}
    h.run(record_command(SPEC, rec))
    assert records(h) == [rec]


def test_record_with_escapes_under_bash(tmp_path):
    h = Host(tmp_path, "bash")
    rec = {"result": "failed", "reason": 'smoke test failed: HTTP 500: {"detail": "a\\nb"}\nC:\\path\tx'}
    h.run(record_command(SPEC, rec))
    assert records(h) == [rec]


def test_spec_record_hides_the_key():
    text = spec_record(SPEC, "pro6000")
    assert KEY not in text
    data = json.loads(text)
    assert data["group"] == "pro6000"
    assert data["spec"]["service"]["api_key"] == "**********"
    assert data["spec"]["speculative"] == {"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash",
                                           "block_size": 16}


def test_journal_command():
    assert journal_command(SPEC, 5) == "journalctl -u sglang.service -n 5 --no-pager -o short-iso"


# --- the deploy lock -------------------------------------------------------------

NOW = 1_750_000_000.0
HERE = socket.gethostname()


def owner(holder: str, pid: int = 1234, age: float = 10.0) -> str:
    return json.dumps({"holder": holder, "pid": pid, "since": int(NOW - age)})


def never_called(pid):
    raise AssertionError("pid_alive asked about a process on another machine")


@pytest.mark.parametrize("text", ["", "\n", "   "])
def test_no_lock(text):
    s = judge_lock(text, NOW, 3600, never_called)
    assert not s.held and not s.stale and s.message == ""


def test_lock_held_by_another_machine():
    s = judge_lock(owner("alice@laptop"), NOW, 3600, never_called)
    assert s.held and not s.stale
    assert s.message.startswith("another deploy is running: lock held by alice@laptop (pid 1234) since ")
    assert "UTC" in s.message


def test_lock_held_by_a_live_local_process():
    s = judge_lock(owner(f"root@{HERE}", pid=99), NOW, 3600, lambda pid: pid == 99)
    assert s.held and not s.stale


def test_lock_stale_by_age():
    s = judge_lock(owner("alice@laptop", age=3601), NOW, 3600, never_called)
    assert s.held and s.stale
    assert s.message.startswith("stale deploy lock held by alice@laptop")
    assert s.message.endswith("older than 3600s")
    assert not judge_lock(owner("alice@laptop", age=3599), NOW, 3600, never_called).stale


def test_lock_stale_by_dead_local_pid():
    asked = []
    s = judge_lock(owner(f"root@{HERE}", pid=4321, age=5), NOW, 3600, lambda pid: asked.append(pid) or False)
    assert asked == [4321]
    assert s.held and s.stale
    assert s.message.endswith("that process is gone")


def test_lock_of_a_similar_hostname_is_not_local():
    s = judge_lock(owner(f"root@x{HERE}", pid=4321), NOW, 3600, never_called)
    assert s.held and not s.stale


@pytest.mark.parametrize(
    "text", ["garbage", "{", '{"holder": "a@b"}', '{"holder": "a@b", "pid": "x", "since": 1}', "[1, 2]", "null"]
)
def test_unreadable_lock(text):
    s = judge_lock(text, NOW, 3600, never_called)
    assert s.held and s.stale
    assert s.message.startswith("unreadable deploy lock (")


def test_stale_after():
    assert stale_after(SPEC) == 2 * 1200 + 120 + 600


def test_lock_owner():
    o = lock_owner()
    assert o["holder"].endswith("@" + HERE)
    assert isinstance(o["pid"], int) and isinstance(o["since"], int)
    # what lock_owner writes, judge_lock reads back as held by a live local process
    s = judge_lock(json.dumps(o), o["since"] + 1, 3600, lambda pid: True)
    assert s.held and not s.stale


def read_lock(host) -> str:
    """The lock owner as preflight reads it: the DeployedFiles fact's command and parser."""
    return parse_deploy_state(host.run(DeployedFiles().command([], lock_owner_file(SPEC))).stdout).lock_owner


def test_lock_commands_work(host):
    me = {"holder": "root@deployer", "pid": 1, "since": 1}
    other = {"holder": "bob@elsewhere", "pid": 2, "since": 2}
    assert read_lock(host) == ""
    host.run(lock_command(SPEC, me, take_over=False))
    assert json.loads(read_lock(host)) == me
    r = host.run(lock_command(SPEC, other, take_over=False), check=False)
    assert r.returncode == 1
    assert r.stdout.splitlines()[0] == "locked:"
    assert json.loads(r.stdout.splitlines()[1]) == me
    host.run(lock_command(SPEC, other, take_over=True))
    assert json.loads(read_lock(host)) == other
    host.run(unlock_command(SPEC))
    assert not host.path(lock_dir(SPEC)).exists()
    assert read_lock(host) == ""


# --- the report table --------------------------------------------------------------

def test_table_has_every_host_and_reason():
    reports = [
        HostReport("gpu-b", "pro6000", "1x NVIDIA RTX PRO 6000 Blackwell Server Edition", "restart", "OK", 312.4,
                   "250 ms, 20.0 tok/s, accept length 3.25"),
        HostReport("gpu-a", "a6000", "2x NVIDIA RTX A6000", "restart", "FAILED (rolled back)",
                   reasons=["the unit stopped: failed (failed, result exit-code)", "second reason"]),
        HostReport("gpu-c", verdict="REFUSED", reasons=["another deploy holds the lock: locked:"]),
    ]
    t = table(reports)
    lines = t.splitlines()
    assert lines[0].split() == ["host", "class", "GPUs", "found", "action", "verdict", "ready", "smoke"]
    assert set(lines[1]) <= {"-", " "}
    hosts = [line.split()[0] for line in lines[2:] if not line.startswith("    - ")]
    assert hosts == ["gpu-a", "gpu-b", "gpu-c"]
    for r in reports:
        for reason in r.reasons:
            assert f"    - {reason}" in lines
    # each reason sits under its own host
    assert lines.index("    - the unit stopped: failed (failed, result exit-code)") == lines.index(
        next(line for line in lines if line.startswith("gpu-a"))) + 1
    assert lines.index("    - another deploy holds the lock: locked:") > lines.index(
        next(line for line in lines if line.startswith("gpu-c")))
    assert "312.4s" in t and "FAILED (rolled back)" in t and "accept length 3.25" in t
    gpu_c = next(line for line in lines if line.startswith("gpu-c"))
    assert gpu_c.split() == ["gpu-c", "-", "-", "-", "REFUSED", "-", "-"]


def test_table_columns_line_up():
    t = table([HostReport("h", "c", "g", "a", "OK", 1.0, "s"), HostReport("a-much-longer-host-name", verdict="x")])
    head, rule, *rows = t.splitlines()
    col = head.index("class")
    assert rule.index(" ") + 2 == col
    assert all(row[col - 2: col] == "  " for row in rows)


def test_describe_gpus():
    assert describe_gpus([]) == "none"
    assert describe_gpus(["NVIDIA RTX A6000", "NVIDIA RTX A6000"]) == "2x NVIDIA RTX A6000"
    assert describe_gpus(["NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA H200"]) == "2x NVIDIA H200, 1x NVIDIA H200 NVL"


def test_run_report_prints_to_stderr(capsys, monkeypatch):
    import types

    import fleet.report

    registered = []
    monkeypatch.setattr(fleet.report, "atexit", types.SimpleNamespace(register=registered.append))
    run = RunReport("title")
    run.host("x").reasons.append("why")
    assert run.host("x") is run.host("x")
    assert registered == [run.print]  # printed once at the end of the pyinfra run
    run.print()
    err = capsys.readouterr().err
    assert err.startswith("\n--> title\n") and "    - why" in err
    RunReport("empty").print()
    assert capsys.readouterr().err == ""


def test_redact_hides_the_key_sglang_logs_with_its_server_args():
    line = f"server_args=ServerArgs(model_path='/m', api_key='{KEY}', port=30000)"
    assert KEY not in redact(line, SPEC) and "api_key='***'" in redact(line, SPEC)
    assert redact(line, make_spec()) == line  # no key declared: nothing to hide
