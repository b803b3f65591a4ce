"""The Makefile's operator targets pass what they are given to the right command (make -n: nothing runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from pyinfra.api import Inventory

from tasks.preflight import ROLLBACK_DATA, requested_rollback

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not shutil.which("make"), reason="no make here")  # allowed: CI runs make test
OLD_VARIABLE = {"SGLANG_FLEET_ROLLBACK": "previous"}  # how make rollback chose a rollback before: left exported


def dry(*args: str, env: dict | None = None) -> str:
    # not the make running these tests' own variables (make test LAB_WORKERS=3): the Makefile's defaults
    outer = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "LAB_WORKERS", "LAB", "INVENTORY", "ARGS")
    p = subprocess.run(["make", "-n", "-s", *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={**{k: v for k, v in os.environ.items() if k not in outer}, **(env or {})})
    return p.stdout + p.stderr


def test_rollback_names_the_stamp_and_limits_the_deploy_to_the_host():
    out = dry("rollback", "HOST=ops-a", "TO=20261130T120000Z", "INVENTORY=.lab/inventory.py")
    assert (".venv/bin/pyinfra -y --limit ops-a --data 'sglang_fleet_rollback=20261130T120000Z'  .lab/inventory.py "
            "deploy.py") in out
    assert ".venv/bin/pyinfra -y --limit ops-a --data 'sglang_fleet_rollback=previous'  inventory.py deploy.py" in dry(
        "rollback", "HOST=ops-a")
    assert "SGLANG_FLEET_ROLLBACK" not in out  # an argument of that one run, nothing in the environment


def test_a_deploy_with_the_old_rollback_variable_exported_is_a_plain_deploy(monkeypatch):
    out = dry("deploy", "ARGS=--limit h1", env=OLD_VARIABLE)
    assert ".venv/bin/pyinfra -y --limit h1 inventory.py deploy.py" in out and "--data" not in out
    for name, value in OLD_VARIABLE.items():
        monkeypatch.setenv(name, value)
    # preflight asks pyinfra's command-line data only: not the environment, not the inventory's data (all
    # hosts', a group's, a host's)
    data = {ROLLBACK_DATA: "previous"}
    from_files = Inventory(([("h1", data)], data), pro6000=(["h1"], data))
    assert from_files.get_host("h1").data.get(ROLLBACK_DATA) == "previous"
    assert requested_rollback(from_files.get_override_data()) is None
    given = Inventory((["h1"], {}), override_data={ROLLBACK_DATA: "20261130T120000Z"})
    assert requested_rollback(given.get_override_data()) == "20261130T120000Z"
    assert requested_rollback({ROLLBACK_DATA: 20261130}) == "20261130"  # pyinfra reads digits as a number


def test_status_history_and_deploy_pass_their_arguments():
    assert ".venv/bin/python -m ops status inv.py --json" in dry("status", "INVENTORY=inv.py", "ARGS=--json")
    assert ".venv/bin/python -m ops history inv.py h1" in dry("history", "INVENTORY=inv.py", "HOST=h1")
    assert ".venv/bin/pyinfra -y --limit h1 inv.py deploy.py" in dry("deploy", "INVENTORY=inv.py", "ARGS=--limit h1")
    assert ".venv/bin/pyinfra --dry --diff --limit h1 inv.py deploy.py" in dry("dry", "INVENTORY=inv.py", "ARGS=--limit h1")


def test_rollback_and_history_need_a_host():
    for target in ("rollback", "history"):
        p = subprocess.run(["make", "-s", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and f"make {target} HOST=<host>" in p.stdout


def test_tune_names_its_class_and_host_and_passes_the_arguments():
    assert ".venv/bin/python -m ops tune inventory.py --class pro6000 --host pro6000-1 --yes" in dry(
        "tune", "CLASS=pro6000", "HOST=pro6000-1", "ARGS=--yes")
    assert ".venv/bin/python -m ops tune inventory.py --class pro6000  " in dry("tune", "CLASS=pro6000")
    assert "make tune CLASS=<class>" in dry("tune")


def test_the_lab_targets_name_their_lab_and_leave_the_others_alone():
    assert ".venv/bin/python -m lab.lab up --lab lab/gateway.toml" in dry("lab-up", "LAB=lab/gateway.toml")
    assert ".venv/bin/python -m lab.lab down --lab lab/gateway.toml" in dry("lab-down", "LAB=lab/gateway.toml")
    # no LAB: the one lab up (lab.lab refuses to guess between two), every lab's status
    assert ".venv/bin/python -m lab.lab down \n" in dry("lab-down") + "\n"
    assert ".venv/bin/python -m lab.lab status \n" in dry("lab-status") + "\n"
    assert "-m lab.lab inventory --lab lab/gateway.toml" in dry("demo", "LAB=lab/gateway.toml")


def test_the_lab_tests_run_in_workers_of_their_own_groups_and_the_busy_run_hogs_every_core():
    test = dry("test")
    assert "-n 3 --dist loadscope --no-loadscope-reorder" in test and "tests/lab" in test
    busy = dry("test-busy")
    assert "stress-ng --cpu $(nproc)" in busy and "kill $hog" in busy
    assert "-n 3 --dist loadscope" in busy and "tests/unit" not in busy
