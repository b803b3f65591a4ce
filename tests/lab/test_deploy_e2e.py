"""The default lab (lab/default.toml), one boot for the module: first the lab as booted (its hosts, files,
network, inventory, CLI, a link that drops), then a real deploy, an idempotent second one, verify, the deploy lock."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from e2e import BIN, REPO, deploy, gpu_apps, health, host_json, main_pid, records, sh, summary_row, verify_checks

from fleet.spec.load import load_class_specs
from fleet.spec import SGLANG_0523_ALGORITHMS
from lab import lab as labmod


# --- the default lab as booted: these run first, before the module's first deploy -------------------

@pytest.fixture(scope="module")
def booted(lab_manager):
    """lab/default.toml freshly booted (one that runs is booted again: these tests see no deploy's work)."""
    return lab_manager.ensure(labmod.DEFAULT_LAB, fresh=True)


def _sh(lab, host, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return lab.ssh(host, command, timeout=timeout)


def toml_hosts(path: Path) -> list[dict]:
    return tomllib.loads(path.read_text())["hosts"]


def test_hosts_answer_ssh_and_systemd_runs(booted):
    lab = booted
    assert [h.name for h in lab.hosts] == [h["name"] for h in toml_hosts(labmod.DEFAULT_LAB)]
    for i, h in enumerate(lab.hosts):
        assert h.ip == f"10.203.0.{11 + i}"
        p = _sh(lab, h.name, "hostname; systemctl is-system-running")
        name, state = p.stdout.split()
        assert name == h.name
        failed = _sh(lab, h.name, "systemctl --failed --no-legend --plain").stdout
        assert state == "running", failed


def test_host_json_matches_lab_file(booted):
    lab = booted
    for raw in toml_hosts(labmod.DEFAULT_LAB):
        got = host_json(lab, raw["name"])
        want = {
            "nvidia_smi": "ok", "sglang_version": "0.5.23", "sglang_algorithms": list(SGLANG_0523_ALGORITHMS),
            "load": "ok", "load_seconds": 3.0, "workloads": [], "missing_models": [], "draft_vocab_size": None,
            **raw,
        }
        want.pop("preinstalled", None)
        for k, v in want.items():
            assert got[k] == v, k
        for k in ("name", "group", "gpu_model", "gpu_count", "gpu_memory_mib", "driver_version", "nvidia_smi",
                  "sglang_version", "sglang_algorithms", "load", "load_seconds", "preinstalled_argv"):
            assert k in got, k


def test_network_is_the_lab_subnet_only(booted):
    lab = booted
    p = _sh(lab, "a6000-1", "ip -4 -o addr show dev eth0; ip -4 route")
    assert "10.203.0.12/24" in p.stdout
    assert "default" not in p.stdout  # no way out of the lab
    # hosts reach each other over the bridge
    p = _sh(lab, "a6000-1", "timeout 3 bash -c '</dev/tcp/10.203.0.11/22' && echo open")
    assert p.stdout.strip() == "open", p.stderr


def test_models_present_with_realistic_configs(booted):
    lab = booted
    for h in lab.hosts:
        spec = load_class_specs(REPO / "group_data")[h.group]
        target = json.loads(_sh(lab, h.name, f"cat {spec.service.model_path}/config.json").stdout)
        assert target["num_nextn_predict_layers"] == 1  # NEXTN without a draft is legitimate
        assert target["vocab_size"] > 100000 and target["architectures"]
        draft = json.loads(_sh(lab, h.name, f"cat {spec.speculative.draft_model_path}/config.json").stdout)
        assert draft["architectures"] == ["DFlashDraftModel"]
        assert draft["block_size"] == 16
        assert draft["model_type"] == target["model_type"]
        assert draft["vocab_size"] == target["vocab_size"]
        assert set(draft["dflash_config"]) == {"mask_token_id", "target_layer_ids"}
        assert draft["num_target_layers"] == target["num_hidden_layers"]


def test_workloads_run_at_boot(booted):
    lab = booted
    unit = _sh(lab, "pro6000-1", "cat /etc/systemd/system/dflash-train.service").stdout
    assert "ExecStart=/usr/local/bin/lab-gpu-job --name dflash-train --memory-mib 88098 --gpus all" in unit
    assert _sh(lab, "pro6000-1", "systemctl is-enabled dflash-train").stdout.strip() == "enabled"
    assert _sh(lab, "pro6000-1", "systemctl is-active dflash-train").stdout.strip() == "active"
    assert _sh(lab, "a6000-1", "systemctl cat dflash-train").returncode != 0


def test_preinstalled_service_serves_the_old_config(booted):
    lab = booted
    from fleet.rollout.render import server_argv

    got = host_json(lab, "pro6000-1")
    argv = got["preinstalled_argv"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "NEXTN"
    assert "--speculative-draft-model-path" not in argv
    spec = load_class_specs(REPO / "group_data")["pro6000"]
    assert _sh(lab, "pro6000-1", f"systemctl is-enabled {spec.service.unit}").stdout.strip() == "enabled"
    show = _sh(lab, "pro6000-1", f"systemctl show -p ExecStart --value {spec.service.unit}").stdout
    assert " ".join(argv) in show
    assert _sh(lab, "pro6000-1", f"test -f {spec.env_file}").returncode == 0
    assert host_json(lab, "a6000-1")["preinstalled_argv"] is None
    assert _sh(lab, "a6000-1", f"test -e {spec.unit_file}").returncode != 0
    # the launcher is the group's path, a wrapper around the SGLang double
    launcher = server_argv(spec)[0]
    assert _sh(lab, "pro6000-1", f"test -x {launcher}").returncode == 0
    assert _sh(lab, "pro6000-1", f"systemctl is-active {spec.service.unit}").stdout.strip() == "active"


def test_nvidia_smi_double_installed(booted):
    lab = booted
    p = _sh(lab, "a6000-1", "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits")
    assert p.stdout.splitlines() == ["NVIDIA RTX A6000, 49140"] * 2


def test_inventory_for_pyinfra(booted):
    lab = booted
    inv = runpy.run_path(str(lab.inventory))
    assert inv["_lab_file"] == str(labmod.DEFAULT_LAB)
    assert inv["_lab_name"] == "sgllab"
    assert [n for n, _ in inv["pro6000"]] == ["pro6000-1"]
    assert [n for n, _ in inv["a6000"]] == ["a6000-1"]
    name, data = inv["a6000"][0]
    assert data == {"ssh_hostname": "10.203.0.12", "ssh_user": "root", "ssh_key": str(labmod.KEY),
                    "ssh_strict_host_key_checking": "no", "ssh_known_hosts_file": "/dev/null"}
    p = subprocess.run([str(REPO / ".venv/bin/pyinfra"), "-y", str(lab.inventory), "exec", "--", "hostname"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout + p.stderr  # pyinfra prints its progress on stderr
    for h in lab.hosts:
        assert f"[{h.name}] " in out and f"] {h.name}" in out.replace("]   ", "] ")


def test_up_twice_is_harmless(booted):
    lab = booted
    pids = {h.name: h.pid for h in lab.hosts}
    again = labmod.up(labmod.DEFAULT_LAB)
    assert {h.name: h.pid for h in again.hosts} == pids  # the same machines: nothing booted again
    assert lab.inventory.exists()
    assert all(r["state"] == "running" and r["ssh"] == "ok" for r in labmod.status(lab.name))


def test_up_of_another_lab_file_under_a_running_labs_name_is_refused(booted, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text(labmod.DEFAULT_LAB.read_text())
    with pytest.raises(labmod.LabError, match=rf"lab 'sgllab' is up from {labmod.DEFAULT_LAB} \(another lab file\); "
                                              rf"run `python -m lab.lab down --lab {labmod.DEFAULT_LAB}` first"):
        labmod.up(other)


def test_cli_status(booted):
    p = lab_cli("status", "--lab", str(labmod.DEFAULT_LAB))
    assert p.returncode == 0, p.stderr
    assert "pro6000-1  10.203.0.11  pro6000  running  ok" in p.stdout
    assert "inventory .lab/sgllab/inventory.py" in p.stdout.splitlines()[0]


def lab_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.lab", *args], cwd=REPO, capture_output=True, text=True)


def test_a_hosts_link_drops_silently_and_comes_back(booted):
    """`link HOST down`: nothing answers, nothing refuses; a connection open across the drop goes on
    once the link is back."""
    lab = booted
    host = lab.hosts[-1]
    # open until told to end (a file), whatever the time the drop takes on a busy machine
    across = subprocess.Popen(labmod.ssh_argv(host.ip, "rm -f /run/lab-go; echo open; "
                                                       "until [ -e /run/lab-go ]; do sleep 0.1; done; echo still-there"),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert across.stdout.readline() == "open\n"
    try:
        down = lab_cli("link", host.name, "down", "--lab", str(labmod.DEFAULT_LAB))
        assert (down.returncode, down.stdout) == (0, f"{host.name}: link down\n"), down.stderr
        unanswered = lab.ssh(host.name, "true")
        assert unanswered.returncode == 255 and "timed out" in unanswered.stderr.lower(), unanswered.stderr
        assert across.poll() is None  # no reset: the open connection just waits
    finally:
        up = lab_cli("link", host.name, "up", "--lab", str(labmod.DEFAULT_LAB))
    assert (up.returncode, up.stdout) == (0, f"{host.name}: link up\n"), up.stderr
    assert lab.ssh(host.name, "touch /run/lab-go").returncode == 0
    assert across.communicate(timeout=30)[0] == "still-there\n"
    assert lab.ssh(host.name, "true").returncode == 0
    unknown = lab_cli("link", "no-such-host", "down", "--lab", str(labmod.DEFAULT_LAB))
    assert unknown.returncode == 1 and "no host 'no-such-host' in lab 'sgllab' (hosts: lab 'sgllab': " in unknown.stderr


# --- other labs -----------------------------------------------------------------------------


# --- deployed -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def deployed(booted):
    first = deploy(booted)
    return booted, first


def test_first_deploy_replaces_nextn_with_dflash_and_stops_the_training(deployed):
    lab, first = deployed
    assert first.returncode == 0, first.out
    unit = sh(lab, "pro6000-1", "cat /etc/systemd/system/sglang.service")
    assert "--speculative-algorithm DFLASH" in unit and "--speculative-dflash-block-size 16" in unit
    assert "NEXTN" not in unit
    assert sh(lab, "pro6000-1", "systemctl is-active dflash-train.service") != "active"
    assert all("lab-gpu-job" not in a and "dflash-train" not in a for a in gpu_apps(lab, "pro6000-1"))
    assert health(lab, "pro6000-1") == "200" and health(lab, "a6000-1") == "200"
    row = summary_row(first.out, "pro6000-1")
    assert "OK" in row and "RTX PRO 6000" in row, first.out
    # the old NEXTN unit was kept as a backup, and the rollout recorded with its smoke test
    assert "NEXTN" in sh(lab, "pro6000-1", "cat /var/lib/sglang-fleet/sglang/backups/*/sglang.service")
    assert records(lab, "pro6000-1")[-1]["result"] == "ok"


def test_second_deploy_changes_nothing_and_restarts_nothing(deployed):
    lab, _ = deployed
    pids = {h: main_pid(lab, h) for h in ("pro6000-1", "a6000-1")}
    n = len(records(lab, "pro6000-1"))
    again = deploy(lab)
    assert again.returncode == 0, again.out
    assert all("none (already as declared)" in summary_row(again.out, h) for h in pids), again.out
    assert {h: main_pid(lab, h) for h in pids} == pids
    assert len(records(lab, "pro6000-1")) == n


def _verify(lab) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "pytest"), "-q", "-p", "no:cacheprovider", "tests/verify", "--inventory", str(lab.inventory)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )


def test_verify_passes_after_deploy_and_fails_when_stopped_by_hand(deployed):
    lab, _ = deployed
    ok = _verify(lab)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    sh(lab, "a6000-1", "systemctl stop sglang.service")
    try:
        broken = _verify(lab)
        assert broken.returncode != 0
        assert "a6000-1" in broken.stdout and "is not active" in broken.stdout
    finally:
        again = deploy(lab)  # converges: starts it again
    assert again.returncode == 0, again.out
    assert health(lab, "a6000-1") == "200"


def test_verify_reaches_a_host_by_the_operators_ssh_config_as_pyinfra_does(deployed, tmp_path):
    """A host the inventory names only by an alias of ~/.ssh/config (its address, user and key
    there, no ssh_hostname): pyinfra reaches it, and make verify checks it the same way."""
    lab, _ = deployed
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host lab-alias\n  HostName {lab.host('a6000-1').ip}\n  User root\n  IdentityFile {labmod.KEY}\n"
        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n")
    inventory = tmp_path / "inventory.py"
    inventory.write_text('from tasks.inventory import checked\n\na6000 = ["lab-alias"]\n\nchecked(globals())\n')
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"} | {"HOME": str(home), "NO_COLOR": "1"}
    ex = subprocess.run([str(BIN / "pyinfra"), "-y", str(inventory), "exec", "--", "cat /etc/lab/host.json"],
                        cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert ex.returncode == 0 and '"name": "a6000-1"' in ex.stdout + ex.stderr, ex.stdout + ex.stderr
    v = subprocess.run([str(BIN / "pytest"), "-q", "-p", "no:cacheprovider", "tests/verify", "--inventory", str(inventory)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert v.returncode == 0 and f"{verify_checks()} passed" in v.stdout, v.stdout + v.stderr
    assert sorted(p.name for p in home.rglob("*")) == [".ssh", "config"]  # and no file of ours beside it


def test_two_concurrent_deploys_one_is_refused(deployed):
    lab, _ = deployed
    sh(lab, "a6000-1", "systemctl stop sglang.service")  # both runs will have work to do
    command = [str(BIN / "pyinfra"), "-y", str(lab.inventory), "deploy.py"]
    procs = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], outs
    refused = outs[[p.returncode for p in procs].index(1)]
    assert "lock" in refused and "held by" in refused, refused
    assert health(lab, "a6000-1") == "200"


def test_stale_lock_is_reported_and_taken_over(deployed):
    """The lock names the SSH session of its deploy: once that session is gone (a killed
    controller, a lost link), the next deploy, from any machine, takes the lock over."""
    lab, _ = deployed
    owner = {"holder": "bob@elsewhere", "pid": 4242, "since": int(time.time()) - 60, "session": 999999,
             "session_start": 12345}
    sh(lab, "a6000-1", f"mkdir -p /run/sglang-fleet && echo '{json.dumps(owner)}' > /run/sglang-fleet/sglang.lock "
                      "&& systemctl stop sglang.service")
    run = deploy(lab)
    assert run.returncode == 0, run.out
    assert "stale deploy lock held by bob@elsewhere" in run.out and "its SSH session (sshd pid 999999) is gone" in run.out
    assert "taking it over" in run.out
    assert sh(lab, "a6000-1", "ls /run/sglang-fleet/") == ""
    assert health(lab, "a6000-1") == "200"


def test_a_lock_without_an_owner_is_refused_with_the_command_to_clear_it(deployed):
    lab, _ = deployed
    sh(lab, "a6000-1", "mkdir -p /run/sglang-fleet && : > /run/sglang-fleet/sglang.lock && systemctl stop sglang.service")
    try:
        run = deploy(lab)
        assert run.returncode != 0
        assert "REFUSED" in summary_row(run.out, "a6000-1")
        assert "a deploy lock without a readable owner at /run/sglang-fleet/sglang.lock" in run.out
        assert "rm -rf /run/sglang-fleet/sglang.lock" in run.out
        assert sh(lab, "a6000-1", "systemctl is-active sglang.service") == "inactive"  # untouched
    finally:
        sh(lab, "a6000-1", "rm -f /run/sglang-fleet/sglang.lock")
    assert deploy(lab).returncode == 0
