"""The engine as declared state: SGLang installed by the deploy, side by side, from a real package
index (pypiserver on the lab's mirror host, serving the SGLang double's wheels: lab/wheels.py).

Every GPU host serves a hand-made SGLang 0.5.23 (/opt/sglang/bin/python) beside its training job.
One run refuses, before anything stops, a class asking DDTREE of a nightly before DDTree (pro6000-1:
its engine is installed and checked, and lacks it; a release up to 0.5.23 make check refuses already), a class whose install fills the disk (a6000-1: a
small tmpfs) and a class asking a version the index does not have (h200-1). Then the DDTree
build is installed beside the old one and deployed; a build that crashes on load is rolled back to
it; an install killed with the controller changes nothing live, and the next run finishes it; and
the DDTree build from wheel files the controller uploads, with no index at all.
"""

from __future__ import annotations

import re
import signal
import subprocess

import pytest
from e2e import (BIN, REPO, deploy, health, interrupted, main_pid, records, sh, summary_row, verify_checks,
                 workdir)

from lab.mirror import cached_dependencies
from lab.wheels import BUILDS, build_wheel

ENGINES = "/opt/sglang-fleet/engines"
HOST = ('gpu_count = {n}\ngpu_memory_mib = {mib}\nload_seconds = 1\nengine_import_seconds = 1\n'
        'workloads = ["dflash-train"]\npreinstalled = {{}}\n')
LAB = f"""[lab]
name = "englab"
subnet = "10.206.0.0/24"

[[hosts]]
name = "mirror-1"
role = "mirror"

[[hosts]]
name = "pro6000-1"
group = "pro6000"
gpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
{HOST.format(n=1, mib=97887)}
[[hosts]]
name = "a6000-1"
group = "a6000"
gpu_model = "NVIDIA RTX A6000"
engines_disk_kib = 256
{HOST.format(n=2, mib=49140)}
[[hosts]]
name = "h200-1"
group = "h200"
gpu_model = "NVIDIA H200"
{HOST.format(n=1, mib=143771)}"""
WORKLOADS = 'workloads = ["dflash-train.service"]'
DDTREE = ('speculative = {"algorithm": "DDTREE", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash", '
          '"block_size": 8, "tree_budget": 64}')
FAST = 'readiness = {"load_timeout_s": 30, "poll_interval_s": 0.25, "progress_every_s": 5}'


def engine(index: str, version: str, **more) -> str:
    """group_data lines: the class's service without its hand-made launcher, and the engine."""
    fields = ", ".join(f'"{k}": {v!r}' for k, v in {"sglang": f"sglang=={version}", "index_url": index,
                                                     "disk_mib": 1, **more}.items())
    return ('service = {k: v for k, v in service.items() if k != "launcher"}\n'
            f"engine = {{{fields}}}\n{WORKLOADS}\n{FAST}")


def unit(lab, host: str) -> str:
    return sh(lab, host, "cat /etc/systemd/system/sglang.service")


def argv(lab, host: str) -> str:
    return sh(lab, host, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline")


def engines(lab, host: str) -> list[str]:
    return sh(lab, host, f"ls -1a {ENGINES} 2>/dev/null").split()


def as_before(lab, host: str, before: dict) -> None:
    """The host as it was: the same unit file and server process, serving, the training running."""
    assert unit(lab, host) == before["unit"] and main_pid(lab, host) == before["pid"]
    assert health(lab, host) == "200" and sh(lab, host, "systemctl is-active dflash-train") == "active"
    assert sh(lab, host, "ls /run/sglang-fleet/*.lock /var/lib/sglang-fleet/sglang/pending.json 2>/dev/null") == ""


def state(lab, host: str) -> dict:
    return {"unit": unit(lab, host), "pid": main_pid(lab, host)}


@pytest.fixture(scope="module")
def englab(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB, fresh=True)
    return lab, tmp_path_factory.mktemp("wd"), lab.index_url()


def test_each_bad_engine_is_refused_before_anything_stops(englab):
    lab, tmp, index = englab
    before = {h: state(lab, h) for h in ("pro6000-1", "a6000-1", "h200-1")}
    run = deploy(lab, workdir(tmp / "bad", pro6000=f"{engine(index, '0.5.24.dev2')}\n{DDTREE}",
                              a6000=engine(index, "0.5.24.dev29907", disk_mib=0), h200=engine(index, "9.9.9")))
    assert run.returncode != 0
    for h in before:
        assert "REFUSED" in summary_row(run.out, h), run.out
        as_before(lab, h, before[h])
    # DDTREE of a build without it: installed beside the old one, checked there, and found lacking
    (name,) = [n for n in engines(lab, "pro6000-1") if n.startswith("sglang-0.5.24.dev2-")]
    assert (f"pro6000-1: speculative algorithm: expected an engine with DDTREE, found SGLang 0.5.24.dev2 at "
            f"{ENGINES}/{name}/bin/python, which offers") in run.out and "not DDTree" in run.out
    assert "nothing was stopped" in run.out
    # the disk filled during the install (disk_mib 0 lets it start): pip's reason, no partial venv left
    assert re.search(r"a6000-1: engine sglang-0\.5\.24\.dev29907-\w+: expected pip to install sglang==0\.5\.24"
                     r"\.dev29907 from .*No space left on device", run.out), run.out
    (log,) = [n for n in engines(lab, "a6000-1") if n.endswith(".log")]  # pip's whole log, for a look
    assert engines(lab, "a6000-1") == [".", "..", ".install.lock", log] and f"pip's log: {ENGINES}/{log}" in run.out
    # a version the index does not have: the index and pip's own reason named
    assert ("h200-1: engine " in run.out and f"from {index}, found pip exit 1" in run.out
            and "No matching distribution found for sglang==9.9.9" in run.out), run.out
    assert not [n for n in engines(lab, "h200-1") if n.startswith("sglang-")]


KEYED = 'service = {**service, "api_key": {"env": "LAB_ENGINE_API_KEY"}}'  # its --config file: PyYAML in the venv
KEY = {"LAB_ENGINE_API_KEY": "sk-engine-0123456789abcdef"}


def test_the_ddtree_engine_is_installed_beside_the_old_one_and_serves(englab):
    lab, tmp, index = englab
    run = deploy(lab, workdir(tmp / "ddtree", pro6000=f"{engine(index, '0.5.24.dev29907')}\n{DDTREE}\n{KEYED}"),
                 "--limit", "pro6000-1", env=KEY)
    assert run.returncode == 0, run.out
    (name,) = [n for n in engines(lab, "pro6000-1") if n.startswith("sglang-0.5.24.dev29907-")]
    row = summary_row(run.out, "pro6000-1")
    assert "OK" in row and name in row and f"install engine {name}" in row, row
    assert health(lab, "pro6000-1") == "200"
    running = argv(lab, "pro6000-1")
    assert running.startswith(f"{ENGINES}/{name}/bin/python -m sglang.launch_server ")
    assert "--speculative-algorithm DDTREE" in running and "--speculative-ddtree-budget 64" in running
    # installed and checked while the old service and the training ran; the old engines kept
    assert run.out.index(f"engine {name} installed") < run.out.index("stopping dflash-train")
    assert sh(lab, "pro6000-1", f"test -x /opt/sglang/bin/python && ls {ENGINES}/*/engine.lock | wc -l") == "2"
    frozen = sh(lab, "pro6000-1", f"cat {ENGINES}/{name}/engine.lock").split()
    assert "sglang==0.5.24.dev29907" in frozen and "PyYAML==6.0.2" in frozen  # resolved from the index
    assert "--config /etc/sglang/sglang.yaml" in running and KEY["LAB_ENGINE_API_KEY"] not in running
    record = records(lab, "pro6000-1")[-1]
    assert (record["result"], record["engine"], record["sglang"]) == ("ok", name, "0.5.24.dev29907")
    history = subprocess.run([str(BIN / "python"), "-m", "ops", "history", str(lab.inventory), "pro6000-1"],
                             cwd=REPO, capture_output=True, text=True, timeout=120).stdout
    assert f"engine {name}" in history
    again = deploy(lab, workdir(tmp / "ddtree-again", pro6000=f"{engine(index, '0.5.24.dev29907')}\n{DDTREE}\n"
                                                           f"{KEYED}"), "--limit", "pro6000-1", env=KEY)
    assert again.returncode == 0 and "none (already as declared)" in summary_row(again.out, "pro6000-1"), again.out


def test_an_engine_that_crashes_on_load_is_rolled_back_to_the_one_before(englab):
    lab, tmp, index = englab
    sh(lab, "pro6000-1", "systemctl start dflash-train")  # the training back beside the service, as before a switch
    before, old_argv = state(lab, "pro6000-1"), argv(lab, "pro6000-1")
    run = deploy(lab, workdir(tmp / "crash", pro6000=f"{engine(index, '0.5.24.dev1')}\n{DDTREE}"),
                 "--limit", "pro6000-1")
    assert run.returncode != 0 and "FAILED (rolled back)" in summary_row(run.out, "pro6000-1"), run.out
    assert unit(lab, "pro6000-1") == before["unit"] and argv(lab, "pro6000-1") == old_argv
    assert health(lab, "pro6000-1") == "200" and sh(lab, "pro6000-1", "systemctl is-active dflash-train") == "active"
    (crashed,) = [n for n in engines(lab, "pro6000-1") if n.startswith("sglang-0.5.24.dev1-")]
    assert sh(lab, "pro6000-1", f"test -x {ENGINES}/{crashed}/bin/python && echo kept") == "kept"  # for diagnosis
    record = records(lab, "pro6000-1")[-1]
    assert record["result"] == "rolled-back" and "dflash-train.service given back" in record["left"], record


def test_an_install_killed_with_the_controller_changes_nothing_live_and_the_next_run_finishes_it(englab):
    lab, tmp, index = englab
    before = state(lab, "pro6000-1")
    # another declaration of 0.5.23 (its venv from another path to the same Python): a new engine;
    # keep = 0: the unused engines (the refused 0.5.23, the crashed build) go when it installs
    wd = workdir(tmp / "killed", pro6000=engine(index, "0.5.23", python="/usr/bin/python3.11", keep=0))
    run = interrupted(lab, wd, "pro6000-1", signal.SIGKILL, on_line="installing engine", after=0.3)
    assert run.fired, run.out
    # killed during it: its venv still partial, or its pip (orphaned with the link) still holding the lock
    assert sh(lab, "pro6000-1", f"ls -d {ENGINES}/.*.partial 2>/dev/null; flock -n {ENGINES}/.install.lock true "
                                "|| echo held"), engines(lab, "pro6000-1")
    as_before(lab, "pro6000-1", before)
    sh(lab, "pro6000-1", f"flock -w 60 {ENGINES}/.install.lock true")  # an orphaned pip may still finish
    assert unit(lab, "pro6000-1") == before["unit"]
    done = deploy(lab, wd, "--limit", "pro6000-1")
    assert done.returncode == 0 and "OK" in summary_row(done.out, "pro6000-1"), done.out
    left = engines(lab, "pro6000-1")
    assert not [n for n in left if n.endswith(".partial")]
    live = argv(lab, "pro6000-1").split()[0].split("/")[-3]
    assert live.startswith("sglang-0.5.23-") and live in left
    # kept: the live one and the one its backup runs (the DDTree build); removed: the unused ones
    assert not [n for n in left if n.startswith("sglang-0.5.24.dev1-")], left
    assert [n for n in left if n.startswith("sglang-0.5.24.dev29907-")], left
    assert health(lab, "pro6000-1") == "200"


def test_a_build_from_the_controllers_wheel_files_installs_without_any_index(englab):
    lab, tmp, _ = englab
    # a wheelhouse: the build and what it requires (PyYAML, for the host's Python 3.11)
    house = [build_wheel(next(b for b in BUILDS if b.version == "0.5.24.dev29907"), tmp / "dist"),
             *(w for w in cached_dependencies() if "-cp311-" in w.name)]
    asked = f"journalctl -u lab-pypi.service -o cat | grep -c '^{lab.host('pro6000-1').ip} '"
    before = sh(lab, "mirror-1", asked)
    run = deploy(lab, workdir(tmp / "wheels", pro6000=f"{engine(None, '0.5.24.dev29907', wheels=[str(w) for w in house])}\n"
                                                     f"{DDTREE}"), "--limit", "pro6000-1")
    assert run.returncode == 0 and "OK" in summary_row(run.out, "pro6000-1"), run.out
    assert "2 wheel(s) uploaded to /var/cache/sglang-fleet/wheels/sglang-0.5.24.dev29907-" in run.out and \
        "(no index))" in run.out
    assert "--speculative-algorithm DDTREE" in argv(lab, "pro6000-1") and health(lab, "pro6000-1") == "200"
    assert sh(lab, "mirror-1", asked) == before  # pip asked the index nothing
    assert sh(lab, "pro6000-1", "ls -A /var/cache/sglang-fleet/wheels") == ""  # the uploads gone once installed
    verify = subprocess.run([str(BIN / "pytest"), "-q", "-p", "no:cacheprovider", str(REPO / "tests/verify"),
                             "--inventory", str(lab.inventory), "-k", "pro6000-1"],
                            cwd=tmp / "wheels", capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0 and f"{verify_checks()} passed" in verify.stdout, verify.stdout[-3000:]
