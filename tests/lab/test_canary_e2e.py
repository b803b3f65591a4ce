"""The canary judged by what speculation is for (issue 40): its accept length and tokens/s against its class's baseline.

Three PRO 6000 boxes (e2e.PRO3_LAB) serving the old NEXTN spec beside their training jobs. The class's DFlash
drafter first: the canary passes its analysis and the summary shows its figures against the old spec's, measured
on it before its turn. Then, with the training running again on every box, a new revision of the drafter that
loads, answers /health and passes the smoke test but accepts little with the target (the lab declares its
acceptance: e2e.PRO3_POOR_DRAFT): the canary's accept length falls below the bound, it rolls back (the previous
drafter serving, its training given back), the class stops, and the other two serve as before, their servers
and training never touched.
"""

from __future__ import annotations

import re

import pytest
from e2e import (PRO3_HOSTS, PRO3_LAB, PRO3_POOR_DRAFT, canary_analysis, deploy, health, main_pid, sh, summary_row,
                 workdir)

HOSTS = PRO3_HOSTS  # inventory order: pro-1 is the canary
FAST = 'readiness = {"load_timeout_s": 20, "poll_interval_s": 0.25, "progress_every_s": 5}'
TRAIN = "dflash-train.service"
UNIT = "cat /etc/systemd/system/sglang.service"


@pytest.fixture(scope="module")
def canary(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(PRO3_LAB, clean=True)
    return lab, tmp_path_factory.mktemp("wd")


def test_a_good_drafter_passes_the_analysis_and_the_summary_shows_its_figures_against_the_old_spec(canary):
    lab, tmp = canary
    run = deploy(lab, workdir(tmp / "good", canary_analysis=True, pro6000=FAST))
    assert run.returncode == 0, run.out
    said = canary_analysis(run.out, "pro-1")
    m = re.search(r"canary analysis passed: ([0-9.]+) tok/s, accept length ([0-9.]+) against the baseline's "
                  r"([0-9.]+) tok/s, accept length ([0-9.]+) \(the same load on the canary before its turn \(the old "
                  r"spec\)\); bounds: 0.5 x its tok/s \(the old spec drafts otherwise \(.*--speculative-algorithm",
                  said)
    assert m, run.out
    assert float(m.group(1)) > 0 and float(m.group(2)) > float(m.group(4)) > 1  # DFlash's drafts, NEXTN's before
    for h in HOSTS:
        assert "DFLASH" in sh(lab, h, UNIT) and health(lab, h) == "200"
    assert [h for h in HOSTS if canary_analysis(run.out, h)] == ["pro-1"]  # the canary alone is analysed


def test_a_new_drafter_that_accepts_little_rolls_the_canary_back_and_stops_the_class(canary):
    lab, tmp = canary
    for h in HOSTS:  # the training back on every box: the next rollout stops it in each host's turn
        sh(lab, h, f"systemctl start {TRAIN}")
    before = {h: (main_pid(lab, h), main_pid(lab, h, TRAIN)) for h in HOSTS}
    poor = f'speculative = {{**speculative, "draft_model_path": "{PRO3_POOR_DRAFT}"}}'
    run = deploy(lab, workdir(tmp / "poor", canary_analysis=True, pro6000=f"{FAST}\n{poor}"))
    assert run.returncode != 0, run.out
    assert "FAILED (rolled back)" in summary_row(run.out, "pro-1"), run.out
    said = canary_analysis(run.out, "pro-1")
    m = re.search(r"canary analysis failed: accept length ([0-9.]+) below 0.8 x ([0-9.]+) = ([0-9.]+): "
                  r"([0-9.]+) tok/s, accept length \1 against the baseline's ([0-9.]+) tok/s, accept length \2 "
                  r"\(the same load on the canary before its turn \(the old spec\)\); bounds: 0.5 x its tok/s, 0.8 x "
                  r"its accept length", said)
    assert m, run.out
    assert float(m.group(1)) < 1.5 < 4 < float(m.group(2))  # the poor drafter's figure, the class's own drafter's
    # the canary: the previous drafter serving again, its training given back
    assert health(lab, "pro-1") == "200" and PRO3_POOR_DRAFT not in sh(lab, "pro-1", UNIT)
    assert "/root/models/Qwen3.6-27B-DFlash" in sh(lab, "pro-1", UNIT)
    assert sh(lab, "pro-1", f"systemctl is-active {TRAIN}") == "active"
    for h in HOSTS[1:]:
        assert "NOT ROLLED (serving as before)" in summary_row(run.out, h), run.out
        # never restarted, its training never stopped
        assert (main_pid(lab, h), main_pid(lab, h, TRAIN)) == before[h]
        assert PRO3_POOR_DRAFT not in sh(lab, h, UNIT)
    for h in HOSTS:
        left = sh(lab, h, "ls -A /run/sglang-fleet; test -e /var/lib/sglang-fleet/sglang/pending.json && echo pending")
        assert left == ""  # no lock, no pending record left
