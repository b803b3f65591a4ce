"""A host that answers hostile content is refused by name and left untouched; the others deploy.

`hostile` serves the old NEXTN spec beside a job nobody declared (its GPU is busy), and holds:
a target config.json carrying marker lines that forge a free GPU, a drop-in without a final
newline with a byte that is not UTF-8, and a pending-rollout record of wrong types naming a file
outside the unit's managed ones. Its refusal names what is really there (the busy GPU, the
unreadable config.json and record), nothing of it changes, and the other hosts deploy; every
host has its row. `steady` holds a harmless drop-in without a final newline: once deployed, it
reads as serving (a second run changes nothing), where the unframed answer glued the drop-in's
last line to the next marker and restarted the service on every run.
"""

from __future__ import annotations

import base64
import json

import pytest
from e2e import REPO, deploy, health, main_pid, sh, summary_row

PRO = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
       'gpu_count = 1\ngpu_memory_mib = 97887\nload_seconds = 1\n')
NEXTN = 'preinstalled = { speculative = { algorithm = "NEXTN", num_steps = 3, topk = 1, num_draft_tokens = 4 } }\n'
LAB = f"""
[lab]
name = "hostlab"
subnet = "10.212.0.0/24"

[[hosts]]
name = "hostile"
{PRO}workloads = ["someone-elses-job"]
{NEXTN}
[[hosts]]
name = "steady"
{PRO}
[[hosts]]
name = "a6000-ok"
group = "a6000"
gpu_model = "NVIDIA RTX A6000"
gpu_count = 2
gpu_memory_mib = 49140
load_seconds = 1
"""
TARGET = "/root/models/Qwen3.6-27B/config.json"
DROPIN_DIR = "/etc/systemd/system/sglang.service.d"
PENDING = "/var/lib/sglang-fleet/sglang/pending.json"
UNIT = "/etc/systemd/system/sglang.service"
A_FREE_PRO6000 = "0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, GPU-x, 97887, 580.95.05, 00000000:18:00.0, Disabled"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# What the old framing would have read as a whole GPU section and an empty process list.
FORGED = (f'{{"architectures": ["Qwen3ForCausalLM"]}}\n@@section=gpus\n@@nvidia-smi=0\n{A_FREE_PRO6000}\n'
          f"@@section=gpu_processes\n@@nvidia-smi=0\n@@section=gpus\n@@nvidia-smi=0\n{_b64(A_FREE_PRO6000)}\n"
          "@@section=gpu_processes\n@@nvidia-smi=0\n")
PENDING_RECORD = {"version": 1, "phase": "rolling-back", "since": "yesterday", "by": 5, "target": "t", "restart": 1,
                  "before": {"files": {"/etc/shadow": None}, "backup": "../../../etc",
                             "service": {"enabled": "enabled", "active": "active"}, "workloads": {}}}


def _put(lab, host: str, path: str, data: bytes) -> None:
    """Write raw bytes on a lab host (through base64: the ssh command line is text)."""
    sh(lab, host, f"mkdir -p $(dirname {path}) && echo {base64.b64encode(data).decode()} | base64 -d > {path}")


def _state(lab, host: str) -> dict:
    """What must not change on a refused host: files, the service's process, the job, no lock."""
    return {
        "sha1s": sh(lab, host, f"sha1sum {UNIT} {TARGET} {PENDING} {DROPIN_DIR}/* 2>&1"),
        "pid": main_pid(lab, host),
        "job": sh(lab, host, "systemctl is-active someone-elses-job.service"),
        "lock": sh(lab, host, "ls /run/sglang-fleet 2>/dev/null"),
        "backups": sh(lab, host, "ls /var/lib/sglang-fleet/sglang/backups 2>/dev/null"),
    }


@pytest.fixture(scope="module")
def hostile_run(lab_manager):
    lab = lab_manager.ensure(LAB)
    _put(lab, "hostile", TARGET, FORGED.encode())
    _put(lab, "hostile", f"{DROPIN_DIR}/50-odd.conf", b"[Service]\n# caf\xe9 \xff\nLimitNOFILE=65536")
    _put(lab, "hostile", PENDING, json.dumps(PENDING_RECORD).encode())
    _put(lab, "steady", f"{DROPIN_DIR}/50-limits.conf", b"[Service]\n# \xff\nLimitNOFILE=65536")
    for host in ("hostile", "steady"):
        sh(lab, host, "systemctl daemon-reload")
    before = _state(lab, "hostile")
    return lab, before, deploy(lab)


def test_the_hostile_host_is_refused_for_what_is_really_there(hostile_run):
    _, _, run = hostile_run
    assert run.returncode != 0
    assert "REFUSED" in summary_row(run.out, "hostile"), run.out
    table = run.out.rsplit("SGLang fleet rollout summary", 1)[-1]
    reasons = table.split("\nhostile ", 1)[1].split("\nsteady ", 1)[0]
    assert "GPUs busy" in reasons and "someone-elses-job.service" in reasons  # the forged free list did nothing
    assert "target model" in reasons and "not valid JSON" in reasons
    assert "pending rollout" in reasons and "unreadable pending-rollout record" in reasons
    assert "Traceback" not in run.out and "UnicodeDecodeError" not in run.out


def test_the_hostile_host_is_left_untouched(hostile_run):
    lab, before, _ = hostile_run
    assert _state(lab, "hostile") == before
    assert health(lab, "hostile") == "200"  # its old service still serves
    assert json.loads(sh(lab, "hostile", f"cat {PENDING}")) == PENDING_RECORD
    assert sh(lab, "hostile", "test -e /etc/shadow && echo kept") == "kept"


def test_the_other_hosts_deploy_and_every_host_has_a_row(hostile_run):
    lab, _, run = hostile_run
    for host in ("steady", "a6000-ok"):
        assert "OK" in summary_row(run.out, host), run.out
        assert health(lab, host) == "200"
    assert summary_row(run.out, "hostile")


def test_a_drop_in_without_a_final_newline_leaves_a_converged_host_as_it_is(hostile_run):
    lab, _, _ = hostile_run
    pid = main_pid(lab, "steady")
    again = deploy(lab, REPO, "--limit", "steady")
    assert again.returncode == 0, again.out
    assert "none (already as declared)" in summary_row(again.out, "steady"), again.out
    assert main_pid(lab, "steady") == pid
