"""tasks/silences: a host's turn is silenced in the monitoring host's Alertmanager before it and the silence
expired after it, whatever the turn's end; an Alertmanager that does not answer holds no rollout back, and
the summary says what was silenced and what was not. The commands (fleet.monitoring) are Alertmanager's v2 API."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from fakehost import Script, fake_hosts, fresh_run, this_run  # noqa: F401

from fleet.groupdata import load_class_specs, load_monitoring
from fleet.monitoring import Monitoring, expire_command, silence_command, silence_id
from fleet.wire import Unreadable
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


def test_a_turn_is_silenced_before_it_and_the_silence_expired_after_it(monkeypatch):
    monkeypatch.setattr(silences.time, "time", lambda: 1_800_000_000.0)
    fakes = hosts({"/api/v2/silences": json.dumps({"silenceID": SID}), f"/api/v2/silence/{SID}": "200"})
    r1, mon = fakes["r1"].host, fakes["mon"]
    monitor, steps, during = Monitor(MON, mon.host), Steps(), []
    with silenced(r1, monitor, "pro6000", 600, steps):
        during.append(len(mon.commands()))
    assert during == [1]  # made before the turn's work, expired after it
    assert mon.commands() == [silence_command(MON, "r1", "pro6000", 1_800_000_000.0, 1_800_000_600.0,
                                              "r1's turn in a rollout of pro6000 (at most 600 s)"),
                              expire_command(MON, SID)]
    body = json.loads(shlex.split(mon.commands()[0])[shlex.split(mon.commands()[0]).index("-d") + 1])
    assert body["matchers"][0] == {"name": "host", "value": "r1", "isRegex": False, "isEqual": True}
    assert body["endsAt"] == "2027-01-15T08:10:00.000Z" and body["createdBy"] == "sglang-fleet"
    row = this_run().report.hosts["r1"]
    assert row.notes == [f"silenced on mon for its turn (silence {SID}, expired after it)"] and not row.warnings


def test_a_turn_that_raises_still_expires_its_silence():
    fakes = hosts({"/api/v2/silences": json.dumps({"silenceID": SID}), f"/api/v2/silence/{SID}": "200"})
    with pytest.raises(RuntimeError), silenced(fakes["r1"].host, Monitor(MON, fakes["mon"].host), "pro6000", 60,
                                               Steps()):
        raise RuntimeError("the turn broke off")
    assert fakes["mon"].commands()[-1] == expire_command(MON, SID)


@pytest.mark.parametrize("answers, warning", [
    ({"/api/v2/silences": (False, "curl: (7) Failed to connect")}, "not silenced for its turn: monitoring host mon: "
                                                                     "curl: (7) Failed to connect"),
    ({"/api/v2/silences": "<html>"}, "not silenced for its turn: Alertmanager's answer to a new silence"),
    ({"/api/v2/silences": json.dumps({"silenceID": SID}), f"/api/v2/silence/{SID}": "500"},
     f"silence {SID} on mon not expired (500): it ends by itself 60 s after the turn began"),
])
def test_an_alertmanager_that_does_not_answer_holds_no_turn_back(answers, warning):
    fakes = hosts(answers)
    ran = []
    with silenced(fakes["r1"].host, Monitor(MON, fakes["mon"].host), "pro6000", 60, Steps()):
        ran.append(True)
    assert ran == [True]
    row = this_run().report.hosts["r1"]
    assert any(w.startswith(warning) for w in row.warnings), row.warnings


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
        expire_command(MON, "../../etc")
