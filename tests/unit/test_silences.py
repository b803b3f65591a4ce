"""tasks/silences: a host's turn is silenced in the monitoring host's Alertmanager before it, and the silence ends
once its alerts have resolved after it (Monitoring.resolve_s), whatever the turn's end; a run that takes a turn over
ends the silence a killed run left the same way; an Alertmanager that does not answer holds no rollout back, and
the summary says what was silenced and what was not. The commands (fleet.monitoring.silences) are Alertmanager's v2 API."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from fakehost import Script, fake_hosts, fresh_run, this_run  # noqa: F401

from fleet.spec.load import load_class_specs, load_monitoring
from fleet.monitoring.models import Monitoring
from fleet.monitoring.silences import Silence, ours, silence_command, silence_id, silences_command, turn_ended
from fleet.core.wire import Unreadable
from tasks import silences
from tasks.silences import Monitor, monitor_of, silenced

SID = "6b2c0a1e-4f5d-4c3b-9a8e-0123456789ab"
MON = Monitoring()


class Steps:
    def __init__(self):
        self.said = []

    def log(self, message, color=None):
        self.said.append(message)


def hosts(mon_answers: dict):
    fakes = fake_hosts({"r1": Script({}), "mon": Script(mon_answers)}, None, {"pro6000": (["r1"], {}),
                                                                            "monitoring": (["mon"], {})})
    fakes["mon"].host.connected = True
    return fakes


T0 = 1_800_000_000.0
OLD = "0a1b2c3d-0000-4000-8000-000000000001"  # a killed run's silence of r1's turn


def am_silence(sid: str, host: str = "r1", gpu_class: str = "pro6000", state: str = "active",
               by: str = "sglang-fleet", ends: str = "2027-01-15T09:00:00.000Z") -> dict:
    """One silence as Alertmanager's /api/v2/silences lists it."""
    return {"id": sid, "status": {"state": state}, "createdBy": by, "comment": "x", "updatedAt": "2027-01-15T08:00:00Z",
            "startsAt": "2027-01-15T08:00:00.123456789Z", "endsAt": ends,
            "matchers": [{"name": "host", "value": host, "isRegex": False, "isEqual": True},
                         {"name": "gpu_class", "value": gpu_class, "isRegex": False, "isEqual": True}]}


def clock(monkeypatch, *times: float):
    """silences.time.time() answering `times` in turn (the turn's start, its end), then the last one."""
    left = list(times)
    monkeypatch.setattr(silences.time, "time", lambda: left.pop(0) if len(left) > 1 else left[0])


def body(command: str) -> dict:
    words = shlex.split(command)
    return json.loads(words[words.index("-d") + 1])


def test_a_turns_silence_ends_once_its_alerts_have_resolved_after_the_turn_not_at_once(monkeypatch):
    clock(monkeypatch, T0, T0 + 100)  # the turn took 100 s
    fakes = hosts({"--data-urlencode": json.dumps([am_silence(SID)]),
                   "/api/v2/silences": json.dumps({"silenceID": SID})})
    r1, mon = fakes["r1"].host, fakes["mon"]
    monitor, steps, during = Monitor(MON, mon.host), Steps(), []
    with silenced(r1, monitor, "pro6000", 600, steps):
        during.append(len(mon.commands()))
    assert during == [1]  # made before the turn's work
    assert mon.commands() == [silence_command(MON, "r1", "pro6000", T0, T0 + 600,
                                              "r1's turn in a rollout of pro6000 (at most 600 s)"),
                              silences_command(MON, "r1"),
                              silence_command(MON, "r1", "pro6000", T0 + 0.123, T0 + 100 + MON.resolve_s(),
                                              "r1's turn in a rollout of pro6000, over: until its alerts have resolved",
                                              SID)]
    made, ended = body(mon.commands()[0]), body(mon.commands()[2])
    assert made["matchers"][0] == {"name": "host", "value": "r1", "isRegex": False, "isEqual": True}
    assert made["endsAt"] == "2027-01-15T08:10:00.000Z" and made["createdBy"] == "sglang-fleet" and "id" not in made
    # the page during a rollout: Prometheus still has the replica down until a scrape and an evaluation after the
    # turn, and sends that to Alertmanager; the silence holds that long after the turn's end, no less
    assert ended["id"] == SID and ended["endsAt"] == "2027-01-15T08:02:30.000Z"
    assert ended["startsAt"] == "2027-01-15T08:00:00.123Z"  # as Alertmanager has it (it starts a silence at its now)
    assert MON.resolve_s() >= MON.scrape_interval_s + MON.scrape_timeout_s + MON.evaluation_interval_s
    row = this_run().report.hosts["r1"]
    assert row.notes == [f"silenced on mon for its turn (silence {SID}, ending {MON.resolve_s():g} s after the turn, "
                         "once its alerts have resolved)"] and not row.warnings


def test_the_silence_ends_at_least_the_resolve_time_after_the_turn_whatever_it_was_made_to_last():
    for made_to_end in (T0 + 10, T0 + 4000):  # a turn that took nearly its bound; the bound of a killed run's turn
        [(sid, ends)] = turn_ended([Silence(SID, T0 - 600, made_to_end)], T0, MON).items()
        assert sid == SID and ends == T0 + MON.resolve_s()
    lab = Monitoring(scrape_interval_s=1, evaluation_interval_s=1, rate_window_s=5)
    assert (MON.resolve_s(), lab.resolve_s()) == (15 + 10 + 15 + 10, 1 + 1 + 1 + 10)


def test_a_run_that_takes_a_turn_over_takes_over_the_silence_a_killed_run_left(monkeypatch):
    clock(monkeypatch, T0, T0 + 30)
    listed = [am_silence(OLD), am_silence(SID),
              am_silence("0a1b2c3d-0000-4000-8000-000000000002", by="alice"),  # an operator's: not ours
              am_silence("0a1b2c3d-0000-4000-8000-000000000003", state="expired"),
              am_silence("0a1b2c3d-0000-4000-8000-000000000004", gpu_class="a6000")]  # not this turn's matchers
    fakes = hosts({"--data-urlencode": json.dumps(listed), "/api/v2/silences": json.dumps({"silenceID": SID})})
    with silenced(fakes["r1"].host, Monitor(MON, fakes["mon"].host), "pro6000", 600, Steps()):
        pass
    changed = {body(c)["id"]: body(c) for c in fakes["mon"].commands() if '"id"' in c}
    assert set(changed) == {SID, OLD}
    assert changed[OLD]["endsAt"] == changed[SID]["endsAt"] == "2027-01-15T08:01:20.000Z"  # T0 + 30 + 50
    row = this_run().report.hosts["r1"]
    assert f"silence {OLD} on mon, an interrupted run's, taken over: ending 50 s after the turn, once its alerts " \
           "have resolved" in row.notes and not row.warnings


def test_a_turn_that_raises_still_ends_its_silence():
    fakes = hosts({"--data-urlencode": "[]", "/api/v2/silences": json.dumps({"silenceID": SID})})
    with pytest.raises(RuntimeError), silenced(fakes["r1"].host, Monitor(MON, fakes["mon"].host), "pro6000", 60,
                                               Steps()):
        raise RuntimeError("the turn broke off")
    assert body(fakes["mon"].commands()[-1])["id"] == SID


@pytest.mark.parametrize("answers, warning", [
    ({"/api/v2/silences": (False, "curl: (7) Failed to connect")}, "not silenced for its turn: monitoring host mon: "
                                                                     "curl: (7) Failed to connect"),
    ({"--data-urlencode": "[]", "/api/v2/silences": "<html>"},
     "not silenced for its turn: Alertmanager's answer to a new silence"),
    ({"--data-urlencode": "[]", "/api/v2/silences": [json.dumps({"silenceID": SID}), "<html>"]},
     f"silence {SID} on mon not ended (Alertmanager's answer to a new silence"),
    ({"--data-urlencode": (False, "curl: (28) timed out"), "/api/v2/silences": json.dumps({"silenceID": SID})},
     "silences on mon not read (monitoring host mon: curl: (28) timed out): one left by an interrupted run ends by "
     "itself at its turn's bound"),
])
def test_an_alertmanager_that_does_not_answer_holds_no_turn_back(answers, warning):
    fakes = hosts(answers)
    ran = []
    with silenced(fakes["r1"].host, Monitor(MON, fakes["mon"].host), "pro6000", 60, Steps()):
        ran.append(True)
    assert ran == [True]
    row = this_run().report.hosts["r1"]
    assert any(w.startswith(warning) for w in row.warnings), row.warnings


def test_this_turns_silence_ends_after_it_even_where_the_silences_cannot_be_read():
    fakes = hosts({"--data-urlencode": "<html>", "/api/v2/silences": json.dumps({"silenceID": SID})})
    with silenced(fakes["r1"].host, Monitor(MON, fakes["mon"].host), "pro6000", 60, Steps()):
        pass
    assert body(fakes["mon"].commands()[-1])["id"] == SID


def test_no_monitoring_host_no_silence():
    fakes = fake_hosts({"r1": Script({})}, None, {"pro6000": (["r1"], {})})
    assert monitor_of(fakes["r1"].host.state) is None
    with silenced(fakes["r1"].host, None, "pro6000", 60, Steps()):
        pass
    assert fakes["r1"].commands() == []


def test_the_monitoring_host_is_found_in_the_inventory_once_per_run():
    fakes = hosts({})
    found = monitor_of(fakes["r1"].host.state)
    group_data = Path(__file__).resolve().parents[2] / "group_data"
    assert found.host is fakes["mon"].host
    assert found.spec == load_monitoring(group_data, load_class_specs(group_data))["monitoring"]
    assert monitor_of(fakes["r1"].host.state) is found


def test_alertmanagers_answers_and_ids_are_checked():
    assert silence_id(json.dumps({"silenceID": SID})) == SID
    for garbage in ("", "{}", json.dumps({"silenceID": "x; rm -rf /"}), "[" * 5000):
        with pytest.raises(Unreadable):
            silence_id(garbage)
    with pytest.raises(ValueError):
        silence_command(MON, "r1", "pro6000", T0, T0 + 1, "", sid="../../etc")


@pytest.mark.parametrize("garbage", ["", "{}", "null", '"x"', "[" * 5000])
def test_silences_that_do_not_read_are_unreadable(garbage):
    with pytest.raises(Unreadable):
        ours(garbage, "r1", "pro6000")


def test_only_a_turns_own_silences_are_ours():
    def one(**changed) -> list:
        return ours(json.dumps([{**am_silence(SID), **changed}]), "r1", "pro6000")
    [found] = one()
    assert (found.id, round(found.starts, 3), found.ends) == (SID, 1_800_000_000.123, 1_800_003_600.0)
    assert one(status={"state": "pending"})[0].id == SID
    regex = [{"name": "host", "value": "r.*", "isRegex": True},
             {"name": "gpu_class", "value": "pro6000", "isRegex": False}]
    wider = [{"name": "host", "value": "r1", "isRegex": False}]  # every alert of r1, whatever its class: an operator's
    for changed in ({"createdBy": "sglang-fleet-x"}, {"status": {"state": "expired"}}, {"status": "active"},
                    {"matchers": regex}, {"matchers": wider}, {"matchers": am_silence(SID)["matchers"] * 2},
                    {"matchers": [{"name": "host", "value": "r1", "isRegex": False, "isEqual": False},
                                  am_silence(SID)["matchers"][1]]},
                    {"id": "x; rm -rf /"}, {"endsAt": "tomorrow"}, {"startsAt": None}, {"matchers": "host=r1"}):
        assert one(**changed) == [], changed
    assert [s.id for s in ours(json.dumps([1, None, "x", am_silence(SID)]), "r1", "pro6000")] == [SID]
