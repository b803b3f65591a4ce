"""fleet.lock: who holds a host's deploy lock, whether that deploy still runs, and taking it (no hosts).

The commands run for real under sh in a tmp dir (/run/ moved there). The "SSH session" a
lock names is the nearest ancestor process called sshd: the tests run the lock command
under a shell whose executable is named sshd, so its pid and start time are what a lock
taken over SSH records.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from fleet.lock import (
    REFUSED_EXIT,
    REFUSED_MARK,
    TAKEN_MARK,
    LockFacts,
    describe,
    facts_command,
    judge,
    lock_file,
    release_command,
    stale_after,
    take_command,
)
from fleet.parse import parse_deploy_state
from fleet.spec import ClassSpec
from fleet.wire import frames

SPEC = ClassSpec.model_validate({
    "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
    "service": {"model_path": "/m", "served_model_name": "m"},
})
PATH = lock_file(SPEC)
NOW = 1_750_000_000.0
WHO = {"holder": "alice@laptop", "pid": 7, "since": int(NOW)}


def text(**fields) -> str:
    return json.dumps({"holder": "bob@desk", "pid": 1234, "since": int(NOW - 10), **fields})


# --- judge ------------------------------------------------------------------------------

def test_no_lock_is_free():
    assert judge(LockFacts(), PATH, NOW, 3600).kind == "free"


def test_a_lock_whose_ssh_session_lives_is_held_whatever_its_age():
    s = judge(LockFacts(True, text(session=99, session_start=5, since=1), "5"), PATH, NOW, 3600)
    assert s.kind == "held" and not s.free_to_take
    assert s.message.startswith("another deploy is running: lock held by bob@desk since ")
    assert "its SSH session, sshd pid 99, is alive" in s.message


@pytest.mark.parametrize("now_start", ["", "6"])  # the pid is gone, or is another process now
def test_a_lock_whose_ssh_session_is_gone_is_stale_at_once(now_start):
    s = judge(LockFacts(True, text(session=99, session_start=5), now_start), PATH, NOW, 3600)
    assert s.kind == "stale" and s.free_to_take
    assert s.message.endswith("its SSH session (sshd pid 99) is gone")


def test_a_lock_without_a_session_goes_stale_by_age():
    assert judge(LockFacts(True, text(), ""), PATH, NOW, 3600).kind == "held"
    old = judge(LockFacts(True, text(since=int(NOW - 3601)), ""), PATH, NOW, 3600)
    assert old.kind == "stale" and old.message.endswith("older than 3600s")


@pytest.mark.parametrize("bad", ["", "garbage", "{", '{"holder": "a@b"}', '{"holder": "a", "since": "x"}', "[1]", "null"])
def test_a_lock_without_a_readable_owner_is_refused_with_the_command_to_clear_it(bad):
    s = judge(LockFacts(True, bad, ""), PATH, NOW, 3600)
    assert s.kind == "ownerless" and not s.free_to_take
    assert s.message.startswith(f"a deploy lock without a readable owner at {PATH}")
    assert s.message.endswith(f"clear it with: rm -rf {PATH}")


def test_describe_and_stale_after():
    assert describe(text(since=0)) == "held by bob@desk since 1970-01-01 00:00:00 UTC"
    assert stale_after(SPEC) == 2 * 1200 + 120 + 600


# --- the commands ---------------------------------------------------------------------------

def sh(tmp: Path, command: str, under: str = "sh") -> subprocess.CompletedProcess:
    command = command.replace("/run/", f"{tmp}/run/")
    return subprocess.run([under, "-c", f"sh -c {shlex.quote(command)}"], capture_output=True, text=True, timeout=30)


def read(tmp: Path) -> LockFacts:
    return parse_deploy_state(sh(tmp, facts_command(PATH)).stdout).lock


def test_taken_over_ssh_the_lock_names_the_session_and_goes_stale_when_it_ends(tmp_path):
    sshd = tmp_path / "sshd"
    sshd.symlink_to("/bin/sh")
    r = sh(tmp_path, take_command(SPEC, WHO, LockFacts()), under=str(sshd))
    assert r.stdout.strip() == TAKEN_MARK, r.stderr
    owner = json.loads((tmp_path / PATH.lstrip("/")).read_text())
    assert {k: owner[k] for k in WHO} == WHO and isinstance(owner["session"], int)
    # that "session" has ended (its shell exited): any later deploy sees the lock stale
    assert judge(read(tmp_path), PATH, NOW, 3600).kind == "stale"


def test_a_lock_of_a_live_session_is_held(tmp_path):
    sshd = tmp_path / "sshd"
    sshd.symlink_to("/bin/sh")
    live = subprocess.Popen([str(sshd), "-c", "sleep 30"])
    try:
        start = Path(f"/proc/{live.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
        lock = tmp_path / PATH.lstrip("/")
        lock.parent.mkdir(parents=True)
        lock.write_text(text(session=live.pid, session_start=int(start)) + "\n")
        assert judge(read(tmp_path), PATH, NOW, 3600).kind == "held"
    finally:
        live.kill()
        live.wait()


def test_take_is_compare_and_replace(tmp_path):
    assert sh(tmp_path, take_command(SPEC, WHO, LockFacts())).returncode == 0
    assert read(tmp_path).present
    # a second deploy that saw no lock at preflight is refused, and told who holds it
    r = sh(tmp_path, take_command(SPEC, {**WHO, "holder": "carol@x"}, LockFacts()))
    (said,) = frames(r.stdout)
    assert r.returncode == REFUSED_EXIT and said.marker == REFUSED_MARK and "alice@laptop" in said.text
    # one that judged exactly this lock stale takes it
    seen = read(tmp_path)
    assert sh(tmp_path, take_command(SPEC, {**WHO, "holder": "carol@x"}, seen)).returncode == 0
    assert "carol@x" in read(tmp_path).text
    # release leaves nothing
    sh(tmp_path, release_command(SPEC))
    assert read(tmp_path) == LockFacts()
