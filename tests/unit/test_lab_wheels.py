"""lab/wheels.py: the SGLang double's builds as real wheels, installed with the controller's own pip
(--no-index, from the built directory): each reports its build, the DDTree build has its flag, the
crashing build crashes, the mismatched one is refused, and a rebuild gives the same bytes."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import json
import shutil
import signal
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lab import wheels

ROOT = Path(__file__).resolve().parents[2]
PY3 = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable  # a lab host's python3


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--no-input"],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("index")
    wheels.build_wheels(dest)
    return dest


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory) -> dict[str, Path]:
    """Each good build, installed by pip from the built directory into a target of its own."""
    out = {}
    for version in wheels.GOOD:
        target = tmp_path_factory.mktemp(f"site-{version}")
        # --no-deps: PyYAML, which each requires, is the index's (lab/mirror.py); the controller has it
        done = pip("install", "--quiet", "--no-index", "--no-deps", "--find-links", str(built), "--target", str(target),
                   f"sglang=={version}")
        assert done.returncode == 0, done.stderr
        out[version] = target
    return out


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    """A host whose own entry says another version and no DDTREE: what a build says must win."""
    host = tmp_path / "host.json"
    host.write_text(json.dumps({"sglang_version": "9.9.9", "sglang_algorithms": ["EAGLE"], "engine_import_seconds": 0,
                                "load": "ok", "load_seconds": 0.2, "gpu_count": 1, "gpu_memory_mib": 97887}))
    return {"PATH": "/usr/bin:/bin", "LAB_HOST_JSON": str(host), "LAB_GPU_DIR": str(tmp_path / "gpu"),
            "LAB_SGLANG_IMPORT_LOG": str(tmp_path / "imports.log"), "LAB_SGLANG_WARMUP_SECONDS": "0.2"}


def python(site: Path, env: dict[str, str], *args: str, timeout=30) -> subprocess.CompletedProcess:
    return subprocess.run([PY3, *args], capture_output=True, text=True, env={**env, "PYTHONPATH": str(site)},
                          cwd="/", timeout=timeout)


def test_the_table_has_the_builds_issue_19_names():
    assert [b.version for b in wheels.BUILDS] == ["0.5.23", "0.5.24.dev29907", "0.5.24.dev2", "0.5.24.dev1", "0.5.25"]
    assert wheels.GOOD == ("0.5.23", "0.5.24.dev29907", "0.5.24.dev2", "0.5.24.dev1")


def test_each_build_reports_its_own_version_whatever_the_host_says(installed, env):
    for version, site in installed.items():
        done = python(site, env, "-c", "import sglang; print(sglang.__version__)")
        assert done.stdout.strip() == version, done.stderr


def test_only_the_ddtree_builds_parse_the_ddtree_budget(installed, env):
    for version, site in installed.items():
        done = python(site, env, "-m", "sglang.launch_server", "--help")
        assert done.returncode == 0, done.stderr
        ddtree = version not in ("0.5.23", "0.5.24.dev2")
        assert ("--speculative-ddtree-budget" in done.stdout) == ddtree, version
        builtins = "Builtins: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO" + (", DDTREE." if ddtree else ".")
        assert builtins in " ".join(done.stdout.split()), version


def _model(tmp_path: Path) -> Path:
    spec = importlib.util.spec_from_file_location("record_sglang_fixtures",
                                                  ROOT / "lab" / "doubles" / "record_sglang_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_models(tmp_path / "models") / "target"


def test_the_crashing_build_crashes_on_load_even_as_the_preinstalled_argv(installed, env, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    flags = ["--model-path", str(_model(tmp_path)), "--port", str(port)]
    host = json.loads(Path(env["LAB_HOST_JSON"]).read_text())
    Path(env["LAB_HOST_JSON"]).write_text(json.dumps({**host, "preinstalled_argv": flags}))
    crashed = python(installed["0.5.24.dev1"], env, "-m", "sglang.launch_server", *flags)
    assert crashed.returncode == -signal.SIGKILL
    assert "Traceback (most recent call last):" in crashed.stderr
    assert "Received sigquit from a child process. It usually means the child failed." in crashed.stderr


def test_pip_refuses_the_wheel_whose_metadata_says_another_version(built, tmp_path):
    done = pip("install", "--no-index", "--find-links", str(built), "--target", str(tmp_path / "site"),
               "sglang==0.5.25")
    assert done.returncode != 0 and not (tmp_path / "site" / "sglang").exists()
    assert ("Requested sglang==0.5.25 from file://" + str(built / "sglang-0.5.25-py3-none-any.whl")
            + " has inconsistent version: expected '0.5.25', but metadata has '0.5.26'") in done.stdout + done.stderr


def test_a_rebuild_gives_the_same_bytes(built, tmp_path):
    again = wheels.build_wheels(tmp_path)
    assert [w.name for w in again] == [b.filename for b in wheels.BUILDS] + ["lab_ddtree_plugin-1.0-py3-none-any.whl"]
    for w in again:
        assert w.read_bytes() == (built / w.name).read_bytes(), w.name


def test_a_wheel_is_the_package_and_what_pip_checks_nothing_an_import_left(tmp_path, monkeypatch):
    source = tmp_path / "src" / "sglang"
    shutil.copytree(wheels.DOUBLE, source, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (source / "__pycache__").mkdir()
    (source / "__pycache__" / "_lab.cpython-311.pyc").write_bytes(b"stale")
    (source / "srt" / "stray.pyc").write_bytes(b"stale")
    monkeypatch.setattr(wheels, "DOUBLE", source)
    build = wheels.BUILDS[1]
    with zipfile.ZipFile(wheels.build_wheel(build, tmp_path / "out")) as z:
        names = z.namelist()
        info = f"sglang-{build.version}.dist-info"
        assert names[-3:] == [f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD"]
        assert names[:-3] == sorted(names[:-3]) and not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
        expected = {str(p.relative_to(source.parent)) for p in source.rglob("*.py")} | {"sglang/flags.json"}
        assert set(names[:-3]) == expected | {"sglang/_build.json"}
        assert json.loads(z.read("sglang/_build.json")) == {
            "sglang_version": "0.5.24.dev29907", "sglang_algorithms": wheels.BUILTIN_ALGORITHMS + ["DDTREE"]}
        metadata = z.read(f"{info}/METADATA").decode()
        assert metadata.startswith("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.24.dev29907\n")
        assert z.read(f"{info}/WHEEL").decode().splitlines()[0::2] == ["Wheel-Version: 1.0", "Root-Is-Purelib: true"]
        assert "Tag: py3-none-any" in z.read(f"{info}/WHEEL").decode()
        rows = list(csv.reader(io.StringIO(z.read(f"{info}/RECORD").decode())))
        assert [r[0] for r in rows] == names and rows[-1] == [f"{info}/RECORD", "", ""]
        for name, digest, size in rows[:-1]:
            data = z.read(name)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert int(size) == len(data)
        assert {i.date_time for i in z.infolist()} == {wheels.EPOCH}
