"""make bench's code, kept from breaking silently (no test runs a benchmark: they need the lab and
take minutes): every bench module imports and is run by make bench, and its lab files are valid."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.spec.load import gateway_files, load_class_specs
from lab import labfile

ROOT = Path(__file__).resolve().parents[2]
BENCHES = sorted(p for p in (ROOT / "bench").glob("*.py") if p.name != "common.py")  # common.py: what they share


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_bench_imports_and_make_bench_runs_it():
    # in a process of its own: the benches import pyinfra's CLI, whose gevent patching would change
    # this test process's threads for the tests after it
    loader = "import importlib.util as u, sys\nfor p in sys.argv[1:]:\n    s = u.spec_from_file_location('b', p)\n" \
             "    m = u.module_from_spec(s); s.loader.exec_module(m); assert callable(m.main), p\n"
    done = subprocess.run([sys.executable, "-c", loader, *map(str, BENCHES)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    for path in BENCHES:
        assert f"bench/{path.name}" in (ROOT / "Makefile").read_text()


@pytest.mark.parametrize("name, text, hosts", [
    ("status", lambda m: (ROOT / "lab" / "fleet48.toml").read_text(), 48), ("turns", lambda m: m.LAB, 3),
    ("canary", lambda m: m.LAB, 3),
    ("engine", lambda m: m.LAB, 2), ("weights", lambda m: m.LAB, 2), ("real", lambda m: m.LAB, 1)])
def test_the_benches_labs_are_valid_lab_files(name, text, hosts, tmp_path):
    path = tmp_path / f"{name}.toml"
    path.write_text(text(load(ROOT / "bench" / f"{name}.py")))
    groups = sorted(load_class_specs(ROOT / "group_data"))
    lab = labfile.parse(path, groups, sorted(gateway_files(ROOT / "group_data")))
    assert len(lab.hosts) == hosts
