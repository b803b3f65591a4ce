"""Outcomes are types (fleet/core/outcome.py): what steers a rollout is a HostVerdict, never its words; so are a record's
kind and result (RecordKind, RecordResult), a drain's answer (DrainResult) and what a fact came to (fleet/rollout/gpus.py's,
fleet/engine/parse.py's and fleet/weights/parse.py's statuses): neither compared with nor assigned as the words they stand for."""

from __future__ import annotations

import ast

import pytest
from test_run import PRODUCT, ROOT

from fleet.rollout.activation import Outcome
from fleet.turns.drains import Answer, DrainResult
from fleet.core.outcome import HostVerdict, RecordKind, RecordResult
from fleet.engine.parse import Engine, EngineStatus
from fleet.rollout.gpus import GpuList, NvidiaSmiStatus
from fleet.weights.parse import ModelDir, ModelStatus


def test_what_serves_and_what_says_why_is_decided_by_the_verdict():
    assert {v for v in HostVerdict if v.serves} == {HostVerdict.OK, HostVerdict.ROLLED_BACK}
    assert {v for v in HostVerdict if not v.said_why} == {
        HostVerdict.PENDING, HostVerdict.PASSED_PREFLIGHT, HostVerdict.OK, HostVerdict.INTERRUPTED}
    assert [v for v in HostVerdict if v.ok] == [HostVerdict.OK]


def test_an_outcome_holds_a_verdict_and_refuses_words_that_are_none():
    assert Outcome("FAILED (rolled back)").verdict is HostVerdict.ROLLED_BACK
    with pytest.raises(ValueError):
        Outcome("FAILED (rolled back, sort of)")


def verdict_words_compared(tree: ast.AST) -> list[str]:
    """Comparisons of something's verdict with a string literal: words that would steer."""
    def is_verdict(n: ast.AST) -> bool:
        return (isinstance(n, ast.Attribute) and n.attr == "verdict") or (isinstance(n, ast.Name) and n.id == "verdict")

    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare):
            sides = [n.left, *n.comparators]
            if any(is_verdict(s) for s in sides) and any(isinstance(s, ast.Constant) and isinstance(s.value, str)
                                                         for s in sides):
                out.append(ast.unparse(n))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("startswith", "endswith") \
                and is_verdict(n.func.value):
            out.append(ast.unparse(n))
    return out


@pytest.mark.parametrize("path", PRODUCT, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_verdict_is_steered_by_its_words(path):
    assert verdict_words_compared(ast.parse(path.read_text())) == []


def test_the_check_finds_words_that_steer():
    tree = ast.parse('if out.verdict == "FAILED (rolled back)" or r.verdict.startswith("FAILED"): pass')
    assert len(verdict_words_compared(tree)) == 2


# What each steering name stands for: its type's words, compared or assigned as a literal, steer by words.
STEERING = {
    "verdict": {v.value for v in HostVerdict},
    "kind": {v.value for v in RecordKind},
    "result": {v.value for v in (*RecordResult, *DrainResult)},
    "status": {v.value for v in (*NvidiaSmiStatus, *EngineStatus, *ModelStatus)},
}


def _steering(n: ast.AST) -> str | None:
    """The steering name `n` reads or writes: x.verdict, verdict, record.get("kind"), record["result"]."""
    if isinstance(n, ast.Attribute):
        name = n.attr
    elif isinstance(n, ast.Name):
        name = n.id
    elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" and n.args \
            and isinstance(n.args[0], ast.Constant):
        name = n.args[0].value
    elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant):
        name = n.slice.value
    else:
        return None
    return name if name in STEERING else None


def _words(n: ast.AST | None, name: str) -> bool:
    """`n` is one of `name`'s words as a literal (or a tuple, list or set of them, or a choice between them)."""
    if isinstance(n, ast.Constant):
        return isinstance(n.value, str) and n.value in STEERING[name]
    if isinstance(n, (ast.Tuple, ast.List, ast.Set)):
        return any(_words(e, name) for e in n.elts)
    if isinstance(n, ast.IfExp):
        return _words(n.body, name) or _words(n.orelse, name)
    return False


def words_that_steer(tree: ast.AST) -> list[str]:
    """Steering names compared with, or assigned, their words as literals: `r.result == "ok"`,
    `report.verdict = "passed preflight"`, `Answer(result="busy")`, `{"kind": "tune"}`."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare):
            sides = [n.left, *n.comparators]
            names = [s for s in map(_steering, sides) if s]
            if any(_words(s, name) for name in names for s in sides):
                out.append(ast.unparse(n))
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any((name := _steering(t)) and _words(n.value, name) for t in targets):
                out.append(ast.unparse(n))
        elif isinstance(n, ast.keyword) and n.arg in STEERING and _words(n.value, n.arg):
            out.append(ast.unparse(n))
        elif isinstance(n, ast.Dict):
            out += [f"{ast.unparse(k)}: {ast.unparse(v)}" for k, v in zip(n.keys, n.values)
                    if isinstance(k, ast.Constant) and k.value in STEERING and _words(v, k.value)]
    return out


# fleet/programs/ run on the hosts, with nothing of the deploy importable there: their words are the wire's
@pytest.mark.parametrize("path", [p for p in PRODUCT if "programs" not in p.relative_to(ROOT).parts],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_outcome_is_compared_with_or_assigned_its_words(path):
    assert words_that_steer(ast.parse(path.read_text())) == []


def test_the_check_finds_words_compared_and_assigned():
    tree = ast.parse(
        'report.verdict = "passed preflight"\n'
        'if r.result == "ok" and record.get("kind") != "tune" or gpus.status == "nvidia-smi missing": pass\n'
        'x = {"result": "rolled-back" if bad else "failed", "kind": "deploy"}\n'
        'Answer(result="busy")\n'
        'if answer.result in ("no answer", "busy"): pass\n'
        'verdict: str = "OK"\n')
    assert len(words_that_steer(tree)) == 9
    fine = ast.parse('report.verdict = HostVerdict.OK\nif r.result == RecordResult.OK: pass\nkind = "server"\n'
                     'x = {"result": RecordResult.OK}\nif held.kind != "free": pass\n')
    assert words_that_steer(fine) == []


def test_a_status_holds_its_type_and_refuses_words_that_are_none():
    assert GpuList("nvidia-smi missing").status is NvidiaSmiStatus.MISSING
    assert Engine("no launcher").status is EngineStatus.NO_LAUNCHER
    assert ModelDir("/m", "damaged").status is ModelStatus.DAMAGED
    assert Answer("peer").result is DrainResult.PEER
    for made in (lambda: GpuList("nvidia-smi gone"), lambda: Engine("no lancher"), lambda: ModelDir("/m", "broken"),
                 lambda: Answer("maybe")):
        with pytest.raises(ValueError):
            made()
