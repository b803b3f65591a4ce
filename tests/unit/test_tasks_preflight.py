"""tasks/preflight.check on a pyinfra Host (in its group, with its data) whose facts are HostFacts built
by hand (builders): what a converged host, a drifted one and each refused one get in their row, that a
refused host gets the refusal operation and nothing else, the diffs --diff shows (never a secret's),
the warnings; and make rollback's target read from the host's backup sets."""

from __future__ import annotations

import json

from dataclasses import replace
from types import SimpleNamespace

import pytest
from builders import DRAFT, SPEC, converged, gpu, make_spec, secrets_of, wanted
from fakehost import Clock, fake_host, fresh_run, this_run  # noqa: F401
from pyinfra.context import ctx_host, ctx_state

from facts.history import DeployHistory
from facts.preflight import HostSnapshot, snapshot_args
from fleet.rollout import intent
from fleet.tune import search as tune
from fleet.core import bounds
from fleet.rollout.history import Backup, History
from fleet.rollout.lock import LockFacts
from fleet.rollout.gpus import GpuList
from fleet.rollout.commands import spec_record
from tasks import preflight

NEW = make_spec(speculative={"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash",
                             "block_size": 8})
STAMP = "20261129T080000Z"


def data_of(spec) -> dict:
    return spec.model_dump(mode="json", exclude_defaults=True)


@pytest.fixture
def checking(tmp_path, monkeypatch):
    (tmp_path / "pro6000.py").write_text("gpu_class = {}\n")
    (tmp_path / "a6000.py").write_text("gpu_class = {}\n")
    monkeypatch.setattr(preflight, "time", Clock())
    queued = []
    monkeypatch.setattr(preflight, "python", SimpleNamespace(call=lambda **kw: queued.append(kw)))

    def check(facts, data=data_of(SPEC), groups=("pro6000",), diff=False, override=None, history=History()):
        """check() on host `h`: (its Preflight or None, its row, the operations queued, what it logged, facts asked)."""
        fake = fake_host(lambda command: (True, ""), groups={g: data for g in groups})
        asked = []

        def get_fact(cls, **kwargs):
            asked.append((cls, kwargs))
            if isinstance(facts, Exception):
                raise facts
            return {HostSnapshot: facts, DeployHistory: history}[cls]

        fake.host.get_fact = get_fact
        fake.host.inventory.get_override_data = lambda: override or {}
        fake.host.state.config.DIFF = diff
        with ctx_state.use(fake.host.state), ctx_host.use(fake.host):
            pf = preflight.check(str(tmp_path))
        return pf, this_run().report.hosts["h"], queued, fake.logged, asked
    return check


def test_a_converged_host_is_ok_with_nothing_to_do_from_one_snapshot(checking):
    pf, row, queued, _, asked = checking(converged(SPEC))
    assert asked == [(HostSnapshot, {**snapshot_args(SPEC), "_timeout": bounds.snapshot_s(SPEC)})]
    assert not pf.plan.has_work and pf.group == "pro6000" and pf.stamp == "20261130T120000Z"
    assert (row.gpu_class, row.verdict, row.action, row.reasons, queued) == (
        "pro6000", "OK", "none (already as declared)", [], [])
    assert row.gpus == "1x NVIDIA RTX PRO 6000 Blackwell Workstation Edition at 18:00.0"


def test_a_host_a_make_tune_measures_is_refused_untouched_but_by_the_tunes_own_runs(checking):
    """A make deploy meanwhile: nothing of the host taken (no lock, no restart); the tune's candidates and return go."""
    owner = ("make tune of h (pid 7 on c)", 900.0)
    now = int(Clock().time())
    measured = converged(SPEC)
    measured = replace(measured, deployed=replace(measured.deployed, tune=json.dumps(
        tune.mark(now, "root@c", "block size 8", owner))))
    pf, row, _, _, _ = checking(measured)
    assert pf is None and row.verdict == "REFUSED"
    assert row.reasons == [f"h: make tune: expected no make tune under way, found {owner[0]} measuring candidate "
                           "block size 8 (its lease 900s more): the host is left as it is; wait for the tune, or stop "
                           "it (Ctrl-C), then make deploy"]
    own = {intent.INTENT_DATA: json.dumps({"owner": owner[0], "lease_s": owner[1], "record": "tune"})}
    pf, row, _, _, _ = checking(measured, override=own)
    assert pf is not None and row.verdict != "REFUSED"


def with_contents(facts, spec=SPEC):
    """The host's files' text as preflight reads it (secrets too, to show they are never shown)."""
    text = {f.path: f.content for f in wanted(spec) if f.content is not None}
    return replace(facts, deployed=replace(facts.deployed, contents=text))


def test_a_drifted_host_passes_with_its_plan_and_diff_shows_the_changes(checking):
    pf, row, queued, logged, _ = checking(with_contents(converged(SPEC)), data=data_of(NEW), diff=True)
    assert pf.plan.restart and row.verdict == "passed preflight" and row.action == pf.plan.action() and queued == []
    assert row.action == "update sglang.service, spec.json, restart"
    (unit_diff,) = [m for m in logged if m.startswith(f"Will change {SPEC.unit_file}\n")]
    assert f"--- {SPEC.unit_file} (on the host)" in unit_diff and f"+++ {SPEC.unit_file} (declared)" in unit_diff
    assert "\n-    --speculative-dflash-block-size 16\n+    --speculative-dflash-block-size 8\n" in unit_diff


def test_without_diff_nothing_is_shown_and_a_secret_is_never_shown(checking, monkeypatch):
    monkeypatch.setenv("SGLANG_API_KEY_TEST", "sk-Fleet0123456789abcdef")
    keyed = make_spec(service={"api_key": {"env": "SGLANG_API_KEY_TEST"}})
    old = with_contents(converged(keyed, secrets=secrets_of(keyed, "sk-Old0123456789abcdef0")), keyed)
    _, _, _, quiet, _ = checking(old, data=data_of(keyed))
    assert not any(m.startswith("Will ") for m in quiet)
    pf, row, _, logged, _ = checking(old, data=data_of(keyed), diff=True)
    secret = [f.path for f in pf.plan.swap if f.secret]
    assert secret and all(f"Will write {path} (content not shown)" in logged for path in secret)
    assert not any("sk-Fleet0123456789abcdef" in m or "sk-Old0123456789abcdef0" in m for m in logged)
    assert any("has no LogFilterPatterns=" in w for w in row.warnings)  # systemd 252 logs the key at each start


HELD = LockFacts(True, '{"holder": "bob@ci", "pid": 7, "since": 1796040000}')


@pytest.mark.parametrize("facts, groups, data, reason", [
    (converged(SPEC), (), data_of(SPEC), "h: gpu class: expected exactly one GPU class group, found none"),
    (converged(SPEC), ("pro6000", "a6000"), data_of(SPEC),
     "h: gpu class: expected exactly one GPU class group, found ['pro6000', 'a6000']"),
    (converged(SPEC), ("pro6000",), {**data_of(SPEC), "gpu_class": {"gpu_count": "two"}}, "gpu_class"),
    (None, ("pro6000",), data_of(SPEC), "h: preflight: expected the host's facts, found no answer to the preflight "
                                        "command (see pyinfra's error above)"),
    (converged(SPEC, gpus=GpuList("ok", (gpu(name="NVIDIA RTX A6000", memory=49140),))), ("pro6000",), data_of(SPEC),
     "NVIDIA RTX A6000"),
    (converged(SPEC, deployed=replace(converged(SPEC).deployed, lock=HELD)), ("pro6000",), data_of(SPEC),
     "h: deploy lock: expected no other deploy, found another deploy is running: lock held by bob@ci since "
     "2026-11-30 12:00:00 UTC"),
    (ValueError("odd\x1b[2J answer"), ("pro6000",), data_of(SPEC),
     "h: preflight: could not judge what the host answered (ValueError: 'odd\ufffd[2J answer')"),
])
def test_a_refused_host_gets_its_reasons_and_the_refusal_only(checking, facts, groups, data, reason):
    pf, row, queued, logged, _ = checking(facts, data=data, groups=groups)
    assert pf is None and (row.verdict, row.action) == ("REFUSED", "none")
    assert any(reason in r for r in row.reasons), row.reasons
    assert [q["name"] for q in queued] == ["Refuse host (preflight failed)"] and queued[0]["reasons"] == row.reasons
    assert queued[0]["function"](None, SimpleNamespace(log_styled=lambda *a, **k: None), row.reasons) is False


def test_warnings_are_in_the_row_and_do_not_refuse(checking):
    facts = converged(SPEC, gpus=replace(converged(SPEC).gpus, warnings=("WARNING: infoROM is corrupted at gpu 0",)))
    pf, row, _, _, _ = checking(facts)
    assert pf is not None and row.verdict == "OK"
    assert row.warnings == ["h: nvidia-smi said: WARNING: infoROM is corrupted at gpu 0"]


def test_a_stale_lock_is_taken_over(checking):
    stale = LockFacts(True, '{"holder": "bob@ci", "pid": 7, "since": 1000}')
    pf, row, _, logged, _ = checking(converged(SPEC, deployed=replace(converged(SPEC).deployed, lock=stale)))
    assert pf is not None and any(m.endswith("; taking it over") and m.startswith("stale deploy lock") for m in logged)


# --- make rollback -----------------------------------------------------------------------

@pytest.mark.parametrize("given, to", [({}, None), ({"sglang_fleet_rollback": 20261129}, "20261129"),
                                       ({"sglang_fleet_rollback": "previous"}, "previous")])
def test_a_rollback_is_asked_for_on_the_command_line_only(given, to):
    assert preflight.requested_rollback(given) == to


def backup(spec=SPEC) -> Backup:
    on_host = converged(SPEC).deployed.files
    return Backup(STAMP, {p.rsplit("/", 1)[1]: s for p, s in on_host.items() if s is not None},
                  spec_record(spec, "pro6000"))


def test_a_rollback_puts_a_backup_set_back_by_copying_it_on_the_host(checking):
    facts = converged(NEW, group="pro6000")
    pf, row, _, _, asked = checking(facts, data=data_of(NEW), override={"sglang_fleet_rollback": STAMP},
                                    history=History([], [backup()]))
    assert asked[0][0] is DeployHistory and pf.rollback.stamp == STAMP and pf.spec == SPEC
    assert row.action.startswith(f"roll back to backups/{STAMP}: ")
    assert {f.copied_from for f in pf.plan.swap} <= {f.copied_from for f in pf.rollback.files} and pf.plan.swap
    assert all(f.content is None for f in pf.rollback.files)  # copied on the host: nothing travels


@pytest.mark.parametrize("history, reason", [
    (History(), "h: rollback: no backup on the host: nothing was ever replaced there"),
    (History([], [Backup(STAMP, {}, "")]), f"h: rollback: backups/{STAMP}: it holds no spec.json"),
    (History([], [backup(make_spec(service={"unit": "other"}))]),
     f"h: rollback: backups/{STAMP}: it is of other.service, not of the declared sglang.service"),
])
def test_a_rollback_with_nothing_fit_to_put_back_is_refused(checking, history, reason):
    pf, row, queued, _, _ = checking(converged(SPEC), override={"sglang_fleet_rollback": STAMP}, history=history)
    assert pf is None and row.verdict == "REFUSED" and row.reasons[0].startswith(reason), row.reasons


BY_BRANCH = make_spec(speculative={"algorithm": "DFLASH", "draft_model": {"repo": "z-lab/d", "branch": "main"}})
COMMIT = "e" * 40


def test_a_branch_is_pinned_to_the_commit_its_endpoint_names_before_the_host_is_read(checking, monkeypatch):
    monkeypatch.setattr("fleet.weights.hub.http_get", lambda url, token: (200, ('{"sha": "%s"}' % COMMIT).encode()))
    pinned = BY_BRANCH.with_commits({("z-lab/d", "main"): COMMIT})
    facts = converged(pinned)
    facts = replace(facts, models={**facts.models, pinned.draft_path: facts.models[DRAFT]})
    pf, row, _, logged, asked = checking(facts, data=data_of(BY_BRANCH))
    assert pf is not None, row.reasons
    assert pf.spec == pinned and asked[0][1]["models"] == [pinned.model_paths, list(pinned.hub_models)]
    assert f"z-lab/d: branch main is commit {COMMIT} (this run's, on every host)" in logged
    assert row.verdict == "OK"


def test_a_branch_without_a_commit_refuses_the_host_before_it_is_read(checking, monkeypatch):
    monkeypatch.setattr("fleet.weights.hub.http_get", lambda url, token: (404, b"Repository not found"))
    pf, row, queued, _, asked = checking(converged(SPEC), data=data_of(BY_BRANCH))
    assert pf is None and row.verdict == "REFUSED" and asked == []
    assert row.reasons == ["h: z-lab/d: branch main: expected its commit from https://huggingface.co, found HTTP 404: "
                           "'Repository not found'; nothing was touched"]


def test_an_overlay_is_planned_on_the_declared_spec_with_its_knobs_and_always_restarted(checking):
    asked = {"overlay": {"block_size": 8}, "says": "a make tune candidate (block size 8)", "stay_out": True,
             "keep_backup": False, "record": "tune"}
    pf, row, queued, _, _ = checking(converged(SPEC), override={intent.INTENT_DATA: asked})
    assert pf.spec.speculative.block_size == 8 and pf.plan.intent == intent.requested({intent.INTENT_DATA: asked})
    assert pf.plan.restart and queued == [] and "a make tune candidate (block size 8)" in row.action


@pytest.mark.parametrize("override, reason", [
    ({intent.INTENT_DATA: "8"}, "h: --data sglang_fleet_run: expected a JSON object of overlay, says"),
    ({intent.INTENT_DATA: {"overlay": {"block_size": 17}}},
     "h: the overlay: block_size: Input should be less than or equal to 16"),
    ({intent.INTENT_DATA: {"overlay": {"tree_budget": 8}}}, "h: speculative.algorithm DFLASH has no tree_budget"),
    ({intent.INTENT_DATA: {"overlay": {"block_size": 8}}, "sglang_fleet_rollback": STAMP},
     "h: a rollback takes no overlay"),
])
def test_an_intent_that_cannot_be_is_refused_before_the_host_is_read(checking, override, reason):
    pf, row, queued, _, asked = checking(converged(SPEC), override=override)
    assert pf is None and row.verdict == "REFUSED" and asked == [] and len(queued) == 1
    assert row.reasons[0].startswith(reason) and row.reasons[0].endswith("nothing was touched"), row.reasons
