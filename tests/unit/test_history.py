"""fleet.rollout.history: deploy records and backup sets as the host prints them; which backup a
rollback puts back, and how."""

from __future__ import annotations

import json
import subprocess

import pytest
from builders import KEYED, converged, make_spec

from fleet.rollout.history import (
    PREVIOUS,
    Backup,
    History,
    Record,
    choose_backup,
    describe_serving,
    history_command,
    new_record,
    parse_history,
    rollback_files,
    spec_sha256,
)
from fleet.rollout.parse import FileState
from fleet.rollout.plan import plan
from fleet.rollout.render import server_argv
from fleet.rollout.commands import sha1, spec_record

OLD = make_spec(speculative={"algorithm": "EAGLE3", "draft_model_path": "/root/models/E3", "num_steps": 3, "topk": 4,
                             "num_draft_tokens": 8})
NEW = make_spec()
OLD_RECORD = {"time": 1_796_000_000, "by": "bob@desk", "group": "pro6000", "stamp": "20261129T080000Z",
              "algorithm": "EAGLE3", "action": "install, enable, start", "result": "ok", "ready": "/health 200"}


def run_on(tmp_path, records: list[str], backups: dict[str, dict[str, str]]) -> History:
    """History as history_command prints it from a real directory tree."""
    (tmp_path / "deploys.jsonl").write_text("".join(line + "\n" for line in records))
    for stamp, files in backups.items():
        d = tmp_path / "backups" / stamp
        d.mkdir(parents=True)
        for name, text in files.items():
            (d / name).write_text(text)
            (d / name).chmod(0o600)
    out = subprocess.run(["sh", "-c", history_command(str(tmp_path / "deploys.jsonl"), str(tmp_path / "backups"))],
                         capture_output=True, text=True, check=True).stdout
    return parse_history(out)


def test_records_old_and_new_are_read_and_backups_sorted_oldest_first(tmp_path):
    new = new_record(kind="rollback", spec=NEW, group="pro6000", stamp="20261130T120000Z", now=1_796_040_000,
                     by="alice@laptop", action="update sglang.service, restart", sglang="0.5.23",
                     repo=("0123456789abcdef0123", True), to="20261129T080000Z")
    h = run_on(tmp_path, [json.dumps(OLD_RECORD), "not json", json.dumps({**new, "result": "ok"})], {
        "20261130T120000Z": {"sglang.service": "unit 2\n", "spec.json": spec_record(NEW, "pro6000")},
        "20261129T080000Z": {"sglang.service": "unit 1\n", "spec.json": spec_record(OLD, "pro6000")},
    })
    old, latest = h.records
    assert (old.kind, old.sglang, old.commit, old.dirty, old.algorithm) == ("deploy", "", "", None, "EAGLE3")
    assert (latest.kind, latest.to, latest.sglang, latest.served_model) == ("rollback", "20261129T080000Z", "0.5.23",
                                                                          "qwen3.6-27b")
    assert latest.spec_sha256 == spec_sha256(NEW, "pro6000") and latest.describe_commit() == "0123456789ab+dirty"
    assert h.unreadable == 1 and h.last == latest
    assert h.stamps() == ["20261129T080000Z", "20261130T120000Z"]
    b = h.backups[0]
    assert set(b.files) == {"sglang.service", "spec.json"} and b.files["sglang.service"].mode == "600"
    assert b.files["sglang.service"].sha1 == sha1("unit 1\n")
    spec, group, problem = b.spec()
    assert (spec, group, problem) == (OLD, "pro6000", "")
    assert b.summary() == "qwen3.6-27b, EAGLE3 (draft /root/models/E3, steps 3, topk 4, draft tokens 8)"


def test_no_records_no_backups(tmp_path):
    out = subprocess.run(["sh", "-c", history_command(str(tmp_path / "none.jsonl"), str(tmp_path / "nope"))],
                         capture_output=True, text=True, check=True).stdout
    assert parse_history(out) == History()


@pytest.mark.parametrize("text, problem", [
    ("", "it holds no spec.json"),
    ('{"group": "pro6000", "spec": {"service": {"api_key": "**********"}}}', "its spec.json cannot be read as a spec"),
    ("{not json", "its spec.json cannot be read as a spec"),
])
def test_a_backup_without_a_readable_spec_says_why(text, problem):
    spec, _, why = Backup("s", {}, text).spec()
    assert spec is None and why.startswith(problem)


S1, S2, S3, S4, S5 = (f"2026113{i}T120000Z" for i in range(5))


def rec(stamp: str, result: str = "ok", kind: str = "deploy") -> Record:
    return Record(time=0, by="alice@laptop", result=result, kind=kind, stamp=stamp)


def sets(*stamps: str) -> list[Backup]:
    return [Backup(s, {}, "") for s in stamps]


def previous(records: list[Record], backups: list[Backup]) -> str:
    backup, problem = choose_backup(History(records, backups), PREVIOUS)
    return backup.stamp if backup else problem


def test_previous_is_the_set_from_before_the_last_successful_change():
    # S1 installed (nothing to back up), S2 replaced S1's files (set S2)
    assert previous([rec(S1), rec(S2)], sets(S2)) == S2
    # then S3 failed and was rolled back: its set holds the live files, putting it back would change nothing
    assert previous([rec(S1), rec(S2), rec(S3, "rolled-back")], sets(S2, S3)) == S2
    assert previous([rec(S1), rec(S2), rec(S3, "failed")], sets(S2, S3)) == S2
    # a successful rollout that replaced no file (a restart, a repair) took no set: the change before it counts
    assert previous([rec(S1), rec(S2), rec(S3)], sets(S2)) == S2
    # a successful rollback is a change too: previous undoes it
    assert previous([rec(S1), rec(S2), rec(S3, kind="rollback")], sets(S2, S3)) == S3


def test_previous_of_a_rollout_that_took_over_an_interrupted_one_is_the_set_that_one_took():
    # S3 was interrupted after its backup (no record of its own); S4 took it over, kept S3's set, and succeeded
    assert previous([rec(S1), rec(S2), rec(S4)], sets(S2, S3)) == S3
    # ... and a failed one after the set it took over is passed over like any other
    assert previous([rec(S1), rec(S2), rec(S4), rec(S5, "rolled-back")], sets(S2, S3, S5)) == S3
    # a set older than the record before the rollout was not this rollout's
    assert previous([rec(S1), rec(S3, "rolled-back"), rec(S4)], sets(S2)).startswith("no rollout on record")


def test_without_a_set_from_a_successful_change_previous_names_none():
    why = ("no rollout on record that succeeded left a backup set here (only the last 5 are kept): name the set to "
           f"put back with TO=<stamp> (make history shows what each holds); the backups there are: {S2}, {S3} "
           "(newest last)")
    assert previous([rec(S1), rec(S2, "rolled-back"), rec(S3, "rolled-back")], sets(S2, S3)) == why  # all failed
    assert previous([], sets(S2, S3)) == why  # no records (deploys.jsonl removed)
    assert previous([rec(S1)] + [rec(s, "failed") for s in (S2, S3)], sets(S2, S3)) == why  # S1 installed: no set
    # the good change's set pruned by KEEP_BACKUPS failed ones after it: nothing older is left either
    stamps = [f"202612{d:02d}T120000Z" for d in range(1, 8)]
    assert previous([rec(stamps[0]), *(rec(s, "failed") for s in stamps[1:])], sets(*stamps[2:])).startswith(
        "no rollout on record that succeeded left a backup set here (only the last 5 are kept)")
    assert previous([rec(S1)], []) == "no backup on the host: nothing was ever replaced there"


def test_choose_backup_by_stamp():
    history = History([], sets(S1, S2))
    assert choose_backup(history, S1)[0].stamp == S1
    assert choose_backup(history, "20250101T000000Z") == (None, (
        f"backups/20250101T000000Z does not exist; the backups there are: {S1}, {S2} (newest last)"))


def test_a_rollback_copies_the_backed_up_files_on_the_host_and_removes_those_it_lacks():
    keyed_now = make_spec(service=KEYED)
    files = {"sglang.service": FileState("644", "root:root", "1" * 40), "spec.json": FileState("600", "root:root",
                                                                                                "2" * 40)}
    want = rollback_files(OLD, "pro6000", Backup("20261129T080000Z", files, spec_record(OLD, "pro6000")))
    d = "/var/lib/sglang-fleet/sglang/backups/20261129T080000Z"
    assert [(f.path, f.copied_from, f.sha1, f.present) for f in want] == [
        ("/etc/systemd/system/sglang.service", f"{d}/sglang.service", "1" * 40, True),
        ("/etc/sglang/sglang.env", None, None, False),  # absent then: removed
        ("/etc/sglang/sglang.yaml", None, None, False),
        ("/etc/sglang/sglang.secret", None, None, False),
        ("/etc/sglang/sglang.auth", None, None, False),
        ("/var/lib/sglang-fleet/sglang/spec.json", f"{d}/spec.json", "2" * 40, True),
    ]
    assert all(f.content is None for f in want)  # nothing travels: copied on the host
    # planned against a host serving a keyed spec: every file changes, the service restarts
    p = plan(OLD, want, converged(keyed_now), None, "20261130T130000Z", 1_796_040_000, "alice@laptop")
    assert p.restart and p.wait and p.backup
    assert [f.path for f in p.swap] == [f.path for f in want if f.path != "/etc/sglang/sglang.secret"]  # absent both


def test_describe_serving():
    assert describe_serving(None) == ("-", "-")
    assert describe_serving(tuple(server_argv(NEW)[1:])) == (
        "qwen3.6-27b", "DFLASH (draft /root/models/Qwen3.6-27B-DFlash, block size 16)")
    assert describe_serving(server_argv(make_spec(speculative={"algorithm": "none"}))) == ("qwen3.6-27b", "none")


def test_the_spec_hash_follows_the_spec():
    assert spec_sha256(NEW, "pro6000") == spec_sha256(make_spec(), "pro6000")
    assert spec_sha256(NEW, "pro6000") != spec_sha256(OLD, "pro6000") != spec_sha256(NEW, "h200")


def test_record_from_json_fills_what_old_records_lack():
    r = Record.from_json({"time": 1, "by": "x", "result": "ok", "unknown_later_field": 3})
    assert (r.kind, r.commit, r.dirty, r.describe_commit()) == ("deploy", "", None, "no commit")
