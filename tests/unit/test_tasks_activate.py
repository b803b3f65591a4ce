"""tasks/activate over a pyinfra Host whose commands the test answers (fakehost): a begun rollout's
activation (files live, restart, the wait for /health, the smoke test, the record), its rollback
when any step fails (the journal shown redacted, the files restored, the previous service started
again, the training given back), a host whose link breaks on the way given up as LOST with nothing
more sent, and a failed pyinfra operation's rollback (after_failure). Each command is named by
comparing it with what fleet/ builds for the plan; the clock is scripted."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
from builders import SPEC, converged, make_spec, process, unit
from fakehost import Clock, Script, fake_host, fresh_run, this_run, observation, preflight_of, smi, smoke_answer  # noqa: F401

from facts.gpu import GpuProcesses
from fleet.rollout import commands as rollout, gate
from fleet.rollout.gpus import GpuProcessList
from tasks import activate, workloads
from tasks.common import Begun

NEW = make_spec(speculative={"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash",
                             "block_size": 8})
TRAINING = "dflash-train.service"
# the host serves SPEC and trains; the rollout puts NEW live (files, restart) and stops the training first
HOST = converged(SPEC, units={**converged(SPEC).units, TRAINING: unit(TRAINING, active_state="active",
                                                                       sub_state="running",
                                                                       unit_file_state="enabled")},
                 gpu_processes=GpuProcessList("ok", (process(4242, SPEC.service_unit), process(99, TRAINING))))
TRAINING_HOLDS = smi((99, f"/system.slice/{TRAINING}"))


class Named:
    """A command HostSteps sends for `pf`, by name: each compared with what fleet/ builds for its plan."""

    def __init__(self, pf):
        spec, p = pf.spec, pf.plan
        observe = gate.observe_command(spec)
        apply = rollout.apply_command(spec, list(p.swap), list(p.repairs), p.daemon_reload, p.enable, p.restart)
        self.exact = {f"{apply}; {observe}": "apply", gate.smoke_command(spec): "smoke",
                      rollout.journal_command(spec): "journal", f"{rollout.restart_command(spec)}; {observe}": "restart",
                      rollout.stop_and_disable_command(spec): "stop and disable", observe: "observe",
                      GpuProcesses().command(spec.readiness.command_timeout_s): "smi",
                      rollout.stop_workloads_command([TRAINING]): "stop training",
                      rollout.give_back_command(spec, [TRAINING], [TRAINING]): "give back"}
        self.starts = {"( set -- wait ": "wait", rollout.phase_command(spec, p.record.rolling_out().to_json()): "its turn",
                       "umask 077; ": "restore", rollout.record_command(spec, {})[:40]: "finish"}

    def __call__(self, command: str) -> str:
        return self.exact.get(command) or next((n for s, n in self.starts.items() if command.startswith(s)),
                                               f"unknown: {command[:80]}")


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(activate, "time", clock)
    monkeypatch.setattr(workloads, "time", clock)
    return clock


def activating(answers: dict, pf=None, facts=HOST):
    """_activate on a begun host answering `answers` (name -> answer(s)); (ok, the commands by name, fake, row)."""
    pf = pf or preflight_of(NEW, facts)
    named = Named(pf)
    fake = fake_host(Script(answers, key=named))
    this_run().begun["h"] = Begun(pf)
    ok = activate._activate(None, fake.host, pf)
    return ok, [named(c) for c in fake.commands()], fake, this_run().report.hosts["h"]


RESTORED = f"{rollout.RESTORED} {SPEC.unit_file} {SPEC.env_file} "
SERVING = {"apply": observation(pid=5000, health=0), "wait": observation(pid=5000), "smoke": smoke_answer(),
           "smi": smi(), "restore": RESTORED, "restart": observation(pid=6000)}


def test_a_rollout_stops_the_training_puts_the_files_live_waits_for_health_and_records_ok():
    ok, sent, fake, row = activating(SERVING)
    assert ok and sent == ["its turn", "stop training", "smi", "apply", "wait", "smoke", "finish"]
    wait = fake.commands()[sent.index("wait")]
    assert wait == gate.wait_command(NEW, gate.observation_text(observation(pid=5000, health=0)),
                                     NEW.readiness.progress_every_s)  # the clock stood still: a whole budget
    assert row.verdict == "OK" and row.ready_s == 0 and row.smoke == "500 ms, 16.0 tok/s, accept length 3.25"
    assert '"result": "ok"' in fake.commands()[-1] and "h" not in this_run().begun


def test_a_host_that_serves_at_once_needs_no_wait():
    ok, sent, _, _ = activating({**SERVING, "apply": observation(pid=5000)})
    assert ok and sent == ["its turn", "stop training", "smi", "apply", "smoke", "finish"]


GIVEN_BACK = {"smi": [smi(), TRAINING_HOLDS]}  # free for the new service; the training holds its GPU again
ROLLED_BACK = ["journal", "restore", "restart", "give back", "smi", "finish"]


@pytest.mark.parametrize("answers, sent, reason", [
    ({"apply": observation(active="failed", sub="failed", pid=0, health=0, result="exit-code")},
     ["its turn", "stop training", "smi", "apply", *ROLLED_BACK], "the unit stopped: failed (failed, result exit-code)"),
    ({"wait": observation(pid=5001, restarts=1, health=0)},
     ["its turn", "stop training", "smi", "apply", "wait", *ROLLED_BACK], "the unit restarted (pid 5000 -> 5001): the server died"),
    ({"smoke": smoke_answer(http=500, text="")},
     ["its turn", "stop training", "smi", "apply", "wait", "smoke", *ROLLED_BACK],
     "h: not ready: /health 200, but its generation failed: expected a chat completion with tokens (at most "
     "smoke.max_tokens 16, within smoke.timeout_s 120s), found: chat completion answered HTTP 500"),
    # tokens, but the drafter never ran: no verify step in the answer's meta_info, and no /metrics counter read
    ({"smoke": smoke_answer(verify_ct=0)},
     ["its turn", "stop training", "smi", "apply", "wait", "smoke", *ROLLED_BACK],
     "h: not ready: its generation made 8 tokens but DFLASH did not run: expected spec_verify_ct > 0"),
])
def test_a_failed_activation_rolls_back_to_the_previous_service_and_gives_the_training_back(answers, sent, reason):
    ok, got, fake, row = activating({**SERVING, **GIVEN_BACK, **answers})
    assert not ok and got == sent
    assert row.verdict == "FAILED (rolled back)" and row.reasons[0].startswith(reason)
    assert row.ready_s is None  # not called ready
    assert any(r.startswith("left: the previous sglang.service serving again (backups/20261130T120000Z); "
                            f"{TRAINING} given back") for r in row.reasons)
    restore = fake.commands()[got.index("restore")]
    pf = preflight_of(NEW, HOST)
    assert restore == rollout.restore_command(NEW, pf.plan.before.files, pf.plan.before.backup, False, "enabled",
                                              pf.plan.record.rolling_back(row.reasons[0]).to_json())
    assert '"result": "rolled-back"' in fake.commands()[-1]


def test_the_journal_shown_on_a_failure_has_the_secrets_blanked():
    keyed = make_spec(service={"api_key": {"env": "SGLANG_API_KEY_TEST"}})
    pf = preflight_of(keyed, converged(SPEC))
    key = pf.secrets.api_key
    answers = {**SERVING, "smoke": smoke_answer(http=401),
               "journal": f"server_args=ServerArgs(api_key='{key}')\nrejected Bearer {key}\n"}
    ok, sent, fake, _ = activating(answers, pf=pf)
    assert "journal" in sent and key and not any(key in line for line in fake.logged)
    assert [line for line in fake.logged if line.startswith("  | ")] == [
        "  | server_args=ServerArgs(api_key='***')", "  | rejected Bearer ***"]


def test_a_rollback_whose_restore_fails_stops_and_disables_the_service_and_keeps_the_files():
    ok, sent, _, row = activating({**SERVING, **GIVEN_BACK, "smoke": smoke_answer(http=500),
                                     "restore": (False, "cp: no space")})
    assert sent[-5:] == ["restore", "stop and disable", "give back", "smi", "finish"]
    assert row.verdict == "FAILED (rollback failed)" and "restoring the files failed: cp: no space" in row.reasons


def test_a_previous_service_that_does_not_start_again_is_stopped_for_inspection():
    ok, sent, fake, row = activating({**SERVING, **GIVEN_BACK, "smoke": smoke_answer(http=500),
                                         "restart": (False, "start-limit")})
    assert sent[-7:] == ["restore", "restart", "journal", "stop and disable", "give back", "smi", "finish"]
    assert row.verdict == "FAILED (rollback failed)"
    assert "the previous service did not come back: systemctl could not start it" in row.reasons
    assert "systemctl could not start sglang.service: start-limit" in fake.logged


def test_training_that_does_not_come_back_is_named_in_the_row(clock):
    ok, sent, _, row = activating({**SERVING, "smoke": smoke_answer(http=500)})  # nvidia-smi never shows it again
    assert f"{TRAINING} runs again but holds no GPU memory after {NEW.readiness.workload_release_timeout_s:g}s" \
        in row.reasons
    assert sum(clock.slept) > NEW.readiness.workload_release_timeout_s  # the scripted clock ran, not the wall's


def test_a_link_that_breaks_mid_rollout_gives_the_host_up_and_sends_nothing_more():
    ok, sent, _, row = activating({**SERVING, "wait": EOFError()})
    assert not ok and sent == ["its turn", "stop training", "smi", "apply", "wait"]  # no rollback over the lost link
    assert row.verdict == "LOST" and "h" in this_run().lost and "h" not in this_run().begun
    assert row.reasons[1] == "h: given up at: the wait for sglang.service's /health"
    assert row.reasons[-1].startswith("next: once it answers again, make deploy")


def test_a_rollback_that_served_says_the_host_differs_from_group_data():
    pf = replace(preflight_of(NEW, HOST), rollback=SimpleNamespace(stamp="20261101T000000Z"))
    ok, _, fake, row = activating(SERVING, pf=pf)
    assert ok and row.reasons == ["left: backups/20261101T000000Z serving; the host now differs from group_data: the "
                                  "next make deploy brings it back to the declared spec (make dry shows the difference)"]
    assert '"kind": "rollback"' in fake.commands()[-1] and '"to": "20261101T000000Z"' in fake.commands()[-1]


# --- a pyinfra operation that failed after begin ---------------------------------------------

def failing(answers: dict, applied=False):
    pf = preflight_of(NEW, HOST)
    named = Named(pf)
    fake = fake_host(Script(answers, key=named))
    this_run().begun["h"] = Begun(pf, applied=applied)
    activate.after_failure(fake.host, this_run().begun["h"], "'Upload the new files beside the live ones' failed")
    return [named(c) for c in fake.commands()], this_run().report.hosts["h"]


def test_a_failed_upload_restores_the_files_and_restarts_the_previous_service():
    sent, row = failing(SERVING)
    assert sent == ["restore", "restart", "finish"]  # its training was never stopped: nothing given back
    assert row.verdict == "FAILED (rolled back)" and "h" not in this_run().begun
    assert row.reasons[0] == "'Upload the new files beside the live ones' failed"


def test_a_failure_after_the_new_files_went_live_stops_the_new_service_first():
    sent, row = failing({**SERVING, "restore": f"{rollout.RESTORED}"}, applied=True)
    assert sent == ["restore", "restart", "finish"]
    assert row.verdict == "FAILED (rolled back)"


def test_a_rollback_that_breaks_leaves_the_pending_record_to_the_next_run():
    sent, row = failing({"restore": ValueError("unexpected")})
    assert sent == ["restore"] and row.reasons == [
        "h: could not roll back (unexpected); the host keeps its pending-rollout record: the next run finishes this "
        "rollout or rolls it back"]


def test_service_takes_its_turn_then_queues_the_activation(monkeypatch):
    pf, enlisted, calls = preflight_of(NEW, HOST), [], []
    monkeypatch.setattr(activate.rolling, "enlist", lambda host, p: enlisted.append(p))
    monkeypatch.setattr(activate, "python", SimpleNamespace(call=lambda **kw: calls.append(kw)))
    activate.service(pf)
    assert enlisted == [pf] and calls[0]["function"] is activate._activate and calls[0]["pf"] is pf
