"""tasks/recovery over a fake host: begin's one command (the lock, the checks, the backup, the pending
record) and what each of its answers makes of the host (begun with its lease kept; refused with
nothing done; lost with its state unknown), a failed operation's rollback callback, and an
interrupt: every begun host's row says where it is left, and the run stops at once."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace

import pytest
from answers import answer, record
from builders import SPEC, converged, make_spec
from fakehost import Script, fake_host, fresh_run, this_run, preflight_of  # noqa: F401

from fleet.core import bounds, layout
from fleet.rollout import commands as rollout, lock
from fleet.rollout.history import Backup, rollback_files
from fleet.rollout.parse import FileState
from fleet.rollout.plan import units_as_read
from tasks import recovery
from tasks.common import Begun
from tasks.preflight import Rollback

NEW = make_spec(speculative={"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash",
                             "block_size": 8})
PF = preflight_of(NEW, converged(SPEC))


def beginning(said):
    fake = fake_host(Script({"@@begun": said}))
    return recovery._begin_or_lost(None, fake.host, PF), fake, this_run().report.hosts.get("h")


def test_begin_sends_one_command_built_from_what_preflight_read_and_keeps_the_lock_leased():
    ok, fake, _ = beginning(answer(rollout.BEGUN_MARK))
    p = PF.plan
    assert ok and fake.commands() == [rollout.begin_command(
        NEW, lock.owner(), PF.facts.deployed.lock,
        {path: PF.facts.deployed.sha1(path) for path in rollout.watched_files(NEW)}, p.before.backup,
        p.record.to_json(), secret_uploads=[f.path for f in p.swap if f.secret and f.content is not None],
        copies={}, units=units_as_read(NEW, PF.facts))]
    assert p.before.backup == "20261130T120000Z"  # the files before are backed up first
    begun = this_run().begun["h"]
    assert begun.pf is PF and begun.lease is not None and not begun.lease.greenlet.dead


def test_the_begin_of_a_rollback_stages_the_backup_sets_files_before_its_own_backup_can_prune_it():
    stamp = "20261129T080000Z"
    files = rollback_files(SPEC, "pro6000", Backup(stamp, {"sglang.service": FileState("644", "root:root", "x")}, ""))
    pf = preflight_of(SPEC, converged(NEW), rollback=Rollback(stamp, SPEC, "pro6000", files))
    fake = fake_host(Script({"@@begun": answer(rollout.BEGUN_MARK)}))
    assert recovery._begin_or_lost(None, fake.host, pf)
    # a copy of begin.sh's, which stages its copies before its own backup (test_host_programs.py runs it so)
    staged = shlex.quote(f"{SPEC.backups_dir}/{stamp}/sglang.service\n{layout.staged_path(SPEC.unit_file)}")
    (command,) = fake.commands()
    assert staged in command and f" {pf.stamp} " in command


OWNER = json.dumps({"holder": "bob@ci", "pid": 7, "since": 1_796_040_000})


@pytest.mark.parametrize("said, reason", [
    (answer(record("lock", OWNER, value="refused")),
     "h: deploy lock: expected no other deploy, found another deploy that took it since preflight: held by bob@ci "
     "since 2026-11-30 12:00:00 UTC"),
    (answer(record("lock", "", value="refused")),
     "h: deploy lock: expected no other deploy, found another deploy that took it since preflight: it has let it go "
     "again"),
    (answer(record(rollout.CHANGED, value=NEW.env_file)),
     f"h: {NEW.env_file} changed since preflight (another deploy, or a hand edit); nothing was done: run again"),
    (answer(record(rollout.UNIT_CHANGED, "inactive\nenabled\n", value=SPEC.service_unit)),
     "h: sglang.service became inactive since preflight (it was active: another deploy, or a hand change); "
     "nothing was done: run again"),
])
def test_a_host_changed_since_preflight_is_refused_with_nothing_done(said, reason):
    ok, _, row = beginning(said)
    assert not ok and "h" not in this_run().begun
    assert (row.verdict, row.action, row.reasons) == ("REFUSED", "none", [reason])


def test_a_begin_that_fails_otherwise_fails_the_host_saying_what_the_host_said():
    ok, _, row = beginning((False, "@@lock=taken\ninstall: cannot create directory: Read-only file system\n"))
    assert not ok and "h" not in this_run().begun and row.verdict == "FAILED" and row.action != "none"
    assert row.reasons == ["h: could not begin the rollout, nothing was changed: install: cannot create directory: "
                           "Read-only file system"]


def test_a_begin_that_gets_no_answer_leaves_the_host_lost_its_state_unknown():
    ok, _, row = beginning(EOFError())
    assert not ok and row.verdict == "LOST" and "h" in this_run().lost and "h" not in this_run().begun
    assert row.reasons[0] == this_run().lost["h"] and row.reasons[0].startswith(f"h: {bounds.begin(NEW).what}: expected an answer")
    assert row.reasons[1].endswith(f"when its lease has run out ({NEW.readiness.link_timeout_s:g}s) and finishes or "
                                   "rolls back that rollout")


# --- what ends a begun rollout otherwise -----------------------------------------------------

def test_a_failed_operation_on_a_begun_host_rolls_it_back_and_on_another_does_nothing(monkeypatch):
    rolled = []
    monkeypatch.setattr(recovery.activate, "after_failure", lambda host, begun, why: rolled.append((host, begun, why)))
    begun, a, b = Begun(PF), SimpleNamespace(name="a"), SimpleNamespace(name="b")
    this_run().begun["a"] = begun
    for host in (a, b):
        recovery._rolled_back_on_failure(None, host, "'Upload sglang.env' failed")
    assert rolled == [(a, begun, "'Upload sglang.env' failed")]


def test_an_unfinished_run_says_where_each_begun_host_is_left():
    this_run().begun.update(a=Begun(PF), b=Begun(PF))
    recovery._unfinished(this_run(), "interrupted")
    assert this_run().begun == {}
    for name in "ab":
        row = this_run().report.hosts[name]
        assert row.verdict == "INTERRUPTED" and row.reasons == [
            f"{name}: interrupted mid-rollout; it keeps its pending-rollout record: the next run (make deploy) "
            "finishes this rollout or rolls it back to the state recorded before it"]


def test_begin_arms_the_run_and_queues_the_begin(monkeypatch):
    armed, calls = [], []
    monkeypatch.setattr(recovery.runs, "arm", lambda state, on_failure, unfinished: armed.append(
        (state, on_failure, unfinished)))
    monkeypatch.setattr(recovery, "python", SimpleNamespace(call=lambda **kw: calls.append(kw)))
    monkeypatch.setattr(recovery, "host", SimpleNamespace(state="the state"))
    recovery.begin(PF)
    assert armed == [("the state", recovery._rolled_back_on_failure, recovery._unfinished)]
    assert [c["function"] for c in calls] == [recovery._begin_or_lost] and calls[0]["pf"] is PF

