"""What real GPU boxes do that a kind lab would not (issue 9): a reasoning model whose short
reply is all thinking, a host whose environment names an HTTP proxy, an nvidia-smi that
warns on stderr, one that hangs (a GPU fallen off the bus), and MIG turned on. One deploy
over all of them: each refused host untouched, the others converged."""

from __future__ import annotations

import subprocess
import time

import pytest
from e2e import BIN, REPO, deploy, health, sh, summary_row, verify_checks, workdir

PRO = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
       'gpu_count = 1\ngpu_memory_mib = 97887\nload_seconds = 1\n')
LAB = f"""
[lab]
name = "boxlab"
subnet = "10.217.0.0/24"

[[hosts]]
name = "thinker"
{PRO}reasoning_model = true

[[hosts]]
name = "proxied"
{PRO}
[[hosts]]
name = "warned"
{PRO}nvidia_smi = "warning"

[[hosts]]
name = "hung"
{PRO}nvidia_smi = "hang"

[[hosts]]
name = "sliced"
{PRO}mig = true

[[hosts]]
name = "slow-import"
{PRO}engine_import_seconds = 3

[[hosts]]
name = "cloudy"
{PRO}ssh_user = "ubuntu"
"""
TIMEOUT_S = 4
TOKEN = "hf_lab_0123456789abcdef"
OVERRIDE = ('service = {**service, "extra_args": ["--reasoning-parser", "qwen3"], '
            '"secret_environment": {"HF_TOKEN": {"env": "LAB_BOX_HF_TOKEN"}}}\n'
            'readiness = {"load_timeout_s": 30, "poll_interval_s": 0.25, "progress_every_s": 5, '
            f'"command_timeout_s": {TIMEOUT_S}}}\n'
            'rolling = {"max_unavailable": "100%"}')  # the boxes' turns are not what this shows
PROXY = "http_proxy=http://127.0.0.1:9\nHTTP_PROXY=http://127.0.0.1:9\n"  # nothing listens on port 9


@pytest.fixture(scope="module")
def boxes(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB, fresh=True)
    sh(lab, "proxied", f"printf '{PROXY}' >> /etc/environment")
    wd = workdir(tmp_path_factory.mktemp("wd") / "w", pro6000=OVERRIDE)
    t = time.monotonic()
    run = deploy(lab, wd, env={"LAB_BOX_HF_TOKEN": TOKEN})
    run.cwd = wd
    return lab, run, time.monotonic() - t


def untouched(lab, host: str) -> bool:
    return sh(lab, host, "ls -d /etc/sglang /var/lib/sglang-fleet /run/sglang-fleet /etc/systemd/system/sglang.service "
                         "2>/dev/null; systemctl is-active sglang") == "inactive"


def test_a_reasoning_model_still_thinking_passes_the_smoke_test_and_the_summary_says_so(boxes):
    lab, run, _ = boxes
    row = summary_row(run.out, "thinker")
    assert " OK " in row and "reasoning only" in row, run.out
    assert health(lab, "thinker") == "200"
    reply = sh(lab, "thinker", "curl -s -d '{\"model\": \"qwen3.6-27b\", \"max_tokens\": 16, \"messages\": "
                               "[{\"role\": \"user\", \"content\": \"hi\"}]}' http://127.0.0.1:30000/v1/chat/completions")
    assert '"content":null' in reply and '"reasoning_content":"' in reply  # what the smoke test met


def test_a_host_whose_environment_names_a_proxy_is_deployed_through_the_gate(boxes):
    lab, run, _ = boxes
    assert " OK " in summary_row(run.out, "proxied"), run.out
    # the proxy is in effect in SSH sessions: curl without --noproxy goes there and gets nothing
    assert sh(lab, "proxied", "curl -s -o /dev/null -w '%{http_code}' --max-time 3 http://127.0.0.1:30000/health") \
        == "000"
    assert sh(lab, "proxied", "curl -s --noproxy '*' -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/health") \
        == "200"


def test_nvidia_smi_warnings_are_shown_not_fatal(boxes):
    lab, run, _ = boxes
    row = summary_row(run.out, "warned")
    assert " OK " in row and "1x NVIDIA RTX PRO 6000 Blackwell Workstation Edition at 18:00.0" in row, run.out
    warning = "warned: nvidia-smi said: WARNING: infoROM is corrupted at gpu 0000:18:00.0"
    assert f"    ! warning: {warning}" in run.out.rsplit("SGLang fleet rollout summary", 1)[-1]
    assert health(lab, "warned") == "200"


def test_a_hanging_nvidia_smi_refuses_its_host_within_the_bound_and_the_others_go_on(boxes):
    lab, run, took = boxes
    assert "REFUSED" in summary_row(run.out, "hung"), run.out
    assert (f"hung: nvidia-smi: expected an answer within readiness.command_timeout_s = {TIMEOUT_S}s, found none: "
            "`nvidia-smi --query-gpu` hung and was killed") in run.out
    assert untouched(lab, "hung")
    assert all(" OK " in summary_row(run.out, h) for h in ("thinker", "proxied", "warned"))
    # the hung host cost its bound (twice: the GPU query, then the process query), not the run
    print(f"deploy over 5 hosts, one hung: {took:.1f}s")
    assert sh(lab, "hung", "pgrep -c -f '[/]usr/bin/nvidia-smi' || true") == "0"  # nothing left hanging there


def test_mig_turned_on_refuses_the_host_of_a_class_that_does_not_declare_it(boxes):
    lab, run, _ = boxes
    assert "REFUSED" in summary_row(run.out, "sliced"), run.out
    assert "sliced: MIG mode: expected MIG disabled (gpu_class.mig is false), found GPU 0: MIG Enabled" in run.out
    assert untouched(lab, "sliced")


def test_the_engine_is_imported_once_then_read_from_the_hosts_cache(boxes):
    """`import sglang` costs seconds on a real host (torch): the first preflight pays it (the
    version, then --help: two imports), a no-op run after it imports nothing."""
    lab, run, _ = boxes
    assert " OK " in summary_row(run.out, "slow-import"), run.out
    imports = sh(lab, "slow-import", "cat /run/lab-sglang-imports.log").splitlines()
    assert len(imports) == 2 and any("--help" in line for line in imports)
    t = time.monotonic()
    again = deploy(lab, run.cwd, "--limit", "slow-import", env={"LAB_BOX_HF_TOKEN": TOKEN})
    took = time.monotonic() - t
    assert "none (already as declared)" in summary_row(again.out, "slow-import"), again.out
    assert sh(lab, "slow-import", "cat /run/lab-sglang-imports.log").splitlines() == imports
    assert sh(lab, "slow-import", "ls /var/cache/sglang-fleet/engine | wc -l") == "1"
    print(f"no-op run with a 3 s engine import, cached: {took:.1f}s")


def test_a_login_user_with_sudo_gets_the_same_rollout_and_its_secret_never_lies_in_a_shared_place(boxes):
    """The cloud setup: ssh_user "ubuntu", _sudo = True. Every command of the rollout (lock,
    restart, record) runs as root through sudo; the secret passes through ubuntu's 0700 drop
    directory, not a shared temporary file; make verify connects the same way."""
    lab, run, _ = boxes
    assert " OK " in summary_row(run.out, "cloudy"), run.out
    assert sh(lab, "cloudy", "stat -c '%a %U' /etc/sglang/sglang.secret /etc/sglang/sglang.env").splitlines() == [
        "600 root", "644 root"]
    assert sh(lab, "cloudy", "stat -c '%a %U' /home/ubuntu/.sglang-fleet-upload; ls -A /home/ubuntu/.sglang-fleet-upload") \
        == "700 ubuntu"  # emptied
    assert sh(lab, "cloudy", "grep -rlF -- " + TOKEN + " /tmp /var/tmp /home 2>/dev/null") == ""
    assert sh(lab, "cloudy", "ls /run/sglang-fleet; ls /var/lib/sglang-fleet/sglang") == "backups\ndeploys.jsonl\nspec.json"
    assert health(lab, "cloudy") == "200"
    v = subprocess.run(
        [str(BIN / "pytest"), "-q", "-p", "no:cacheprovider", "-k", "cloudy", str(REPO / "tests" / "verify"),
         "--rootdir", str(REPO), "-c", str(REPO / "pyproject.toml"), "--inventory", str(lab.inventory)],
        cwd=run.cwd, capture_output=True, text=True, timeout=300,
    )
    assert v.returncode == 0 and f"{verify_checks()} passed" in v.stdout, v.stdout + v.stderr
