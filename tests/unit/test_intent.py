"""fleet.rollout.intent: a run's intent read from its --data (every refusal), its overlay laid over the spec, the return from
an overlay a host still serves; and the deploy's modules branch on no tune flag: the intent is data they take."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from builders import DRAFT, make_spec

from fleet.rollout import intent
from fleet.tune import search as tune
from fleet.rollout.intent import INTENT_DATA, PLAIN, Intent

ROOT = Path(__file__).resolve().parents[2]
SPEC = make_spec()  # DFLASH, block size 16
DDTREE = make_spec(speculative={"algorithm": "DDTREE", "draft_model_path": DRAFT, "block_size": 8, "tree_budget": 64})
FULL = {"overlay": {"block_size": 8}, "says": "a make tune candidate (block size 8)", "stay_out": True,
        "keep_backup": False, "record": "tune", "owner": "make tune of h1 (pid 7 on c)", "lease_s": 900,
        "outcome": "/tmp/outcome.json"}


@pytest.mark.parametrize("data, want", [
    ({}, PLAIN),
    ({"other": 1}, PLAIN),
    ({INTENT_DATA: None}, PLAIN),
    ({INTENT_DATA: {}}, PLAIN),
    ({INTENT_DATA: FULL}, Intent({"block_size": 8}, "a make tune candidate (block size 8)", True, False, "tune",
                                 "make tune of h1 (pid 7 on c)", 900.0, "/tmp/outcome.json")),
    ({INTENT_DATA: json.dumps(FULL)}, intent.requested({INTENT_DATA: FULL})),  # a string of JSON, as a shell gives it
    ({INTENT_DATA: {"overlay": {"block_size": 4, "tree_budget": 32}}}, Intent({"block_size": 4, "tree_budget": 32})),
])
def test_requested_reads_the_intent_of_the_run(data, want):
    assert intent.requested(data) == want


def test_an_intent_goes_through_its_json_unchanged():
    i = intent.requested({INTENT_DATA: FULL})
    assert intent.requested({INTENT_DATA: json.dumps(i.to_json())}) == i and i.owned == ("make tune of h1 (pid 7 on c)",
                                                                                         900.0)
    assert PLAIN.owned is None and PLAIN.keep_backup and PLAIN.record == "deploy" and not PLAIN.stay_out


@pytest.mark.parametrize("value, said", [
    (8, "expected a JSON object of overlay, says"),
    ("block_size=8", "expected a JSON object"),
    ([1], "expected a JSON object"),
    ({"overlay": {}, "candidate": 8}, "expected a JSON object"),  # an unknown key
    ({"overlay": [8]}, "overlay: expected whole numbers for block_size, tree_budget"),
    ({"overlay": {"block_size": "8"}}, "overlay: expected whole numbers"),
    ({"overlay": {"block_size": True}}, "overlay: expected whole numbers"),  # a bool is no number here
    ({"overlay": {"block_size": 8.0}}, "overlay: expected whole numbers"),
    ({"overlay": {"model_path": 1}}, "overlay: expected whole numbers for block_size, tree_budget"),
    ({"stay_out": "yes"}, "stay_out: expected a bool"),
    ({"keep_backup": 0}, "keep_backup: expected a bool"),
    ({"says": 8}, "says: expected a str"),
    ({"record": "rollback"}, "record: expected one of deploy, tune"),
    ({"owner": "t"}, "expected an owner of printable characters and a lease of 0..7 days"),
    ({"owner": "t\n@@result=ok", "lease_s": 9}, "expected an owner of printable characters"),
    ({"owner": "t", "lease_s": -1}, "a lease of 0..7 days"),
    ({"owner": "t", "lease_s": 1e9}, "a lease of 0..7 days"),
    ({"owner": "t", "lease_s": "9"}, "a lease of 0..7 days"),
    ({"says": "x\n@@result=ok"}, "expected says of printable characters"),
    ({"says": "x" * 257}, "expected says of printable characters"),
    ({"outcome": "/" + "x" * 5000}, "an outcome path of at most 4096"),
])
def test_requested_refuses_what_is_not_an_intent_naming_its_data(value, said):
    with pytest.raises(ValueError) as e:
        intent.requested({INTENT_DATA: value})
    assert str(e.value).startswith(f"--data {INTENT_DATA}: ") and said in str(e.value)


def test_the_overlay_is_laid_over_the_declared_spec_and_refused_where_the_spec_refuses_it():
    assert intent.applied(SPEC, PLAIN) is SPEC
    assert intent.applied(SPEC, Intent({"block_size": 8})).speculative.block_size == 8
    both = intent.applied(DDTREE, Intent({"block_size": 4, "tree_budget": 32})).speculative
    assert (both.block_size, both.tree_budget) == (4, 32)
    with pytest.raises(ValueError, match="speculative.algorithm DFLASH has no tree_budget"):
        intent.applied(SPEC, Intent({"tree_budget": 32}))
    with pytest.raises(ValueError, match="block size 17: block_size: Input should be less than or equal to 16"):
        intent.applied(SPEC, Intent({"block_size": 17}, "block size 17"))
    plain = make_spec(speculative={"algorithm": "none"})
    with pytest.raises(ValueError, match="speculative.algorithm none has no block_size"):
        intent.applied(plain, Intent({"block_size": 8}))


def test_a_run_without_an_overlay_on_a_host_that_serves_one_returns_it_keeping_the_overlays_records():
    left = tune.read_mark(json.dumps(tune.mark(1, "root@c", "block size 8")))
    assert PLAIN.returning(None) is PLAIN
    assert PLAIN.returning(left) == Intent(keep_backup=False, record="tune")
    owned = Intent(owner="make tune of h1", lease_s=60.0)
    assert owned.returning(left) == Intent(keep_backup=False, record="tune", owner="make tune of h1", lease_s=60.0)
    candidate = Intent({"block_size": 4}, stay_out=True)
    assert candidate.returning(left) is candidate  # the next overlay: no return


# --- no branch on a tune flag -------------------------------------------------------------------------------------

DEPLOY_MODULES = ("fleet/rollout/plan.py", "fleet/rollout/pending.py", "fleet/rollout/commands.py", "fleet/turns/rolling.py",
                  "fleet/rollout/activation.py", "tasks/preflight.py", "tasks/activate.py", "tasks/rolling.py", "tasks/recovery.py")


def _mentions_tune(node: ast.AST) -> list[str]:
    found = []
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and "tune" in n.id.lower():
            found.append(n.id)
        elif isinstance(n, ast.Attribute) and "tune" in n.attr.lower():
            found.append(n.attr)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.lower() == "tune":
            found.append(repr(n.value))
    return found


def tune_branches(source: str) -> list[str]:
    """Each test of a branch (if, while, a conditional expression, a comprehension's if, an and/or, a comparison, a
    match) that looks at something named tune."""
    out = []
    for n in ast.walk(ast.parse(source)):
        tests = []
        if isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            tests = [n.test]
        elif isinstance(n, ast.comprehension):
            tests = list(n.ifs)
        elif isinstance(n, (ast.BoolOp, ast.Compare)):
            tests = [n]
        elif isinstance(n, ast.Match):
            tests = [n.subject]
        out += [f"line {t.lineno}: {ast.unparse(t)}" for t in tests if _mentions_tune(t)]
    return sorted(set(out))


def test_the_check_finds_a_branch_on_a_tune_flag():
    assert tune_branches("if plan.tune:\n    x = 1\n") == ["line 1: plan.tune"]
    assert tune_branches("y = 1 if p.tune_left is None else 2\n") == ["line 1: p.tune_left is None"]
    assert tune_branches("kind = 'tune' if a or b else 'deploy'\n") == []  # a value chosen, not a branch on one
    assert tune_branches("ok = record.get('kind') == 'tune'\n") == ["line 1: record.get('kind') == 'tune'"]
    assert tune_branches("z = [c for c in cs if c.tune]\n") == ["line 1: c.tune"]
    assert tune_branches("why = p.intent.says or 'its turn'\n") == []


@pytest.mark.parametrize("module", DEPLOY_MODULES)
def test_no_branch_on_a_tune_flag_remains_in_the_deploy(module):
    assert tune_branches((ROOT / module).read_text()) == []
