"""Preflight in the lab: each unsafe host is refused untouched, the good ones are deployed."""

from __future__ import annotations

import json
import runpy

import pytest
from e2e import REPO, deploy, health, main_pid, sh, summary_row, workdir

from fleet.spec.load import load_class_specs

PRO = 'group = "pro6000"\ngpu_count = 1\ngpu_memory_mib = 97887\ndriver_version = "580.95.05"\n'
PRO_NAME = 'gpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
NEXTN = 'preinstalled = { speculative = { algorithm = "NEXTN", num_steps = 3, topk = 1, num_draft_tokens = 4 } }\n'
DRAFT = "/root/models/Qwen3.6-27B-DFlash"

LAB = f"""
[lab]
name = "pflab"
subnet = "10.216.0.0/24"

[[hosts]]
name = "good"
{PRO}{PRO_NAME}workloads = ["dflash-train"]
{NEXTN}
[[hosts]]
name = "ddtree-engine"
{PRO}{PRO_NAME}sglang_algorithms = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "DDTREE"]

[[hosts]]
name = "a6000-box"
group = "pro6000"
gpu_model = "NVIDIA RTX A6000"
gpu_count = 2
gpu_memory_mib = 49140
driver_version = "580.95.05"
{NEXTN}
[[hosts]]
name = "ada"
{PRO}gpu_model = "NVIDIA RTX 6000 Ada Generation"

[[hosts]]
name = "no-smi"
{PRO}{PRO_NAME}nvidia_smi = "missing"

[[hosts]]
name = "driver-err"
{PRO}{PRO_NAME}nvidia_smi = "driver-error"

[[hosts]]
name = "no-draft"
{PRO}{PRO_NAME}missing_models = ["{DRAFT}"]

[[hosts]]
name = "bad-draft"
{PRO}{PRO_NAME}draft_vocab_size = 32000

[[hosts]]
name = "rogue"
{PRO}{PRO_NAME}workloads = ["someone-elses-job"]

[[hosts]]
name = "no-curl"
{PRO}{PRO_NAME}workloads = ["dflash-train"]
missing_programs = ["curl"]
{NEXTN}"""

REFUSED = {
    "a6000-box": "NVIDIA RTX A6000",
    "ada": "NVIDIA RTX 6000 Ada Generation",
    "no-smi": "nvidia-smi",
    "driver-err": "couldn't communicate with the NVIDIA driver",
    "no-draft": DRAFT,
    "bad-draft": "vocab",
    "rogue": "someone-elses-job",
    "no-curl": "host program curl: expected curl (for the readiness gate, the smoke test and the health check; "
               "Debian package curl) installed",
}


def _files(lab, host):
    return sh(lab, host, "sha256sum /etc/systemd/system/sglang.service /etc/sglang/* 2>/dev/null; "
                         "systemctl is-active dflash-train.service someone-elses-job.service 2>/dev/null")


@pytest.fixture(scope="module")
def pf_lab(lab_manager):
    return lab_manager.ensure(LAB)


@pytest.fixture(scope="module")
def first_run(pf_lab):
    before = {h: (_files(pf_lab, h), main_pid(pf_lab, h)) for h in REFUSED}
    return before, deploy(pf_lab)


def test_refused_hosts_are_named_and_untouched(pf_lab, first_run):
    before, run = first_run
    assert run.returncode != 0, run.out
    for host, why in REFUSED.items():
        row_and_reasons = run.out.rsplit("SGLang fleet rollout summary", 1)[-1]
        assert "REFUSED" in summary_row(run.out, host), (host, run.out)
        assert why in row_and_reasons, (host, why, row_and_reasons)
        assert (_files(pf_lab, host), main_pid(pf_lab, host)) == before[host], host


def test_a_host_without_curl_keeps_its_server_and_training_as_they_were(pf_lab, first_run):
    """A minimal install and a declared NEXTN -> DFLASH change: refused before anything stops (it was: the old
    server stopped, the new one never judged ready, nothing serving). /health read with the host's Python."""
    assert sh(pf_lab, "no-curl", "command -v curl || echo none") == "none"
    read = ("python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:30000/health\", "
            "timeout=5).status)'")
    assert sh(pf_lab, "no-curl", read) == "200"
    assert "NEXTN" in sh(pf_lab, "no-curl", "cat /etc/systemd/system/sglang.service")
    assert sh(pf_lab, "no-curl", "systemctl is-active dflash-train.service") == "active"
    assert sh(pf_lab, "no-curl", "ls /run/sglang-fleet/sglang.lock /var/lib/sglang-fleet/sglang/pending.json "
                                 "2>/dev/null || echo none") == "none"  # no lock, no rollout begun


def test_mislabelled_box_keeps_serving_its_old_service(pf_lab, first_run):
    assert "NEXTN" in sh(pf_lab, "a6000-box", "cat /etc/systemd/system/sglang.service")
    assert health(pf_lab, "a6000-box") == "200"


def test_nvidia_smi_missing_and_driver_error_have_their_own_messages(first_run):
    _, run = first_run
    table = run.out.rsplit("SGLang fleet rollout summary", 1)[-1]
    smi = table.split("no-smi", 1)[1].split("\n", 2)[1]
    drv = table.split("driver-err", 1)[1].split("\n", 2)[1]
    assert "expected nvidia-smi installed" in smi and "command not found" in smi
    assert "couldn't communicate with the NVIDIA driver" in drv and "exit 9" in drv
    assert "expected nvidia-smi installed" not in drv


def test_good_hosts_are_deployed_and_training_stopped(pf_lab, first_run):
    _, run = first_run
    assert "OK" in summary_row(run.out, "good"), run.out
    assert health(pf_lab, "good") == "200"
    assert sh(pf_lab, "good", "systemctl is-active dflash-train.service") != "active"
    assert "DFLASH" in sh(pf_lab, "good", "cat /etc/systemd/system/sglang.service")


def test_ddtree_is_refused_on_0523_and_never_served_as_dflash(pf_lab, first_run, tmp_path):
    ddtree = workdir(tmp_path / "wd", pro6000=(
        'speculative = {"algorithm": "DDTREE", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash",'
        ' "block_size": 16, "tree_budget": 64}'
    ))
    unit_before = sh(pf_lab, "good", "cat /etc/systemd/system/sglang.service")
    run = deploy(pf_lab, ddtree)
    assert run.returncode != 0
    row = run.out.rsplit("SGLang fleet rollout summary", 1)[-1]
    assert "REFUSED" in summary_row(run.out, "good")
    assert "DDTREE" in row and "linear dflash" in row.lower() and "algorithm: DFLASH" in row, row
    assert sh(pf_lab, "good", "cat /etc/systemd/system/sglang.service") == unit_before
    # an engine that has DDTree gets it, spelt as DDTree, not DFLASH
    assert "OK" in summary_row(run.out, "ddtree-engine"), run.out
    unit = sh(pf_lab, "ddtree-engine", "cat /etc/systemd/system/sglang.service")
    assert "--speculative-algorithm DDTREE" in unit and "--speculative-ddtree-budget 64" in unit


def test_seed_incident_a6000_box_is_refused_untouched_while_pro6000_is_deployed(lab_manager):
    lab = lab_manager.ensure(REPO / "lab" / "seed-incident.toml")
    # the lab as its file says: a 2x RTX A6000 box filed under pro6000, holding that class's models
    box = json.loads(sh(lab, "a6000-box", "cat /etc/lab/host.json"))
    assert (box["group"], box["gpu_model"], box["gpu_count"], box["gpu_memory_mib"]) == (
        "pro6000", "NVIDIA RTX A6000", 2, 49140)
    inv = runpy.run_path(str(lab.inventory))
    assert [n for n, _ in inv["pro6000"]] == ["pro6000-1", "a6000-box"] and "a6000" not in inv
    model = load_class_specs(REPO / "group_data")["pro6000"].service.model_path
    assert lab.ssh("a6000-box", f"test -f {model}/config.json").returncode == 0
    assert sh(lab, "a6000-box", "nvidia-smi --query-gpu=name --format=csv,noheader").splitlines() == [
        "NVIDIA RTX A6000"] * 2
    before = (_files(lab, "a6000-box"), main_pid(lab, "a6000-box"))
    run = deploy(lab)
    assert run.returncode != 0
    row = summary_row(run.out, "a6000-box")
    assert "REFUSED" in row and "2x NVIDIA RTX A6000" in row, run.out
    assert (_files(lab, "a6000-box"), main_pid(lab, "a6000-box")) == before
    assert "OK" in summary_row(run.out, "pro6000-1"), run.out
    assert health(lab, "pro6000-1") == "200"
