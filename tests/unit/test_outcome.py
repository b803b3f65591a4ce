"""Outcomes are types (fleet/outcome.py): what steers a rollout is a HostVerdict, never its words."""

from __future__ import annotations

import ast

import pytest
from test_run import PRODUCT, ROOT

from fleet.activation import Outcome
from fleet.outcome import HostVerdict


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
