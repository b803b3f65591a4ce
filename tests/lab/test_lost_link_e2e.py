"""A link that drops silently mid-rollout, and a controller frozen mid-rollout: no run hangs, no lock
is kept from the next run.

Three PRO 6000 boxes serve the old NEXTN spec beside their training jobs (test_turns_e2e.py's hosts, reset as
they booted: one lab for both); the new spec loads in 8 s.
- pro-1 (the canary of pro-1, pro-2): its link drops (eth0 down inside its namespace,
  lab.lab.link) while the deploy waits for its /health. The run ends by itself: pro-1 is reported
  LOST within readiness.link_timeout_s, with no rollback tried over the dead link, and pro-2 is
  NOT ROLLED (the same server and training processes, no lock or pending record). With the link
  back and the lock's lease run out, the next run takes the lock over and finishes the rollout.
- pro-3: its controller is stopped (SIGSTOP: a hung process, a laptop's lid) in the same wait.
  Its SSH session lives on (sshd keeps it), its lease does not: once the lease has run out, the
  next run takes the lock over all the same, and finishes the rollout.
The two scenarios run side by side, each on its own hosts (--limit).
"""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from e2e import (PRO3_HOSTS, PRO3_LAB, Run, deploy, health, in_its_readiness_wait, main_pid, of, sh, summary_row,
                 workdir)

LINK_S = 12  # readiness.link_timeout_s of this test's spec
CLASS = PRO3_HOSTS[:2]  # inventory order: pro-1 is the canary
FROZEN = PRO3_HOSTS[2]
READINESS = ('readiness = {"load_timeout_s": 40, "poll_interval_s": 0.25, "progress_every_s": 5, '
             f'"link_timeout_s": {LINK_S}}}\n'
             'service = {**service, "environment": {"LAB_SGLANG_LOAD_SECONDS": "8"}}')  # time for a fault in its load
TRAIN = "dflash-train.service"
LEFT = "ls /run/sglang-fleet/ /var/lib/sglang-fleet/sglang/pending.json 2>/dev/null; true"


def pids(lab, host: str) -> tuple[int, int]:
    return main_pid(lab, host), main_pid(lab, host, TRAIN)


def lose_the_link(lab, wd) -> dict:
    seen = {"before": {h: pids(lab, h) for h in CLASS}}
    first = Run(lab, wd, CLASS)
    in_its_readiness_wait(lab, first, "pro-1", "DFLASH")
    lab.link("pro-1", False)
    seen["dropped"] = time.monotonic()
    try:
        seen["rc"] = first.wait(timeout=180)
    finally:
        lab.link("pro-1", True)
    seen["first"] = first
    seen["after"] = {h: pids(lab, h) for h in CLASS[1:]}
    seen["left"] = {h: sh(lab, h, LEFT) for h in CLASS}
    seen["units"] = {h: sh(lab, h, "cat /etc/systemd/system/sglang.service") for h in CLASS}
    time.sleep(max(0.0, seen["dropped"] + LINK_S + 1 - time.monotonic()))  # its lease has run out
    seen["second"] = deploy(lab, wd, *[a for h in CLASS for a in ("--limit", h)])
    return seen


def freeze_the_controller(lab, wd) -> dict:
    seen = {}
    first = Run(lab, wd, [FROZEN])
    try:
        in_its_readiness_wait(lab, first, FROZEN, "DFLASH")
        first.p.send_signal(signal.SIGSTOP)
        frozen = time.monotonic()
        time.sleep(max(0.0, frozen + LINK_S + 1 - time.monotonic()))  # its lease has run out
        # the SSH session its lock names lives on: only the lease frees the lock
        seen["session"] = sh(lab, FROZEN, "s=$(sed -n 's/.*\"session\": \\([0-9]*\\),.*/\\1/p' "
                                          "/run/sglang-fleet/sglang.lock); cat /proc/$s/comm")
        seen["second"] = deploy(lab, wd, "--limit", FROZEN)
    finally:
        first.p.kill()
        first.wait(timeout=30)
    return seen


@pytest.fixture(scope="module")
def runs(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(PRO3_LAB, clean=True)
    wd = workdir(tmp_path_factory.mktemp("wd") / "w", pro6000=READINESS)
    with ThreadPoolExecutor(2) as pool:
        lost, frozen = pool.submit(lose_the_link, lab, wd), pool.submit(freeze_the_controller, lab, wd)
        return lab, lost.result(), frozen.result()


def test_a_host_whose_link_drops_is_reported_lost_within_the_bound_and_its_class_stops(runs):
    lab, seen, _ = runs
    first = seen["first"]
    out = first.out
    assert seen["rc"] != 0, out
    # LOST within readiness.link_timeout_s of the drop, saying why, at what, and what the next run does
    assert first.first("pro-1", "pro-1: link lost: expected an answer to its lock's lease renewal") \
        - seen["dropped"] <= LINK_S, out
    row = summary_row(out, "pro-1")
    assert " LOST " in row, out
    table = out.rsplit("SGLang fleet rollout summary", 1)[-1]
    assert "pro-1: given up at: the wait for sglang.service's /health" in table
    assert "next: once it answers again, make deploy (from any machine: the lock's lease runs out 12s after its " \
           "last renewal) finishes this rollout or rolls it back" in table
    assert not first.said("pro-1", "rolling back")  # no rollback over the dead link
    # it keeps what the next run needs: its pending record and this run's lock
    assert "pending.json" in seen["left"]["pro-1"] and "sglang.lock" in seen["left"]["pro-1"]
    # the rest of its class as it was: the same server and training, no lock, no pending record
    assert "NOT ROLLED (serving as before)" in summary_row(out, "pro-2"), out
    assert seen["after"]["pro-2"] == seen["before"]["pro-2"]
    assert "NEXTN" in seen["units"]["pro-2"] and seen["left"]["pro-2"] == "/run/sglang-fleet/:"


def test_the_next_run_takes_the_lock_over_and_finishes_the_rollout(runs):
    lab, seen, _ = runs
    run = seen["second"]
    assert run.returncode == 0, run.out
    assert any(of("pro-1", "stale deploy lock held by", line) and "; taking it over" in line
               for line in run.out.splitlines()), run.out
    row = summary_row(run.out, "pro-1")
    assert "take over an interrupted rollout" in row and " OK " in row and "accept length" in row, run.out
    for h in CLASS:
        assert health(lab, h) == "200" and "DFLASH" in sh(lab, h, "cat /etc/systemd/system/sglang.service")
        assert sh(lab, h, f"systemctl is-active {TRAIN}") != "active"  # the GPUs serve now
        assert sh(lab, h, LEFT) == "/run/sglang-fleet/:"  # no lock, no lease, no pending record


def test_a_frozen_controllers_lock_is_taken_over_once_its_lease_runs_out(runs):
    lab, _, seen = runs
    assert seen["session"] in ("sshd", "sshd-session")  # its SSH session is alive
    run = seen["second"]
    assert run.returncode == 0, run.out
    assert "its lease ran out (not renewed within readiness.link_timeout_s by the host's clock" in run.out, run.out
    row = summary_row(run.out, FROZEN)
    assert "take over an interrupted rollout" in row and " OK " in row, run.out
    assert health(lab, FROZEN) == "200" and sh(lab, FROZEN, LEFT) == "/run/sglang-fleet/:"
