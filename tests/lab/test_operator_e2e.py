"""Operator commands on a real lab: `make status` (drift named as `make dry` names it, unhealthy
and unreachable hosts with rows of their own, --json), `make history`, and `make rollback` to
the previous backup set or to one that does not exist; a host whose state changes between a
run's preflight and its begin; the old rollback variable left exported; `make rollback` after a
failed deploy.

The group_data the deploys run from is a git repository, so the records carry its commit:
version A (DFLASH block size 8) is deployed, then B (block size 16); a rollback puts A back.
The make targets run as an operator runs them, from the Makefile, in that directory.

"Between preflight and begin" is made with a hook: a deploy file run before deploy.py wraps
begin's callback (tasks.recovery._begin), so a command runs on the host after preflight read it
(planning time) and just before begin's command: the window a run that ended meanwhile, or a
hand, would use.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest
from e2e import BIN, REPO, deploy, health, main_pid, records, sh, summary_row, workdir

from lab.provision import WORKLOAD_UNIT

PRO = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
       'gpu_count = 1\ngpu_memory_mib = 97887\nload_seconds = 1\n')
LAB = f"""
[lab]
name = "opslab"
subnet = "10.215.0.0/24"

[[hosts]]
name = "ops-a"
{PRO}
[[hosts]]
name = "ops-b"
{PRO}
[[hosts]]
name = "ops-c"
group = "a6000"
gpu_model = "NVIDIA RTX A6000"
gpu_count = 2
gpu_memory_mib = 49140
load_seconds = 1
"""
FAST = 'readiness = {"load_timeout_s": 30, "poll_interval_s": 0.25, "progress_every_s": 5}'
BLOCK_8 = 'speculative = {**speculative, "block_size": 8}'
UNIT = "/etc/systemd/system/sglang.service"


def git(wd, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@lab", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@lab"}
    return subprocess.run(["git", "-C", str(wd), *args], capture_output=True, text=True, check=True, env=env).stdout.strip()


def ops(wd, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([str(BIN / "python"), "-m", "ops", *args], cwd=wd, capture_output=True, text=True, timeout=120)
    p.out = p.stdout + p.stderr
    return p


def with_a_gone_host(lab, wd):
    """The lab's inventory and one more PRO 6000 host at a lab address where nothing listens."""
    inventory = wd / "inventory-with-a-gone-host.py"
    gone = "pro6000.append(('ops-gone', {**pro6000[0][1], 'ssh_port': 2}))  # nothing listens there\n"
    inventory.write_text(lab.inventory.read_text().replace("# Validate group_data", gone + "# Validate group_data"))
    return inventory


def make(lab, wd, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`make ARGS INVENTORY=<the lab's>` in the deploy's directory, with this venv (-o venv: nothing installed)."""
    p = subprocess.run(["make", "-s", "-f", str(REPO / "Makefile"), "-o", "venv", f"BIN={BIN}",
                        f"INVENTORY={lab.inventory}", *args], cwd=wd, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1", **(env or {})})
    p.out = p.stdout + p.stderr
    return p


def rollback(lab, wd, host: str, to: str) -> subprocess.CompletedProcess:
    return make(lab, wd, "rollback", f"HOST={host}", f"TO={to}")


def running_args(lab, host: str) -> str:
    return sh(lab, host, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang)/cmdline")


def double_loads(lab, host: str, load: str) -> None:
    """The SGLang double on the host loads from now on as `load` says: 'crash' (but with the arguments
    the server runs with now: those still load) or 'ok'."""
    keep = f", preinstalled_argv=open('/proc/{main_pid(lab, host)}/cmdline').read().split(chr(0))[3:-1]" \
        if load == "crash" else ""
    sh(lab, host, "python3 -c \"import json; p = '/etc/lab/host.json'; d = json.load(open(p)); "
                  f"d.update(load='{load}'{keep}); json.dump(d, open(p, 'w'))\"")


def declare_block_size(wd, size: int) -> None:
    """pro6000's group_data in this directory, with another DFLASH block size."""
    path = wd / "group_data" / "pro6000.py"
    kept = [line for line in path.read_text().splitlines() if not line.startswith("speculative = {**speculative")]
    path.write_text("\n".join([*kept, f'speculative = {{**speculative, "block_size": {size}}}']) + "\n")


def stamps(lab, wd, host: str) -> list[str]:
    history = json.loads(ops(wd, "history", str(lab.inventory), host, "--json").stdout)
    return sorted(b["stamp"] for b in history["backups"])


def row(text: str, host: str) -> str:
    return next((line for line in text.splitlines() if line.startswith(host + " ")), "")


def details(text: str, host: str) -> list[str]:
    """The indented lines under a host's row."""
    lines = text.splitlines()
    start = lines.index(row(text, host)) + 1
    out = []
    for line in lines[start:]:
        if not line.startswith("    "):
            break
        out.append(line.strip())
    return out


@pytest.fixture(scope="module")
def fleet(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB)
    wd = workdir(tmp_path_factory.mktemp("wd") / "w", pro6000=f"{FAST}\n{BLOCK_8}", a6000=FAST)
    git(wd, "init", "-q")
    git(wd, "add", "-A")
    git(wd, "commit", "-qm", "A: block size 8")
    commit_a = git(wd, "rev-parse", "HEAD")
    first = deploy(lab, wd)
    text = (wd / "group_data" / "pro6000.py").read_text().replace(BLOCK_8, "")
    (wd / "group_data" / "pro6000.py").write_text(text)
    git(wd, "commit", "-qam", "B: block size 16")
    second = deploy(lab, wd)
    return lab, wd, commit_a, git(wd, "rev-parse", "HEAD"), first, second


def test_records_carry_the_engine_the_spec_hash_and_the_commit(fleet):
    lab, _, commit_a, commit_b, first, second = fleet
    assert first.returncode == 0 and second.returncode == 0, first.out + second.out
    a, b = records(lab, "ops-a")
    assert (a["commit"], a["dirty"], b["commit"], b["dirty"]) == (commit_a, False, commit_b, False)
    assert a["sglang"] == b["sglang"] == "0.5.23" and a["kind"] == b["kind"] == "deploy"
    assert a["spec_sha256"] != b["spec_sha256"] and len(b["spec_sha256"]) == 64
    assert (b["result"], b["by"], b["served_model"]) == ("ok", a["by"], "qwen3.6-27b")


def test_status_of_a_converged_fleet_is_ok(fleet):
    _, wd, commit_a, commit_b, _, _ = fleet
    p = ops(wd, "status", str(fleet[0].inventory))
    assert p.returncode == 0, p.out
    # the a6000 class did not change with B: its last deploy is A's
    for host, commit in (("ops-a", commit_b), ("ops-b", commit_b), ("ops-c", commit_a)):
        line = row(p.stdout, host)
        assert line.endswith("OK") and "active (running), enabled" in line and " 200 " in line, p.out
        assert f"({commit[:12]})" in line and details(p.stdout, host) == []
    assert "DFLASH (draft /root/models/Qwen3.6-27B-DFlash, block size 16)" in row(p.stdout, "ops-a")


def test_history_lists_rollouts_and_backups_newest_first(fleet):
    lab, wd, _, commit_b, _, _ = fleet
    p = ops(wd, "history", str(lab.inventory), "ops-a")
    assert p.returncode == 0, p.out
    lines = p.stdout.splitlines()
    assert lines[0] == "ops-a: rollouts, newest first"
    assert " deploy by " in lines[1] and f"({commit_b[:12]})" in lines[1]
    backups = lines[lines.index(next(x for x in lines if x.startswith("ops-a: backups"))) + 1:]
    assert len(backups) == 1 and "qwen3.6-27b, DFLASH (draft /root/models/Qwen3.6-27B-DFlash, block size 8)" in backups[0]


def test_a_rollback_to_a_stamp_that_does_not_exist_is_refused_with_the_list(fleet):
    lab, wd, _, _, _, _ = fleet
    pid = main_pid(lab, "ops-a")
    stamps = json.loads(ops(wd, "history", str(lab.inventory), "ops-a", "--json").stdout)["backups"]
    p = rollback(lab, wd, "ops-a", "20200101T000000Z")
    assert p.returncode != 0 and "REFUSED" in summary_row(p.out, "ops-a"), p.out
    assert (f"ops-a: rollback: backups/20200101T000000Z does not exist; the backups there are: "
            f"{stamps[0]['stamp']} (newest last)") in p.out
    assert main_pid(lab, "ops-a") == pid and len(records(lab, "ops-a")) == 2  # untouched, nothing recorded


def test_a_rollback_puts_the_previous_service_back_and_says_deploy_would_undo_it(fleet):
    lab, wd, _, _, _, _ = fleet
    p = rollback(lab, wd, "ops-a", "previous")
    assert " OK " in summary_row(p.out, "ops-a"), p.out
    assert "the next make deploy brings it back to the declared spec" in p.out
    assert health(lab, "ops-a") == "200"
    assert "--speculative-dflash-block-size 8" in sh(lab, "ops-a", f"cat {UNIT}")
    assert "--speculative-dflash-block-size 8" in running_args(lab, "ops-a")
    last = records(lab, "ops-a")[-1]
    assert (last["kind"], last["result"]) == ("rollback", "ok") and last["to"].endswith("Z")
    # status: drift, named as make dry names it
    s = ops(wd, "status", str(lab.inventory), "--limit", "ops-a")
    assert s.returncode == 1 and row(s.stdout, "ops-a").endswith("DRIFT"), s.out
    assert f"rollback to {last['to']}" in row(s.stdout, "ops-a")
    dry = deploy(lab, wd, "--dry", "--limit", "ops-a")
    assert "update sglang.service, spec.json, restart" in summary_row(dry.out, "ops-a")
    assert details(s.stdout, "ops-a")[0] == "drift: make deploy would update sglang.service, spec.json, restart"


def test_a_rollback_whose_service_does_not_come_up_rolls_forward(fleet):
    """B's server now crashes on load on ops-a (the double loads only the argv A runs with):
    the rollback to B fails its gate and A serves again."""
    lab, wd, _, _, _, _ = fleet
    double_loads(lab, "ops-a", "crash")
    p = rollback(lab, wd, "ops-a", "previous")
    assert p.returncode != 0 and "FAILED (rolled back)" in summary_row(p.out, "ops-a"), p.out
    assert health(lab, "ops-a") == "200"
    assert "--speculative-dflash-block-size 8" in sh(lab, "ops-a", f"cat {UNIT}")
    last = records(lab, "ops-a")[-1]
    assert (last["kind"], last["result"]) == ("rollback", "rolled-back")


def test_status_names_a_hand_edit_a_stopped_service_and_an_unreachable_host(fleet):
    lab, wd, _, _, _, _ = fleet
    sh(lab, "ops-b", f"sed -i 's/--mem-fraction-static 0.85/--mem-fraction-static 0.8/' {UNIT}")
    sh(lab, "ops-c", "systemctl stop sglang")
    inventory = with_a_gone_host(lab, wd)
    p = ops(wd, "status", str(inventory))
    j = ops(wd, "status", str(inventory), "--json")
    assert p.returncode == 1 and j.returncode == 1, p.out
    assert row(p.stdout, "ops-b").endswith("DRIFT")
    assert details(p.stdout, "ops-b")[0] == "drift: make deploy would update sglang.service, restart", p.out
    assert details(p.stdout, "ops-b")[1:] == [
        "- systemd's copy of sglang.service is older than its file (daemon-reload pending)",
        f"- {UNIT}: differs from group_data"]
    assert row(p.stdout, "ops-c").endswith("UNHEALTHY") and "inactive (dead), enabled" in row(p.stdout, "ops-c")
    assert details(p.stdout, "ops-c")[:3] == ["drift: make deploy would start", "- /health no answer",
                                              "- sglang.service is inactive (dead)"]
    assert row(p.stdout, "ops-gone").endswith("UNREACHABLE") and details(p.stdout, "ops-gone")[0].startswith("- ops-gone: ")
    # --json carries the same facts as the table
    rows = {r["host"]: r for r in json.loads(j.stdout)}
    assert {h: r["verdict"] for h, r in rows.items()} == {
        "ops-a": "DRIFT", "ops-b": "DRIFT", "ops-c": "UNHEALTHY", "ops-gone": "UNREACHABLE"}
    for host, r in rows.items():
        if r["drift"]:
            assert f"drift: make deploy would {r['drift']}" in details(p.stdout, host)
        assert [f"- {reason}" for reason in r["reasons"]] == [x for x in details(p.stdout, host) if x.startswith("- ")]
        assert r["served_model"] in row(p.stdout, host) and r["speculative"] in row(p.stdout, host)


def test_the_deploy_summary_has_a_row_for_a_host_it_could_not_reach(fleet):
    lab, wd, _, _, _, _ = fleet
    p = subprocess.run([str(BIN / "pyinfra"), "-y", str(with_a_gone_host(lab, wd)), "deploy.py"], cwd=wd,
                       capture_output=True, text=True, timeout=600, env={**os.environ, "NO_COLOR": "1"})
    out = p.stdout + p.stderr
    assert p.returncode != 0
    row_ = summary_row(out, "ops-gone")
    assert "pro6000" in row_ and "UNREACHABLE" in row_, out
    table = out.rsplit("SGLang fleet rollout summary", 1)[-1]
    assert "    - ops-gone: Could not connect" in table
    assert all(summary_row(out, h) for h in ("ops-a", "ops-b", "ops-c"))  # the others ran


TRAINING = "dflash-train.service"  # pro6000's declared workload; the ops hosts have none until a test makes one
STARTS_THE_TRAINING = f"""\
# Another operator starts the training on the host between this run's preflight and its begin.
from fleet.core import bounds
from tasks import recovery
from tasks.common import run

if not hasattr(recovery._begin, "hooked"):
    begin = recovery._begin

    def _begin(state, host, pf):
        run(host, "systemctl start {TRAINING}", bounds.workloads(pf.spec, "another operator's start"))
        return begin(state, host, pf)

    _begin.hooked = True
    recovery._begin = _begin
"""


def test_a_workload_started_between_preflight_and_begin_refuses_the_host_untouched(fleet):
    """Preflight saw the training stopped: the plan stops nothing, and a rollback would leave it
    stopped. Started meanwhile, begin refuses the host: nothing of the rollout happens."""
    lab, wd, _, _, _, _ = fleet
    sh(lab, "ops-b", f"printf '%s' {shlex.quote(WORKLOAD_UNIT.format(name='dflash-train', mib=1000))} "
                     f"> /etc/systemd/system/{TRAINING} && systemctl daemon-reload")
    try:
        declare_block_size(wd, 4)  # work for the run: a change of spec
        (wd / "hook.py").write_text(STARTS_THE_TRAINING)
        pid, unit, kept, backups = main_pid(lab, "ops-b"), sh(lab, "ops-b", f"cat {UNIT}"), records(lab, "ops-b"), \
            stamps(lab, wd, "ops-b")
        assert "--speculative-dflash-block-size 16" in unit and pid and kept and backups
        p = subprocess.run([str(BIN / "pyinfra"), "-y", "--limit", "ops-b", str(lab.inventory), "hook.py", "deploy.py"],
                           cwd=wd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                           env={**os.environ, "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"})
        out = p.stdout + p.stderr
        assert p.returncode != 0 and "REFUSED" in summary_row(out, "ops-b"), out
        assert (f"ops-b: {TRAINING} became active since preflight (it was inactive: another deploy, or a hand "
                "change); nothing was done: run again") in out
        # the host as the hand left it: the service untouched, the training running, no trace of the rollout
        assert main_pid(lab, "ops-b") == pid and sh(lab, "ops-b", f"cat {UNIT}") == unit and health(lab, "ops-b") == "200"
        assert sh(lab, "ops-b", f"systemctl is-active {TRAINING}") == "active"
        assert sh(lab, "ops-b", "find /run/sglang-fleet /var/lib/sglang-fleet/sglang /etc/systemd/system /etc/sglang "
                                "-maxdepth 1 \\( -name '*.lock' -o -name pending.json -o -name '.*.sglang-fleet-new' \\) "
                                "2>/dev/null; echo end") == "end"  # no lock, no pending record, nothing staged
        assert records(lab, "ops-b") == kept and stamps(lab, wd, "ops-b") == backups
    finally:
        (wd / "hook.py").unlink(missing_ok=True)
        sh(lab, "ops-b", f"systemctl stop {TRAINING}; rm -f /etc/systemd/system/{TRAINING}; systemctl daemon-reload")


def test_a_deploy_with_the_old_rollback_variable_exported_is_a_plain_deploy(fleet):
    """SGLANG_FLEET_ROLLBACK is how make rollback chose a rollback before; left exported it made
    every deploy a rollback. Here it names the set holding A: the deploy deploys group_data."""
    lab, wd, _, _, _, _ = fleet
    declare_block_size(wd, 4)
    p = make(lab, wd, "deploy", "ARGS=--limit ops-b", env={"SGLANG_FLEET_ROLLBACK": stamps(lab, wd, "ops-b")[0]})
    assert p.returncode == 0 and " OK " in summary_row(p.out, "ops-b") and "roll back" not in p.out, p.out
    last = records(lab, "ops-b")[-1]
    assert (last["kind"], last["result"], last["to"]) == ("deploy", "ok", "")
    assert "--speculative-dflash-block-size 4" in sh(lab, "ops-b", f"cat {UNIT}") and health(lab, "ops-b") == "200"
    assert "--speculative-dflash-block-size 4" in running_args(lab, "ops-b")


def test_after_a_failed_deploy_make_rollback_puts_back_the_set_before_the_last_good_change(fleet):
    """ops-b: B, then the good change to block size 4 (the test above), then block size 2, which
    crashes on load and is rolled back. The newest set now holds the live files (block size 4);
    `make rollback` puts back the one before the good change: B (block size 16)."""
    lab, wd, _, _, _, _ = fleet
    good = records(lab, "ops-b")[-1]
    assert (good["result"], good["stamp"] in stamps(lab, wd, "ops-b")) == ("ok", True)
    double_loads(lab, "ops-b", "crash")
    declare_block_size(wd, 2)
    failed = deploy(lab, wd, "--limit", "ops-b")
    assert "FAILED (rolled back)" in summary_row(failed.out, "ops-b"), failed.out
    assert "--speculative-dflash-block-size 4" in running_args(lab, "ops-b")
    double_loads(lab, "ops-b", "ok")  # B loads again
    p = make(lab, wd, "rollback", "HOST=ops-b")
    assert p.returncode == 0 and " OK " in summary_row(p.out, "ops-b"), p.out
    last = records(lab, "ops-b")[-1]
    assert (last["kind"], last["result"], last["to"]) == ("rollback", "ok", good["stamp"])
    assert "--speculative-dflash-block-size 16" in sh(lab, "ops-b", f"cat {UNIT}") and health(lab, "ops-b") == "200"
    assert "--speculative-dflash-block-size 16" in running_args(lab, "ops-b")
