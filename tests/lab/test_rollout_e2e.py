"""Rollout in the lab: a crash, a hang, or a generation that hangs behind a /health that answers rolls back to
the service that was serving."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from e2e import deploy, gpu_apps, health, records, sh, summary_row, workdir

COMMON = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
          'gpu_count = 1\ngpu_memory_mib = 97887\ndriver_version = "580.95.05"\n')
NEXTN = 'preinstalled = { speculative = { algorithm = "NEXTN", num_steps = 3, topk = 1, num_draft_tokens = 4 } }\n'

LAB = f"""
[lab]
name = "rolab"
subnet = "10.219.0.0/24"

[[hosts]]
name = "crash"
{COMMON}{NEXTN}load = "crash"
load_seconds = 2

[[hosts]]
name = "hang"
{COMMON}{NEXTN}load = "hang"

[[hosts]]
name = "first-crash"
{COMMON}load = "crash"
load_seconds = 1

[[hosts]]
name = "stubborn"
{COMMON}{NEXTN}workloads = ["dflash-train"]

[[hosts]]
name = "hung"
{COMMON}{NEXTN}"""
# The SGLang double's control file (lab/doubles/README.md): in /run, so it outlives the restart into the new server.
CONTROL = "PYTHONPATH=/usr/local/lib/sglang-double python3 -m sglang._lab_control"
# A training unit that systemd refuses to stop by hand: the deploy must stop there.
REFUSE_STOP = ("mkdir -p /etc/systemd/system/dflash-train.service.d && printf '[Unit]\\nRefuseManualStop=yes\\n' "
               "> /etc/systemd/system/dflash-train.service.d/stubborn.conf && systemctl daemon-reload")

SHORT_TIMEOUT = ('readiness = {"load_timeout_s": 8, "poll_interval_s": 0.5, "progress_every_s": 3, '
                 '"workload_release_timeout_s": 30}\nsmoke = {"timeout_s": 5}')


@pytest.fixture(scope="module")
def rolled(lab_manager, tmp_path_factory):
    """Each host's own deploy (`--limit`): in one run its class's first failure would stop the
    others' turns (tests/lab/test_turns_e2e.py shows that); here each fails its own way."""
    lab = lab_manager.ensure(LAB)
    sh(lab, "stubborn", REFUSE_STOP)
    # hung: every server's generation hangs from before the new one starts, /health answering 200 throughout
    assert '"generation": "hang"' in sh(lab, "hung", f"{CONTROL} --generation hang")
    wd = workdir(tmp_path_factory.mktemp("wd") / "w", pro6000=SHORT_TIMEOUT)
    hosts = ("crash", "hang", "first-crash", "stubborn", "hung")
    try:
        with ThreadPoolExecutor(len(hosts)) as pool:  # side by side: each run on its own host
            return lab, dict(zip(hosts, pool.map(lambda h: deploy(lab, wd, "--limit", h), hosts)))
    finally:
        sh(lab, "hung", f"{CONTROL} --reset")  # the previous server generates again (its requests held till now)


def test_each_run_fails_and_says_so(rolled):
    _, runs = rolled
    for host, run in runs.items():
        assert run.returncode != 0, run.out
    assert "rolled back" in summary_row(runs["crash"].out, "crash"), runs["crash"].out
    assert "rolled back" in summary_row(runs["hang"].out, "hang"), runs["hang"].out


def test_crash_rolls_back_and_nextn_answers_again(rolled):
    lab, runs = rolled
    run = runs["crash"]
    assert "the unit" in run.out and "Traceback" in run.out  # the journal excerpt is shown
    assert "NEXTN" in sh(lab, "crash", "cat /etc/systemd/system/sglang.service")
    assert health(lab, "crash") == "200"
    assert records(lab, "crash")[-1]["result"] == "rolled-back"


def test_hang_ends_at_the_load_timeout_and_rolls_back(rolled):
    lab, runs = rolled
    run = runs["hang"]
    assert "not ready after 8s" in run.out
    assert "NEXTN" in sh(lab, "hang", "cat /etc/systemd/system/sglang.service")
    assert health(lab, "hang") == "200"


def test_a_first_install_that_crashes_leaves_the_host_as_it_was(rolled):
    lab, runs = rolled
    run = runs["first-crash"]
    row = summary_row(run.out, "first-crash")
    assert "FAILED (rolled back)" in row, run.out
    assert "left: sglang.service not installed, as it was" in run.out
    assert sh(lab, "first-crash", "systemctl is-active sglang.service; ls /etc/systemd/system/sglang.service "
                                  "/etc/sglang/sglang.env 2>&1 | grep -c 'No such file'") == "inactive\n2"
    assert gpu_apps(lab, "first-crash") == []
    assert records(lab, "first-crash")[-1]["result"] == "rolled-back"


def test_a_workload_that_will_not_stop_fails_the_host_before_its_service_is_touched(rolled):
    lab, runs = rolled
    run = runs["stubborn"]
    row = summary_row(run.out, "stubborn")
    assert "FAILED (service untouched)" in row, run.out
    assert "expected dflash-train.service to stop" in run.out
    # `disable --now` disabled it before systemd refused the stop: the rollback enables it again
    assert sh(lab, "stubborn", "systemctl is-active dflash-train.service; systemctl is-enabled dflash-train.service") \
        == "active\nenabled"
    assert "NEXTN" in sh(lab, "stubborn", "cat /etc/systemd/system/sglang.service")
    assert health(lab, "stubborn") == "200"
    assert sh(lab, "stubborn", "ls /run/sglang-fleet/ /var/lib/sglang-fleet/sglang/pending.json 2>&1") \
        == "ls: cannot access '/var/lib/sglang-fleet/sglang/pending.json': No such file or directory\n/run/sglang-fleet/:"


def test_a_server_that_answers_health_but_cannot_generate_is_not_called_ready(rolled):
    """/health 200 through a hung scheduler (sglang 6624, 35822): the gate's last step, a real generation, gets
    no answer within smoke.timeout_s, so the host is not ready; it rolls back to the previous service."""
    lab, runs = rolled
    run = runs["hung"]
    row = summary_row(run.out, "hung")
    assert "FAILED (rolled back)" in row, run.out
    assert row.split()[row.split().index("back)") + 1] == "-", row  # no time to ready: it never was
    assert ("hung: not ready: /health 200, but its generation failed: expected a chat completion with tokens (at most "
            "smoke.max_tokens 16, within smoke.timeout_s 5s), found: chat completion got no answer (curl exit 28: "
            "timed out)") in run.out
    # the server's journal, shown on the failure: it held the request (the double's hang, not another fault)
    assert "lab: POST /v1/chat/completions held by /run/lab-sglang-control.json" in run.out
    # end state: the previous NEXTN service serving (and generating), its record, no lock, no pending rollout
    assert "NEXTN" in sh(lab, "hung", "cat /etc/systemd/system/sglang.service")
    assert health(lab, "hung") == "200"
    reply = json.loads(sh(lab, "hung", "curl -s --max-time 30 -H 'Content-Type: application/json' -d "
                                       "'{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
                                       "\"max_tokens\": 4}' http://127.0.0.1:30000/v1/chat/completions"))
    assert reply["usage"]["completion_tokens"] == 4
    last = records(lab, "hung")[-1]
    assert last["result"] == "rolled-back" and last["reason"].startswith("hung: not ready: /health 200, but its "
                                                                          "generation failed")
    assert sh(lab, "hung", "ls /run/sglang-fleet/ /var/lib/sglang-fleet/sglang/pending.json 2>&1") \
        == "ls: cannot access '/var/lib/sglang-fleet/sglang/pending.json': No such file or directory\n/run/sglang-fleet/:"


def test_once_its_generation_answers_the_same_deploy_passes_the_gate_with_speculation_shown(rolled, tmp_path):
    """The other side of the gate's last step: the new DFLASH server generates, its answer's meta_info shows
    verify steps, so it is ready and serves (the hung host, its control reset by the fixture)."""
    lab, _ = rolled
    run = deploy(lab, workdir(tmp_path / "w", pro6000=SHORT_TIMEOUT), "--limit", "hung")
    row = summary_row(run.out, "hung")
    assert run.returncode == 0 and " OK " in row, run.out
    assert row.split()[row.split().index("OK") + 1].endswith("s"), row  # its time to ready
    assert "accept length" in row
    assert "DFLASH" in sh(lab, "hung", "cat /etc/systemd/system/sglang.service")
    assert records(lab, "hung")[-1]["result"] == "ok"
