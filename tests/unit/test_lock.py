"""fleet.rollout.lock: who holds a host's deploy lock, whether that deploy still runs, its lease, and taking,
renewing and releasing it (no hosts).

The commands run for real under sh in a tmp dir (/run/ moved there). The "SSH session" a
lock names is the nearest ancestor process called sshd: the tests run the lock command
under a shell whose executable is named sshd, so its pid and start time are what a lock
taken over SSH records; commands run under one such shell are one session.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from fleet.core.layout import lease_file
from fleet.rollout.lock import (
    LEASE_RAN_OUT,
    NOT_OURS_MARK,
    REFUSED_EXIT,
    REFUSED_MARK,
    RENEWED_MARK,
    TAKEN_MARK,
    LockFacts,
    describe,
    facts_command,
    judge,
    lost_after_s,
    release_command,
    renew_command,
    renew_every_s,
    stale_after,
    take_command,
)
from fleet.rollout.parse import parse_deploy_state
from fleet.spec import ClassSpec
from fleet.core.wire import frames

SPEC = ClassSpec.model_validate({
    "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
    "service": {"model_path": "/m", "served_model_name": "m"},
})
PATH = SPEC.lock_file
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


# --- the lease --------------------------------------------------------------------------

LEASE = lease_file(PATH)


def test_a_lock_whose_lease_ran_out_is_stale_even_with_its_session_alive():
    """A link that dropped silently: sshd keeps the session, the lease runs out."""
    s = judge(LockFacts(True, text(session=99, session_start=5), LEASE_RAN_OUT), PATH, NOW, 3600)
    assert s.kind == "stale" and s.free_to_take
    assert s.message.startswith("stale deploy lock held by bob@desk since ")
    assert s.message.endswith("its lease ran out (not renewed within readiness.link_timeout_s by the host's clock: "
                              "its deploy lost the link or was killed)")
    # a lock without a session, young: its lease ran out all the same
    assert judge(LockFacts(True, text(), LEASE_RAN_OUT), PATH, NOW, 3600).kind == "stale"
    # a lock without a readable owner stays refused, whatever its lease
    assert judge(LockFacts(True, "garbage", LEASE_RAN_OUT), PATH, NOW, 3600).kind == "ownerless"


def test_the_lease_is_renewed_every_quarter_of_the_link_timeout_and_given_up_after_half():
    spec = SPEC.model_copy(update={"readiness": SPEC.readiness.model_copy(update={"link_timeout_s": 12})})
    assert (renew_every_s(spec), lost_after_s(spec)) == (3, 6)
    assert SPEC.readiness.link_timeout_s == 60  # the declared default


def in_session(tmp: Path, *commands: str) -> list[subprocess.CompletedProcess]:
    """Each command in its own shell, all of them under one "sshd" process: one SSH session."""
    sshd = tmp / "sshd"
    if not sshd.exists():
        sshd.symlink_to("/bin/sh")
    outs = [tmp / f"out{i}" for i in range(len(commands))]
    script = "; ".join(f"sh -c {shlex.quote(c.replace('/run/', f'{tmp}/run/'))} > {o} 2>&1; echo $? >> {o}"
                       for c, o in zip(commands, outs))
    subprocess.run([str(sshd), "-c", script], timeout=30, check=True)
    done = []
    for o in outs:
        *lines, rc = o.read_text().splitlines()
        done.append(subprocess.CompletedProcess([], int(rc), "\n".join(lines) + "\n", ""))
    return done


def host_file(tmp: Path, real: str) -> Path:
    return tmp / real.lstrip("/")


def test_take_writes_a_lease_of_link_timeout_by_the_hosts_clock(tmp_path):
    before = int(subprocess.run(["date", "+%s"], capture_output=True, text=True).stdout)
    (taken,) = in_session(tmp_path, take_command(SPEC, WHO, LockFacts()))
    assert taken.stdout.split()[0] == TAKEN_MARK
    expires = int(host_file(tmp_path, LEASE).read_text())
    assert before + 60 <= expires <= before + 60 + 5


def test_renew_extends_only_ones_own_lease(tmp_path):
    take, renew = take_command(SPEC, WHO, LockFacts()), renew_command(SPEC)
    lease = host_file(tmp_path, LEASE)
    _, renewed = in_session(tmp_path, take, f"printf '1\\n' > {LEASE}; {renew}")
    assert renewed.stdout.split()[0] == RENEWED_MARK and int(lease.read_text()) > 1
    # from another session (another deploy's, or this run's after a takeover): not renewed
    lease.write_text("1\n")
    other = sh(tmp_path, renew, under=str(tmp_path / "sshd"))  # a session of its own: not the lock's
    assert other.stdout.split()[0] == NOT_OURS_MARK and lease.read_text() == "1\n"
    # no lock at all (released, or never taken): not ours either
    host_file(tmp_path, PATH).unlink()
    assert sh(tmp_path, renew).stdout.split()[0] == NOT_OURS_MARK


def test_release_removes_only_ones_own_lock(tmp_path):
    take, release = take_command(SPEC, WHO, LockFacts()), release_command(SPEC)
    in_session(tmp_path, take)
    lock, lease = host_file(tmp_path, PATH), host_file(tmp_path, LEASE)
    # a run whose lock was taken over does not remove the new owner's
    gone = sh(tmp_path, release, under=str(tmp_path / "sshd"))
    assert gone.returncode == 0 and lock.exists() and lease.exists()
    # its own: lock and lease gone
    lock.unlink()
    lease.unlink()
    _, released = in_session(tmp_path, take, release)
    assert released.returncode == 0 and not lock.exists() and not lease.exists()
    # no lock directory at all: nothing to do
    assert sh(tmp_path / "empty", release).returncode == 0


@pytest.mark.parametrize("lease, kind", [("past", "stale"), ("future", "held"), ("x1", "held"), ("", "held")])
def test_preflight_reads_the_lease_against_the_hosts_clock(tmp_path, lease, kind):
    """A live session holds the lock while its lease holds; a lease that is not a number is none."""
    sshd = tmp_path / "sshd"
    sshd.symlink_to("/bin/sh")
    live = subprocess.Popen([str(sshd), "-c", "sleep 30"])
    try:
        start = Path(f"/proc/{live.pid}/stat").read_text().rsplit(") ", 1)[1].split()[19]
        lock = host_file(tmp_path, PATH)
        lock.parent.mkdir(parents=True)
        lock.write_text(text(session=live.pid, session_start=int(start)) + "\n")
        now = int(subprocess.run(["date", "+%s"], capture_output=True, text=True).stdout)
        host_file(tmp_path, LEASE).write_text({"past": str(now - 2), "future": str(now + 60)}.get(lease, lease) + "\n")
        facts = read(tmp_path)
        assert judge(facts, PATH, NOW, 3600).kind == kind
        assert (facts.session_start_now == LEASE_RAN_OUT) == (kind == "stale")
    finally:
        live.kill()
        live.wait()


def test_a_hostile_lock_text_runs_nothing_in_renew_or_release(tmp_path):
    canary = tmp_path / "canary"
    lock = host_file(tmp_path, PATH)
    lock.parent.mkdir(parents=True)
    for payload in (f"$(touch {canary})", f"`touch {canary}`", f"'; touch {canary}; '", '"session": null, "x": 1}'):
        lock.write_text(text(holder=payload) + "\n")
        assert sh(tmp_path, renew_command(SPEC)).stdout.split()[0] == NOT_OURS_MARK
        sh(tmp_path, release_command(SPEC))
        assert not canary.exists() and lock.exists()
