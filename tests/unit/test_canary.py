"""fleet.turns.canary: the canary's figures against its class's baseline, every verdict; the baseline from a make
tune record or from the load on the old spec; which canaries are analysed."""

from __future__ import annotations

import copy

import pytest
from builders import DRAFT, make_spec

from fleet.turns import canary
from fleet.turns.canary import Baseline, Figures, judge
from fleet.rollout.render import server_argv
from fleet.spec import Canary
from fleet.tune.search import level

C = Canary()
BASE = Baseline(Figures(400.0, 4.0, 16), "the same load on the canary before its turn (the old spec)")
SPEC = make_spec()  # DFLASH, block size 16
DDTREE = make_spec(speculative={"algorithm": "DDTREE", "draft_model_path": DRAFT, "block_size": 8, "tree_budget": 64})
PLAIN = make_spec(speculative={"algorithm": "none"})


@pytest.mark.parametrize("tps, accept, passed", [
    (400.0, 4.0, True),  # as good
    (280.0, 3.2, True),  # at both bounds: 0.7 x 400, 0.8 x 4.0
    (279.9, 4.0, False),  # slower
    (400.0, 3.19, False),  # accepts less
    (100.0, 1.0, False),  # both
    (900.0, 9.0, True),  # better
])
def test_the_canary_fails_below_either_fraction_of_its_baseline(tps, accept, passed):
    a = judge(Figures(tps, accept, 16), BASE, C, speculative=True, metrics=True)
    assert a.passed is passed
    assert ("canary analysis passed: " if passed else "canary analysis failed: ") in a.summary
    assert "against the baseline's 400.0 tok/s, accept length 4.00 (the same load on the canary before its turn (the " \
           "old spec)); bounds: 0.7 x its tok/s, 0.8 x its accept length" in a.summary


def test_the_summary_names_each_figure_below_its_bound():
    a = judge(Figures(100.0, 1.0, 16), BASE, C, speculative=True, metrics=True)
    assert a.summary.startswith("canary analysis failed: 100.0 tok/s below 0.7 x 400.0 = 280.0; accept length 1.00 "
                                "below 0.8 x 4.00 = 3.20: 100.0 tok/s, accept length 1.00 against")


def test_declared_fractions_are_the_bounds():
    strict = Canary(min_accept_length=1.0, min_tokens_per_s=0.5)
    assert not judge(Figures(400.0, 3.99, 16), BASE, strict, True, True).passed
    assert judge(Figures(200.0, 4.0, 16), BASE, strict, True, True).passed


def test_a_failed_request_fails_the_canary_whatever_its_speed():
    a = judge(Figures(900.0, 9.0, 16, failed=1), BASE, C, True, True)
    assert not a.passed and a.summary == "canary analysis: 1 of 16 requests of its load failed"
    assert not judge(Figures(900.0, 9.0, 16, failed=1), None, C, True, True).passed


def test_no_baseline_passes_saying_so():
    a = judge(Figures(10.0, 1.0, 16), None, C, True, True)
    assert a.passed
    assert a.summary.startswith("canary analysis: 10.0 tok/s, accept length 1.00; not compared: no baseline")


def test_speculation_that_did_not_run_fails_a_speculative_canary():
    a = judge(Figures(400.0, None, 16), BASE, C, speculative=True, metrics=True)
    assert not a.passed and "no accept length: SGLang counted no verify step (speculation did not run)" in a.summary


@pytest.mark.parametrize("speculative, metrics, base_accept, note", [
    (False, True, 4.0, "no speculation: tokens/s alone"),
    (True, False, 4.0, "service.enable_metrics false: tokens/s alone"),
    (True, True, None, "the baseline had no accept length: tokens/s alone"),
])
def test_without_an_accept_length_to_compare_tokens_per_s_alone_decides(speculative, metrics, base_accept, note):
    base = Baseline(Figures(400.0, base_accept, 16), "x")
    ok = judge(Figures(300.0, None if not speculative else 1.0, 16), base, C, speculative, metrics)
    assert ok.passed and ok.summary.endswith(f"({note})") and "x its accept length" not in ok.summary
    slow = judge(Figures(200.0, 9.0, 16), base, C, speculative, metrics)
    assert not slow.passed and "200.0 tok/s below 0.7 x 400.0 = 280.0" in slow.summary


ARGV = server_argv(SPEC)


def test_the_old_specs_load_is_a_baseline_only_when_it_served_every_request():
    ok = level(4, [(1.0, True, 100, 0.1, "")] * 4, 1.0, {}, {})
    assert canary.before_turn(ok, tuple(ARGV), ARGV) == Baseline(Figures(400.0, None, 4), canary.BEFORE_SOURCE)
    assert canary.before_turn(level(4, [(1.0, True, 100, 0.1, "")] * 3, 1.0, {}, {}, planned=4), (), ARGV) is None
    assert canary.before_turn(level(4, [(1.0, True, 0, 0.1, "")] * 4, 1.0, {}, {}), (), ARGV) is None
    assert canary.before_turn(None, (), ARGV) is None


def test_the_old_specs_accept_length_counts_only_where_it_drafted_as_the_new_one():
    ok = level(4, [(1.0, True, 100, 0.1, "")] * 4, 1.0, {}, {})
    new_drafter = server_argv(make_spec(speculative={"algorithm": "DFLASH", "draft_model_path": DRAFT + "-v2",
                                                     "block_size": 16}))
    assert canary.before_turn(ok, tuple(new_drafter), ARGV).unlike == ""  # only the drafter changed
    shorter = server_argv(make_spec(speculative={"algorithm": "DFLASH", "draft_model_path": DRAFT, "block_size": 8}))
    b = canary.before_turn(ok, tuple(shorter), ARGV)
    assert b.unlike == "the old spec drafts otherwise (--speculative-dflash-block-size)"
    assert canary.before_turn(ok, tuple(server_argv(PLAIN)), ARGV).unlike == \
        "the old spec drafts otherwise (--speculative-algorithm, --speculative-dflash-block-size)"
    assert canary.before_turn(ok, None, ARGV).unlike == "the old server's command line unknown"
    # judged by tokens/s alone, saying why: an accept length that fell with the draft length fails nothing
    a = judge(Figures(400.0, 2.0, 16), Baseline(Figures(400.0, 4.0, 16), "s", b.unlike), C, True, True)
    assert a.passed and a.summary.endswith("(the old spec drafts otherwise (--speculative-dflash-block-size): "
                                           "tokens/s alone)")


def test_drafting_reads_both_forms_of_a_flag_and_ignores_the_drafters_name():
    assert canary.drafting(["python", "--speculative-algorithm=DFLASH", "--speculative-dflash-block-size", "8",
                            "--speculative-draft-model-path", "/d", "--speculative-x", "--port", "1"]) == {
        "--speculative-algorithm": "DFLASH", "--speculative-dflash-block-size": "8", "--speculative-x": ""}
    assert canary.drafting(["python", "--model-path", "/m"]) == {}


RECORD = {"class": "pro6000", "target": SPEC.target_path, "algorithm": "DFLASH", "candidates": [
    {"candidate": {"block_size": 8}, "deployed": True, "levels": [
        {"concurrency": 4, "requests": 16, "failed": 0, "tokens_per_s": 300.0, "accept_length": 3.0}]},
    {"candidate": {"block_size": 16}, "deployed": True, "levels": [
        {"concurrency": 1, "requests": 8, "failed": 0, "tokens_per_s": 120.0, "accept_length": 5.0},
        {"concurrency": 4, "requests": 16, "failed": 0, "tokens_per_s": 410.0, "accept_length": 4.6}]}]}


def test_the_tune_record_gives_the_figures_of_the_specs_block_size_at_the_concurrency():
    b = canary.from_record(RECORD, SPEC, "pro6000", 4, "tuning/pro6000.json")
    assert b == Baseline(Figures(410.0, 4.6, 16), "make tune record tuning/pro6000.json (block size 16, concurrency 4)")
    assert canary.from_record(RECORD, SPEC, "pro6000", 1, "p").figures.tokens_per_s == 120.0


def changed(path, value):
    r = copy.deepcopy(RECORD)
    *keys, last = path
    node = r
    for k in keys:
        node = node[k]
    node[last] = value
    return r


@pytest.mark.parametrize("record", [
    None, [], "x", {},
    changed(["class"], "a6000"),
    changed(["target"], "/models/other"),
    changed(["algorithm"], "DDTREE"),
    changed(["candidates"], "x"),
    changed(["candidates", 1, "deployed"], False),
    changed(["candidates", 1, "candidate"], {"block_size": 16, "tree_budget": 8}),
    changed(["candidates", 1, "levels"], None),
    changed(["candidates", 1, "levels", 1, "failed"], 1),
    changed(["candidates", 1, "levels", 1, "tokens_per_s"], 0),
    changed(["candidates", 1, "levels", 1, "tokens_per_s"], "410"),
    changed(["candidates", 1, "levels", 1, "tokens_per_s"], float("inf")),
    changed(["candidates", 1, "levels", 1, "accept_length"], -1),
    changed(["candidates", 1, "levels", 1, "requests"], 0),
    changed(["candidates", 1, "levels", 1, "concurrency"], 8),
])
def test_a_record_of_something_else_or_unusable_figures_is_no_baseline(record):
    assert canary.from_record(record, SPEC, "pro6000", 4, "p") is None


def test_a_record_level_without_accept_length_is_a_tokens_per_s_baseline():
    b = canary.from_record(changed(["candidates", 1, "levels", 1, "accept_length"], None), SPEC, "pro6000", 4, "p")
    assert b.figures == Figures(410.0, None, 16)


def test_ddtree_matches_the_tree_budget_too_and_a_spec_without_speculation_has_no_record_baseline():
    r = {**RECORD, "algorithm": "DDTREE", "target": DDTREE.target_path, "candidates": [
        {"candidate": {"block_size": 8, "tree_budget": 32}, "deployed": True,
         "levels": RECORD["candidates"][0]["levels"]},
        {"candidate": {"block_size": 8, "tree_budget": 64}, "deployed": True,
         "levels": RECORD["candidates"][1]["levels"]}]}
    assert canary.from_record(r, DDTREE, "pro6000", 4, "p").source == \
        "make tune record p (block size 8, tree budget 64, concurrency 4)"
    assert canary.from_record({**RECORD, "algorithm": "none"}, PLAIN, "pro6000", 4, "p") is None


@pytest.mark.parametrize("analysis, hosts, mid_change, judged", [
    (True, 3, False, True), (True, 2, False, True),
    (False, 3, False, False),  # declared off
    (True, 1, False, False),  # a class of one: nobody follows it
    (True, 3, True, False),  # a takeover of a host left mid-change: no old spec serves
])
def test_which_canaries_are_analysed(analysis, hosts, mid_change, judged):
    spec = SPEC.model_copy(update={"canary": Canary(analysis=analysis)})
    assert canary.judged(spec, hosts, mid_change) is judged


def test_the_load_is_the_declared_one_with_make_tunes_prompts():
    spec = SPEC.model_copy(update={"canary": Canary(requests=4, concurrency=2, max_tokens=32, timeout_s=9)})
    load = canary.load(spec.canary, spec)
    assert (load.requests, load.concurrency, load.max_tokens, load.timeout_s) == (4, 2, 32, 9)
    assert load.prompts[0].startswith("Write a short story")


def test_unmeasured_is_a_failure_saying_why():
    a = canary.unmeasured("measure: expected the load's record, found 'Killed'")
    assert not a.passed and a.summary.endswith("found 'Killed'")
