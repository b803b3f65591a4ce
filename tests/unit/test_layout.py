"""fleet/core/layout.py is the one place the deploy names where things live on a host: no other
module of the deploy spells one of its directories in a string."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fleet.core import layout

REPO = Path(__file__).resolve().parents[2]
ROOTS = [layout.CONFIG_DIR, layout.STATE_ROOT, layout.LOCK_ROOT, layout.ENGINE_CACHE_DIR, layout.ENGINES_DIR, layout.ENGINE_PIP_DIR,
         layout.GATEWAY_CONFIG_DIR, layout.UNITS_DIR]
DEPLOY_CODE = sorted(p for d in ("adapter", "fleet", "facts", "tasks", "ops") for p in (REPO / d).rglob("*.py")) \
    + [REPO / "deploy.py"]


@pytest.mark.parametrize("module", [p for p in DEPLOY_CODE if p.name != "layout.py"],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_no_other_module_names_an_on_host_place(module):
    strings = [n.value for n in ast.walk(ast.parse(module.read_text()))
               if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    named = [(root, s) for s in strings if "\n" not in s for root in ROOTS if root in s]  # docstrings may tell
    assert not named, f"{module.relative_to(REPO)} names {named[0][0]} itself (in {named[0][1]!r}): use fleet.core.layout"


def test_every_place_is_under_its_root_and_a_staged_file_beside_its_own():
    unit = "sglang"
    assert layout.pending_file(unit).startswith(layout.state_dir(unit) + "/")
    assert layout.lease_file(layout.lock_file(unit)) == f"{layout.LOCK_ROOT}/{unit}.lease"
    assert layout.staged_path("/etc/sglang/sglang.env") == "/etc/sglang/.sglang.env.sglang-fleet-new"
