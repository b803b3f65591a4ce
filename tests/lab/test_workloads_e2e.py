"""Workloads that are not services: a training job in a scope (as a container runs) and a bare process.

held-1 serves the old NEXTN spec beside two jobs group_data declares: `trainer`, in the scope
trainer.scope, given back by its declared command; `torch`, a bare process matched by its command
line, declared as not given back. held-2's GPU is held by a scope group_data does not declare. A
spec that crashes: held-2 is refused as GPUs busy, untouched; held-1's jobs are stopped in its own
turn, and on the rollback the scope comes back holding the GPU while the bare process stays
stopped. The good spec, the process running again: both are stopped and the host serves it.
"""

from __future__ import annotations

import time

import pytest
from e2e import deploy, gpu_apps, health, main_pid, records, sh, summary_row, workdir


PRO = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
       'gpu_count = 1\ngpu_memory_mib = 97887\nload_seconds = 1\n'
       'preinstalled = { speculative = { algorithm = "NEXTN", num_steps = 3, topk = 1, num_draft_tokens = 4 } }\n')
LAB = (f'[lab]\nname = "heldlab"\nsubnet = "10.222.0.0/24"\n\n[[hosts]]\nname = "held-1"\n{PRO}scope_workloads = ["trainer"]\n'
       f'process_workloads = ["torch"]\n\n[[hosts]]\nname = "held-2"\n{PRO}scope_workloads = ["batch-job"]\n')
WORKLOADS = ('workloads = [{"name": "trainer", "scope": "trainer*.scope", '
             '"give_back": ["/usr/bin/systemctl", "start", "lab-scope-trainer.service"]}, '
             '{"name": "torch", "command_line": "*/lab-gpu-job --name torch *", "give_back": False}]')
FAST = 'readiness = {"load_timeout_s": 20, "poll_interval_s": 0.25, "progress_every_s": 5}'
CRASH = 'service = {**service, "environment": {"LAB_SGLANG_LOAD": "crash"}}'
TORCH_RUNNING = "pgrep -f 'lab-gpu-job --name torc[h]'"  # [h]: not this shell's own command line


def apps(lab, host: str) -> dict[str, int]:
    """What holds the host's GPU: process name -> pid, as nvidia-smi lists them."""
    return {name: int(pid) for pid, name, _ in (line.split(", ") for line in gpu_apps(lab, host))}


@pytest.fixture(scope="module")
def held(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB, fresh=True)
    return lab, tmp_path_factory.mktemp("wd")


def test_the_lab_runs_a_job_in_a_scope_and_one_as_a_bare_process(held):
    lab, _ = held
    assert set(apps(lab, "held-1")) == {"sglang::scheduler_TP0", "trainer", "torch"}
    assert sh(lab, "held-1", "systemctl is-active trainer.scope") == "active"
    pid = apps(lab, "held-1")["torch"]  # left behind by its oneshot: in its cgroup, no unit runs it
    assert sh(lab, "held-1", f"systemctl is-active lab-proc-torch.service; cat /proc/{pid}/cgroup | tail -1") \
        == "inactive\n0::/system.slice/lab-proc-torch.service"


def test_a_crash_stops_the_declared_jobs_in_the_hosts_turn_and_gives_back_the_scope_only(held):
    lab, tmp = held
    before, refused = apps(lab, "held-1"), (apps(lab, "held-2"), main_pid(lab, "held-2"))
    run = deploy(lab, workdir(tmp / "crash", pro6000=f"{WORKLOADS}\n{FAST}\n{CRASH}"))
    assert run.returncode != 0
    assert "FAILED (rolled back)" in summary_row(run.out, "held-1"), run.out
    assert "stopping trainer, torch (its turn)" in run.out
    # the previous service serves again; the scope was given back by its command and holds the GPU again
    assert health(lab, "held-1") == "200" and "NEXTN" in sh(lab, "held-1", "cat /etc/systemd/system/sglang.service")
    after = apps(lab, "held-1")
    assert set(after) == {"sglang::scheduler_TP0", "trainer"} and after["trainer"] != before["trainer"]
    assert sh(lab, "held-1", "systemctl is-active trainer.scope") == "active"
    assert sh(lab, "held-1", TORCH_RUNNING) == ""  # declared not given back: no process of it at all
    record = records(lab, "held-1")[-1]
    assert record["result"] == "rolled-back" and "trainer given back" in record["left"], record
    assert "torch was not restarted (declared so)" in record["left"] and \
        "torch was not restarted (declared so)" in run.out.rsplit("SGLang fleet rollout summary", 1)[-1]
    # an undeclared scope: refused as GPUs busy, naming it; nothing of the host changed
    assert "REFUSED" in summary_row(run.out, "held-2"), run.out
    assert "held-2: GPUs busy: expected GPUs free of processes outside sglang.service and trainer (scopes " \
           "trainer*.scope), torch (processes of command line '*/lab-gpu-job --name torch *'), found pid " \
           f"{refused[0]['batch-job']} batch-job" in run.out
    assert "in batch-job.scope" in run.out
    assert (apps(lab, "held-2"), main_pid(lab, "held-2")) == refused


def test_the_good_spec_stops_the_scope_and_the_process_and_serves(held):
    lab, tmp = held
    sh(lab, "held-1", "systemctl start lab-proc-torch.service")
    deadline = time.monotonic() + 20
    while "torch" not in apps(lab, "held-1") and time.monotonic() < deadline:
        time.sleep(0.2)
    run = deploy(lab, workdir(tmp / "good", pro6000=f"{WORKLOADS}\n{FAST}"), "--limit", "held-1")
    assert run.returncode == 0, run.out
    assert "stop trainer, torch" in records(lab, "held-1")[-1]["action"]
    assert set(apps(lab, "held-1")) == {"sglang::scheduler_TP0"}
    assert sh(lab, "held-1", "systemctl is-active trainer.scope; " + TORCH_RUNNING) == "inactive"
    assert health(lab, "held-1") == "200" and "DFLASH" in sh(lab, "held-1", "cat /etc/systemd/system/sglang.service")
