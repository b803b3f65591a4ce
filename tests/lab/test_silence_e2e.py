"""A run killed mid-turn leaves a silence; the run that takes the turn over takes the silence over (lab/silence.toml):
three PRO 6000 replicas without a gateway, and mon-1 with Debian's Prometheus and Alertmanager (the lab's intervals
are seconds: e2e.monitoring_overrides), lab-webhook recording what Alertmanager sends.

A first deploy; then a declared change whose load (LAB_SGLANG_LOAD_SECONDS) outlasts the replica-down alert's
`for:`, the controller SIGKILLed (its process group) while the canary loads. The canary's silence, made by the killed
run to last the whole turn bound, is still active. The next run finishes the canary and rolls the other two: no
page reaches the webhook from the kill to the end of the run, nor after it (though the down alert fired in each
turn), every silence of ours ends at the latest Monitoring.resolve_s after the run's end (Alertmanager's own record
of its end), and none is active a minute after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from e2e import BIN, REPO, _rfc3339, deploy, lab_monitoring, monitoring_overrides, no_silence_left, notifications, \
    prometheus, quiet_alerts, quiet_since, sh, silences, summary_row, wait_for, workdir

HOSTS = ("pro6000-1", "pro6000-2", "pro6000-3")  # inventory order: pro6000-1 is the canary
MONITORING = monitoring_overrides({})
LOAD_S = 12  # each replica's load in the change: port closed, so Prometheus has it down and its alert fires
CHANGE = ('speculative = {**speculative, "block_size": 8}\n'
          f'service = {{**service, "environment": {{"LAB_SGLANG_LOAD_SECONDS": "{LOAD_S}"}}}}\n'
          'readiness = {"load_timeout_s": 120, "poll_interval_s": 0.25}')
NEW_ARGV = "--speculative-dflash-block-size 8"
LOOK_S = 180  # how long the test looks for the canary's load to begin (a busy machine): not a product bound


@pytest.fixture(scope="module")
def silab(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(REPO / "lab/silence.toml", fresh=True)
    run = deploy(lab, workdir(tmp_path_factory.mktemp("first"), monitoring=MONITORING))
    assert run.returncode == 0, run.out
    return lab, tmp_path_factory


def ours(lab, host: str) -> list[dict]:
    return [s for s in silences(lab) if s["createdBy"] == "sglang-fleet" and s["status"]["state"] == "active"
            and {"name": "host", "value": host, "isRegex": False, "isEqual": True} in s["matchers"]]


def canary_loading(lab) -> bool:
    """The killed run's event, from the host: the canary's record rolling out and its new server started."""
    record = sh(lab, HOSTS[0], "cat /var/lib/sglang-fleet/sglang/pending.json 2>/dev/null")
    started = sh(lab, HOSTS[0], "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline")
    return bool(record) and json.loads(record).get("phase") == "rolling-out" and NEW_ARGV in started


def test_a_run_that_takes_over_a_killed_turn_takes_over_its_silence_and_pages_no_one(silab):
    lab, tmp = silab
    before = quiet_alerts(lab)
    cwd = workdir(tmp.mktemp("change"), monitoring=MONITORING, pro6000=CHANGE)
    killed = subprocess.Popen([str(BIN / "pyinfra"), "-y", str(lab.inventory), "deploy.py"], cwd=cwd,
                              env={**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        wait_for("the canary's new server loading", lambda: killed.poll() is not None or canary_loading(lab), LOOK_S)
    finally:
        if killed.poll() is None:
            os.killpg(killed.pid, signal.SIGKILL)
        out = killed.communicate(timeout=60)[0]
    kill = time.time()
    assert killed.returncode == -signal.SIGKILL, out  # killed, not ended by itself
    [left] = ours(lab, HOSTS[0])  # the killed run's: made to last its turn's bound
    assert _rfc3339(left["endsAt"]) - kill > 10 * lab_monitoring().resolve_s(), left
    assert not ours(lab, HOSTS[1]) and not ours(lab, HOSTS[2])  # their turns had not come

    run = deploy(lab, cwd)
    ended = time.time()
    assert run.returncode == 0, run.out
    for h in HOSTS:
        assert " OK " in summary_row(run.out, h) or h == HOSTS[0], run.out
        assert NEW_ARGV in sh(lab, h, "cat /etc/systemd/system/sglang.service")
    assert "take over an interrupted rollout" in summary_row(run.out, HOSTS[0]), run.out
    assert f"silence {left['id']} on mon-1, an interrupted run's, taken over" in run.out, run.out
    assert notifications(lab)[before:] == []  # from the kill to the run's end: no page

    made = no_silence_left(lab, ended)
    assert {m["value"] for s in made for m in s["matchers"] if m["name"] == "host"} == set(HOSTS)
    taken = next(s for s in made if s["id"] == left["id"])
    assert _rfc3339(taken["endsAt"]) <= ended + lab_monitoring().resolve_s(), taken
    quiet_since(lab, ended)
    assert notifications(lab)[before:] == []  # nor once the silences ended
    # not a quiet rollout by luck: each replica's down alert fired during its turn, under its silence
    fired = prometheus(lab, "/api/v1/query", f'max_over_time(ALERTS{{alertname="SGLangReplicaDown",'
                                             f'alertstate="firing"}}[{int(time.time() - kill) + 60}s])')
    assert {r["metric"]["host"] for r in fired["data"]["result"]} == set(HOSTS), fired
    print(f"silences ended {max(_rfc3339(s['endsAt']) for s in made) - ended:.1f} s after the run "
          f"(bound {lab_monitoring().resolve_s():g} s); the taken-over one had been made to last "
          f"{_rfc3339(left['endsAt']) - kill:.0f} s more")
