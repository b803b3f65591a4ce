"""fleet.rollout.activation: every branch of activate and roll back, against scripted steps (no hosts)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fleet.rollout.activation import activate, roll_back
from fleet.turns.canary import Analysis
from fleet.rollout.gate import SmokeResult, Verdict
from fleet.rollout.pending import BEGUN, ROLLING_BACK, ROLLING_OUT, Before, Pending, UnitBefore
from fleet.rollout.plan import Plan

UNIT = "sglang.service"
READY = Verdict(True, True, "/health 200 after 3.0s", 3.0)
CRASHED = Verdict(True, False, "the unit stopped: failed (failed, result signal)", 1.0)
SMOKE_OK = SmokeResult(True, "ok", 0.2, 16, 80.0, 4.7, "Hello!")
SMOKE_BAD = SmokeResult(False, "chat completion answered HTTP 500: boom")
TRAIN = {"dflash-train.service": UnitBefore("enabled", "active")}
SERVING = Before({"/etc/systemd/system/sglang.service": "a" * 40}, "20261130T120000Z", UnitBefore("enabled", "active"),
                 TRAIN)
STOPPED = replace(SERVING, service=UnitBefore("enabled", "inactive"))
NOTHING = Before({"/etc/systemd/system/sglang.service": None}, None, UnitBefore("", "inactive"), {})
RECORD = {"time": 1, "by": "alice@laptop"}


class Steps:
    """Scripted steps: each answer is taken from its list in turn; every call is logged."""

    def __init__(self, apply=(True,), ready=(READY, READY), smoke=(SMOKE_OK,), restore=((True, True, ""),),
                 restart=(True,), give_back=([],), stop_workloads=([],), go_live=((True, ""),), analysis=None):
        self.analysis = analysis  # the canary analysis's verdict; None: the turn has none (and no call is logged)
        self.answers = {"go_live": list(go_live), "apply": list(apply), "wait_ready": list(ready), "smoke": list(smoke),
                        "restore": list(restore), "restart": list(restart), "give_back": list(give_back),
                        "stop_workloads": list(stop_workloads)}
        self.calls: list[tuple] = []
        self.records: list[dict] = []

    def _next(self, name, *args):
        self.calls.append((name, *args))
        return self.answers[name].pop(0)

    def go_live(self):
        return self._next("go_live")

    def stop_workloads(self):
        return self._next("stop_workloads")

    def apply(self):
        return self._next("apply"), "apply output"

    def wait_ready(self):
        return self._next("wait_ready")

    def smoke(self):
        return self._next("smoke")

    def analyse(self):
        if self.analysis is not None:
            self.calls.append(("analyse",))
        return self.analysis

    def show_journal(self):
        self.calls.append(("show_journal",))

    def restore(self, reason, stop):
        return self._next("restore", reason, stop)

    def restart(self):
        return self._next("restart")

    def stop_and_disable(self):
        self.calls.append(("stop_and_disable",))

    def give_back(self, workloads):
        return self._next("give_back", workloads)

    def finish(self, record):
        self.calls.append(("finish",))
        self.records.append(record)

    def log(self, message, color=None):
        pass

    @property
    def names(self):
        return [c[0] for c in self.calls]


def make_plan(before=SERVING, restart=True, wait=True, interrupted=None, finish_rollback=False, replaces_service=True,
              stop_workloads=("dflash-train.service",), phase=ROLLING_OUT):
    record = Pending(phase, 1, "alice@laptop", "t", restart, "", before)
    return Plan(before=before, restart=restart, wait=wait, interrupted=interrupted, finish_rollback=finish_rollback,
                record=interrupted if finish_rollback else record, replaces_service=replaces_service,
                stop_workloads=stop_workloads)


# --- activate -------------------------------------------------------------------------------

def test_ready_and_smoke_passed_finish_the_rollout():
    steps = Steps()
    out = activate(make_plan(), steps, UNIT, RECORD)
    assert out.ok and out.verdict == "OK" and out.ready == READY and out.smoke == SMOKE_OK
    assert steps.names == ["stop_workloads", "apply", "wait_ready", "smoke", "finish"]
    assert steps.records == [{**RECORD, "result": "ok", "ready": READY.reason, "smoke": SMOKE_OK.summary()}]


def test_a_canary_that_passes_its_analysis_finishes_with_the_figures_in_its_record():
    steps = Steps(analysis=Analysis(True, "canary analysis passed: 100.0 tok/s"))
    assert activate(make_plan(), steps, UNIT, RECORD).ok
    assert steps.names == ["stop_workloads", "apply", "wait_ready", "smoke", "analyse", "finish"]
    assert steps.records[0]["canary"] == "canary analysis passed: 100.0 tok/s"


def test_a_canary_below_its_baseline_rolls_back_as_after_a_failed_smoke_test():
    why = "canary analysis failed: accept length 1.10 below 0.8 x 4.70 = 3.76"
    steps = Steps(analysis=Analysis(False, why))
    out = activate(make_plan(), steps, UNIT, RECORD)
    assert out.verdict == "FAILED (rolled back)" and out.reasons == [why] and out.ready == READY
    assert steps.names == ["stop_workloads", "apply", "wait_ready", "smoke", "analyse", "restore", "restart",
                           "wait_ready", "give_back", "finish"]
    assert steps.calls[5] == ("restore", why, False)  # its files back, then the old service restarted
    assert steps.records[0]["result"] == "rolled-back" and steps.records[0]["reason"] == why


def test_a_rollout_only_begun_records_that_its_turn_came_before_its_first_change():
    steps = Steps()
    assert activate(make_plan(phase=BEGUN), steps, UNIT, RECORD).ok
    assert steps.names == ["go_live", "stop_workloads", "apply", "wait_ready", "smoke", "finish"]


def test_a_turn_that_cannot_be_recorded_changes_nothing_and_gives_up_the_rollout():
    steps = Steps(go_live=[(False, "No space left on device")], restore=[(True, False, "")])
    out = activate(make_plan(phase=BEGUN), steps, UNIT, RECORD)
    assert not out.ok and steps.names[:2] == ["go_live", "restore"]
    assert "stop_workloads" not in steps.names and "apply" not in steps.names
    assert "recording its turn failed: No space left on device" in steps.calls[1][1]


def test_a_plan_without_a_wait_applies_and_finishes():
    steps = Steps()
    out = activate(make_plan(restart=False, wait=False, stop_workloads=()), steps, UNIT, RECORD)
    assert out.ok and steps.names == ["apply", "finish"]
    assert steps.records[0]["result"] == "ok" and steps.records[0]["ready"] is None


@pytest.mark.parametrize("failure, reason", [
    ({"apply": (False,)}, "applying the files failed: apply output"),
    ({"ready": (CRASHED, READY)}, CRASHED.reason),
    ({"smoke": (SMOKE_BAD,)}, SMOKE_BAD.reason),
])
def test_every_failure_rolls_back_to_the_service_that_was_serving(failure, reason):
    steps = Steps(**failure)
    out = activate(make_plan(), steps, UNIT, RECORD)
    assert out.verdict == "FAILED (rolled back)" and out.reasons == [reason]
    assert ("restore", reason, False) in steps.calls  # it was serving: restore does not stop it on its own
    assert steps.names[-4:] == ["restart", "wait_ready", "give_back", "finish"]
    assert ("give_back", ["dflash-train.service"]) in steps.calls
    assert out.left == "the previous sglang.service serving again (backups/20261130T120000Z); dflash-train.service given back"
    assert "journalctl -u sglang.service" in out.next
    assert steps.records[-1] == {**RECORD, "result": "rolled-back", "reason": reason, "rollback": "FAILED (rolled back)",
                                 "left": out.left}
    # the journal is shown when the server ran and failed, not when the files could not go live
    assert (("show_journal",) in steps.calls) == ("apply" not in failure)
    assert out.ready is None  # not called ready: /health 200 without a generation is not ready either


def test_health_200_without_a_generation_is_not_ready():
    """The gate's last step failed (a scheduler hung behind /health 200): no ready time in the host's row."""
    steps = Steps(smoke=(SMOKE_BAD,))
    out = activate(make_plan(), steps, UNIT, RECORD)
    assert not out.ok and out.ready is None and out.smoke is None
    assert steps.names[:4] == ["stop_workloads", "apply", "wait_ready", "smoke"]


@pytest.mark.parametrize("restored", [True, False])
def test_an_interrupted_rollback_is_finished_without_applying_anything(restored):
    """Its files may be back already (the interrupted run restored them): the previous service
    is restarted either way, since the process running may still be the new one."""
    it = Pending(ROLLING_BACK, 1, "bob", "t", True, "the unit stopped", SERVING)
    steps = Steps(restore=((True, restored, ""),))
    out = activate(make_plan(interrupted=it, finish_rollback=True), steps, UNIT, RECORD)
    assert "apply" not in steps.names and steps.calls[0] == ("restore", "the unit stopped", False)
    assert steps.names[1:] == ["restart", "wait_ready", "give_back", "finish"]
    assert out.verdict == "FAILED (rolled back)"


# --- roll back --------------------------------------------------------------------------------

def test_the_previous_service_that_does_not_come_back_is_stopped_and_disabled_and_kept():
    steps = Steps(ready=(CRASHED, CRASHED))
    out = activate(make_plan(), steps, UNIT, RECORD)
    assert out.verdict == "FAILED (rollback failed)"
    assert steps.names[-5:] == ["wait_ready", "show_journal", "stop_and_disable", "give_back", "finish"]
    assert out.reasons == [CRASHED.reason, f"the previous service did not come back: {CRASHED.reason}"]
    assert out.left.startswith("sglang.service stopped and disabled with the previous files (backups/20261130T120000Z)")
    assert "kept for inspection" in out.left and "dflash-train.service given back" in out.left
    assert "repair it by hand" in out.next
    assert steps.records[-1]["result"] == "failed" and steps.records[-1]["rollback"] == "FAILED (rollback failed)"


def test_a_previous_service_systemd_cannot_start_is_a_failed_rollback():
    steps = Steps(ready=(CRASHED,), restart=(False,))
    out = activate(make_plan(), steps, UNIT, RECORD)
    assert out.verdict == "FAILED (rollback failed)" and "systemctl could not start it" in out.reasons[-1]
    assert "stop_and_disable" in steps.names


def test_a_failed_restore_stops_and_disables_and_still_gives_the_workloads_back():
    steps = Steps(ready=(CRASHED,), restore=((False, False, "cp: No space left on device"),))
    out = activate(make_plan(), steps, UNIT, RECORD)
    assert out.verdict == "FAILED (rollback failed)"
    assert steps.names[-3:] == ["stop_and_disable", "give_back", "finish"]
    assert "cp: No space left on device" in out.reasons[-1]


@pytest.mark.parametrize("before, left", [
    (STOPPED, "sglang.service stopped, as it was; dflash-train.service given back"),
    (NOTHING, "sglang.service not installed, as it was"),
])
def test_a_service_that_was_not_running_is_left_stopped(before, left):
    steps = Steps(ready=(CRASHED,))
    out = activate(make_plan(before=before), steps, UNIT, RECORD)
    assert out.verdict == "FAILED (rolled back)" and out.left == left
    assert ("restore", CRASHED.reason, True) in steps.calls  # this run started it: restore stops it
    assert "restart" not in steps.names and "stop_and_disable" not in steps.names


def test_a_restart_of_unchanged_files_that_fails_leaves_nothing_to_roll_back_to():
    steps = Steps(ready=(CRASHED,), restore=((True, False, ""),))
    out = activate(make_plan(replaces_service=False), steps, UNIT, RECORD)
    assert out.verdict == "FAILED (stopped: nothing to roll back to)"
    assert steps.names[-3:] == ["stop_and_disable", "give_back", "finish"]


def test_a_service_this_run_never_restarted_is_left_as_found():
    steps = Steps(ready=(CRASHED,), restore=((True, False, ""),))
    out = activate(make_plan(restart=False), steps, UNIT, RECORD)
    assert out.verdict == "FAILED (service untouched)"
    assert "stop_and_disable" not in steps.names and "restart" not in steps.names


def test_workloads_that_will_not_stop_roll_back_before_anything_goes_live_and_are_given_back():
    steps = Steps(stop_workloads=(["h: workloads: expected dflash-train.service to release GPU memory"],),
                  restore=((True, False, ""),))
    out = activate(make_plan(), steps, UNIT, RECORD)
    assert out.verdict == "FAILED (service untouched)" and "apply" not in steps.names
    assert steps.names == ["stop_workloads", "restore", "give_back", "finish"]
    assert out.reasons == ["h: workloads: expected dflash-train.service to release GPU memory"]


@pytest.mark.parametrize("stopped, given_back", [(True, True), (False, False)])
def test_a_failure_before_anything_went_live_gives_the_workloads_back_only_if_they_were_stopped(stopped, given_back):
    """What a failed upload (before the host's turn) or a turn that never came leads to
    (tasks.activate.after_failure, tasks.rolling's leave): training never stopped is left alone."""
    steps = Steps(restore=((True, False, ""),))
    out = roll_back(make_plan(), steps, UNIT, RECORD, "'Upload the new files' failed", started=False,
                    workloads_stopped=stopped)
    assert out.verdict == "FAILED (service untouched)"
    assert steps.names == (["restore", "give_back", "finish"] if given_back else ["restore", "finish"])
    assert out.left == "sglang.service as it was: this run did not restart it" + (
        "; dflash-train.service given back" if given_back else "")


def test_a_turn_that_never_came_after_an_interrupted_run_still_gives_the_workloads_back():
    # the interrupted run may have stopped them: its record says they ran before
    it = Pending(ROLLING_OUT, 1, "bob", "t", True, "", SERVING)
    steps = Steps(restore=((True, False, ""),))
    roll_back(make_plan(interrupted=it), steps, UNIT, RECORD, "not rolled", started=False, workloads_stopped=False)
    assert ("give_back", ["dflash-train.service"]) in steps.calls


def test_workloads_that_do_not_hold_their_gpus_again_are_reported():
    steps = Steps(ready=(CRASHED, READY), give_back=(["dflash-train.service runs again but holds no GPU memory"],))
    out = activate(make_plan(), steps, UNIT, RECORD)
    assert out.reasons[-1] == "dflash-train.service runs again but holds no GPU memory"
    assert out.left.endswith("dflash-train.service given back (dflash-train.service runs again but holds no GPU memory)")


def test_nothing_to_give_back_asks_nothing():
    steps = Steps(ready=(CRASHED,))
    activate(make_plan(before=replace(NOTHING, workloads={"w.service": UnitBefore("disabled", "inactive")})), steps,
             UNIT, RECORD)
    assert "give_back" not in steps.names


def test_a_workload_declared_not_given_back_is_said_so_not_restarted():
    from fleet.rollout.pending import FoundProcess, Held

    torch = Held(processes=(FoundProcess(77, 123, "torchrun train.py"),), given_back=False)
    before = replace(SERVING, workloads={**TRAIN, "torch": torch})
    steps = Steps(ready=(CRASHED, READY))
    out = activate(make_plan(before=before), steps, UNIT, RECORD)
    assert ("give_back", ["dflash-train.service"]) in steps.calls  # only what group_data says how to start
    assert out.left.endswith("dflash-train.service given back; torch was not restarted (declared so)")
    assert steps.records[-1]["left"] == out.left
