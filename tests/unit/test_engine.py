"""The declared engine (fleet/spec/engine.py EngineSpec, fleet/engine/install.py): its validation and name, and its
commands run for real here: a venv built by the controller's own pip from a package index on
loopback, holding the SGLang double's wheels (lab/wheels.py), then checked as a host checks it."""

from __future__ import annotations

import base64
import functools
import http.server
import json
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from builders import SPEC, make_spec
from packaging.utils import canonicalize_name
from pydantic import ValidationError

from facts.sglang import SglangEngine
from fleet.engine import install as rules
from fleet.engine.install import the_pip_wheel
from fleet.core import layout
from fleet.spec.load import SpecError, validate_class
from fleet.rollout.guards import engine_violations
from fleet.engine.parse import parse_engine
from fleet.rollout.render import server_argv
from fleet.spec import ClassSpec
from lab import mirror
from tasks.common import CACHE, downloaded
from tasks.engine import PIP
from lab.wheels import BUILDS, PLUGIN, build_wheel, build_wheels




@pytest.fixture(scope="module")
def pip_wheel() -> str:
    """The pip wheel a deploy installs engines with (tasks/engine.py), from the controller's cache: a
    wheel alone on sys.path, as on a host (the project venv's pip would bring the venv's packages)."""
    return str(the_pip_wheel(downloaded(CACHE / "wheels" / PIP.replace("==", "-"),
                                        ["--no-deps", "--only-binary=:all:", PIP], PIP)))
DDTREE = {"algorithm": "DDTREE", "draft_model_path": "/m/draft", "block_size": 8, "tree_budget": 64}


def engine_spec(**engine) -> ClassSpec:
    data = SPEC.model_dump(mode="json")
    data["service"].pop("launcher")
    return ClassSpec.model_validate({**data, "engine": {"sglang": "sglang==0.5.23", **engine}})


# --- the spec -----------------------------------------------------------------------------

def test_the_engine_is_named_by_what_it_installs_and_its_venv_is_the_launcher():
    a = engine_spec()
    assert a.engine.name.startswith("sglang-0.5.23-") and rules.NAME.match(a.engine.name)
    assert a.launcher == f"{layout.ENGINES_DIR}/{a.engine.name}/bin/python" == server_argv(a)[0]
    assert engine_spec().engine.name == a.engine.name  # the same declaration, the same venv on every host
    others = [engine_spec(sglang="sglang==0.5.24.dev29907"), engine_spec(packages=["torch==2.9.1"]),
              engine_spec(index_url="http://10.0.0.5:8080/simple/"), engine_spec(python="/usr/bin/python3.12")]
    assert len({a.engine.name, *(o.engine.name for o in others)}) == 5
    assert engine_spec(keep=5, disk_mib=1).engine.name == a.engine.name  # how it is kept is not what it is
    built = [engine_spec(wheels=[f"/w/{n}"]).engine.name for n in ("sglang-0.5.23-py3-none-any.whl",
                                                                     "sglang-0.5.23-1-py3-none-any.whl")]
    assert len({a.engine.name, *built}) == 3  # a rebuild by its build tag is another engine
    assert engine_spec(wheels=["/elsewhere/sglang-0.5.23-py3-none-any.whl"]).engine.name == built[0]
    assert SPEC.launcher == "/opt/sglang/bin/python" and SPEC.engine is None


def test_a_spec_round_trips_through_its_record():
    spec = engine_spec()
    assert ClassSpec.model_validate(json.loads(spec.model_dump_json())) == spec


def test_engine_and_a_hand_made_launcher_are_exclusive():
    data = SPEC.model_dump(mode="json")
    with pytest.raises(ValidationError, match="engine and service.launcher are exclusive"):
        ClassSpec.model_validate({**data, "engine": {"sglang": "sglang==0.5.23"}})


@pytest.mark.parametrize("field, value, said", [
    ("sglang", "sglang>=0.5", "pinned to one version"),
    ("sglang", "sglang==0.5.*", "pinned to one version"),
    ("sglang", "sglang @ https://example.invalid/sglang.whl", "pinned to one version"),
    ("sglang", "sglang==0.5.23; python_version < '3.9'", "pinned to one version"),
    ("sglang", "torch==2.9.1", "SGLang's requirement"),
    ("sglang", "sglang==0.5.23 --index-url http://evil", "a pip requirement"),
    ("packages", ["sglang==0.5.23"], "no sglang here"),
    ("packages", ["torch==2.9.1", "Torch==2.9.0"], "torch more than once"),
    ("packages", ["torch"], "pinned to one version"),
    ("index_url", "ftp://mirror/simple", "an http(s) URL"),
    ("index_url", "https://user:s3cret@mirror/simple", "without credentials"),
    ("index_url", "https://mirror /simple", "an http(s) URL"),
    ("extra_index_urls", ["file:///srv/wheels"], "an http(s) URL"),
    ("python", "python3", "absolute path"),
    ("wheels", ["dist/sglang.tar.gz"], "a wheel file's path"),
])
def test_bad_engine_fields_are_refused_naming_the_rule(field, value, said):
    data = SPEC.model_dump(mode="json")
    data["service"].pop("launcher")
    with pytest.raises(SpecError) as e:
        validate_class("group_data/x.py", {**data, "engine": {"sglang": "sglang==0.5.23", field: value}})
    (problem,) = e.value.problems
    assert problem.startswith(f"group_data/x.py: engine.{field}") and said in problem and "s3cret" not in problem


# --- survey and garbage collection ---------------------------------------------------------

def names(*versions: str) -> list[str]:
    return [engine_spec(sglang=f"sglang=={v}").engine.name for v in versions]


def test_unused_engines_beyond_keep_go_oldest_first_never_one_a_unit_runs_nor_the_declared():
    live, backup, declared, new, mid, old = names("0.5.20", "0.5.21", "0.5.23", "0.5.19", "0.5.18", "0.5.17")
    survey = rules.Survey({live: 1, backup: 2, declared: 3, new: 30, mid: 20, old: 10}, frozenset({live, backup}))
    assert rules.to_remove(survey, declared, keep=1) == [mid, old]
    assert rules.to_remove(survey, declared, keep=0) == [new, mid, old]
    assert rules.to_remove(survey, declared, keep=5) == []


def test_the_survey_reads_only_engine_names_and_the_launchers_units_run():
    good, other = names("0.5.23", "0.5.22")
    engines = f"100 {good}\n200 {other}\n300 not-an-engine\nxx {good}x\n"
    uses = f"{layout.engine_launcher(good)}\n/opt/elsewhere/bin/python\n{layout.ENGINES_DIR}/../../etc/bin/python\n"
    answer = "\n".join(["@@engines", _b64(engines), "@@uses", _b64(uses)]) + "\n"
    survey = rules.read_survey(answer)
    assert survey.engines == {good: 100, other: 200} and survey.uses == {good}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# --- the install, for real --------------------------------------------------------------------

@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """A package index on loopback: http.server's listing of simple/sglang/ is a PEP 503 page."""
    root = tmp_path_factory.mktemp("index")
    # the double's wheels and what they require (PyYAML), each under its project's page, as PEP 503 lays them out
    for wheel in [*build_wheels(root / "built"), *mirror.cached_dependencies()]:
        project = root / "simple" / canonicalize_name(wheel.name.split("-")[0])
        project.mkdir(parents=True, exist_ok=True)
        shutil.copy(wheel, project / wheel.name)
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def engines(tmp_path, monkeypatch):
    """fleet.core.layout's engine places under tmp_path; the host's lab config (no import cost)."""
    root = tmp_path / "engines"
    monkeypatch.setattr(layout, "ENGINES_DIR", str(root))
    monkeypatch.setattr(layout, "ENGINE_INSTALL_LOCK", str(root / ".install.lock"))
    monkeypatch.setattr(layout, "ENGINE_PIP_DIR", str(root / ".pip"))
    monkeypatch.setattr(layout, "ENGINE_WHEELS_DIR", str(tmp_path / "wheels"))
    host_json = tmp_path / "host.json"
    host_json.write_text(json.dumps({"engine_import_seconds": 0}))
    monkeypatch.setenv("LAB_HOST_JSON", str(host_json))
    monkeypatch.setenv("LAB_SGLANG_IMPORT_LOG", str(tmp_path / "imports.log"))
    return root


def sh(command: str) -> str:
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=300).stdout


def test_an_engine_installs_beside_the_others_and_is_checked_from_its_own_venv(index, engines, tmp_path, pip_wheel):
    spec = engine_spec(sglang="sglang==0.5.24.dev29907", index_url=index, disk_mib=1,
                       python="/usr/bin/python3").model_copy(update={"speculative": make_spec(DDTREE).speculative})
    done = rules.read_install(sh(rules.install_command(spec, pip_wheel, [])))
    assert done.outcome == "new", done
    venv = engines / spec.engine.name
    assert "sglang==0.5.24.dev29907" in (venv / rules.FREEZE).read_text().split()
    assert not list(engines.glob(".*.partial")) and (venv / rules.LOG).is_file()
    out = sh(checks(spec, tmp_path))
    engine = parse_engine(out)
    assert engine.version == "0.5.24.dev29907" and "DDTREE" in engine.algorithms
    assert engine_violations("gpu1", spec, engine) == [] and rules.read_args_check(out) is None
    # a second install finds it complete
    assert rules.read_install(sh(rules.install_command(spec, pip_wheel, []))).outcome == "already"


def test_ddtree_on_0523_is_refused_by_the_new_engine_itself(index, engines, tmp_path, pip_wheel):
    spec = engine_spec(index_url=index, disk_mib=1).model_copy(update={"speculative": make_spec(DDTREE).speculative})
    assert rules.read_install(sh(rules.install_command(spec, pip_wheel, []))).outcome == "new"
    out = sh(checks(spec, tmp_path))
    (v,) = [v for v in engine_violations("gpu1", spec, parse_engine(out)) if v.check == "speculative algorithm"]
    assert "SGLang 0.5.23 at " + spec.launcher in str(v) and "not DDTree" in str(v)
    said = rules.read_args_check(out)
    assert said is not None and "--speculative-ddtree-budget" in said


def checks(spec: ClassSpec, tmp_path: Path) -> str:
    """The new engine's checks as tasks/engine.py runs them: its fact and its parser at once."""
    return rules.check_command(spec, 60, SglangEngine().command(spec.launcher, 60, {}, str(tmp_path / "cache")))


@pytest.mark.parametrize("version, said", [
    ("9.9.9", "No matching distribution found for sglang==9.9.9"),
    ("0.5.25", "0.5.26"),  # a wheel whose metadata names another version than its file
])
def test_a_failed_pip_leaves_no_partial_and_says_pips_reason(index, engines, version, said, pip_wheel):
    spec = engine_spec(sglang=f"sglang=={version}", index_url=index, disk_mib=1)
    done = rules.read_install(sh(rules.install_command(spec, pip_wheel, [])))
    assert done.outcome == "pip" and done.pip_rc != "0" and said in rules.pip_reason(done.pip_said)
    assert not (engines / spec.engine.name).exists() and not list(engines.glob(".*.partial"))


def test_an_unreachable_index_fails_the_install(engines, pip_wheel):
    spec = engine_spec(index_url="http://127.0.0.1:9/simple/", disk_mib=1)
    done = rules.read_install(sh(rules.install_command(spec, pip_wheel, [])))
    assert done.outcome == "pip" and "sglang==0.5.23" in rules.pip_reason(done.pip_said)


def test_too_little_disk_refuses_before_pip_runs(index, engines, pip_wheel):
    spec = engine_spec(index_url=index, disk_mib=10_485_760)
    done = rules.read_install(sh(rules.install_command(spec, pip_wheel, [])))
    assert done.outcome == "disk" and done.free_kib and not (engines / spec.engine.name).exists()


def test_a_partial_left_by_an_interrupted_install_is_removed_and_removals_are_said(index, engines, pip_wheel):
    spec = engine_spec(index_url=index, disk_mib=1)
    (engines / f".{spec.engine.name}.partial" / "bin").mkdir(parents=True)
    old = names("0.5.1")[0]
    (engines / old).mkdir()
    done = rules.read_install(sh(rules.install_command(spec, pip_wheel, [old])))
    assert done.outcome == "new" and done.removed == (old,)
    assert sorted(p.name for p in engines.iterdir()) == [".install.lock", spec.engine.name]


def test_an_install_running_holds_off_another(index, engines, pip_wheel):
    spec = engine_spec(index_url=index, disk_mib=1)
    engines.mkdir()
    holder = subprocess.Popen(["flock", str(engines / ".install.lock"), "sleep", "30"])
    try:
        subprocess.run(["sh", "-c", f"until ! flock -n {engines}/.install.lock true; do sleep 0.05; done"], timeout=10)
        assert rules.read_install(sh(rules.install_command(spec, pip_wheel, []))).outcome == "busy"
    finally:
        holder.kill()
        holder.wait()
    assert not (engines / spec.engine.name).exists()


def test_an_engine_from_uploaded_wheels_alone_installs_without_any_index(engines, tmp_path, pip_wheel):
    # a wheelhouse: the build and what it requires (PyYAML, for this machine's python3)
    house = [build_wheel(next(b for b in BUILDS if b.version == "0.5.24.dev29907"), tmp_path / "dist"),
             *(w for w in mirror.cached_dependencies() if "-cp311-" in w.name)]
    spec = engine_spec(sglang="sglang==0.5.24.dev29907", index_url=None, wheels=[str(w) for w in house], disk_mib=1)
    assert "--no-index" in rules.pip_install_argv(spec) and "--index-url" not in rules.pip_install_argv(spec)
    uploaded = Path(layout.engine_wheels(spec.engine.name))
    uploaded.mkdir(parents=True)
    for wheel in house:  # what tasks/engine.py uploads
        shutil.copy(wheel, uploaded)
    done = rules.read_install(sh(rules.install_command(spec, pip_wheel, [])))
    assert done.outcome == "new", done
    frozen = (engines / spec.engine.name / rules.FREEZE).read_text().split()
    assert "sglang==0.5.24.dev29907" in frozen and "PyYAML==6.0.2" in frozen
    assert not uploaded.exists()  # installed: the uploads go


def test_a_resolution_conflict_is_pips_own_reason(index, engines, pip_wheel):
    name, version, needs = PLUGIN
    spec = engine_spec(index_url=index, packages=[f"{name}=={version}"], disk_mib=1)
    done = rules.read_install(sh(rules.install_command(spec, pip_wheel, [])))
    reason = rules.pip_reason(done.pip_said)
    assert done.outcome == "pip" and "conflicting dependencies" in reason and "ResolutionImpossible" in reason, reason


def test_status_names_the_engine_a_server_runs_by_its_venv():
    name = engine_spec().engine.name
    assert rules.running_engine([layout.engine_launcher(name), "-m", "sglang.launch_server"]) == name
    for other in (["/opt/sglang/bin/python", "-m"], [f"{layout.ENGINES_DIR}/../x/bin/python"], [], None,
                  [f"{layout.ENGINES_DIR}/{name}/bin/python3"]):
        assert rules.running_engine(other) is None


def test_a_directory_at_the_engines_name_that_is_not_complete_is_nobodys_and_is_built_again(index, engines, pip_wheel):
    spec = engine_spec(index_url=index, disk_mib=1)
    (engines / spec.engine.name / "bin").mkdir(parents=True)  # made by hand, or damaged: no freeze
    survey = rules.read_survey(sh(rules.survey_command(spec)))
    assert spec.engine.name not in survey.engines
    assert rules.read_install(sh(rules.install_command(spec, pip_wheel, []))).outcome == "new"
    assert spec.engine.name in rules.read_survey(sh(rules.survey_command(spec))).engines


def test_one_pip_wheel_is_what_a_download_must_leave(pip_wheel):
    assert rules.the_pip_wheel(["pip-24.3.1-py3-none-any.whl"]) == "pip-24.3.1-py3-none-any.whl"
    for wheels in ([], ["a.whl", "b.whl"]):
        with pytest.raises(ValueError, match=f"expected one pip wheel in the controller's cache, found {len(wheels)}"):
            rules.the_pip_wheel(wheels)
