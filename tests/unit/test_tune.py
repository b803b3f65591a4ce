"""make tune: fleet/tune/search.py's decisions (candidates, refusals, the figures of a level, the winners, the
record, the group_data change), the tune section of a class spec, and what the deploy does for a tune
(the plan of a candidate and of the return, the tune mark read, written and removed on a real shell,
the backup set dropped, the replica kept out of its gateway, the record's kind); then ops/tune.py's
runbook over fakes: its deploys, its measurements, the host's status and the gateway are scripted, no
host or pyinfra run is contacted (the one real child is a stand-in pyinfra script)."""

from __future__ import annotations

import argparse
import base64
import ast
import builtins
import hashlib
import io
import json
import shlex
import shutil
import subprocess
import sys
import types
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import builders
from fleet.core import bounds
from builders import KEYED, converged, secrets_of
from test_rolling import Through  # the gateway scripted, as test_rolling.py scripts it
from test_rollout import Host as Root  # a tmp root the rollout's commands run in, as test_rollout.py's

from facts.deploy import DeployedFiles
from fleet.rollout import commands as rollout, intent, lock
from fleet.tune import measure, search as tune
from fleet.rollout.activation import Outcome
from fleet.gateway.models import GatewayRolling
from fleet.gateway.smg import Replica
from fleet.spec.load import load_class_specs, load_gateways, read_group_file, validate_class
from fleet.rollout.history import PREVIOUS, Backup, History, Record, before_last_change, choose_backup, spec_sha256
from fleet.rollout.parse import parse_deploy_state
from fleet.rollout.plan import declared_files, plan
from fleet.turns.rolling import through_gateway
from fleet.spec import TUNE_BLOCK_SIZES, ClassSpec, Tune
from fleet.rollout.status import DRIFT, OK, HostStatus, judge
from fleet.tune.search import Candidate, Level, Result
from ops import tune as ops_tune

REPO = Path(__file__).resolve().parents[2]
TUNER = ops_tune.Tuner  # some tests stand in for ops.tune.Tuner; the class itself is this
STAMP, NOW, BY = "20261130T120000Z", 1_796_040_000, "alice@laptop"
DRAFT = "/root/models/Qwen3.6-27B-DFlash"


def make_spec(service=None, **fields) -> ClassSpec:
    """builders' spec, bound where the controller reaches it (a loopback class is refused)."""
    return builders.make_spec(service={"host": "0.0.0.0", **(service or {})}, **fields)


SPEC = make_spec()


def dflash(block_size=16, **tune_section) -> ClassSpec:
    spec = make_spec(speculative={"algorithm": "DFLASH", "draft_model_path": DRAFT, "block_size": block_size})
    return spec.model_copy(update={"tune": Tune.model_validate(tune_section)}) if tune_section else spec


def ddtree(block_size=16, tree_budget=64, **tune_section) -> ClassSpec:
    spec = make_spec(speculative={"algorithm": "DDTREE", "draft_model_path": DRAFT, "block_size": block_size,
                                  "tree_budget": tree_budget})
    return spec.model_copy(update={"tune": Tune.model_validate(tune_section)}) if tune_section else spec


EAGLE = make_spec(speculative={"algorithm": "EAGLE3", "draft_model_path": DRAFT, "num_steps": 3, "topk": 4,
                               "num_draft_tokens": 8})


def lv(concurrency=1, tps=100.0, failed=0, requests=8, p99=1.0, accept=3.0) -> Level:
    return Level(concurrency, requests, failed, int(tps), 1.0, tps, 0.5, 0.9, p99, 0.05, accept, tps, [])


def res(block_size, *levels, budget=None, deployed=True, reason="") -> Result:
    return Result(Candidate(block_size, budget), deployed, reason, list(levels))


# --- Candidate and the run's --data ---------------------------------------------------------------

def test_a_candidate_describes_itself_and_names_only_its_knobs():
    assert Candidate(8).describe() == "block size 8" and Candidate(8).to_json() == {"block_size": 8}
    assert Candidate(8, 32).describe() == "block size 8, tree budget 32"
    assert Candidate(8, 32).to_json() == {"block_size": 8, "tree_budget": 32}


# --- candidate_spec ----------------------------------------------------------------------------

def test_a_candidates_spec_is_the_declared_one_with_its_knobs():
    keyed = make_spec(service=KEYED, speculative={"algorithm": "DFLASH", "draft_model_path": DRAFT,
                                                   "block_size": 16})
    s = tune.candidate_spec(keyed, Candidate(4))
    assert s.speculative.block_size == 4 and s.speculative.draft_model_path == DRAFT
    assert s.model_dump(exclude={"speculative"}) == keyed.model_dump(exclude={"speculative"})
    assert keyed.speculative.block_size == 16  # the declared spec is left as it was
    d = tune.candidate_spec(ddtree(), Candidate(8, 128))
    assert (d.speculative.algorithm, d.speculative.block_size, d.speculative.tree_budget) == ("DDTREE", 8, 128)


def test_a_candidates_spec_keeps_models_by_repository_an_engine_and_the_hub():
    rev = "a" * 40
    data = SPEC.model_dump(mode="json")
    for key in ("launcher", "model_path"):
        data["service"].pop(key)
    data["service"]["model"] = {"repo": "z-lab/Qwen3.6-27B", "revision": rev}
    data["speculative"] = {"algorithm": "DFLASH", "draft_model": {"repo": "z-lab/d", "revision": rev}}
    spec = ClassSpec.model_validate({**data, "engine": {"sglang": "sglang==0.5.23"},
                                     "hub": {"models_dir": "/data/models", "token": {"env": "HF_TOKEN"}}})
    s = tune.candidate_spec(spec, Candidate(8))
    assert s.speculative.block_size == 8 and s.speculative.draft_model == spec.speculative.draft_model
    assert s.model_dump(exclude={"speculative"}) == spec.model_dump(exclude={"speculative"})


def test_a_candidates_spec_of_every_shipped_dflash_class_validates():
    for group, spec in load_class_specs(REPO / "group_data").items():
        if spec.speculative.algorithm == "DFLASH":
            assert tune.candidate_spec(spec, Candidate(1)).speculative.block_size == 1, group


@pytest.mark.parametrize("spec, c, message", [
    (EAGLE, Candidate(8), "speculative.algorithm EAGLE3 has no block size to tune"),
    (SPEC, Candidate(8, 32), "a tree budget is tuned with DDTREE only, and always with it"),
    (ddtree(), Candidate(8), "a tree budget is tuned with DDTREE only, and always with it"),
])
def test_a_candidate_the_algorithm_has_no_knob_for_is_refused(spec, c, message):
    with pytest.raises(ValueError, match=message):
        tune.candidate_spec(spec, c)


@pytest.mark.parametrize("c", [Candidate(0), Candidate(17)])
def test_a_candidate_out_of_sglangs_bounds_is_refused_by_the_spec(c):
    with pytest.raises(ValueError, match="block_size"):  # pydantic's ValidationError is a ValueError
        tune.candidate_spec(SPEC, c)


# --- candidates ---------------------------------------------------------------------------------

@pytest.mark.parametrize("declared, sizes", [
    (16, [4, 8, 12, 16]), (12, [4, 8, 12]), (10, [4, 8, 10]), (6, [4, 6]), (4, [4]), (2, [2]), (1, [1]),
])
def test_the_default_candidates_stop_at_the_declared_block_size_and_include_it(declared, sizes):
    assert TUNE_BLOCK_SIZES == (4, 8, 12, 16)
    cands, problems = tune.candidates(dflash(declared))
    assert [c.block_size for c in cands] == sizes and problems == []
    assert all(c.tree_budget is None for c in cands)


def test_the_command_line_goes_over_tune_block_sizes_which_goes_over_the_default():
    spec = dflash(16, block_sizes=[2, 3])
    assert [c.block_size for c in tune.candidates(spec)[0]] == [2, 3]
    assert tune.candidates(spec, [9, 5, 9])[0] == [Candidate(5), Candidate(9)]  # sorted, each once
    assert [c.block_size for c in tune.candidates(spec, [])[0]] == [2, 3]  # an empty list is none given


def test_block_sizes_out_of_bounds_are_problems_each_named():
    _, problems = tune.candidates(SPEC, [0, 8, 17])
    assert problems == ["block size 0: expected 1..16 (SGLang's bound), found 0",
                        "block size 17: expected 1..16 (SGLang's bound), found 17"]


def test_ddtree_candidates_are_each_block_size_with_each_tree_budget():
    # half the declared budget, it and twice it, within SGLang's bounds
    assert tune.candidates(ddtree(8, 64))[0] == [Candidate(b, g) for b in (4, 8) for g in (32, 64, 128)]
    assert [c.tree_budget for c in tune.candidates(ddtree(4, 1))[0]] == [1, 2]
    assert [c.tree_budget for c in tune.candidates(ddtree(4, 1024))[0]] == [512, 1024]
    spec = ddtree(8, 64, tree_budgets=[32, 16])
    assert tune.candidates(spec)[0] == [Candidate(4, 16), Candidate(4, 32), Candidate(8, 16), Candidate(8, 32)]
    assert tune.candidates(spec, [8], [128, 128])[0] == [Candidate(8, 128)]
    _, problems = tune.candidates(spec, [8], [0, 2000])
    assert problems == ["tree budget 0: expected 1..1024 (SGLang's bound), found 0",
                        "tree budget 2000: expected 1..1024 (SGLang's bound), found 2000"]


def test_tree_budgets_for_linear_dflash_are_a_problem():
    cands, problems = tune.candidates(SPEC, [8], [32])
    assert cands == [Candidate(8)] and problems == ["tree budgets: DFLASH has none (DDTREE only)"]


def test_an_algorithm_without_a_block_size_has_nothing_to_tune():
    assert tune.candidates(EAGLE) == ([], ["speculative.algorithm: expected DFLASH or DDTREE (the algorithms with "
                                           "a block size), found EAGLE3: nothing to tune"])
    assert tune.candidates(make_spec(speculative={"algorithm": "none"}))[0] == []


# --- refusals -----------------------------------------------------------------------------------

def test_a_tunable_class_has_no_refusal_with_or_without_a_gateway():
    assert tune.refusals("h1", SPEC, [], None, 0) == []
    assert tune.refusals("h1", SPEC, [], "gw", 2) == []


def test_a_class_bound_to_loopback_is_refused_before_any_restart():
    (out,) = tune.refusals("h1", builders.SPEC, [], None, 0)
    assert out.startswith("h1: tune: service.host: expected an address the controller reaches") and "127.0.0.1" in out


def test_each_refusal_names_the_host():
    no_metrics = make_spec(service={"enable_metrics": False})
    out = tune.refusals("h1", no_metrics, ["block size 0: expected 1..16"], "gw", 1)
    assert out == [
        "h1: tune: block size 0: expected 1..16",
        "h1: tune: service.enable_metrics: expected true (the accept length and generation throughput come "
        "from SGLang's /metrics), found false",
        "h1: tune: its class is behind gateway gw with 1 replica: expected at least 2 (a peer serves while this "
        "one is tuned)",
    ]


# --- the tune section of a class spec -----------------------------------------------------------

def test_the_tune_section_defaults():
    t = ClassSpec.model_fields["tune"].default_factory()
    assert SPEC.tune == t == Tune()
    assert (t.block_sizes, t.tree_budgets, t.concurrency, t.rounds, t.min_requests, t.max_tokens, t.prompts,
            t.level_timeout_s, t.objective_concurrency, t.p99_latency_s) == \
        (None, None, [1, 8, 32], 4, 8, 256, None, 600, None, None)
    assert t.objective == 32 and t.requests(1) == 8 and t.requests(8) == 32 and t.requests(32) == 128
    assert Tune(concurrency=[4, 2], objective_concurrency=2).objective == 2
    assert Tune(rounds=1, min_requests=1).requests(3) == 3


def test_the_tune_sections_lists_are_sorted_and_each_value_once():
    t = Tune(block_sizes=[8, 4], tree_budgets=[64, 32], concurrency=[32, 1])
    assert (t.block_sizes, t.tree_budgets, t.concurrency) == ([4, 8], [32, 64], [1, 32])


@pytest.mark.parametrize("section, where", [
    ({"block_sizes": [4, 4]}, "each value once"),
    ({"block_sizes": [0]}, "block_sizes"),
    ({"block_sizes": [17]}, "block_sizes"),
    ({"block_sizes": []}, "block_sizes"),
    ({"block_sizes": [True]}, "block_sizes"),  # strict: a bool is no block size
    ({"block_sizes": [4.0]}, "block_sizes"),
    ({"tree_budgets": [1025]}, "tree_budgets"),
    ({"tree_budgets": [32, 32]}, "each value once"),
    ({"concurrency": []}, "concurrency"),
    ({"concurrency": list(range(1, 10))}, "concurrency"),  # at most 8
    ({"concurrency": [0]}, "concurrency"),
    ({"concurrency": [1025]}, "concurrency"),
    ({"rounds": 0}, "rounds"),
    ({"rounds": 101}, "rounds"),
    ({"min_requests": 0}, "min_requests"),
    ({"max_tokens": 8193}, "max_tokens"),
    ({"prompts": []}, "prompts"),
    ({"prompts": [""]}, "a prompt with something to answer"),
    ({"prompts": ["hi", "   "]}, "a prompt with something to answer"),
    ({"block_sizes": [1e20]}, "block_sizes"),
    ({"block_sizes": [10 ** 20]}, "block_sizes"),
    ({"level_timeout_s": 0.5}, "level_timeout_s"),
    ({"level_timeout_s": float("inf")}, "level_timeout_s"),
    ({"p99_latency_s": 0}, "p99_latency_s"),
    ({"objective_concurrency": 4}, "objective_concurrency 4 is not one of concurrency [1, 8, 32]"),
    ({"blocksizes": [4]}, "blocksizes"),  # a typo is an error, as everywhere in a spec
])
def test_the_tune_section_refuses_what_is_out_of_its_bounds(section, where):
    with pytest.raises(ValueError, match=where.replace("[", r"\[").replace("]", r"\]")):
        Tune.model_validate(section)


def test_a_class_file_declares_its_tune_section():
    data = read_group_file(REPO / "group_data/pro6000.py")
    spec = validate_class("pro6000.py", {**data, "tune": {"block_sizes": [8, 16], "concurrency": [1, 4]}})
    assert spec.tune.block_sizes == [8, 16] and spec.tune.objective == 4
    with pytest.raises(Exception, match="tune"):
        validate_class("pro6000.py", {**data, "tune": {"rounds": 0}})


def test_the_tune_settings_change_no_hosts_spec_json_nor_its_spec_hash():
    tuned = dflash(16, block_sizes=[4], concurrency=[2], max_tokens=64)
    assert rollout.spec_record(tuned, "pro6000") == rollout.spec_record(SPEC, "pro6000")
    assert "tune" not in json.loads(rollout.spec_record(tuned, "pro6000"))["spec"]
    assert spec_sha256(tuned, "pro6000") == spec_sha256(SPEC, "pro6000")
    assert {f.path: f.content for f in declared_files(tuned, "pro6000", converged(), secrets_of(tuned))} == \
        {f.path: f.content for f in declared_files(SPEC, "pro6000", converged(), secrets_of(SPEC))}
    # ... while a candidate's spec is another spec
    assert spec_sha256(tune.candidate_spec(SPEC, Candidate(8)), "pro6000") != spec_sha256(SPEC, "pro6000")
    assert SPEC.tune_file == "/var/lib/sglang-fleet/sglang/tune.json"


# --- the workload -------------------------------------------------------------------------------

def test_the_workload_is_fixed_and_its_hash_follows_it():
    w = tune.workload(Tune())
    assert w == {"prompts": list(tune.PROMPTS), "max_tokens": 256, "rounds": 4, "min_requests": 8,
                 "concurrency": [1, 8, 32], "stream": True}
    assert len(set(tune.PROMPTS)) == len(tune.PROMPTS) >= 4
    h = tune.workload_sha256(Tune())
    assert h == hashlib.sha256(json.dumps(w, sort_keys=True).encode()).hexdigest() == tune.workload_sha256(Tune())
    assert tune.workload(Tune(prompts=["hi"]))["prompts"] == ["hi"]
    others = [Tune(prompts=["hi"]), Tune(max_tokens=64), Tune(rounds=2), Tune(min_requests=1), Tune(concurrency=[1])]
    assert len({h, *map(tune.workload_sha256, others)}) == 6
    # what only picks the winner is no part of the workload
    assert tune.workload_sha256(Tune(p99_latency_s=2, objective_concurrency=8, block_sizes=[4])) == h


# --- one level's figures ------------------------------------------------------------------------

@pytest.mark.parametrize("values, p, want", [
    ([], 50, None), ([3.0], 50, 3.0), ([3.0], 99, 3.0), ([4.0, 1.0, 3.0, 2.0], 50, 2.0),
    ([4.0, 1.0, 3.0, 2.0], 90, 4.0), (list(map(float, range(1, 101))), 99, 99.0),
    (list(map(float, range(1, 101))), 50, 50.0), ([1.0, 2.0], 0, 1.0),
])
def test_percentile_is_the_nearest_rank(values, p, want):
    assert tune.percentile(values, p) == want


BEFORE = {"sglang:generation_tokens_total": 1000.0, "sglang:spec_verify_calls_total": 100.0}


def test_a_level_has_the_clients_figures_and_sglangs():
    results = [(1.0, True, 100, 0.1, ""), (2.0, True, 300, None, ""), (9.0, False, 0, None, "HTTP 500"),
               (4.0, True, 200, 0.3, "")]
    after = {"sglang:generation_tokens_total": 1600.0, "sglang:spec_verify_calls_total": 250.0,
             "sglang:spec_accept_length": 9.9, "sglang:gen_throughput": 123.4}
    got = tune.level(8, results, 2.0, BEFORE, after)
    assert got == Level(concurrency=8, requests=4, failed=1, output_tokens=600, wall_s=2.0, tokens_per_s=300.0,
                        latency_p50_s=2.0, latency_p90_s=4.0, latency_p99_s=4.0, ttft_p50_s=0.1,
                        accept_length=4.0, gen_throughput=123.4, errors=["HTTP 500"])


def test_a_levels_accept_length_falls_back_to_the_gauge_when_no_verify_step_was_counted():
    after = {**BEFORE, "sglang:spec_accept_length": 3.5}
    assert tune.level(1, [(1.0, True, 10, 0.1, "")], 1.0, BEFORE, after).accept_length == 3.5
    assert tune.level(1, [(1.0, True, 10, 0.1, "")], 1.0, {}, {}).accept_length is None  # no /metrics at all
    # counters that went backwards (a restart in between): no figure from them
    assert tune.level(1, [], 1.0, BEFORE, {"sglang:spec_verify_calls_total": 50.0}).accept_length is None


def test_a_level_of_failures_only_has_no_latency_and_its_first_three_distinct_errors():
    results = [(0.1, False, 0, None, e) for e in ("a", "b", "a", "c", "d")]
    got = tune.level(2, results, 0.0, {}, {})
    assert (got.requests, got.failed, got.output_tokens, got.tokens_per_s) == (5, 5, 0, 0.0)  # no wall: no rate
    assert (got.latency_p50_s, got.latency_p99_s, got.ttft_p50_s, got.gen_throughput) == (None, None, None, None)
    assert got.errors == ["a", "b", "c"]
    assert tune.level(2, [], 1.23456, {}, {}).wall_s == 1.235


# --- the winners --------------------------------------------------------------------------------

def test_result_at_finds_its_level():
    r = res(8, lv(1), lv(8))
    assert r.at(8).concurrency == 8 and r.at(32) is None


def test_the_winner_has_the_most_tokens_per_second_and_no_failed_request():
    results = [res(4, lv(8, 100)), res(8, lv(8, 300, failed=1)), res(12, lv(8, 200)), res(16, lv(1, 999))]
    assert tune.winner(results, 8) == Candidate(12)  # 8 was faster but failed a request; 16 was not measured at 8
    assert tune.winner(results, 1) == Candidate(16)
    assert tune.winner(results, 32) is None
    assert tune.winner([], 8) is None


def test_a_candidate_not_deployed_or_measured_on_no_request_cannot_win():
    assert tune.winner([res(4, lv(8, 100), deployed=False)], 8) is None
    assert tune.winner([res(4, lv(8, 100, requests=0))], 8) is None
    assert tune.winner([res(4, deployed=False, reason="the deploy failed")], 8) is None


def test_a_latency_bound_passes_over_the_slow_candidates():
    results = [res(4, lv(8, 100, p99=1.0)), res(8, lv(8, 300, p99=5.0)), res(12, lv(8, 200, p99=None))]
    assert tune.winner(results, 8) == Candidate(8)
    assert tune.winner(results, 8, p99_bound=2.0) == Candidate(4)
    assert tune.winner(results, 8, p99_bound=5.0) == Candidate(8)  # at the bound is within it
    assert tune.winner(results, 8, p99_bound=0.5) is None


def test_a_tie_goes_to_the_smaller_block_size_then_the_smaller_tree_budget():
    assert tune.winner([res(16, lv(8, 100)), res(4, lv(8, 100)), res(8, lv(8, 100))], 8) == Candidate(4)
    tied = [res(8, lv(8, 100), budget=64), res(8, lv(8, 100), budget=32), res(16, lv(8, 100), budget=16)]
    assert tune.winner(tied, 8) == Candidate(8, 32)


def test_the_change_names_only_the_keys_the_winner_changes():
    assert tune.change(SPEC, Candidate(16)) == {}
    assert tune.change(SPEC, Candidate(8)) == {"block_size": 8}
    assert tune.change(ddtree(8, 64), Candidate(8, 32)) == {"tree_budget": 32}
    assert tune.change(ddtree(8, 64), Candidate(4, 64)) == {"block_size": 4}
    assert tune.change(ddtree(8, 64), Candidate(4, 32)) == {"block_size": 4, "tree_budget": 32}
    assert tune.describe_change(SPEC, {}) == "none: the class declares the winner already"
    assert tune.describe_change(SPEC, {"block_size": 8}) == "speculative.block_size: 16 -> 8"
    assert tune.describe_change(ddtree(8, 64), {"block_size": 4, "tree_budget": 32}) == \
        "speculative.block_size: 8 -> 4; speculative.tree_budget: 64 -> 32"


# --- the record ---------------------------------------------------------------------------------

def record_of(spec, results, **kw):
    return tune.record(**{"host": "h1", "group": "pro6000", "spec": spec, "gpus": "1x PRO 6000", "engine": "0.5.23",
                          "weights": "-", "source": "SGLang on h1's GPUs", "results": results, "started": 10,
                          "ended": 20, "by": BY, "finished": True, **kw})


def test_the_record_has_every_figure_the_winners_and_the_change():
    spec = dflash(16, concurrency=[1, 8])
    results = [res(4, lv(1, 50), lv(8, 100)), res(8, lv(1, 60), lv(8, 300, failed=1)),
               res(12, lv(1, 40), lv(8, 200)), res(16, deployed=False, reason="the deploy failed (exit 1): x")]
    rec = record_of(spec, results)
    assert json.loads(json.dumps(rec)) == rec  # plain JSON
    assert {k: rec[k] for k in ("version", "class", "host", "gpus", "engine", "target", "draft", "weights",
                                "algorithm", "declared", "figures_from", "started", "ended", "by", "finished")} == {
        "version": 1, "class": "pro6000", "host": "h1", "gpus": "1x PRO 6000", "engine": "0.5.23",
        "target": spec.target_path, "draft": spec.draft_path, "weights": "-", "algorithm": "DFLASH",
        "declared": {"block_size": 16}, "figures_from": "SGLang on h1's GPUs", "started": 10, "ended": 20,
        "by": BY, "finished": True}
    assert rec["workload"] == tune.workload(spec.tune) and rec["workload_sha256"] == tune.workload_sha256(spec.tune)
    assert rec["objective"] == {"concurrency": 8, "p99_latency_s": None}
    assert rec["candidates"][0] == {"candidate": {"block_size": 4}, "deployed": True, "reason": "",
                                    "levels": [asdict(lv(1, 50)), asdict(lv(8, 100))]}
    assert rec["candidates"][3] == {"candidate": {"block_size": 16}, "deployed": False,
                                    "reason": "the deploy failed (exit 1): x", "levels": []}
    assert rec["winner_per_concurrency"] == {"1": {"block_size": 8}, "8": {"block_size": 12}}
    assert rec["winner"] == {"block_size": 12} and rec["change"] == {"block_size": 12}


def test_the_records_overall_winner_is_picked_at_the_objective_within_the_latency_bound():
    spec = dflash(16, concurrency=[1, 8], objective_concurrency=1, p99_latency_s=2)
    results = [res(4, lv(1, 50, p99=1.0), lv(8, 100)), res(8, lv(1, 90, p99=3.0), lv(8, 50))]
    rec = record_of(spec, results)
    assert rec["objective"] == {"concurrency": 1, "p99_latency_s": 2}
    assert rec["winner_per_concurrency"] == {"1": {"block_size": 8}, "8": {"block_size": 4}}  # no bound per level
    assert rec["winner"] == {"block_size": 4} and rec["change"] == {"block_size": 4}


def test_a_record_without_a_winner_changes_nothing():
    rec = record_of(SPEC, [res(8, lv(32, 100, failed=2))], finished=False)
    assert rec["winner"] is None and rec["change"] == {} and rec["finished"] is False
    assert rec["winner_per_concurrency"] == {"1": None, "8": None, "32": None}
    d = record_of(ddtree(8, 64), [res(8, lv(32, 100), budget=32)])
    assert d["declared"] == {"block_size": 8, "tree_budget": 64} and d["algorithm"] == "DDTREE"
    assert d["winner"] == {"block_size": 8, "tree_budget": 32} and d["change"] == {"tree_budget": 32}


# --- the group_data change ----------------------------------------------------------------------

def names_in(text: str) -> dict:
    ns: dict = {}
    exec(compile(text, "<class file>", "exec"), ns)  # group_data files are plain Python, run as pyinfra does
    return ns


def test_apply_change_replaces_the_literal_in_place_and_keeps_everything_else():
    text = (REPO / "group_data/pro6000.py").read_text()
    out = tune.apply_change(text, {"block_size": 8})
    assert out == text.replace('"block_size": 16,', '"block_size": 8,')
    assert names_in(out)["speculative"]["block_size"] == 8
    assert tune.apply_change(text, {}) is text


def test_apply_change_replaces_two_values_on_one_line_and_after_non_ascii_text():
    text = ('# Größe\nspeculative = {"algorithm": "DDTREE", "note": "für Bäume", "block_size": 16, '
            '"tree_budget": 512}  # é\n')
    out = tune.apply_change(text, {"block_size": 4, "tree_budget": 32})
    assert out == text.replace("16", "4").replace("512", "32")
    assert names_in(out)["speculative"] == {"algorithm": "DDTREE", "note": "für Bäume", "block_size": 4,
                                            "tree_budget": 32}


def test_apply_change_overrides_a_key_not_written_as_a_literal_with_one_line_after_it():
    text = 'BS = 16\nspeculative = {\n    "algorithm": "DDTREE",\n    "block_size": BS,\n    "tree_budget": 64,\n}\n\n\n'
    out = tune.apply_change(text, {"block_size": 8, "tree_budget": 32})
    assert out == ('BS = 16\nspeculative = {\n    "algorithm": "DDTREE",\n    "block_size": BS,\n    "tree_budget": 32,\n}'
                   '\n\n# make tune --apply\nspeculative = {**speculative, "block_size": 8}\n')
    assert names_in(out)["speculative"] == {"algorithm": "DDTREE", "block_size": 8, "tree_budget": 32}


@pytest.mark.parametrize("text", [
    'speculative = {"algorithm": "DFLASH"}\n',  # the default block size: not written
    'base = {"algorithm": "DFLASH", "block_size": 16}\nspeculative = dict(base)\n',  # not a dict literal
    'speculative = {"algorithm": "DFLASH", "block_size": 16.0}\n',  # not an int literal
    'speculative = {"algorithm": "DFLASH", **{"block_size": 16}}\n',
])
def test_apply_change_overrides_whatever_it_cannot_rewrite(text):
    out = tune.apply_change(text, {"block_size": 8})
    assert out.startswith(text) and out.endswith('\n\n# make tune --apply\nspeculative = {**speculative, "block_size": 8}\n')
    assert names_in(out)["speculative"]["block_size"] == 8


def test_apply_change_rewrites_the_last_top_level_speculative():
    text = ('speculative = {"algorithm": "DFLASH", "block_size": 16}\n'
            'speculative = {"algorithm": "DFLASH", "block_size": 12}\n')
    out = tune.apply_change(text, {"block_size": 4})
    assert out.splitlines() == ['speculative = {"algorithm": "DFLASH", "block_size": 16}',
                                'speculative = {"algorithm": "DFLASH", "block_size": 4}']


def test_apply_change_refuses_a_file_without_speculative():
    with pytest.raises(ValueError, match=r"it declares no `speculative = \{\.\.\.\}`"):
        tune.apply_change('service = {"port": 30000}\nspeculative_note = 1\n', {"block_size": 8})
    with pytest.raises(SyntaxError):
        tune.apply_change("speculative = {", {"block_size": 8})


def test_apply_change_wins_over_a_later_item_assignment():
    text = 'speculative = {"algorithm": "DFLASH", "block_size": 12}\nspeculative["block_size"] = 16\n'
    assert names_in(tune.apply_change(text, {"block_size": 8}))["speculative"]["block_size"] == 8


# --- the tune mark --------------------------------------------------------------------------------

def test_the_mark_is_read_back_and_an_unreadable_one_is_still_a_mark():
    m = tune.mark(NOW, BY, Candidate(8, 32).describe())
    assert m == {"since": NOW, "by": BY, "candidate": "block size 8, tree budget 32", "record": "tune"}
    got = tune.read_mark(json.dumps(m))
    assert got.since == NOW and BY in got.by and "block size 8, tree budget 32" in got.candidate
    assert tune.read_mark(None) is None
    for text in ("", "{", "[]", "5", '{"since": "x", "by": "a", "candidate": "c"}', '{"since": 1}',
                 '{"since": null, "by": "a", "candidate": "c"}'):
        m = tune.read_mark(text)
        assert (m.since, m.by) == (0, "?") and m.candidate.startswith("unreadable tune.json: "), text
    long = tune.read_mark(json.dumps({"since": 1, "by": "x" * 5000, "candidate": "c"}))
    assert len(long.by) < 300


# --- the plan of a tune's runs --------------------------------------------------------------------

def asked(c: Candidate | None) -> intent.Intent:
    """The intent of a tune's run of `c` (ops.tune.Tuner.intent's overlay and words)."""
    return intent.Intent(c.to_json(), f"a make tune candidate ({c.describe()})", stay_out=True, keep_backup=False,
                         record="tune") if c else intent.PLAIN


def planned(spec, facts, candidate=None, interrupted=None):
    return plan(spec, declared_files(spec, "pro6000", facts, secrets_of(spec)), facts, interrupted, STAMP, NOW, BY,
                asked(candidate))


def marked(facts, text):
    return replace(facts, deployed=replace(facts.deployed, tune=text))


MARK = json.dumps(tune.mark(NOW - 3600, BY, Candidate(8).describe()))


def test_a_candidate_is_always_measured_on_a_fresh_server():
    c = Candidate(8)
    p = planned(tune.candidate_spec(SPEC, c), converged(SPEC), c)
    assert p.intent == asked(c) and p.overlaid is None and p.restart and p.wait and p.backup
    assert p.action().startswith("a make tune candidate (block size 8), update ") and p.action().endswith(", restart")
    # the declared block size as a candidate: no file changes, restarted all the same
    same = planned(SPEC, converged(SPEC), Candidate(16))
    assert same.swap == () and same.restart and same.has_work and not same.backup
    assert same.action() == "a make tune candidate (block size 16), restart" and same.why == ()
    assert not planned(SPEC, converged(SPEC)).has_work  # no candidate: nothing to do


def test_a_host_a_tune_left_is_returned_by_the_next_run_that_is_no_candidate():
    p = planned(SPEC, marked(converged(SPEC), MARK))
    assert not p.intent.overlay and p.overlaid.since == NOW - 3600 and "block size 8" in p.overlaid.candidate
    assert p.intent == intent.Intent(keep_backup=False, record="tune")  # its set and record kept as the tune's
    assert p.restart and p.wait and p.has_work
    assert p.action() == "return from make tune, restart"
    assert len(p.why) == 1 and p.why[0].startswith("make tune left it serving an overlay (")
    assert "block size 8" in p.why[0] and "since 2026-11-30 11:00:00 UTC" in p.why[0]
    assert p.why[0].endswith("): restarted")
    # it serves a candidate's files: the return puts the declared ones back
    on_candidate = marked(converged(tune.candidate_spec(SPEC, Candidate(8))), MARK)
    back = planned(SPEC, on_candidate)
    assert back.backup and back.swap and back.action().startswith("return from make tune, update ")


def test_an_unreadable_mark_is_returned_all_the_same():
    p = planned(SPEC, marked(converged(SPEC), "{not json"))
    assert p.overlaid.candidate.startswith("unreadable tune.json: not valid JSON") and p.restart
    assert "unreadable tune.json" in p.why[0] and p.action() == "return from make tune, restart"


def test_the_next_candidate_on_a_marked_host_is_a_candidate_run_not_a_return():
    c = Candidate(4)
    p = planned(tune.candidate_spec(SPEC, c), marked(converged(tune.candidate_spec(SPEC, Candidate(8))), MARK), c)
    assert p.intent == asked(c) and p.overlaid is not None
    assert p.action().startswith("a make tune candidate (block size 4)") and "return from make tune" not in p.action()
    assert not any("make tune left it" in w for w in p.why)


def test_status_says_a_host_is_left_on_a_candidate():
    r = judge("h1", "pro6000", SPEC, marked(converged(SPEC), MARK), History(), "", secrets_of(SPEC), "", NOW)
    assert r.verdict == DRIFT and "block size 8" in r.tuning and "2026-11-30" in r.tuning and BY in r.tuning
    assert r.drift == "return from make tune, restart"
    assert judge("h1", "pro6000", SPEC, converged(SPEC), History(), "", secrets_of(SPEC), "", NOW).tuning == ""


# --- the mark as the host's facts read it -----------------------------------------------------------

@pytest.fixture
def bin_dir(tmp_path):
    d = tmp_path / "bin"
    d.mkdir()
    for tool in ("cat", "sha1sum", "cut", "stat", "head", "base64", "tr", "sed"):
        if Path(f"/usr/bin/{tool}").exists():
            (d / tool).symlink_to(f"/usr/bin/{tool}")
    return d


def deployed_state(tmp_path, bin_dir, **kw):
    command = DeployedFiles().command([], [], [], str(tmp_path / "lock"), str(tmp_path / "pending.json"), **kw)
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env={"PATH": str(bin_dir)})
    assert done.returncode == 0, done.stderr
    return command, DeployedFiles().process(done.stdout.splitlines())


def test_the_facts_read_the_tune_mark_only_where_it_exists(tmp_path, bin_dir):
    mark_file = tmp_path / "tune.json"
    command, state = deployed_state(tmp_path, bin_dir, tune_file=str(mark_file))
    assert state.tune is None and "@@tune" not in subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, env={"PATH": str(bin_dir)}).stdout
    mark_file.write_text(MARK + "\n")
    _, state = deployed_state(tmp_path, bin_dir, tune_file=str(mark_file))
    assert state.tune == MARK and state.pending is None
    assert tune.read_mark(state.tune).since == NOW - 3600
    mark_file.write_text("x" * 10000)  # read bounded: what is left of it is an unreadable mark
    _, state = deployed_state(tmp_path, bin_dir, tune_file=str(mark_file))
    assert state.tune == "x" * 4096 and tune.read_mark(state.tune).candidate.startswith("unreadable tune.json: ")
    # no tune file asked for (an older caller): no tune block at all
    command, state = deployed_state(tmp_path, bin_dir)
    assert "head -c 4096" not in command and state.tune is None


def test_a_path_with_a_space_is_quoted(tmp_path, bin_dir):
    d = tmp_path / "a dir"
    d.mkdir()
    (d / "tune.json").write_text("{}")
    _, state = deployed_state(tmp_path, bin_dir, tune_file=str(d / "tune.json"))
    assert state.tune == "{}"


def test_parse_deploy_state_takes_only_a_present_tune_block():
    from fleet.core.wire import block

    def text(command: str) -> list[str]:
        return subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True).stdout.splitlines()

    assert parse_deploy_state(text(block("tune", "printf '  {\"since\": 1}\\n\\n'", "present"))).tune == '{"since": 1}'
    assert parse_deploy_state(text(block("tune", "echo x", "absent"))).tune is None
    assert parse_deploy_state([]).tune is None


# --- begin writes the mark, finish drops the set and the mark (run for real) ----------------------

WHO = {"holder": BY, "pid": 4242, "since": NOW}


@pytest.fixture
def root(tmp_path) -> Root:
    return Root(tmp_path, "sh")  # pyinfra's shell (dash on Debian); bash as well where it matters


@pytest.fixture(params=["sh", "bash"])
def either_shell(tmp_path, request) -> Root:
    return Root(tmp_path, request.param)


def begin(root: Root, overlay_mark=None, stamp="s1") -> subprocess.CompletedProcess:
    files = {p: (hashlib.sha1(root.path(p).read_bytes()).hexdigest() if root.path(p).exists() else None)
             for p in rollout.watched_files(SPEC)}
    return root.run(rollout.begin_command(SPEC, WHO, lock.LockFacts(), files, stamp, {"phase": "rolling-out"}, [],
                                          overlay_mark=overlay_mark))


def begun(root: Root, stamp: str) -> None:
    """What begin left for a candidate (test_begin_writes_the_candidates_mark...): its set and its records."""
    root.write(f"{SPEC.backups_dir}/{stamp}/sglang.service", "unit\n")
    root.write(SPEC.pending_file, "{}\n")
    root.write(SPEC.tune_file, MARK + "\n")


def test_begin_writes_the_candidates_mark_with_the_pending_record(either_shell):
    root = either_shell
    root.write(SPEC.unit_file, "unit\n")
    m = tune.mark(NOW, BY, Candidate(8).describe())
    r = begin(root, overlay_mark=m)
    assert r.stdout.strip().endswith(rollout.BEGUN_MARK)
    assert json.loads(root.path(SPEC.tune_file).read_text()) == m
    assert oct(root.path(SPEC.tune_file).stat().st_mode & 0o777) == "0o600"
    assert tune.read_mark(root.path(SPEC.tune_file).read_text()).candidate.strip("'") == "block size 8"
    assert json.loads(root.path(SPEC.pending_file).read_text()) == {"phase": "rolling-out"}


def test_begin_without_a_mark_writes_none(root):
    begin(root)
    assert not root.path(SPEC.tune_file).exists() and root.path(SPEC.pending_file).exists()
    assert SPEC.tune_file not in rollout.begin_command(SPEC, WHO, lock.LockFacts(), {}, None, {}, [])


def test_finish_of_a_tunes_return_drops_its_backup_set_and_the_mark(either_shell):
    root = either_shell
    begun(root, "20261130T120000Z")
    root.path(f"{SPEC.backups_dir}/20261129T120000Z").mkdir()  # an older set: kept
    command = rollout.finish_command(SPEC, {"result": "ok", "kind": "tune"}, drop_backup="20261130T120000Z",
                                     returned=True)
    assert f"rm -rf {SPEC.backups_dir}/20261130T120000Z" in command and f"{SPEC.tune_file}" in command
    root.run(command)
    assert sorted(p.name for p in root.path(SPEC.backups_dir).iterdir()) == ["20261129T120000Z"]
    assert not root.path(SPEC.tune_file).exists() and not root.path(SPEC.pending_file).exists()
    assert [json.loads(line) for line in root.path(SPEC.records_file).read_text().splitlines()] == \
        [{"result": "ok", "kind": "tune"}]


def test_finish_of_a_candidate_drops_its_set_and_keeps_the_mark(root):
    begun(root, "s1")
    root.run(rollout.finish_command(SPEC, {"result": "ok", "kind": "tune"}, drop_backup="s1"))
    assert list(root.path(SPEC.backups_dir).iterdir()) == [] and root.path(SPEC.tune_file).exists()
    assert not root.path(SPEC.pending_file).exists()


def test_finish_of_a_plain_deploy_keeps_its_set_and_any_mark(root):
    begun(root, "s1")
    command = rollout.finish_command(SPEC, {"result": "ok"})
    assert "rm -rf" not in command and SPEC.tune_file not in command
    root.run(command)
    assert [p.name for p in root.path(SPEC.backups_dir).iterdir()] == ["s1"] and root.path(SPEC.tune_file).exists()


# --- history: a make rollback passes over the tune's runs -------------------------------------------

S1, S2, S3, S4 = (f"2026113{i}T120000Z" for i in range(4))


def rec(stamp, result="ok", kind="deploy") -> Record:
    return Record(time=0, by=BY, result=result, kind=kind, stamp=stamp)


def test_previous_passes_over_the_tunes_runs():
    sets = [Backup(s, {}, "") for s in (S1, S2, S3)]
    # S1 changed the service (its set S1), then a tune: a candidate (S2) and the return (S3), whose sets remain
    backup, _ = before_last_change(History([rec(S1), rec(S2, kind="tune"), rec(S3, kind="tune")], sets))
    assert backup.stamp == S1
    assert choose_backup(History([rec(S1), rec(S2, kind="tune")], sets), PREVIOUS)[0].stamp == S1
    backup, why = before_last_change(History([rec(S2, kind="tune"), rec(S3, kind="tune")], sets))
    assert backup is None and why.startswith("no rollout on record that succeeded left a backup set here")
    # a change after the tune is the previous one again
    assert before_last_change(History([rec(S1), rec(S2, kind="tune"), rec(S3)], sets))[0].stamp == S3


# --- the rolling turn keeps a candidate out of its gateway ------------------------------------------

ME, PEER = Replica("r1", "c", "m", "http://10.0.0.1:30000"), Replica("r2", "c", "m", "http://10.0.0.2:30000")
BOTH_READY, ME_OUT = {ME.url: "ready", PEER.url: "ready"}, {PEER.url: "ready"}


def turn(gw, verdict="OK", stay_out=True):
    return through_gateway(ME, [ME, PEER], GatewayRolling(drain_timeout_s=10, ready_timeout_s=5, poll_interval_s=1),
                           gw, lambda: Outcome(verdict), lambda why: Outcome("FAILED (service untouched)", [why]),
                           stay_out=stay_out)


@pytest.mark.parametrize("verdict", ["OK", "FAILED (rolled back)"])
def test_a_candidate_that_serves_stays_out_of_its_gateway(verdict):
    gw = Through([BOTH_READY, ME_OUT])
    out = turn(gw, verdict)
    assert out.verdict == verdict and "in" not in gw.events and gw.events.count("out") == 1
    assert "kept out of gateway gw: a make tune candidate" in gw.events


def test_a_candidate_that_does_not_serve_is_left_out_as_any_replica():
    gw = Through([BOTH_READY, ME_OUT])
    out = turn(gw, "FAILED (rollback failed)")
    assert "in" not in gw.events and "left out of gateway gw: it does not serve" in out.reasons[-1]
    assert "kept out of gateway gw: a make tune candidate" not in gw.events


def test_the_return_comes_back_into_the_gateway():
    gw = Through([ME_OUT, ME_OUT, BOTH_READY])  # the tuned replica is out when the return begins
    out = turn(gw, stay_out=False)
    assert out.verdict == "OK" and gw.events.count("in") == 1
    assert any(str(e).startswith("back in gateway gw") for e in gw.events)


# --- tasks/activate: the record's kind, what finish drops -------------------------------------------

def preflight(spec, facts, candidate=None, rollback=None):
    from tasks.preflight import Preflight

    return Preflight("pro6000", spec, facts, secrets_of(spec), planned(spec, facts, candidate), STAMP, rollback)


def finished(monkeypatch, pf, record) -> str:
    from tasks import activate
    from adapter import run as runs
    from tasks.common import Begun

    sent = []
    monkeypatch.setattr(activate, "run", lambda host, command, bound: sent.append(command) or (True, ""))
    host = SimpleNamespace(name="h", state=SimpleNamespace())
    runs.of(host.state).begun["h"] = Begun(pf)
    activate.HostSteps(host, runs.of(host.state).begun["h"]).finish(record)
    assert "h" not in runs.of(host.state).begun
    return sent[0]


C8 = Candidate(8)
ON_CANDIDATE = marked(converged(tune.candidate_spec(SPEC, C8)), MARK)


def test_finish_of_a_candidate_drops_the_set_it_took_and_keeps_the_mark(monkeypatch):
    pf = preflight(tune.candidate_spec(SPEC, C8), converged(SPEC), C8)
    assert pf.plan.before.backup == STAMP
    record = {"kind": "tune", "result": "ok"}
    assert finished(monkeypatch, pf, record) == rollout.finish_command(pf.spec, record, STAMP, False)
    failed = {"kind": "tune", "result": "rolled-back"}
    assert finished(monkeypatch, pf, failed) == rollout.finish_command(pf.spec, failed, STAMP, False)


def test_finish_of_the_return_drops_its_set_and_the_mark_once_it_serves(monkeypatch):
    pf = preflight(SPEC, ON_CANDIDATE)
    record = {"kind": "tune", "result": "ok"}
    assert finished(monkeypatch, pf, record) == rollout.finish_command(SPEC, record, STAMP, True)
    failed = {"kind": "tune", "result": "rolled-back"}  # back on the candidate: the mark stays
    assert finished(monkeypatch, pf, failed) == rollout.finish_command(SPEC, failed, STAMP, False)


def test_finish_of_a_plain_deploy_drops_nothing(monkeypatch):
    pf = preflight(tune.candidate_spec(SPEC, C8), converged(SPEC))
    record = {"kind": "deploy", "result": "ok"}
    assert finished(monkeypatch, pf, record) == rollout.finish_command(pf.spec, record, None, False)


def test_the_record_of_a_candidate_and_of_the_return_is_of_kind_tune():
    from tasks import activate

    assert activate._record(preflight(tune.candidate_spec(SPEC, C8), converged(SPEC), C8))["kind"] == "tune"
    ret = activate._record(preflight(SPEC, ON_CANDIDATE))
    assert ret["kind"] == "tune" and ret["action"].startswith("return from make tune")
    assert activate._record(preflight(tune.candidate_spec(SPEC, C8), converged(SPEC)))["kind"] == "deploy"
    rollback = SimpleNamespace(stamp=S1, files=[])
    assert activate._record(preflight(SPEC, ON_CANDIDATE, rollback=rollback))["kind"] == "rollback"


# ==================================================================================================
# ops/tune.py: the runbook over fakes
# ==================================================================================================

def args(**kw) -> argparse.Namespace:
    base = dict(inventory="inventory.py", gpu_class="pro6000", host=None, block_sizes=None, tree_budgets=None,
                concurrency=None, rounds=None, max_tokens=None, objective_concurrency=None, yes=True, apply=False)
    return argparse.Namespace(**{**base, **kw})


def ok_row(verdict=OK, **kw) -> HostStatus:
    return HostStatus("h1", verdict, "pro6000", gpus="1x NVIDIA RTX PRO 6000", sglang="0.5.23", weights="-", **kw)


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A tmp cwd with a copy of group_data; the records go to tuning/ there."""
    shutil.copytree(REPO / "group_data", tmp_path / "group_data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ops_tune, "GROUP_DIR", tmp_path / "group_data")
    monkeypatch.setattr(ops_tune, "RECORDS", tmp_path / "tuning")
    return tmp_path


class Scripted:
    """A Tuner whose deploys, measurements, status and gateway are scripted (no __init__: no inventory)."""

    def __init__(self, spec=None, gateway=None, replicas=(), rows=None, deploys=None, levels=None, **arg):
        t = object.__new__(TUNER)
        t.args, t.inventory, t.group, t.name = args(**arg), "inventory.py", "pro6000", "h1"
        t.spec = spec or dflash(16, block_sizes=[4, 8, 16], concurrency=[1, 8])
        t.url = "http://h1:30000"
        t.gateway, t.replicas, t.host = gateway, list(replicas), SimpleNamespace(name="h1")
        self.t, self.deployed, self.measured = t, [], []
        self.rows = list(rows or [ok_row()])
        self.deploys = dict(deploys or {})  # candidate (None: the return) -> (rc, row) or an exception
        self.levels = dict(levels or {})  # block size -> levels, or an exception
        self.peer, self.released = None, []
        t.deploy, t.measure, t.status = self.deploy, self.measure, self.status
        t.release = lambda: self.released.append(t.name)
        t._peer_problem, t.source, t._api_key = lambda: self.peer, lambda: "SGLang on h1's GPUs", lambda: None

    def deploy(self, c):
        self.deployed.append(c)
        got = self.deploys.get(c, (0, "h1 pro6000 ... OK"))
        if isinstance(got, BaseException):
            raise got
        return got

    def measure(self, c):
        self.measured.append(c)
        got = self.levels.get(c.block_size)
        if isinstance(got, BaseException):
            raise got
        return got if got is not None else [lv(cc, 100.0 + c.block_size) for cc in self.t.spec.tune.concurrency]

    def status(self):
        return self.rows.pop(0) if len(self.rows) > 1 else self.rows[0]


def saved(here) -> dict:
    return json.loads((here / "tuning/pro6000.json").read_text())


def test_a_sweep_deploys_each_candidate_measures_it_returns_the_host_and_records_it(here, capsys):
    s = Scripted(levels={8: [lv(1, 90), lv(8, 500)]})
    assert s.t.run() == 0
    assert s.deployed == [Candidate(4), Candidate(8), Candidate(16), None]  # the return after the sweep
    assert s.measured == [Candidate(4), Candidate(8), Candidate(16)]
    rec = saved(here)
    assert rec["finished"] is True and rec["host"] == "h1" and rec["gpus"] == "1x NVIDIA RTX PRO 6000"
    assert rec["engine"] == "0.5.23" and rec["by"] == lock.owner()["holder"]
    assert [c["candidate"] for c in rec["candidates"]] == [{"block_size": 4}, {"block_size": 8}, {"block_size": 16}]
    assert rec["candidates"][1]["levels"] == [asdict(lv(1, 90)), asdict(lv(8, 500))]
    assert rec["winner_per_concurrency"] == {"1": {"block_size": 16}, "8": {"block_size": 8}}
    assert rec["winner"] == {"block_size": 8} and rec["change"] == {"block_size": 8}
    assert rec["started"] <= rec["ended"] and rec["figures_from"] == "SGLang on h1's GPUs"
    assert not (here / "tuning/pro6000.tmp").exists()
    out = capsys.readouterr().out
    assert "h1 is behind no gateway: it stops serving for the tune (3 restarts, then one more to its declared " \
           "spec); confirmed by --yes" in out
    assert "h1: candidate 2 of 3: block size 8: deploying" in out
    assert "h1: back on its declared spec\n" in out
    assert "best at concurrency 1: block size 16\nbest at concurrency 8: block size 8\n" in out
    assert "winner (objective: tokens/s at concurrency 8): block size 8" in out
    assert "recommended group_data/pro6000.py change: speculative.block_size: 16 -> 8" in out
    # without --apply the class file is left as it was
    assert (here / "group_data/pro6000.py").read_text() == (REPO / "group_data/pro6000.py").read_text()
    # matplotlib is in the test extra (pyproject.toml): the real picture; test_no_picture_without_matplotlib the other way
    assert (here / "tuning/pro6000.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_failed_candidate_is_recorded_not_deployed_and_the_sweep_goes_on(here, capsys):
    s = Scripted(deploys={Candidate(8): (1, "h1 pro6000 FAILED (rolled back) - smoke test failed: HTTP 500")})
    assert s.t.run() == 0
    assert s.deployed == [Candidate(4), Candidate(8), Candidate(16), None]
    assert s.measured == [Candidate(4), Candidate(16)]
    rec = saved(here)
    bad = rec["candidates"][1]
    assert bad["deployed"] is False and bad["levels"] == []
    assert bad["reason"] == "the deploy failed (exit 1): 'h1 pro6000 FAILED (rolled back) - smoke test failed: HTTP 500'"
    assert rec["winner"] == {"block_size": 16} and rec["change"] == {}
    out = capsys.readouterr().out
    assert "block size 8: not deployed: " in out and "(the sweep goes on)" in out
    assert "recommended group_data/pro6000.py change: none: the class declares the winner already" in out


def test_no_winner_when_every_candidate_failed_exits_1_and_the_host_is_returned(here, capsys):
    s = Scripted(deploys={Candidate(b): (1, "x") for b in (4, 8, 16)})
    assert s.t.run() == 1 and s.deployed[-1] is None
    rec = saved(here)
    assert rec["winner"] is None and rec["finished"] is True and all(not c["deployed"] for c in rec["candidates"])
    out = capsys.readouterr().out
    assert "best at concurrency 8: none (every candidate failed)" in out
    assert "no winner: no candidate served the objective's concurrency without a failed request" in out


def test_an_interrupted_sweep_leaves_the_mark_and_records_that_it_did_not_finish(here, capsys):
    s = Scripted(levels={8: KeyboardInterrupt()})
    waited = []
    s.t.child = SimpleNamespace(wait=lambda: waited.append(True))
    assert s.t.run() == ops_tune.INTERRUPTED == 130
    assert None not in s.deployed and s.deployed == [Candidate(4), Candidate(8)]  # no return deploy
    assert waited == [True]  # the pyinfra child had the Ctrl-C too: it is let to end
    rec = saved(here)
    assert rec["finished"] is False and rec["winner"] is None
    out = capsys.readouterr().out
    assert "interrupted: h1 keeps its tune mark; the next make deploy (or make tune) returns it to its declared spec" in out


def test_an_interrupted_sweep_keeps_the_figures_measured_before_it(here):
    s = Scripted(levels={8: KeyboardInterrupt()})
    assert s.t.run() == 130
    assert [c["candidate"] for c in saved(here)["candidates"]][:1] == [{"block_size": 4}]


def test_a_deploy_stopped_by_a_signal_stops_the_sweep_even_if_the_tune_never_saw_it(here, capsys):
    """The deploy exits 130 on SIGINT or SIGTERM whatever it inherited; a tune started with SIGINT ignored (a
    non-interactive shell's `&`) gets no KeyboardInterrupt of its own, and must not sweep on to the next candidate."""
    s = Scripted(deploys={Candidate(8): (130, "h1 pro6000 ... INTERRUPTED")})
    assert s.t.run() == 130
    assert s.deployed == [Candidate(4), Candidate(8)] and s.measured == [Candidate(4)]  # no next candidate, no return
    rec = saved(here)
    assert rec["finished"] is False and [c["candidate"] for c in rec["candidates"]] == [{"block_size": 4}]
    assert "interrupted: h1 keeps its tune mark" in capsys.readouterr().out


def test_an_interrupt_in_a_deploy_behind_a_gateway_says_the_gateway(here, capsys):
    gw = SimpleNamespace(name="gw1")
    s = Scripted(gateway=gw, replicas=[ME, PEER], deploys={Candidate(4): KeyboardInterrupt()})
    assert s.t.run() == 130 and s.deployed == [Candidate(4)] and s.released == ["h1"]
    assert "to its declared spec and into gateway gw1" in capsys.readouterr().out


def test_an_interrupted_tune_ends_its_marks_lease_and_leaves_its_drain_to_the_next_run(capsys):
    sent = []
    t = object.__new__(TUNER)
    t.name, t.spec, t.host = "h1", dflash(16, concurrency=[1]), SimpleNamespace(name="h1")
    t.gw_spec = SimpleNamespace(python="/usr/bin/python3", unit="smg", discovery_file="/etc/smg/smg-workers.json",
                                rolling=None)
    t.gateway = SimpleNamespace(hosts=[SimpleNamespace(name="gw-1"), SimpleNamespace(name="gw-2")],
                                replicas=[ME, PEER])
    t.fleet = SimpleNamespace(run=lambda h, command, timeout_s: sent.append((h.name, command)) or (
        (True, "@@result=ok\n\n") if h.name != "gw-2" else (False, "cannot connect")))
    TUNER.release(t)
    assert [h for h, _ in sent] == ["h1", "gw-1", "gw-2"]
    assert sent[0][1] == f"{tune.LAPSE} {t.spec.tune_file}"
    request = json.loads(shlex.split(sent[1][1])[-1])
    assert (request["op"], request["replica"], request["owner"]) == ("release", "h1", t.drain_owner()["owner"])
    assert [w["id"] for w in request["workers"]] == [ME.host, PEER.host]
    assert "gw-2: h1's drain not released ('cannot connect'): a make deploy takes it over once its lease has passed" \
        in capsys.readouterr().out


def test_a_tune_mark_with_a_lease_keeps_other_runs_off_the_host_until_it_ends():
    owner = ("make tune of h1 (pid 7 on c)", 900.0)
    m = tune.read_mark(json.dumps(tune.mark(1000, "root@c", "block size 8", owner)))
    assert (m.owner, m.until) == (owner[0], 1900)
    why = tune.under_way(m, 1000.0, None)
    assert why.startswith("expected no make tune under way, found make tune of h1 (pid 7 on c) measuring candidate "
                          "block size 8 (its lease 900s more)")
    assert tune.under_way(m, 1000.0, owner[0]) is None  # the tune's own runs: its candidates and its return
    assert tune.under_way(m, 1900.0, None) is None  # lapsed: a killed tune's host is returned by the next run
    assert tune.under_way(tune.read_mark(json.dumps(tune.mark(1000, "root@c", "block size 8"))), 0, None) is None
    for until in ("soon", -1, 1 << 41, 1.5):
        assert tune.read_mark(json.dumps({**tune.mark(1000, "r", "block size 8", owner), "until": until})).until == 0


def test_a_failed_return_keeps_the_figures_and_refuses_with_the_log(here, capsys, monkeypatch):
    s = Scripted(deploys={None: (1, "h1 pro6000 FAILED (rolled back)")})
    monkeypatch.setattr(ops_tune, "Tuner", lambda a, hs: s.t)
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    assert ops_tune.main(args(), None) == 2
    rec = saved(here)
    assert rec["finished"] is True and len(rec["candidates"]) == 3 and rec["winner"] == {"block_size": 16}
    err = capsys.readouterr().err
    assert err.startswith("h1: tune: the return to its declared spec failed (exit 1): 'h1 pro6000 FAILED (rolled back)'; "
                          "its tune mark stays: make deploy returns it (see ")
    assert err.rstrip().endswith("tuning/pro6000.log)")


def test_apply_writes_the_winner_into_the_class_file(here, capsys):
    s = Scripted(levels={8: [lv(1, 900), lv(8, 900)]}, apply=True)
    assert s.t.run() == 0
    text = (here / "group_data/pro6000.py").read_text()
    assert text == (REPO / "group_data/pro6000.py").read_text().replace('"block_size": 16,', '"block_size": 8,')
    assert validate_class("pro6000.py", read_group_file(here / "group_data/pro6000.py")).speculative.block_size == 8
    assert f"applied to {here / 'group_data/pro6000.py'}: make dry shows the rollout it makes" in capsys.readouterr().out


def test_apply_to_a_class_file_that_does_not_run_on_its_own_says_so_and_leaves_it(here, capsys):
    path = here / "group_data/pro6000.py"
    path.write_text(path.read_text() + "\nspeculative = {**speculative, **SHARED}\n")  # a name from elsewhere
    before = path.read_text()
    s = Scripted(levels={8: [lv(1, 900), lv(8, 900)]}, apply=True)
    assert s.t.run() == 0
    assert path.read_text() == before
    assert f"not applied to {path}: NameError: \"name 'SHARED' is not defined\"; change it by hand" in \
        capsys.readouterr().out


def test_apply_without_a_change_leaves_the_class_file(here, capsys):
    s = Scripted(apply=True)  # 16, the declared one, is fastest
    assert s.t.run() == 0
    assert (here / "group_data/pro6000.py").read_text() == (REPO / "group_data/pro6000.py").read_text()
    assert "applied to" not in capsys.readouterr().out


def test_the_report_names_the_latency_bound(here, capsys):
    s = Scripted(spec=dflash(16, block_sizes=[4], concurrency=[1], p99_latency_s=2.5))
    assert s.t.run() == 0
    assert "winner (objective: tokens/s at concurrency 1, p99 within 2.5s): block size 4" in capsys.readouterr().out


# --- the checks before anything changes -------------------------------------------------------------

def refused(s: Scripted, monkeypatch, capsys) -> list[str]:
    monkeypatch.setattr(ops_tune, "Tuner", lambda a, hs: s.t)
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    assert ops_tune.main(s.t.args, None) == 2
    out = capsys.readouterr()
    return out.err.splitlines()


def test_refusals_exit_2_each_on_stderr_naming_the_host_and_nothing_is_deployed(here, monkeypatch, capsys):
    s = Scripted(spec=dflash(16, concurrency=[1]).model_copy(
        update={"service": make_spec(service={"enable_metrics": False}).service}), block_sizes=[0, 8])
    lines = refused(s, monkeypatch, capsys)
    assert lines == ["h1: tune: block size 0: expected 1..16 (SGLang's bound), found 0",
                     "h1: tune: service.enable_metrics: expected true (the accept length and generation throughput "
                     "come from SGLang's /metrics), found false"]
    assert s.deployed == [] and not (here / "tuning/pro6000.json").exists()


def test_a_class_bound_to_loopback_without_a_gateway_is_refused_and_never_restarted(here, monkeypatch, capsys):
    s = Scripted(spec=dflash(16, concurrency=[1]).model_copy(update={"service": builders.SPEC.service}))
    (line,) = refused(s, monkeypatch, capsys)
    assert "service.host: expected an address the controller reaches" in line
    assert s.deployed == [] and not (here / "tuning/pro6000.json").exists()


def test_an_algorithm_without_a_block_size_is_refused(here, monkeypatch, capsys):
    s = Scripted(spec=EAGLE)
    assert refused(s, monkeypatch, capsys) == [
        "h1: tune: speculative.algorithm: expected DFLASH or DDTREE (the algorithms with a block size), found "
        "EAGLE3: nothing to tune"]


def test_a_lone_replica_behind_a_gateway_is_refused(here, monkeypatch, capsys):
    s = Scripted(gateway=SimpleNamespace(name="gw1"), replicas=[ME])
    assert refused(s, monkeypatch, capsys) == [
        "h1: tune: its class is behind gateway gw1 with 1 replica: expected at least 2 (a peer serves while this one "
        "is tuned)"]


def test_a_drifting_host_is_refused(here, monkeypatch, capsys):
    s = Scripted(rows=[ok_row(verdict=DRIFT, drift="update sglang.service, restart")])
    lines = refused(s, monkeypatch, capsys)
    assert lines == ["h1: tune: expected the host on its declared spec and serving (make status OK), found DRIFT: "
                     "'update sglang.service, restart'; make deploy first"]
    assert s.deployed == []
    s = Scripted(rows=[ok_row(verdict="UNREACHABLE", reasons=["h1: ssh: connection refused"])])
    assert refused(s, monkeypatch, capsys)[0].endswith("found UNREACHABLE: 'h1: ssh: connection refused'; make deploy first")
    s = Scripted(rows=[ok_row(verdict="UNHEALTHY")])
    assert refused(s, monkeypatch, capsys)[0].endswith("found UNHEALTHY: 'UNHEALTHY'; make deploy first")


def test_a_host_a_tune_left_is_given_back_first(here, capsys):
    left = ok_row(verdict=DRIFT, drift="return from make tune, restart", tuning="block size 8, since ... by x")
    s = Scripted(rows=[left, ok_row()])
    assert s.t.run() == 0
    assert s.deployed[0] is None and s.deployed[1:] == [Candidate(4), Candidate(8), Candidate(16), None]
    assert "h1: a make tune left it (block size 8, since ... by x): returning it to its declared spec first" in \
        capsys.readouterr().out


def test_a_host_whose_return_does_not_make_it_ok_is_refused(here, monkeypatch, capsys):
    left = ok_row(verdict=DRIFT, drift="return from make tune, restart", tuning="block size 8")
    s = Scripted(rows=[left, ok_row(verdict="UNHEALTHY", reasons=["/health 503"])])
    assert refused(s, monkeypatch, capsys)[0].endswith("found UNHEALTHY: '/health 503'; make deploy first")
    assert s.deployed == [None]


def test_behind_a_gateway_a_ready_peer_is_needed(here, monkeypatch, capsys):
    s = Scripted(gateway=SimpleNamespace(name="gw1"), replicas=[ME, PEER], yes=False)
    s.peer = "no other replica of m is ready in the gateway"
    assert refused(s, monkeypatch, capsys) == ["h1: tune: gateway gw1: no other replica of m is ready in the gateway"]
    s.peer = None
    assert s.t.check() == [Candidate(4), Candidate(8), Candidate(16)]  # no confirmation asked behind a gateway


def test_without_a_gateway_the_operator_confirms(here, monkeypatch, capsys):
    s = Scripted(yes=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a tty (make in CI, a pipe)
    assert refused(s, monkeypatch, capsys) == [
        "h1: tune: h1 is behind no gateway: it stops serving for the tune (3 restarts, then one more to its declared "
        "spec): confirm with --yes (make tune ... ARGS=--yes)"]
    assert s.deployed == []
    tty = SimpleNamespace(isatty=lambda: True)
    monkeypatch.setattr(sys, "stdin", tty)
    monkeypatch.setattr(builtins, "input", lambda prompt: "no")
    assert refused(s, monkeypatch, capsys) == ["h1: tune: not confirmed; nothing was touched"]
    asked = []
    monkeypatch.setattr(builtins, "input", lambda prompt: asked.append(prompt) or " yes\n")
    assert len(s.t.check()) == 3
    assert asked == ["h1 is behind no gateway: it stops serving for the tune (3 restarts, then one more to its "
                     "declared spec). Type yes to go on: "]


# --- the thin I/O: status, the gateway's peer, the deploy child, the metrics --------------------------

class FakeFleet:
    def __init__(self, hosts=(), spec_of=None, why=None, workers='{"workers": []}'):
        self.hosts = list(hosts)
        self.state = SimpleNamespace(inventory=self.hosts)
        self._spec_of, self.why, self.workers, self.calls = spec_of, why, workers, []

    def spec_of(self, host):
        return self._spec_of(host)

    def close(self):
        self.calls.append("close")

    def connect(self, host):
        self.calls.append(("connect", host.name))
        return self.why

    def fact(self, host, fact, **kw):
        self.calls.append(("fact", host.name, fact.__name__, kw))
        return {"workers": self.workers}


def test_status_reads_the_hosts_row_and_closes_the_connections():
    t = object.__new__(TUNER)
    t.fleet, t.host = FakeFleet(), SimpleNamespace(name="h1")
    t.host_status = lambda fleet, host: (fleet, host.name)
    assert TUNER.status(t) == (t.fleet, "h1") and t.fleet.calls == ["close"]


def test_the_peer_problem_is_read_from_the_gateways_workers(here):
    gateways = load_gateways(here / "group_data", load_class_specs(here / "group_data"))
    t = object.__new__(TUNER)
    gw1 = SimpleNamespace(name="gw1")
    t.gw_spec, t.gateway, t.name, t.replicas = gateways["gateway"], SimpleNamespace(hosts=[gw1]), "r1", [ME, PEER]
    t.gw_group = "gateway"
    t.fleet = FakeFleet(why="ssh: connection refused")
    assert TUNER._peer_problem(t) == "gw1 unreachable: ssh: connection refused"
    t.fleet = FakeFleet(workers="<html>")
    assert TUNER._peer_problem(t).startswith("gw1: /workers")
    t.fleet = FakeFleet(workers=json.dumps({"workers": [{"url": ME.url, "status": "ready"},
                                                        {"url": PEER.url, "status": "pending"}]}))
    assert TUNER._peer_problem(t).startswith("no other replica of m is ready in the gateway")
    _, host, name, kw = t.fleet.calls[1]
    assert (host, name, kw) == ("gw1", "GatewayStatus", {"gw": t.gw_spec, "group": "gateway"})
    assert t.fleet.calls[-1] == "close"
    t.fleet = FakeFleet(workers=json.dumps({"workers": [{"url": ME.url, "status": "ready"},
                                                        {"url": PEER.url, "status": "ready"}]}))
    assert TUNER._peer_problem(t) is None


def test_behind_a_gateway_group_the_peer_must_be_ready_in_every_gateway(here):
    gateways = load_gateways(here / "group_data", load_class_specs(here / "group_data"))
    t = object.__new__(TUNER)
    t.gw_spec, t.gw_group, t.name, t.replicas = gateways["gateway"], "gateway", "r1", [ME, PEER]
    t.gateway = SimpleNamespace(hosts=[SimpleNamespace(name="gw1"), SimpleNamespace(name="gw2")])
    views = {"gw1": {PEER.url: "ready"}, "gw2": {PEER.url: "pending"}}

    class TwoViews(FakeFleet):
        def fact(self, host, fact, **kw):
            self.calls.append(("fact", host.name))
            return {"workers": json.dumps({"workers": [{"url": ME.url, "status": "ready"}] + [
                {"url": u, "status": st} for u, st in views[host.name].items()]})}

    t.fleet = TwoViews()
    assert "pending in gw2" in TUNER._peer_problem(t)
    assert [c for c in t.fleet.calls if c != "close"] == [("connect", "gw1"), ("fact", "gw1"), ("connect", "gw2"),
                                                          ("fact", "gw2")]
    views["gw2"][PEER.url] = "ready"
    assert TUNER._peer_problem(t) is None


PYINFRA = """#!/bin/sh
echo "$@" >> "{calls}"
echo "--> Preparing operations..."
out=$(printf '%s\\n' "$@" | sed -n 's/^sglang_fleet_run=//p' | python3 -c 'import json,sys; print(json.load(sys.stdin)["outcome"])')
{write}
exit {rc}
"""
OUTCOME = '''printf '%s' '{{"h1": {{"verdict": "{verdict}", "ok": false, "reasons": ["{reason}"]}}}}' > "$out"'''


def stand_in_pyinfra(here, monkeypatch, verdict="OK", reason="ready in 1s", rc=0, writes=True) -> Path:
    """pyinfra as the tune runs it: its arguments kept, the host's outcome written where the run's intent asks."""
    calls = here / "pyinfra.calls"
    p = here / "pyinfra"
    p.write_text(PYINFRA.format(calls=calls, rc=rc, write=OUTCOME.format(verdict=verdict, reason=reason)
                                if writes else ""))
    p.chmod(0o755)
    monkeypatch.setattr(ops_tune, "PYINFRA", str(p))
    return calls


def tuner_at(here, gateway=None, spec=SPEC):
    t = object.__new__(TUNER)
    t.name, t.inventory, t.log_path, t.gateway = "h1", "inventory.py", here / "tune.log", gateway
    t.outcome_path = here / "outcome.json"
    t.spec = spec
    t.log_path.write_text("")
    return t


def given(calls: Path) -> list[intent.Intent]:
    """The intent of each pyinfra run, read back as the deploy's own preflight reads it."""
    return [intent.requested({intent.INTENT_DATA: line.split(f"--data {intent.INTENT_DATA}=")[1].split(
        " inventory.py")[0]}) for line in calls.read_text().splitlines()]


def test_a_deploy_is_one_pyinfra_run_on_the_host_its_outcome_read_as_data(here, monkeypatch):
    calls = stand_in_pyinfra(here, monkeypatch, "FAILED (rolled back)", "smoke test failed: HTTP 500", rc=1)
    t = tuner_at(here)
    t.drain_owner = lambda: {"owner": "make tune of h1", "lease_s": 900}
    assert TUNER.deploy(t, Candidate(8, 32)) == (1, "FAILED (rolled back) smoke test failed: HTTP 500")
    assert TUNER.deploy(t, None)[0] == 1
    lines = calls.read_text().splitlines()
    assert [line.split(" --data ")[0] for line in lines] == ["-y --limit h1"] * 2
    assert all(line.endswith(" inventory.py deploy.py") for line in lines)
    candidate, back = given(calls)
    common = {"keep_backup": False, "record": "tune", "owner": "make tune of h1", "lease_s": 900.0,
              "outcome": str(t.outcome_path)}
    assert candidate == intent.Intent({"block_size": 8, "tree_budget": 32},
                                      "a make tune candidate (block size 8, tree budget 32)", stay_out=True, **common)
    assert back == intent.Intent(**common)  # no overlay: the return to the declared spec
    log = t.log_path.read_text()
    assert log.startswith(f"\n$ {here / 'pyinfra'} -y --limit h1 --data sglang_fleet_run=") and log.count("\n$ ") == 2
    assert t.child.returncode == 1


def test_a_run_that_wrote_no_outcome_points_at_its_output(here, monkeypatch):
    stand_in_pyinfra(here, monkeypatch, rc=2, writes=False)
    t = tuner_at(here)
    t.drain_owner = lambda: {"owner": "make tune of h1", "lease_s": 900}
    t.outcome_path.write_text('{"h1": {"verdict": "OK", "reasons": []}}')  # a run before's: not taken for this one
    assert TUNER.deploy(t, Candidate(8)) == (2, f"the run wrote no outcome for h1: see {t.log_path}")


def test_every_run_of_the_tune_owns_the_host_for_a_candidates_time(here, monkeypatch):
    calls = stand_in_pyinfra(here, monkeypatch, "OK", "", rc=0)
    t = tuner_at(here, SimpleNamespace(name="gw"), dflash(16, concurrency=[1, 8], level_timeout_s=100))
    t.gw_spec = SimpleNamespace(rolling=None)
    TUNER.deploy(t, Candidate(8))
    TUNER.deploy(t, None)
    owners = [i.owned for i in given(calls)]
    assert owners[0] == owners[1] and owners[0][0].startswith("make tune of h1 (pid ")
    assert owners[0][1] == round(bounds.turn_s(t.spec) + 200 + bounds.MARGIN_S)


def measured(requests, before=None, after=None, wall_s=2.0) -> str:
    """What fleet/programs/measure.py prints: its one record."""
    data = {"wall_s": wall_s, "before": before or {}, "after": after or {}, "requests": requests}
    return "@@measure\n" + base64.b64encode(json.dumps(data).encode()).decode() + "\n"


class MeasureFleet:
    """ops.fleet.Fleet's run and close, answering each load with the next of `answers`."""

    def __init__(self, answers):
        self.answers, self.ran, self.closed = list(answers), [], 0

    def run(self, host, command, timeout_s):
        self.ran.append((host.name, command, timeout_s))
        return self.answers.pop(0)

    def close(self):
        self.closed += 1


def test_measure_runs_the_shared_load_on_the_host_at_each_concurrency(capsys):
    t = object.__new__(TUNER)
    t.spec = dflash(16, concurrency=[1, 4], rounds=3, min_requests=5, max_tokens=64, level_timeout_s=30)
    t.host = SimpleNamespace(name="h1")
    ok = [1.0, True, 50, 0.2, ""]
    t.fleet = MeasureFleet([
        (True, measured([ok] * 4 + [[2.0, False, 0, None, "HTTP 500"]],
                        {"sglang:generation_tokens_total": 0.0, "sglang:spec_verify_calls_total": 0.0},
                        {"sglang:generation_tokens_total": 400.0, "sglang:spec_verify_calls_total": 100.0,
                         "sglang:gen_throughput": 77.0})),
        (True, measured([ok] * 11 + [[2.0, False, 0, None, "HTTP 500"]]))])
    levels = TUNER.measure(t, Candidate(8))
    assert [(x.concurrency, x.requests, x.failed, x.output_tokens) for x in levels] == [(1, 5, 1, 200), (4, 12, 1, 550)]
    assert levels[0].accept_length == 4.0 and levels[0].gen_throughput == 77.0 and levels[1].accept_length is None
    assert levels[0].ttft_p50_s == pytest.approx(0.2) and levels[0].errors == ["HTTP 500"]
    # the deploy's canary analysis runs this very command (fleet.tune.measure): the tune's load, the same program
    load = measure.Load(5, 1, 64, tuple(tune.PROMPTS), 30.0)
    assert t.fleet.ran[0] == ("h1", measure.command(t.spec, load), measure.bound(load, "x").seconds)
    assert t.fleet.closed == 1
    out = capsys.readouterr().out
    assert "  block size 8, concurrency 1: " in out and "accept length 4.00, p50 1000 ms, p99 1000 ms, 1 of 5 failed " \
                                                       "(HTTP 500)" in out
    assert "accept length n/a" in out


def test_a_load_that_says_nothing_readable_counts_every_request_failed():
    t = object.__new__(TUNER)
    t.spec, t.host = dflash(16, concurrency=[4]), SimpleNamespace(name="h1")
    t.fleet = MeasureFleet([(False, "python3: not found"), (True, "@@measure\nbm90IGpzb24=\n")])
    (level,) = TUNER.measure(t, Candidate(8))
    assert level.requests == t.spec.tune.requests(4) and level.failed == level.requests
    assert level.errors == ["the load did not run: python3: not found"]
    t.spec = dflash(16, concurrency=[1])
    (level,) = TUNER.measure(t, Candidate(8))
    assert level.failed == level.requests and level.errors[0].startswith("measure: ")


class Answer:
    def __init__(self, status=200, text="", data=None, error=None):
        self.status_code, self.text, self._data, self._error = status, text, data, error

    def json(self):
        if self._error:
            raise self._error
        return self._data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_figures_source_from_the_host(monkeypatch):
    import requests

    t = object.__new__(TUNER)
    t.url, t.name, t.api_key = "http://h1:30000", "h1", None
    got = []

    def get(answer):
        def fake(url, timeout, headers=None):
            got.append((url, headers))
            if isinstance(answer, Exception):
                raise answer
            return answer
        monkeypatch.setattr(ops_tune.requests, "get", fake)

    get(Answer(200, data={"lab_double": True}))
    assert TUNER.source(t).startswith("the lab's SGLang double (lab/doubles)")
    assert got[-1] == ("http://h1:30000/server_info", {})
    t.api_key = "sk-x"
    for answer in (Answer(200, data={"lab_double": "yes"}), Answer(200, data=[1]), Answer(404, data=None),
                   Answer(200, error=ValueError("no json")), requests.Timeout("slow")):
        get(answer)
        assert TUNER.source(t) == "SGLang on h1's GPUs"
    assert got[-1] == ("http://h1:30000/server_info", {"Authorization": "Bearer sk-x"})


def test_the_api_key_is_read_from_its_declared_source_or_refused(here, monkeypatch):
    t = object.__new__(TUNER)
    t.name, t.group, t.spec = "h1", "pro6000", SPEC
    assert TUNER._api_key(t) is None
    t.spec = make_spec(service=KEYED)
    monkeypatch.setenv("SGLANG_API_KEY_TEST", "sk-Fleet0123456789abcdef")
    assert TUNER._api_key(t) == "sk-Fleet0123456789abcdef"
    monkeypatch.delenv("SGLANG_API_KEY_TEST")
    with pytest.raises(ops_tune.Refused) as e:
        TUNER._api_key(t)
    assert e.value.problems and all(p.startswith("h1: tune: ") for p in e.value.problems)
    assert "SGLANG_API_KEY_TEST" in e.value.problems[0]


# --- the Tuner as made from the inventory ------------------------------------------------------------

class Data(dict):
    def dict(self):
        return dict(self)


def inventory_host(name, *groups, **data):
    """A host as pyinfra has it: its groups' group_data (all.py first) under its own data."""
    merged = {}
    for g in ("all", *groups):
        merged.update(read_group_file(Path("group_data") / f"{g}.py"))
    return SimpleNamespace(name=name, groups=list(groups), data=Data({**merged, **data}))


def made(monkeypatch, hosts, **kw):
    from fleet.spec.load import validate_host

    def spec_of(host):
        cls = next(g for g in host.groups if g != "gateway")
        return cls, validate_host(f"group_data/{cls}.py", host.data.dict()), []

    fleet = FakeFleet(hosts, spec_of)
    monkeypatch.setattr(ops_tune, "Fleet", lambda inventory: fleet)
    return ops_tune.Tuner(args(**kw), host_status=None)


def test_the_tuner_finds_its_host_its_url_and_its_gateway(here, monkeypatch):
    hosts = [inventory_host("gw1", "gateway"), inventory_host("p1", "pro6000", ssh_hostname="10.0.0.5"),
             inventory_host("p2", "pro6000"), inventory_host("a1", "a6000")]
    t = made(monkeypatch, hosts, max_tokens=64)
    assert (t.name, t.url, t.gateway.name) == ("p1", "http://10.0.0.5:30000", "gw1")
    assert [(r.host, r.url) for r in t.replicas] == [("p1", "http://10.0.0.5:30000"), ("p2", "http://p2:30000")]
    assert t.spec.tune.max_tokens == 64 and t.gw_spec.routes == ["pro6000"]
    assert made(monkeypatch, hosts, host="p2").name == "p2"
    # a class no gateway routes
    a = made(monkeypatch, hosts, gpu_class="a6000")
    assert (a.name, a.gateway, a.replicas) == ("a1", None, [])
    # a gateway file whose host is not in the inventory routes nothing here
    assert made(monkeypatch, hosts[1:]).gateway is None


def test_the_tuner_refuses_a_class_or_host_it_cannot_tune(here, monkeypatch):
    hosts = [inventory_host("p1", "pro6000"), inventory_host("p2", "pro6000")]
    with pytest.raises(ops_tune.Refused) as e:
        made(monkeypatch, hosts, gpu_class="nope")
    assert e.value.problems == ["tune: CLASS=nope: expected one of a6000, cpu_real, h200, pro6000"]
    with pytest.raises(ops_tune.Refused) as e:
        made(monkeypatch, hosts, gpu_class="h200")
    assert e.value.problems == ["tune: no host of class h200 in inventory.py"]
    with pytest.raises(ops_tune.Refused) as e:
        made(monkeypatch, hosts, host="a1")
    assert e.value.problems == ["tune: HOST=a1: expected a host of class pro6000, found p1, p2"]
    fleet = FakeFleet(hosts, lambda host: ("pro6000", None, ["p1: gpu class: expected exactly one"]))
    monkeypatch.setattr(ops_tune, "Fleet", lambda inventory: fleet)
    with pytest.raises(ops_tune.Refused) as e:
        ops_tune.Tuner(args(), None)
    assert e.value.problems == ["p1: gpu class: expected exactly one"]
    with pytest.raises(ops_tune.Refused) as e:
        made(monkeypatch, hosts, objective_concurrency=5)
    assert e.value.problems[0].startswith("tune: the command line: ") and "objective_concurrency 5" in e.value.problems[0]


def test_a_broken_gateway_file_refuses_the_tune(here, monkeypatch):
    (here / "group_data/gateway.py").write_text('gateway = {"routes": ["nope"], "port": 8000}\n')
    with pytest.raises(ops_tune.Refused) as e:
        made(monkeypatch, [inventory_host("p1", "pro6000")])
    assert e.value.problems and any("nope" in p for p in e.value.problems)


def test_main_runs_the_tune_and_ops_dispatches_to_it(here, monkeypatch):
    from ops import __main__ as ops_main

    seen = []
    monkeypatch.setattr(ops_tune, "main", lambda a, host_status: seen.append((a, host_status)) or 7)
    assert ops_main.main(["tune", "inv.py", "--class", "pro6000", "--block-sizes", "4,8", "--yes"]) == 7
    a, host_status = seen[0]
    assert (a.inventory, a.gpu_class, a.block_sizes, a.yes, a.apply, a.host) == ("inv.py", "pro6000", [4, 8], True,
                                                                               False, None)
    assert host_status is ops_main.host_status


def test_the_command_lines_options():
    parser = argparse.ArgumentParser()
    ops_tune.add_parser(parser.add_subparsers(dest="command"))
    a = parser.parse_args(["tune", "inv.py", "--class", "c", "--host", "h", "--block-sizes", "4, 8,", "--tree-budgets",
                           "32", "--concurrency", "1,8", "--rounds", "2", "--max-tokens", "64",
                           "--objective-concurrency", "8", "--apply"])
    assert (a.gpu_class, a.host, a.block_sizes, a.tree_budgets, a.concurrency, a.rounds, a.max_tokens,
            a.objective_concurrency, a.yes, a.apply) == ("c", "h", [4, 8], [32], [1, 8], 2, 64, 8, False, True)
    with pytest.raises(SystemExit):
        parser.parse_args(["tune", "inv.py"])  # --class is required


def test_ints():
    assert ops_tune.ints("4,8,12") == [4, 8, 12] and ops_tune.ints(" 4 , 8 ,") == [4, 8] and ops_tune.ints("") == []
    with pytest.raises(SystemExit, match=r"expected numbers separated by commas, found '4;8'"):
        ops_tune.ints("4;8")


def test_the_command_line_goes_over_the_tune_section_validated():
    spec = dflash(16, concurrency=[1, 8], rounds=2, prompts=["hi"])
    t = ops_tune._with_overrides(spec, args(concurrency=[2, 4], max_tokens=32)).tune
    assert (t.concurrency, t.rounds, t.max_tokens, t.prompts) == ([2, 4], 2, 32, ["hi"])
    assert ops_tune._with_overrides(spec, args()).tune == spec.tune
    assert ops_tune._with_overrides(spec, args(objective_concurrency=8)).tune.objective == 8
    over = ops_tune._with_overrides(spec, args(concurrency=[4, 1], objective_concurrency=4, rounds=1))
    assert over.tune.concurrency == [1, 4] and over.tune.objective == 4 and over.speculative == spec.speculative
    for bad in (dict(concurrency=[1, 1]), dict(concurrency=[]), dict(rounds=0), dict(max_tokens=10 ** 6),
                dict(objective_concurrency=32)):  # 32 is not one of spec's concurrency [1, 8]
        with pytest.raises(ops_tune.Refused) as e:
            ops_tune._with_overrides(spec, args(**bad))
        assert e.value.problems[0].startswith("tune: the command line: "), bad
        assert len(e.value.problems[0]) < 340


# --- the picture ------------------------------------------------------------------------------------

@pytest.fixture
def fake_matplotlib(monkeypatch):
    """matplotlib stood in for (it is optional): what plot() draws is recorded, savefig writes a file."""
    drawn = []

    class Axes:
        def __init__(self, name):
            self.name = name

        def plot(self, xs, ys, **kw):
            drawn.append((self.name, list(xs), list(ys), kw["label"]))

        def set(self, **kw):
            drawn.append((self.name, "set", kw))

        def legend(self):
            pass

        def grid(self, *a, **kw):
            pass

    class Figure:
        def text(self, *a, **kw):
            drawn.append(("text", a[2]))

        def tight_layout(self):
            pass

        def savefig(self, path):
            Path(path).write_bytes(b"picture")

    mpl = types.ModuleType("matplotlib")
    mpl.use = lambda backend: drawn.append(("backend", backend))
    pyplot = types.ModuleType("matplotlib.pyplot")
    pyplot.subplots = lambda rows, cols, figsize: (Figure(), (Axes("tps"), Axes("acc")))
    pyplot.close = lambda fig: drawn.append("closed")
    mpl.pyplot = pyplot
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", pyplot)
    return drawn


def test_the_picture_has_a_line_per_concurrency_of_the_levels_without_failures(tmp_path, fake_matplotlib, capsys):
    spec = dflash(16, concurrency=[1, 8])
    rec = record_of(spec, [res(8, lv(1, 60, accept=None), lv(8, 300)), res(4, lv(1, 50), lv(8, 100, failed=1)),
                           res(16, deployed=False)])
    ops_tune.plot(rec, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes() == b"picture" and ("backend", "Agg") in fake_matplotlib
    lines = [d for d in fake_matplotlib if len(d) == 4]
    assert lines == [("tps", [4, 8], [50.0, 60.0], "concurrency 1"), ("acc", [4, 8], [3.0, 0], "concurrency 1"),
                     ("tps", [8], [300.0], "concurrency 8"), ("acc", [8], [3.0], "concurrency 8")]
    assert ("text", "figures from SGLang on h1's GPUs") in fake_matplotlib and fake_matplotlib[-1] == "closed"
    assert f"picture: {tmp_path / 'p.png'}" in capsys.readouterr().out


def test_the_picture_of_a_ddtree_sweep_with_two_tree_budgets(tmp_path, fake_matplotlib):
    rec = record_of(ddtree(8, 64), [res(8, lv(32, 100), budget=32), res(8, lv(32, 120), budget=64)])
    ops_tune.plot(rec, tmp_path / "p.png")
    assert (tmp_path / "p.png").exists()


def test_no_picture_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    ops_tune.plot(record_of(SPEC, []), tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists()
    assert "no picture: matplotlib is not installed" in capsys.readouterr().out


def test_small_formatters():
    assert ops_tune._ms(None) == "n/a" and ops_tune._ms(0.2504) == "250 ms"
    assert ops_tune._num(None) == "n/a" and ops_tune._num(3.14159) == "3.14"
    assert str(ops_tune.Refused(["a", "b"])) == "a; b" and ops_tune.Refused(["a"]).problems == ["a"]


def test_apply_change_output_is_still_a_valid_class_file():
    text = (REPO / "group_data/pro6000.py").read_text()
    changed = tune.apply_change(text, {"block_size": 4})
    ast.parse(changed)
    declared: dict = {}
    exec(compile(changed, "pro6000.py", "exec"), declared)  # a class file is Python: run as group_data runs it
    assert declared["speculative"]["block_size"] == 4 and changed != text


def test_a_long_deploy_says_where_it_is_every_so_often(here, monkeypatch, capsys):
    stand_in_pyinfra(here, monkeypatch, "OK", "", rc=0)
    real_wait = ops_tune._wait
    waits = iter([None, None, 0])  # two progress intervals pass, then it ends
    monkeypatch.setattr(ops_tune, "_wait", lambda child, seconds: (child.wait(), next(waits))[1])
    t = object.__new__(TUNER)
    t = tuner_at(here)
    t.log_path.write_text("[h1] restart sglang.service: waiting for /health: 30s of 1200s\n")
    assert TUNER.deploy(t, Candidate(8))[0] == 0
    progress = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  deploying, ")]
    assert len(progress) == 2 and all(line.endswith("s: " + repr(ops_tune._last_line(t.log_path)[1:-1]))
                                      for line in progress), progress
    assert real_wait(SimpleNamespace(wait=lambda timeout: (_ for _ in ()).throw(
        subprocess.TimeoutExpired("pyinfra", timeout))), 1) is None
    (here / "empty.log").write_text("")
    assert ops_tune._last_line(here / "empty.log") == "(no output yet)"
