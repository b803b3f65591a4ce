"""The default lab: a real deploy, an idempotent second one, verify, the deploy lock."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from e2e import BIN, REPO, deploy, gpu_apps, health, main_pid, records, sh, summary_row, verify_checks

from lab import lab as labmod


@pytest.fixture(scope="module")
def deployed(lab):
    first = deploy(lab)
    return lab, first


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
