"""A class without a gateway takes turns too: the canary alone, then rolling.max_unavailable at a time.

Three PRO 6000 boxes serve the old NEXTN spec beside their training jobs. A spec whose load
crashes: the canary rolls back and serves NEXTN again, the other two are never touched (same
server and training processes), and the run fails. The good spec: the canary first, then one host
down at a time (sampled on the hosts themselves), and each host's training stops only in its own
turn, after the host before it serves again. And the same spec change with the controller SIGKILLed
during the canary's load: the next run finishes the canary, then rolls the other two in turns.
"""

from __future__ import annotations

import json
import shlex
import signal

import pytest
from e2e import (PRO3_HOSTS, PRO3_LAB, Run, deploy, health, in_its_readiness_wait, main_pid, sh, summary_row,
                 workdir)

HOSTS = PRO3_HOSTS  # inventory order: pro-1 is the canary
FAST = 'readiness = {"load_timeout_s": 20, "poll_interval_s": 0.25, "progress_every_s": 5}'
CRASH = 'service = {**service, "environment": {"LAB_SGLANG_LOAD": "crash"}}'
TRAIN = "dflash-train.service"
# Every 0.2 s on the host: the time, /health's status, the training's state (one clock: the lab
# hosts share this machine's kernel).
SAMPLER = ("while :; do printf '%s %s %s\\n' \"$(date +%s.%N)\" "
           "\"$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 http://127.0.0.1:30000/health)\" "
           f"\"$(systemctl is-active {TRAIN})\"; sleep 0.2; done")


def pids(lab, host: str) -> tuple[int, int]:
    return main_pid(lab, host), main_pid(lab, host, TRAIN)


@pytest.fixture(scope="module")
def turns(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(PRO3_LAB, clean=True)
    return lab, tmp_path_factory.mktemp("wd")


def test_a_canary_that_fails_leaves_the_rest_of_its_class_untouched(turns):
    lab, tmp = turns
    before = {h: pids(lab, h) for h in HOSTS}
    run = deploy(lab, workdir(tmp / "crash", pro6000=f"{FAST}\n{CRASH}"))
    assert run.returncode != 0
    assert "FAILED (rolled back)" in summary_row(run.out, "pro-1"), run.out
    assert health(lab, "pro-1") == "200" and "NEXTN" in sh(lab, "pro-1", "cat /etc/systemd/system/sglang.service")
    assert sh(lab, "pro-1", f"systemctl is-active {TRAIN}") == "active"  # given back
    for h in HOSTS[1:]:
        assert "NOT ROLLED (serving as before)" in summary_row(run.out, h), run.out
        assert pids(lab, h) == before[h]  # its server never restarted, its training never stopped
        assert "NEXTN" in sh(lab, h, "cat /etc/systemd/system/sglang.service")
        assert sh(lab, h, "ls -A /run/sglang-fleet; test -e /var/lib/sglang-fleet/sglang/pending.json && echo pending") \
            == ""  # no lock, no pending record left


def _samples(lab, host: str) -> list[tuple[float, bool, bool]]:
    """(time, serving, training active) as the host's sampler saw them."""
    out = []
    for line in sh(lab, host, "cat /tmp/turn-samples").splitlines():
        t, code, training = line.split()
        out.append((float(t), code == "200", training == "active"))
    return out


def _sampled(lab):
    """Samplers on every host (/tmp/turn-samples) while the block runs; stopped after it."""
    class Sampling:
        def __enter__(self):
            self.pids = {h: sh(lab, h, f"setsid sh -c {shlex.quote(SAMPLER)} > /tmp/turn-samples 2>&1 < /dev/null "
                                       "& echo $!") for h in HOSTS}

        def __exit__(self, *exc):
            for h, pid in self.pids.items():
                sh(lab, h, f"kill {int(pid)}")
    return Sampling()


def assert_in_turns(lab, canary: str) -> None:
    """As the samplers saw it: never two hosts down at once; `canary` went first (it may have served
    all along: a takeover whose server had loaded), and each other host's training stopped only after
    the host before it served again."""
    samples = {h: _samples(lab, h) for h in HOSTS}
    assert all(samples.values())
    # never two hosts down at once: at each sample of any host, the latest state of every host
    events = sorted((t, h, serving) for h in HOSTS for t, serving, _ in samples[h])
    latest = {h: True for h in HOSTS}
    for _, h, serving in events:
        latest[h] = serving
        assert sum(not s for s in latest.values()) <= 1, (h, latest)
    # after the canary, the hosts take their turns as they come: tasks/rolling.py promises no order
    down = {h: min((t for t, serving, _ in samples[h] if not serving), default=0.0) for h in HOSTS}
    back = {h: max((t for t, serving, _ in samples[h] if not serving), default=0.0) for h in HOSTS}
    stopped = {h: min(t for t, _, training in samples[h] if not training) for h in HOSTS if h != canary}
    order = [canary, *sorted(stopped, key=down.get)]
    assert all(down[h] > back[canary] for h in order[1:]), (down, back)
    for previous, h in zip(order, order[1:]):
        assert stopped[h] > back[previous], (h, stopped[h], back[previous])
    for h in HOSTS:
        assert health(lab, h) == "200" and "DFLASH" in sh(lab, h, "cat /etc/systemd/system/sglang.service")
        assert sh(lab, h, f"systemctl is-active {TRAIN}") != "active"  # the GPUs serve now
        assert sh(lab, h, "ls -A /run/sglang-fleet; test -e /var/lib/sglang-fleet/sglang/pending.json && echo pending") \
            == ""  # no lock, no pending record left


def test_the_class_rolls_one_host_at_a_time_and_stops_each_training_in_its_own_turn(turns):
    lab, tmp = turns
    with _sampled(lab):
        run = deploy(lab, workdir(tmp / "good", pro6000=FAST))
    assert run.returncode == 0, run.out
    assert_in_turns(lab, "pro-1")


def pending_phase(lab, host: str) -> str:
    return json.loads(sh(lab, host, "cat /var/lib/sglang-fleet/sglang/pending.json"))["phase"]


def test_a_run_killed_during_the_canarys_load_is_finished_in_turns_by_the_next(turns):
    """The controller SIGKILLed while the canary loads: every host had begun (a pending record each), but
    only the canary's turn had come. The next run finishes the canary, then rolls the other two one at a
    time, each training stopped only in its own turn: not the whole class at once."""
    lab, tmp = turns
    for h in HOSTS:  # the training back beside the server, as before a rollout
        sh(lab, h, f"systemctl enable --now {TRAIN} >/dev/null 2>&1; systemctl is-active {TRAIN}")
    before = {h: pids(lab, h) for h in HOSTS[1:]}
    cwd = workdir(tmp / "killed", pro6000=f'{FAST}\nservice = {{**service, "mem_fraction": 0.8}}')
    first = Run(lab, cwd, HOSTS)
    try:
        in_its_readiness_wait(lab, first, "pro-1", "--mem-fraction-static 0.8")
    finally:
        first.p.send_signal(signal.SIGKILL)
        first.wait(60)
    assert pending_phase(lab, "pro-1") == "rolling-out", first.out
    for h in HOSTS[1:]:
        assert pending_phase(lab, h) == "begun"  # begun, its turn not come: untouched
        assert pids(lab, h) == before[h] and sh(lab, h, f"systemctl is-active {TRAIN}") == "active"

    with _sampled(lab):
        run = deploy(lab, cwd)
    assert run.returncode == 0, run.out
    assert "take over an interrupted rollout" in summary_row(run.out, "pro-1") and "mid-change: at once" in run.out
    for h in HOSTS[1:]:
        assert " OK " in summary_row(run.out, h), run.out
        assert "--mem-fraction-static 0.8" in sh(lab, h, "cat /etc/systemd/system/sglang.service")
    assert run.out.count("its turn had not come") >= 2, run.out
    assert_in_turns(lab, "pro-1")
