"""tasks/gateway_turns: a gateway group's turns one at a time (a lost run's gateway first; the first that
fails stops the rest, which serve on as they are), and the group's commands over fake hosts: each on the
gateway it concerns, the waits bounded."""

from __future__ import annotations

import gevent
import pytest
from fakehost import Clock, Script, fake_hosts, fresh_run, this_run  # noqa: F401

from facts.gateway import host_command
from fleet.gateway.floating import Vrrp, handoff_command, set_handoff
from fleet.gateway.group_turn import Member, TurnError, Turn
from fleet.gateway.models import Gateway
from fleet.gateway.smg import workers_command
from fleet.core.wire import MARK
from tasks import gateway_turns

GW = Gateway.model_validate({"routes": ["pro6000"], "floating": {
    "address": "10.0.0.100", "router_id": 51, "password": {"env": "VRRP_PASSWORD"}}})


def group(answers: dict | None = None):
    hosts = fake_hosts({n: (answers or {}).get(n, Script({})) for n in ("gw-1", "gw-2")}, None,
                       {"gateway": (["gw-1", "gw-2"], {})})
    for h in hosts.values():
        h.host.connected = True
    return hosts


def test_turns_go_one_at_a_time_a_lost_runs_gateway_first(monkeypatch):
    hosts = group()
    ran = []

    def turn(name, ssh, restart, preempt, later):
        ran.append(("start", name, sorted(later)))
        gevent.sleep(0.01)
        ran.append(("end", name))
        return Turn(restarted=restart)

    monkeypatch.setattr(gateway_turns, "gateway_turn", turn)
    state = hosts["gw-1"].host.state
    gateway_turns.enlist(hosts["gw-1"].host, "gateway", first=False)
    gateway_turns.enlist(hosts["gw-2"].host, "gateway", first=True)
    assert this_run().gateway_turns["gateway"].order == ["gw-2", "gw-1"]
    jobs = [gevent.spawn(gateway_turns.take_turn, state, hosts[n].host, GW, "gateway", True) for n in ("gw-1", "gw-2")]
    gevent.joinall(jobs, timeout=5)
    assert [j.value for j in jobs] == [True, True]
    assert ran == [("start", "gw-2", ["gw-1"]), ("end", "gw-2"), ("start", "gw-1", []), ("end", "gw-1")]
    assert {n: this_run().report.hosts[n].verdict for n in ("gw-1", "gw-2")} == {"gw-1": "OK", "gw-2": "OK"}


def test_a_failed_turn_stops_the_groups_roll(monkeypatch):
    hosts = group()

    def turn(name, ssh, restart, preempt, later):
        raise TurnError("gw-1 holds the floating address and no other gateway is ready to take it")

    monkeypatch.setattr(gateway_turns, "gateway_turn", turn)
    state = hosts["gw-1"].host.state
    for n in ("gw-1", "gw-2"):
        gateway_turns.enlist(hosts[n].host, "gateway", first=False)
    jobs = [gevent.spawn(gateway_turns.take_turn, state, hosts[n].host, GW, "gateway", True) for n in ("gw-1", "gw-2")]
    gevent.joinall(jobs, timeout=5)
    assert [j.value for j in jobs] == [False, True]
    first, second = this_run().report.hosts["gw-1"], this_run().report.hosts["gw-2"]
    assert first.verdict == "FAILED" and "no other gateway is ready to take it" in first.reasons[0]
    assert "back in the floating address's election" in first.reasons[0]
    assert second.verdict == "NOT ROLLED (serving as before)"
    assert second.reasons == ["gw-2: not restarted: the roll of gateway group gateway stopped (gw-1's turn failed); "
                              "the next deploy rolls it"]


def test_a_turn_ended_by_any_other_exception_stops_the_groups_roll_too(monkeypatch):
    """A bug or a timeout in a turn (its handoff undone by gateway_turn) goes up as it is; the turns after it
    do not run, as after a TurnError."""
    hosts = group()
    monkeypatch.setattr(gateway_turns, "gateway_turn", lambda *a: (_ for _ in ()).throw(ValueError("a bug")))
    state = hosts["gw-1"].host.state
    for n in ("gw-1", "gw-2"):
        gateway_turns.enlist(hosts[n].host, "gateway", first=False)
    jobs = [gevent.spawn(gateway_turns.take_turn, state, hosts[n].host, GW, "gateway", True) for n in ("gw-1", "gw-2")]
    gevent.joinall(jobs, timeout=5)
    assert isinstance(jobs[0].exception, ValueError) and jobs[1].value is True
    assert this_run().report.hosts["gw-2"].verdict == "NOT ROLLED (serving as before)"


def test_a_gateway_failed_before_its_turn_stops_the_roll_at_once(monkeypatch):
    hosts = group()
    monkeypatch.setattr(gateway_turns, "gateway_turn", lambda *a: pytest.fail("no turn may run"))
    state = hosts["gw-1"].host.state
    for n in ("gw-1", "gw-2"):
        gateway_turns.enlist(hosts[n].host, "gateway", first=False)
    state.failed_hosts.add(hosts["gw-1"].host)  # an operation before its turn failed: its turn never runs
    job = gevent.spawn(gateway_turns.take_turn, state, hosts["gw-2"].host, GW, "gateway", True)
    job.join(timeout=5)
    assert job.value is True
    assert this_run().report.hosts["gw-2"].reasons == [
        "gw-2: not restarted: the roll of gateway group gateway stopped (gw-1 failed before its turn); the next "
        "deploy rolls it"]


def record(key: str, text: str) -> str:
    import base64
    return f"{MARK}{key}=\n{base64.b64encode(text.encode()).decode()}\n"


def read(n: int, holds: bool, handoff: bool = False, ready: bool = True) -> str:
    return "".join([
        record("active", "active"), record("ready", "200" if ready else "503"),
        record("vrrp-installed", "yes"), record("vrrp-active", "active"),
        record("vrrp-state", "MASTER 1.0" if holds else "BACKUP 1.0"),
        record("vrrp-address", "eth0" if holds else ""), record("vrrp-handoff", "1" if handoff else "0"),
        record("interfaces", f"2: eth0    inet 10.0.0.1{n}/24 scope global eth0"),
    ])


def test_the_group_is_read_and_told_over_ssh_each_command_on_its_own_gateway():
    command = host_command(GW, "gateway")
    hosts = group({"gw-1": Script({command: read(1, True)}), "gw-2": Script({command: read(2, False)})})
    ssh = gateway_turns.Ssh(GW, "gateway", [hosts["gw-1"].host, hosts["gw-2"].host], hosts["gw-1"].host,
                            gevent.lock.Semaphore())
    members = ssh.members()
    assert [(m.name, m.address, m.priority, m.vrrp.holds, m.eligible) for m in members] == [
        ("gw-1", "10.0.0.11", 200, True, True), ("gw-2", "10.0.0.12", 190, False, True)]
    one, two = members
    ssh.hold(one, True)
    ssh.forward(two, one)
    ssh.handoff(one, True)
    ssh.forward(two, None)
    assert hosts["gw-1"].commands()[1:] == [handoff_command("hold", "10.0.0.100", "on"), set_handoff("smg", True)]
    assert hosts["gw-2"].commands()[1:] == [handoff_command("forward", "10.0.0.100", "8000", "10.0.0.11"),
                                            handoff_command("forward", "10.0.0.100", "8000", "-")]


def test_a_wait_for_the_new_holder_is_bounded(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(gateway_turns, "time", clock)
    hosts = group({"gw-2": Script({"ip -o -4 addr show to 10.0.0.100/32": ["", "", "eth0\n"]})})
    ssh = gateway_turns.Ssh(GW, "gateway", [hosts["gw-1"].host, hosts["gw-2"].host], hosts["gw-1"].host,
                            gevent.lock.Semaphore())
    two = Member("gw-2", "10.0.0.12", 190, Vrrp(), True)
    ssh.wait_holder(two)
    assert len(clock.slept) == 2
    hosts = group({"gw-2": Script({"ip -o -4 addr show to 10.0.0.100/32": "lo\n"})})
    ssh = gateway_turns.Ssh(GW, "gateway", [hosts["gw-1"].host, hosts["gw-2"].host], hosts["gw-1"].host,
                            gevent.lock.Semaphore())
    with pytest.raises(TurnError, match=r"expected gw-2 holding 10.0.0.100 within 7s, found not yet"):
        ssh.wait_holder(two)


def test_the_wait_for_ready_wants_every_replica_the_holder_routes(monkeypatch):
    monkeypatch.setattr(gateway_turns, "time", Clock())
    a, b = "http://10.0.1.1:30000", "http://10.0.1.2:30000"

    def view(**statuses):
        import json
        return json.dumps({"workers": [{"url": u, "status": s} for u, s in statuses.items()]})

    hosts = group({"gw-1": Script({workers_command(GW): [(False, "curl: (7) refused"), view(**{a: "pending"}),
                                                         view(**{a: "ready", b: "ready"})]}),
                   "gw-2": Script({workers_command(GW): view(**{a: "ready", b: "ready"})})})
    ssh = gateway_turns.Ssh(GW, "gateway", [hosts["gw-1"].host, hosts["gw-2"].host], hosts["gw-1"].host,
                            gevent.lock.Semaphore())
    ssh.wait_ready(Member("gw-1", "10.0.0.11", 200, Vrrp(), True), Member("gw-2", "10.0.0.12", 190, Vrrp(), True))
    assert hosts["gw-1"].commands().count(workers_command(GW)) == 3
