"""The Makefile's operator targets pass what they are given to the right command (make -n: nothing runs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not shutil.which("make"), reason="no make here")  # allowed: CI runs make test


def dry(*args: str) -> str:
    p = subprocess.run(["make", "-n", "-s", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    return p.stdout + p.stderr


def test_rollback_names_the_stamp_and_limits_the_deploy_to_the_host():
    out = dry("rollback", "HOST=ops-a", "TO=20261130T120000Z", "INVENTORY=.lab/inventory.py")
    assert "SGLANG_FLEET_ROLLBACK=20261130T120000Z .venv/bin/pyinfra -y --limit ops-a  .lab/inventory.py deploy.py" in out
    assert "SGLANG_FLEET_ROLLBACK=previous " in dry("rollback", "HOST=ops-a")


def test_status_history_and_deploy_pass_their_arguments():
    assert ".venv/bin/python -m ops status inv.py --json" in dry("status", "INVENTORY=inv.py", "ARGS=--json")
    assert ".venv/bin/python -m ops history inv.py h1" in dry("history", "INVENTORY=inv.py", "HOST=h1")
    assert ".venv/bin/pyinfra -y --limit h1 inv.py deploy.py" in dry("deploy", "INVENTORY=inv.py", "ARGS=--limit h1")
    assert ".venv/bin/pyinfra --dry --diff --limit h1 inv.py deploy.py" in dry("dry", "INVENTORY=inv.py", "ARGS=--limit h1")


def test_rollback_and_history_need_a_host():
    for target in ("rollback", "history"):
        p = subprocess.run(["make", "-s", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and f"make {target} HOST=<host>" in p.stdout
