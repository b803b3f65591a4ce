"""fleet/gateway/floating.py and fleet/gateway/group_turn.py: the floating address's spec and what it refuses; the host's answers (interfaces,
keepalived's state, the handoff's) read as untrusted text; keepalived's config; and a gateway's turn, run
against a simulated group whose keepalived elects as VRRP does: every group of 2 and 3 gateways, every
holder, with and without preempt, rolled through, must never restart the gateway holding the address, never
move it without the old holder's connections routed back to it, and end with one holder and nothing held."""

from __future__ import annotations

import ipaddress
import re
import subprocess
from pathlib import Path

import pytest

from fleet.gateway import floating
from fleet.gateway.floating import (
    Interface, Vrrp, connection_count, connections_command, handoff_command, interface_for, parse_interfaces,
    parse_vrrp, password_problem, priority)
from fleet.gateway.group_turn import Member, TurnError, gateway_turn
from fleet.gateway.models import Gateway
from fleet.gateway.smg import DRAINING, READY, merged
from fleet.spec.load import SpecError, validate_gateway
from fleet.rollout.render import render_gateway_unit, render_keepalived, render_vrrp_auth

ROOT = Path(__file__).resolve().parents[2]
VIP = "10.0.0.100"
FLOAT = {"address": VIP, "router_id": 51, "password": {"env": "VRRP_PASSWORD"}}


def gateway(**floating_) -> Gateway:
    return Gateway.model_validate({"routes": ["pro6000"], "floating": {**FLOAT, **floating_}})


# --- the spec ------------------------------------------------------------------------------------------

def test_a_floating_address_with_its_defaults():
    f = gateway().floating
    assert (f.advert_interval_s, f.failover_s, f.preempt, f.preempt_delay_s) == (1, 5, False, 0)
    assert (f.garp_repeat, f.garp_refresh_s) == (5, 10)
    assert [priority(i) for i in range(3)] == [200, 190, 180] and priority(30) == 1


@pytest.mark.parametrize("change, said", [
    ({"address": "127.0.0.5"}, "not loopback"),
    ({"address": "224.0.0.18"}, "multicast"),
    ({"address": "gw.example"}, "an IPv4 address"),
    ({"address": "fe80::1"}, "an IPv4 address"),
    ({"router_id": 0}, "greater than or equal to 1"),
    ({"router_id": 256}, "less than or equal to 255"),
    ({"password": "s3cret"}, "name where the secret comes from, not its value"),
    ({"advert_interval_s": 2, "failover_s": 6}, "expected at least 3 x advert_interval_s + 1 = 7 s"),
    ({"preempt_delay_s": 10}, "preempt_delay_s without preempt"),
    ({"router_id": "51"}, "expected a whole number written as one"),
    ({"garp_repeat": 0}, "greater than or equal to 1"),
    ({"garp_refresh_s": 3601}, "less than or equal to 3600"),
    ({"holder": "gw-1"}, "unknown key"),
])
def test_what_the_floating_spec_refuses(change, said):
    with pytest.raises(SpecError) as e:
        validate_gateway("group_data/gateway.py", {"routes": ["pro6000"], "floating": {**FLOAT, **change}})
    assert any(p.startswith("group_data/gateway.py: gateway.floating") and said in p for p in e.value.problems), \
        e.value.problems
    assert "s3cret" not in str(e.value.problems)  # a password put there itself is never shown


@pytest.mark.parametrize("value, ok", [("vrrp1234", True), ("a", True), ("", False), ("123456789", False),
                                       ("ab cd", False), ('ab"cd', False), ("ab#cd", False), ("ab!c", False),
                                       ("pässwd", False), ("ab\ncd", False)])
def test_the_vrrp_password_rule_never_shows_the_value(value, ok):
    problem = password_problem(value)
    assert (problem is None) is ok
    if problem:
        assert "1 to 8 printable ASCII" in problem and (not value or value not in problem)


# --- what the host says ---------------------------------------------------------------------------------

IP_ADDR = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
1: lo    inet 10.0.0.100/32 scope global lo\\       valid_lft forever preferred_lft forever
2: eth0    inet 10.0.0.13/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever preferred_lft forever
2: eth0    inet 10.0.0.100/24 scope global secondary eth0\\       valid_lft forever preferred_lft forever
3: eth1@if9    inet 192.168.7.2/24 scope global eth1\\       valid_lft forever preferred_lft forever
garbage line
4: x    inet 999.1.1.1/24 scope global x"""


def test_the_interfaces_are_read_and_the_held_address_is_not_taken_for_the_hosts_own():
    found = parse_interfaces(IP_ADDR)
    assert [(i.name, str(i.network), i.secondary) for i in found] == [
        ("lo", "127.0.0.1/8", False), ("lo", "10.0.0.100/32", False), ("eth0", "10.0.0.13/24", False),
        ("eth0", "10.0.0.100/24", True), ("eth1", "192.168.7.2/24", False)]
    iface, why = interface_for(VIP, found)
    assert (iface.name, str(iface.network), why) == ("eth0", "10.0.0.13/24", "")


@pytest.mark.parametrize("addresses, said", [
    (["eth0 10.0.0.100/24"], "10.0.0.100 is eth0's own address: expected an address no host has"),
    (["eth0 10.9.0.13/24"], "10.0.0.100 is in the subnet of none of its interfaces (eth0 10.9.0.13/24): expected one"),
    ([], "in the subnet of none of its interfaces (none)"),
    (["eth0 10.0.0.13/24", "eth1 10.0.0.14/16"], "10.0.0.100 is in the subnet of 2 interfaces"),
])
def test_an_interface_that_cannot_carry_the_address_is_named(addresses, said):
    found = [Interface(a.split()[0], ipaddress.IPv4Interface(a.split()[1])) for a in addresses]
    iface, why = interface_for(VIP, found)
    assert iface is None and said in why


@pytest.mark.parametrize("address, said", [
    ("10.0.0.100", "10.0.0.100 is the network address of eth0's subnet 10.0.0.100/30: expected a free host address"),
    ("10.0.0.103", "10.0.0.103 is the broadcast address of eth0's subnet 10.0.0.100/30: expected a free host address"),
    ("10.0.0.102", ""),
])
def test_the_subnets_network_and_broadcast_address_are_no_floating_address(address, said):
    iface, why = interface_for(address, [Interface("eth0", ipaddress.IPv4Interface("10.0.0.101/30"))])
    assert (iface is None, why) == (bool(said), said + (" of it" if said else ""))
    point_to_point = [Interface("eth0", ipaddress.IPv4Interface("10.0.0.101/31"))]  # RFC 3021: both are hosts
    assert interface_for("10.0.0.100", point_to_point)[0] is not None


def records(**said) -> dict[str, str]:
    return {f"vrrp-{k.replace('_', '-')}": v for k, v in said.items()}


def test_keepalived_and_the_handoff_read_back():
    v = parse_vrrp(records(installed="yes", active="active", enabled="enabled", state="MASTER 1796394349.911",
                           address="eth0\nlo", forward="10.0.0.14", handoff="1", stopped="0", connections="3"))
    assert v == Vrrp(True, True, True, "MASTER", 1796394349.911, True, True, "10.0.0.14", True, False, 3, "")
    assert parse_vrrp(records(active="inactive")) == Vrrp()


@pytest.mark.parametrize("said, problem", [
    ({"state": "PWNED 1"}, "vrrp state 'PWNED 1' is not one of MASTER"),
    ({"state": "MASTER x"}, "vrrp state 'MASTER x' is not one of"),
    ({"forward": "10.0.0.14; rm -rf /"}, "handoff route '10.0.0.14; rm -rf /' is not an IPv4 address"),
])
def test_garbage_from_the_host_is_a_problem_never_a_state(said, problem):
    v = parse_vrrp(records(active="active", **said))
    assert problem in v.problem and v.state == "" and v.forwards_to == ""


def test_a_huge_or_odd_connection_count_is_no_count():
    assert parse_vrrp(records(connections="9" * 40)).connections is None
    assert parse_vrrp(records(connections="-1")).connections is None
    assert parse_vrrp(records(connections="\u00b2")).connections is None  # a digit to str.isdigit, not to int


def test_connections_are_counted_only_where_ss_ran(tmp_path):
    """`ss | wc -l` said 0 connections of a host without ss: the count is now nothing, an error to the turn."""
    def count(path: str) -> int | None:
        done = subprocess.run(["/bin/sh", "-c", connections_command(8080)], env={"PATH": path}, capture_output=True,
                              text=True)
        assert (done.returncode == 0) == (connection_count(done.stdout) is not None)  # a failed command: an error
        return connection_count(done.stdout)
    ss = tmp_path / "ss"
    ss.write_text("#!/bin/sh\nprintf '0 0 10.0.0.1:8080 10.0.0.9:5000\\n0 0 10.0.0.1:8080 10.0.0.9:5001\\n'\n")
    ss.chmod(0o755)
    assert count(f"{tmp_path}:/usr/bin:/bin") == 2
    ss.write_text("#!/bin/sh\n")
    assert count(f"{tmp_path}:/usr/bin:/bin") == 0
    ss.write_text("#!/bin/sh\necho 'Cannot open netlink socket' >&2; exit 1\n")
    assert count(f"{tmp_path}:/usr/bin:/bin") is None
    ss.unlink()
    assert count(f"{tmp_path}:/usr/bin/no-such-dir:/bin/no-such-dir") is None


# --- keepalived's config and the smg unit ----------------------------------------------------------------

def test_keepalived_config_per_host():
    gw = gateway()
    first = render_keepalived(gw, "gateway", "gw-1", ["gw-1", "gw-2"], "eth0", 24)
    second = render_keepalived(gw, "gateway", "gw-2", ["gw-1", "gw-2"], "eth0", 24)
    assert "priority 200" in first and "priority 190" in second and "router_id gw-2" in second
    assert "virtual_router_id 51" in first and "10.0.0.100/24 dev eth0" in first and "nopreempt" in first
    assert f"include {floating.AUTH_FILE}" in first and "auth_pass" not in first
    assert 'script "/usr/bin/curl -s -o /dev/null --fail --max-time 1 http://127.0.0.1:8000/readiness"' in first
    for f in (floating.stopped_file("smg"), floating.handoff_file("smg")):
        assert f'file "{f}"' in first
    preempting = render_keepalived(gateway(preempt=True, preempt_delay_s=30), "gateway", "gw-1", ["gw-1"], "eth0", 24)
    assert "preempt_delay 30" in preempting and "nopreempt" not in preempting
    # the address announced whatever preempt says: on a move, on meeting a lower priority holder, while held; and
    # a holder giving way to a higher priority says so first, so that the other announces
    for config in (first, second, preempting):
        assert _lines(config, "garp_", "higher_prio") == ["garp_master_repeat 5", "garp_lower_prio_repeat 5",
                                                          "garp_master_refresh 10", "higher_prio_send_advert true"]
    quiet = render_keepalived(gateway(garp_repeat=2, garp_refresh_s=0), "gateway", "gw-1", ["gw-1"], "eth0", 24)
    assert _lines(quiet, "garp_") == ["garp_master_repeat 2", "garp_lower_prio_repeat 2", "garp_master_refresh 0"]
    assert render_vrrp_auth("vrrp1234").endswith("auth_pass vrrp1234\n")


def _lines(config: str, *starts: str) -> list[str]:
    return [line.strip() for line in config.splitlines() if line.strip().startswith(starts)]


def test_the_smg_unit_records_what_it_runs_and_tells_keepalived_when_it_stops():
    unit = render_gateway_unit(gateway(), "gateway")
    assert ('ExecStartPre=/bin/sh -c "mkdir -p /run/sglang-fleet && cp /etc/smg/smg.generation '
            '/run/sglang-fleet/smg.running && echo 0 > /run/sglang-fleet/smg.stopped"') in unit
    assert 'ExecStopPost=/bin/sh -c "echo 1 > /run/sglang-fleet/smg.stopped"' in unit
    alone = render_gateway_unit(Gateway.model_validate({"routes": ["pro6000"]}), "gateway")
    assert 'cp /etc/smg/smg.generation /run/sglang-fleet/smg.running"' in alone and "ExecStopPost" not in alone


def test_the_handoff_program_is_sent_whole_with_its_arguments_quoted():
    command = handoff_command("forward", VIP, "8000", "10.0.0.14")
    assert command.startswith("( set -- forward 10.0.0.100 8000 10.0.0.14\n") and "nft -f -" in command
    assert not [line for line in command.splitlines() if line.lstrip().startswith("#")]  # comments left out
    program = (ROOT / "fleet/programs/handoff.sh").read_text()
    assert re.search(rf"\broutes={floating.ROUTES}\b", program)  # make status reads the same table


# --- many gateways' views as one, for the replicas' drain --------------------------------------------------

def test_the_group_view_of_a_replica():
    a, b = "http://r1:30000", "http://r2:30000"
    assert merged({"gw-1": {a: "pending"}}) == {a: "pending"}
    views = {"gw-1": {a: READY, b: DRAINING}, "gw-2": {a: READY}}
    assert merged(views) == {a: READY, b: DRAINING}
    views = {"gw-1": {a: READY}, "gw-2": {a: "pending"}}
    assert merged(views) == {a: "ready in gw-1, pending in gw-2"}
    views = {"gw-1": {a: DRAINING}, "gw-2": {}}
    assert merged(views) == {a: DRAINING}
    views = {"gw-1": {}, "gw-2": {a: READY}}
    assert merged(views) == {a: "not registered in gw-1, ready in gw-2"}


# --- a gateway's turn, against a simulated group ---------------------------------------------------------

class Sim:
    """A gateway group whose keepalived elects as VRRP does (the holder stays while eligible; without one, or
    with preempt, the highest-priority eligible gateway holds), with the handoff's state, and the checks of
    what must never happen."""

    def __init__(self, n: int, holder: int, preempt: bool, ready=None, flagged=()):
        self.names = [f"gw-{i + 1}" for i in range(n)]
        self.preempt = preempt
        self.ready = {g: True for g in self.names} | (ready or {})
        self.flag = {g: g in flagged for g in self.names}
        self.lo = {g: False for g in self.names}
        self.route: dict[str, str] = {}  # gateway -> the one it routes old connections to
        self.holder = self.names[holder]
        self.restarted: list[str] = []
        self.calls: list[tuple] = []
        self.connections = {g: 0 for g in self.names}  # clients on each gateway
        self.connections[self.holder] = 5
        self.failed = False  # a turn failed: its undo may end the connections it kept (the failure's cost)

    def address(self, name: str) -> str:
        return f"10.0.0.{11 + self.names.index(name)}"

    def eligible(self, g: str) -> bool:
        return self.ready[g] and not self.flag[g]

    def elect(self) -> None:
        before = self.holder
        if self.holder is None or not self.eligible(self.holder):
            self.holder = next((g for g in self.names if self.eligible(g)), None)
        elif self.preempt:
            self.holder = next(g for g in self.names if self.eligible(g))
        if self.holder != before and before is not None and self.connections[before] and not self.failed:
            # a planned move: the old holder's connections must land on it still
            assert self.lo[before], f"{before}'s connections lost: the address left it without its loopback hold"
            assert self.holder is not None and self.route.get(self.holder) == before, \
                f"{before}'s connections lost: {self.holder} does not route them back to it"
        if self.holder is not None and self.holder != before:
            self.connections[self.holder] = 5  # the clients' new connections land on it

    def members(self) -> list[Member]:
        self.calls.append(("members",))
        return [Member(g, self.address(g), priority(i),
                       Vrrp(True, True, True, "MASTER" if g == self.holder else "BACKUP", None, g == self.holder,
                            self.lo[g], self.address(self.route[g]) if g in self.route else "", self.flag[g], False,
                            self.connections[g]), self.ready[g])
                for i, g in enumerate(self.names)]

    def hold(self, m, on):
        self.calls.append(("hold", m.name, on))
        self.lo[m.name] = on

    def forward(self, m, to):
        self.calls.append(("forward", m.name, to.name if to else None))
        if to is None:
            gone = self.route.pop(m.name, None)
            assert gone is None or self.connections[gone] == 0 or self.failed, \
                f"{gone}'s connections cut: its route went first"
        else:
            self.route[m.name] = to.name

    def handoff(self, m, on):
        self.calls.append(("handoff", m.name, on))
        self.flag[m.name] = on
        self.elect()

    def restart(self, m):
        self.calls.append(("restart", m.name))
        assert self.holder != m.name, f"{m.name} restarted while holding the address"
        self.restarted.append(m.name)
        self.ready[m.name] = True  # a gateway down before comes back with its restart
        self.connections[m.name] = 0  # its stop's drain: in-flight requests end, idle connections close

    def wait_ready(self, m, like):
        self.calls.append(("wait_ready", m.name, like.name if like else None))

    def wait_holder(self, m):
        self.calls.append(("wait_holder", m.name))
        if self.holder != m.name:
            raise TurnError(f"{m.name} does not hold the address")

    def wait_idle(self, m):
        self.calls.append(("wait_idle", m.name))
        self.connections[m.name] = 0

    def log(self, message, color=None):
        pass


@pytest.mark.parametrize("n, holder, preempt", [(n, h, p) for n in (2, 3) for h in range(n) for p in (False, True)])
def test_rolling_every_gateway_moves_the_address_only_with_its_connections_and_ends_clean(n, holder, preempt):
    # with preempt the holder is the highest-priority ready gateway: those above it are down (not ready)
    sim = Sim(n, holder, preempt, ready={f"gw-{i + 1}": False for i in range(holder)} if preempt else None)
    for i, g in enumerate(sim.names):
        gateway_turn(g, sim, restart=True, preempt=preempt, later=frozenset(sim.names[i + 1:]))
    assert sorted(sim.restarted) == sim.names
    assert sim.holder is not None and not any(sim.flag.values()) and not any(sim.lo.values()) and not sim.route
    if preempt:
        assert sim.holder == "gw-1"  # the preferred one, back


def test_the_holders_turn_hands_the_address_over_first():
    sim = Sim(2, 0, preempt=False)
    turn = gateway_turn("gw-1", sim, restart=True, preempt=False)
    assert [c for c in sim.calls if c[0] != "members"] == [
        ("hold", "gw-1", True), ("forward", "gw-2", "gw-1"), ("handoff", "gw-1", True), ("wait_holder", "gw-2"),
        ("restart", "gw-1"), ("wait_ready", "gw-1", "gw-2"), ("forward", "gw-2", None), ("hold", "gw-1", False),
        ("handoff", "gw-1", False)]
    assert (turn.restarted, turn.handed_to, turn.took_back, sim.holder) == (True, "gw-2", "", "gw-2")


def test_a_gateway_not_holding_the_address_is_held_out_while_it_restarts():
    sim = Sim(2, 0, preempt=False)
    gateway_turn("gw-2", sim, restart=True, preempt=False)
    assert [c for c in sim.calls if c[0] != "members"] == [
        ("handoff", "gw-2", True), ("restart", "gw-2"), ("wait_ready", "gw-2", "gw-1"), ("handoff", "gw-2", False)]


@pytest.mark.parametrize("why", ["flagged", "not ready", "alone"])
def test_the_holder_with_no_ready_successor_is_not_restarted(why):
    sim = Sim(1 if why == "alone" else 2, 0, preempt=False, ready={"gw-2": why != "not ready"},
              flagged={"gw-2"} if why == "flagged" else ())
    with pytest.raises(TurnError, match="gw-1 holds the floating address and no other gateway is ready to take it"):
        gateway_turn("gw-1", sim, restart=True, preempt=False)
    assert [c for c in sim.calls if c[0] != "members"] == [] and sim.holder == "gw-1"


def test_a_turn_that_fails_after_the_handoff_lets_its_gateway_back_into_the_election():
    sim = Sim(2, 0, preempt=False)

    def never(m):
        sim.calls.append(("wait_holder", m.name))
        raise TurnError(f"expected {m.name} holding the address within 7s")

    sim.wait_holder = never
    with pytest.raises(TurnError, match="expected gw-2 holding"):
        gateway_turn("gw-1", sim, restart=True, preempt=False)
    assert sim.calls[-1] == ("handoff", "gw-1", False) and not sim.flag["gw-1"] and not sim.restarted


class Faulty:
    """The simulated group with one exception injected at its `at`-th call (before the call does anything, or
    after: done on the host, its answer lost); with `down`, every later call on that gateway fails too."""

    def __init__(self, sim: Sim, at: int, after: bool, error: BaseException, down: bool = False):
        self.sim, self.at, self.after, self.error, self.down = sim, at, after, error, down
        self.n, self.on = 0, ""
        self.tried: list[tuple] = []

    def __getattr__(self, name):
        call = getattr(self.sim, name)
        if name == "log":
            return call

        def step(*args):
            self.n += 1
            on = args[0].name if args and isinstance(args[0], Member) else ""
            self.tried.append((name, *(a.name if isinstance(a, Member) else a for a in args)))
            if self.on and on == self.on:
                raise RuntimeError(f"{on} is gone")
            if self.n == self.at and not self.after:
                self.fire(on)
            out = call(*args)
            if self.n == self.at and self.after:
                self.fire(on)
            return out
        return step

    def fire(self, on: str):
        self.sim.failed, self.on = True, on if self.down else ""
        raise self.error


TURNS = {  # a turn of each kind: the sim, the gateway, restart, preempt, later
    "the holder hands over": (lambda: Sim(2, 0, False), "gw-1", True, False, frozenset()),
    "a backup restarts": (lambda: Sim(3, 0, False), "gw-2", True, False, frozenset()),
    "preempt takes back, waiting": (lambda: Sim(2, 0, True), "gw-1", True, True, frozenset()),
    "preempt takes back, the other's turn next": (lambda: Sim(2, 0, True), "gw-1", True, True, frozenset({"gw-2"})),
    "a lost run's turn finished": (lambda: _lost_run(), "gw-1", False, False, frozenset()),
    "a lost run's turn restarted": (lambda: _lost_run(), "gw-1", True, False, frozenset()),
}


def _lost_run() -> Sim:
    sim = Sim(2, 1, preempt=False, flagged={"gw-1"})
    sim.lo["gw-1"], sim.route["gw-2"], sim.connections["gw-1"] = True, "gw-1", 2
    return sim


def _steps(kind: str) -> int:
    make, me, restart, preempt, later = TURNS[kind]
    clean = Faulty(make(), 0, False, RuntimeError())
    gateway_turn(me, clean, restart, preempt, later)
    return clean.n


ERRORS = [lambda: TurnError("expected gw-2 holding the address within 7s"), lambda: ValueError("int('²')"),
          lambda: RuntimeError("a bug"), lambda: KeyboardInterrupt(), lambda: __import__("gevent").Timeout(5)]


@pytest.mark.parametrize("kind", TURNS)
@pytest.mark.parametrize("error", ERRORS, ids=["TurnError", "ValueError", "RuntimeError", "Ctrl-C", "gevent-Timeout"])
def test_an_exception_at_any_step_of_a_turn_undoes_its_handoff(kind, error):
    """Each call of the turn failing, before it acts or after (its answer lost): the exception goes up as it
    was, and from the first read on, the gateway ends in the election, no route or loopback hold left anywhere,
    one gateway holding."""
    make, me, restart, preempt, later = TURNS[kind]
    for at in range(1, _steps(kind) + 1):
        for after in (False, True):
            sim, raised = make(), error()
            with pytest.raises(type(raised)) as e:
                gateway_turn(me, Faulty(sim, at, after, raised), restart, preempt, later)
            where = f"failing at step {at}{' after it acted' if after else ''}: {sim.calls}"
            assert e.value is raised, where
            if at == 1:  # its first read: nothing known, nothing done (a lost run's left for the next run)
                before = make()
                assert (sim.flag, sim.lo, sim.route) == (before.flag, before.lo, before.route), where
                continue
            assert not any(sim.flag.values()) and not any(sim.lo.values()) and not sim.route, where
            assert sim.holder is not None, where


@pytest.mark.parametrize("kind", TURNS)
def test_a_gateway_gone_mid_turn_leaves_the_others_clean(kind):
    """The turn's own gateway stops answering: the undo still ends the routes and holds on the others, tries
    to let it back in, and the first error is the one that goes up."""
    make, me, restart, preempt, later = TURNS[kind]
    for at in range(2, _steps(kind) + 1):  # its first read is where nothing is done yet
        sim, raised = make(), TurnError("gw-1 lost")
        group = Faulty(sim, at, False, raised, down=True)
        with pytest.raises(TurnError) as e:
            gateway_turn(me, group, restart, preempt, later)
        gone = group.on
        assert e.value is raised
        if gone == me:
            assert ("handoff", me, False) in group.tried[at:]
        assert not [g for g in sim.route if g != gone] and not [g for g, on in sim.lo.items() if on and g != gone]


def test_the_successor_is_the_highest_priority_eligible_one():
    sim = Sim(3, 0, preempt=False, ready={"gw-2": False})
    assert gateway_turn("gw-1", sim, restart=True, preempt=False).handed_to == "gw-3"


def test_a_turn_a_lost_run_left_is_finished_without_a_restart_once_its_connections_end():
    sim = Sim(2, 1, preempt=False, flagged={"gw-1"})
    sim.lo["gw-1"], sim.route["gw-2"], sim.connections["gw-1"] = True, "gw-1", 2
    gateway_turn("gw-1", sim, restart=False, preempt=False)
    assert [c for c in sim.calls if c[0] != "members"] == [
        ("wait_ready", "gw-1", "gw-2"), ("wait_idle", "gw-1"), ("forward", "gw-2", None), ("hold", "gw-1", False),
        ("handoff", "gw-1", False)]
    assert not sim.restarted and not sim.route and sim.holder == "gw-2"


def test_preempt_takes_the_address_back_keeping_the_others_connections_until_its_turn():
    sim = Sim(2, 0, preempt=True)
    gateway_turn("gw-1", sim, restart=True, preempt=True, later=frozenset({"gw-2"}))
    assert sim.holder == "gw-1" and sim.route == {"gw-1": "gw-2"} and sim.lo["gw-2"]  # gw-2's turn ends them
    gateway_turn("gw-2", sim, restart=True, preempt=True)
    assert sim.holder == "gw-1" and not sim.route and not any(sim.lo.values())


def test_preempt_with_no_turn_for_the_other_waits_for_its_connections():
    sim = Sim(2, 0, preempt=True)
    turn = gateway_turn("gw-1", sim, restart=True, preempt=True)
    assert turn.took_back == "gw-2" and ("wait_idle", "gw-2") in sim.calls and not sim.route


def test_members_gone_missing_is_a_turn_error():
    sim = Sim(2, 0, preempt=False)
    with pytest.raises(TurnError, match="gw-9 is not among the gateways read"):
        gateway_turn("gw-9", sim, restart=True, preempt=False)


# --- make status: each gateway's keepalived, and which holds the address -------------------------------------

def status_read(state: str, holds: bool, **more) -> dict[str, str]:
    import json
    return {"unit": "ActiveState=active\nSubState=running\nUnitFileState=enabled", "installed": "1.13.0",
            "readiness": "200", "workers": json.dumps({"workers": []}), "vrrp-active": "active",
            "vrrp-state": f"{state} 1.0", "vrrp-address": "eth0" if holds else "", **more}


def test_status_names_the_holder_and_what_keeps_a_gateway_out():
    from fleet.rollout.status import OK, UNHEALTHY, judge_gateway, table, with_floating
    gw = gateway()
    rows = with_floating([judge_gateway("gw-1", "gateway", gw, status_read("MASTER", True), []),
                          judge_gateway("gw-2", "gateway", gw, status_read("BACKUP", False), [])])
    assert [r.verdict for r in rows] == [OK, OK]
    text = table(rows)
    assert "floating 10.0.0.100: MASTER, holds it" in text and "floating 10.0.0.100: BACKUP; held by gw-1" in text
    held_out = judge_gateway("gw-2", "gateway", gw, status_read("FAULT", False, **{"vrrp-handoff": "1",
                                                                                     "vrrp-address": "lo"}), [])
    assert held_out.verdict == UNHEALTHY and "held out of the election by a deploy's turn" in held_out.reasons[0]
    assert "a handoff's hold on the loopback is still there" in held_out.reasons[1]
    none = with_floating([judge_gateway(g, "gateway", gw, status_read("BACKUP", False), []) for g in ("gw-1", "gw-2")])
    assert all(r.verdict == UNHEALTHY and "held by no gateway of gateway" in r.reasons[-1] for r in none)
    split = with_floating([judge_gateway(g, "gateway", gw, status_read("MASTER", True), []) for g in ("gw-1", "gw-2")])
    assert "held by gw-1 and gw-2 at once" in split[0].reasons[-1]
    stopped = judge_gateway("gw-1", "gateway", gw, status_read("MASTER", True, **{"vrrp-active": "inactive"}), [])
    assert stopped.verdict == UNHEALTHY and "keepalived is not running" in stopped.reasons[0]


# --- smg's mesh between the gateways of a group ---------------------------------------------------------------

MESH_TLS = {"ca_cert": {"file": "/pki/ca.pem"}, "cert": {"file": "/pki/{host}.crt"}, "key": {"file": "/pki/{host}.key"}}


def test_each_gateway_joins_the_mesh_of_its_group():
    from fleet.gateway.smg import MeshNode, launch_args
    gw = Gateway.model_validate({"routes": ["pro6000"], "mesh": {"tls": MESH_TLS}})
    args = launch_args(gw, MeshNode("10.0.0.11", ("10.0.0.12", "fd00::3")))
    assert args[args.index("--enable-mesh"):] == [
        "--enable-mesh", "--mesh-port", "39527", "--mesh-advertise-host", "10.0.0.11",
        "--mesh-peer-urls", "10.0.0.12:39527", "[fd00::3]:39527",
        "--mesh-tls-ca-cert", "/etc/smg/smg-mesh.ca.pem", "--mesh-tls-cert", "/etc/smg/smg-mesh.crt",
        "--mesh-tls-key", "/etc/smg/smg-mesh.key"]
    alone = Gateway.model_validate({"routes": ["pro6000"], "mesh": {}})
    assert launch_args(alone, MeshNode("10.0.0.11", ()))[-5:] == [
        "--enable-mesh", "--mesh-port", "39527", "--mesh-advertise-host", "10.0.0.11"]
    assert "--enable-mesh" not in launch_args(Gateway.model_validate({"routes": ["pro6000"]}))


@pytest.mark.parametrize("mesh, said", [
    ({"port": 8000}, "port and mesh.port both 8000"),
    ({"tls": {**MESH_TLS, "cert": {"file": "/pki/gw.crt"}}}, "cert: each gateway has its own"),
    ({"tls": {**MESH_TLS, "key": {"env": "MESH_KEY"}}}, "key: each gateway has its own"),
])
def test_what_the_mesh_spec_refuses(mesh, said):
    with pytest.raises(SpecError) as e:
        validate_gateway("group_data/gateway.py", {"routes": ["pro6000"], "mesh": mesh})
    assert any(said in p for p in e.value.problems), e.value.problems


def test_a_pem_block_and_what_is_not_one():
    from fleet.gateway.models import pem_problem
    block = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUX2p0\n-----END CERTIFICATE-----\n"
    assert pem_problem(block) is None and pem_problem(block.strip()) is None
    assert pem_problem(block + block) is None  # a CA's chain
    for bad in ("", "not a cert", block.replace("-----END", "----END"), block + "; rm -rf /"):
        assert pem_problem(bad) == "expected PEM blocks (-----BEGIN ...-----), found something else", bad
