"""A class's rollout in turns (tasks/rolling.take_turn, with greenlets as pyinfra runs its hosts,
the per-host work faked), with or without a gateway: the canary alone first, then at most
rolling.max_unavailable at once, and the first failure stops the hosts whose turn has not come;
no wait for a turn outlasts what the class's turns can take (fleet.core.bounds.turn_s).
And a replica's way out of the gateway and back (fleet/rolling.through_gateway) against a
scripted gateway and clock."""

from __future__ import annotations

import json
from types import SimpleNamespace

import gevent
import pytest
from builders import make_spec

from fleet.core import bounds
from fleet.rollout.activation import Outcome
from fleet.gateway.models import GatewayRolling
from fleet.gateway.smg import Replica
from fleet.monitoring.models import Monitoring
from fleet.rollout.pending import BEGUN, ROLLING_BACK, ROLLING_OUT
from fleet.turns.drains import Answer, Drain
from fleet.turns.rolling import GatewayError, Turns, through_gateway, turns
from fleet.spec import Canary, ClassSpec, Rolling
from tasks import rolling
from adapter import run as runs

HOSTS = ["r1", "r2", "r3", "r4", "r5"]
# the turns alone here: the canary analysis is test_tasks_rolling's
TURNS_ONLY = make_spec().model_copy(update={"canary": Canary(analysis=False)})


class Steps:
    def log(self, message, color=None):
        pass


@pytest.fixture
def run_class(monkeypatch):
    def run(max_unavailable: int, failing: set[str] = frozenset(), failed_before: set[str] = frozenset(),
            arriving: list[str] = HOSTS, hanging: set[str] = frozenset(), turn_s: float = 60, now=None,
            mid_change: set[str] = frozenset()):
        """hanging: hosts whose activation never ends (left running, killed at the end)."""
        state = SimpleNamespace(failed_hosts=[SimpleNamespace(name=n) for n in failed_before])
        roll = rolling.ClassRoll("c", max_unavailable, turn_s)  # no gateway: the same turns, no drain
        if now is not None:
            roll.now = now
        roll.order, roll.mid_change = list(HOSTS), set(mid_change)
        runs.of(state).rolls["c"] = roll
        events, active = [], set()

        def activation(name):
            def go():
                active.add(name)
                events.append(("start", name, len(active)))
                gevent.sleep(3600 if name in hanging else 0.01)
                active.discard(name)
                events.append(("end", name))
                return Outcome("FAILED (rolled back)" if name in failing else "OK")
            return go

        pf = SimpleNamespace(group="c", spec=TURNS_ONLY)
        jobs = {h: gevent.spawn(rolling.take_turn, SimpleNamespace(name=h, state=state), pf, Steps(), activation(h),
                                lambda reason: Outcome("FAILED (service untouched)", [reason]))
                for h in reversed(arriving)}  # greenlets start in any order
        with gevent.Timeout(10):  # until each has ended, or hangs in its activation
            while not all(j.ready() or (h in hanging and h in active) for h, j in jobs.items()):
                gevent.sleep(0.01)
        running = {h for h, j in jobs.items() if not j.ready()}
        gevent.killall([jobs[h] for h in running])
        for j in jobs.values():
            j.get()  # an error raised in a turn fails the test
        return events, {h: j.value for h, j in jobs.items() if h not in running}
    return run


def test_canary_alone_then_one_at_a_time(run_class):
    events, outcomes = run_class(1)
    assert events[:2] == [("start", "r1", 1), ("end", "r1")]
    assert max(e[2] for e in events if e[0] == "start") == 1
    assert all(o.ok for o in outcomes.values())


def test_after_the_canary_at_most_max_unavailable_at_once(run_class):
    events, _ = run_class(2)
    assert events[:2] == [("start", "r1", 1), ("end", "r1")]
    assert max(e[2] for e in events if e[0] == "start") == 2


def test_a_failed_canary_leaves_the_others_untouched(run_class):
    events, outcomes = run_class(2, failing={"r1"})
    assert [e[1] for e in events if e[0] == "start"] == ["r1"]
    for h in HOSTS[1:]:
        assert outcomes[h].verdict == "NOT ROLLED (serving as before)"
        assert "the rollout of c stopped (after r1: FAILED (rolled back))" in outcomes[h].reasons[0]


def test_a_later_failure_stops_the_hosts_whose_turn_has_not_come(run_class):
    events, outcomes = run_class(1, failing={"r3"})
    started = [e[1] for e in events if e[0] == "start"]
    assert started[0] == "r1" and "r3" in started and len(started) < len(HOSTS)
    assert {h for h, o in outcomes.items() if o.verdict.startswith("NOT ROLLED")} == set(HOSTS) - set(started)


def test_a_canary_that_failed_before_its_turn_stops_the_class(run_class):
    """Its begin or upload failed: it never reaches its turn, and pyinfra has it among the failed hosts."""
    events, outcomes = run_class(1, failed_before={"r1"}, arriving=HOSTS[1:])
    assert events == []
    assert all(o.verdict == "NOT ROLLED (serving as before)" for o in outcomes.values())
    assert "the canary r1 failed" in outcomes["r2"].reasons[0]


def test_a_canary_whose_turn_outlasts_any_turn_stops_the_class(run_class):
    """Every command has its bound, so no turn outlasts turn_s; should one, the class does not wait on it."""
    clock = iter(range(0, 10**6, 100))  # each look at the clock: 100 s later
    events, outcomes = run_class(1, hanging={"r1"}, turn_s=250, now=lambda: next(clock))
    assert [e[1] for e in events if e[0] == "start"] == ["r1"]
    assert set(outcomes) == set(HOSTS[1:])
    for o in outcomes.values():
        assert o.verdict == "NOT ROLLED (serving as before)"
        assert "the canary r1 did not end its turn within 250s, the most a turn can take" in o.reasons[0]


def test_a_turn_that_never_comes_stops_the_class(run_class):
    """At most one at a time after the canary; the next host's turn never ends: the others leave
    once the class's turns would all have ended."""
    events, outcomes = run_class(1, hanging=set(HOSTS[1:]), turn_s=0.05)
    started = [e[1] for e in events if e[0] == "start"]
    assert started[0] == "r1" and len(started) == 2  # the canary, then the one whose turn never ends
    assert outcomes["r1"].ok and set(outcomes) == set(HOSTS) - {started[1]}
    for h in set(HOSTS[1:]) - {started[1]}:
        assert outcomes[h].verdict == "NOT ROLLED (serving as before)"
        assert "'s turn did not come within 0.25s, the most its class's turns take" in outcomes[h].reasons[0]


def test_a_turn_is_bounded_by_every_command_and_wait_it_may_run():
    spec = ClassSpec.model_validate({
        "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
        "service": {"model_path": "/m", "served_model_name": "m"}})
    r, gate = spec.readiness, spec.readiness.load_timeout_s
    alone = bounds.turn_s(spec)
    # the gate twice (the new service, the previous one again), the workloads' release twice, the stops
    assert alone > 2 * gate + 2 * r.workload_release_timeout_s + 3 * spec.service.drain_timeout_s + spec.smoke.timeout_s
    through = GatewayRolling()
    assert bounds.turn_s(spec, through) > alone + 2 * through.ready_timeout_s + through.drain_timeout_s


@pytest.mark.parametrize("declared, hosts, at_once", [
    (1, 8, 1), (3, 8, 3), ("25%", 8, 2), ("25%", 3, 1), ("100%", 5, 5), ("10%", 1, 1), ("50%", 7, 3),
])
def test_max_unavailable_is_a_count_or_a_percentage_of_the_class(declared, hosts, at_once):
    assert Rolling(max_unavailable=declared).at_once(hosts) == at_once


@pytest.mark.parametrize("declared", [0, "0%", "101%", "25", "25 %", -1, 1025])
def test_max_unavailable_refuses_what_is_neither(declared):
    with pytest.raises(ValueError):
        Rolling(max_unavailable=declared)


# --- a replica's turn behind the gateway, scripted -----------------------------------------

ME, PEER = Replica("r1", "c", "m", "http://10.0.0.1:30000"), Replica("r2", "c", "m", "http://10.0.0.2:30000")
CFG = GatewayRolling(drain_timeout_s=10, ready_timeout_s=5, poll_interval_s=1)


class Through:
    """The gateway and the replica, scripted: each statuses() answer is taken in turn (the last one
    repeats); the clock moves only when the turn sleeps."""

    name = "gw"

    def __init__(self, statuses, loads=(0.0,), fail_set_out=(), drains=()):
        self.answers, self.loads, self.fail_set_out = list(statuses), list(loads), list(fail_set_out)
        self.drains = list(drains)  # the gateway host's answers to take_out, in turn (then ok)
        self.t, self.events, self.peers = 0.0, [], []

    def statuses(self):
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def take_out(self, peers):
        self.peers.append(peers)
        answer = self.drains.pop(0) if self.drains else Answer("ok")
        if answer.ok:
            self._set("out")
        return answer

    def put_in(self):
        self._set("in")

    def _set(self, event):
        self.events.append(event)
        if self.fail_set_out and self.fail_set_out.pop(0):
            raise GatewayError("gateway gw: cannot write the discovery file")

    def load(self):
        return self.loads.pop(0) if len(self.loads) > 1 else self.loads[0]

    def log(self, message, color=None):
        self.events.append(message)

    def now(self):
        return self.t

    def sleep(self, seconds):
        self.t += seconds


BOTH_READY = {ME.url: "ready", PEER.url: "ready"}
ME_OUT = {PEER.url: "ready"}


def turn(gw: Through, outcome="OK", raises=None):
    ran = []

    def go():
        ran.append("go")
        if raises:
            raise raises
        return Outcome(outcome)

    out = through_gateway(ME, [ME, PEER], CFG, gw, go, lambda reason: Outcome("FAILED (service untouched)", [reason]))
    return out, ran


def test_a_replica_goes_out_drains_restarts_and_comes_back_ready():
    gw = Through([BOTH_READY, ME_OUT, ME_OUT, BOTH_READY], loads=(2.0, 0.0))
    out, ran = turn(gw)
    assert out.verdict == "OK" and ran == ["go"]
    assert [e for e in gw.events if e in ("out", "in")] == ["out", "in"]
    assert any(str(e).startswith("drained in") for e in gw.events)


def test_a_peer_counted_ready_but_drained_by_then_holds_it_back_until_the_peer_is_back():
    """Two classes' canaries of one model: the other took its drain first; this one waits, then goes."""
    peer_out = Answer("peer", (Drain("r2", "the rollout of r2", "its turn", 60.0),))
    gw = Through([BOTH_READY, BOTH_READY, BOTH_READY, ME_OUT, BOTH_READY], drains=[peer_out, peer_out])
    out, ran = turn(gw)
    assert out.verdict == "OK" and ran == ["go"] and gw.peers[:3] == [("r2",)] * 3
    waited = [e for e in gw.events if str(e).startswith("waiting for another peer")]
    assert waited == ["waiting for another peer in gateway gw: the peer it counted is drained now: r2 drained by the "
                      "rollout of r2 (its turn), its lease 60s more"]


def test_a_peer_drained_for_good_leaves_its_rollout_unchanged():
    gw = Through([BOTH_READY], drains=[Answer("peer", (Drain("r2", "make tune of r2", "a tune", 900.0),))] * 99)
    out, ran = turn(gw)
    assert ran == [] and "out" not in gw.events and out.verdict == "FAILED (service untouched)"
    assert "r2 drained by make tune of r2" in out.reasons[0] and gw.t >= CFG.ready_timeout_s


def test_a_replica_another_owner_holds_out_is_left_untouched_at_once():
    """A make tune measures it: a deploy meanwhile neither restarts it nor puts it back."""
    gw = Through([{PEER.url: "ready"}], drains=[Answer("held", (Drain("r1", "make tune of r1", "a tune", 900.0),))])
    out, ran = turn(gw)
    assert ran == [] and out.verdict == "FAILED (service untouched)" and gw.t == 0
    assert "held out by another: r1 drained by make tune of r1 (a tune), its lease 900s more" in out.reasons[0]


def test_without_a_ready_peer_it_does_not_go_out():
    gw = Through([{ME.url: "ready", PEER.url: "pending"}])
    out, ran = turn(gw)
    assert ran == [] and "out" not in gw.events and out.verdict == "FAILED (service untouched)"
    assert "no other replica of m is ready" in out.reasons[0] and gw.t >= CFG.ready_timeout_s


def test_a_drain_that_does_not_end_stops_it_at_the_timeout():
    gw = Through([BOTH_READY] + [ME_OUT] * 11 + [BOTH_READY], loads=(3.0,))
    out, _ = turn(gw)
    assert out.ok and gw.t >= CFG.drain_timeout_s
    assert any(str(e).startswith("drain timeout 10s") for e in gw.events)


def test_a_gateway_it_cannot_write_leaves_the_replica_serving_as_it_was():
    gw = Through([BOTH_READY], fail_set_out=(True, False))
    out, ran = turn(gw)
    assert ran == [] and out.verdict == "FAILED (service untouched)" and gw.events[:2] == ["out", "in"]


def test_a_replica_that_serves_again_after_a_rollback_comes_back():
    gw = Through([BOTH_READY, ME_OUT, BOTH_READY])
    out, _ = turn(gw, outcome="FAILED (rolled back)")
    assert out.verdict == "FAILED (rolled back)" and gw.events.count("in") == 1


def test_a_replica_that_does_not_serve_stays_out_and_its_row_says_so():
    gw = Through([BOTH_READY, ME_OUT])
    out, _ = turn(gw, outcome="FAILED (rollback failed)")
    assert "in" not in gw.events and "left out of gateway gw: it does not serve" in out.reasons[-1]


def test_a_turn_that_broke_off_leaves_the_replica_out_and_raises():
    gw = Through([BOTH_READY, ME_OUT])
    with pytest.raises(TimeoutError):
        turn(gw, raises=TimeoutError())
    assert "in" not in gw.events and "left out of gateway gw: its rollout broke off" in gw.events


def test_back_in_but_never_ready_is_its_own_verdict():
    gw = Through([BOTH_READY, ME_OUT, ME_OUT])
    out, _ = turn(gw)
    assert out.verdict == "FAILED (serving, not ready in the gateway)"
    assert "expected http://10.0.0.1:30000 ready within 5s, found not registered" in out.reasons[-1]


def test_a_gateway_that_cannot_be_read_keeps_the_replica_in():
    gw = Through([GatewayError("gateway gw: cannot connect")])
    out, ran = turn(gw)
    assert ran == [] and out.reasons == ["gateway gw: cannot connect"] and "out" not in gw.events


def _host(name, groups=("c",)):
    return SimpleNamespace(name=name, groups=list(groups))


def test_hosts_enlist_in_inventory_order_and_only_a_takeover_left_mid_change_goes_first(monkeypatch):
    inventory = [_host("a"), _host("x", ("other",)), _host("b"), _host("c1"), _host("d")]
    state = SimpleNamespace(inventory=inventory)
    spec = ClassSpec.model_validate({
        "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
        "service": {"model_path": "/m", "served_model_name": "m"}, "rolling": {"max_unavailable": "50%"}})
    monkeypatch.setattr(rolling, "gateway_of", lambda state, cls, group_dir: None)

    def pf(restart=True, interrupted=None):
        return SimpleNamespace(group="c", spec=spec, plan=SimpleNamespace(restart=restart, interrupted=interrupted))

    left = {phase: SimpleNamespace(mid_change=phase != BEGUN) for phase in (BEGUN, ROLLING_OUT)}
    for name, p in (("c1", pf()), ("a", pf(interrupted=left[BEGUN])), ("b", pf(interrupted=left[ROLLING_OUT])),
                    ("x", pf(restart=False)), ("d", pf(restart=False))):
        rolling.enlist(SimpleNamespace(name=name, state=state), p)
    roll = runs.of(state).rolls["c"]
    assert roll.order == ["a", "b", "c1"] and roll.mid_change == {"b"}
    assert roll.turns() == Turns(("b",), ("a", "c1"), frozenset({"b"}))
    assert roll.at_once == 2  # 50% of the class's 4 hosts


# Every phase a run can be cut off at, for the canary and for the host after it (a class of N hosts):
# the phase each host's pending record says, and the turns the next run gives them.
CUT_AT = {
    "before begin": {},  # nothing recorded: a fresh rollout
    "begun, waiting for its turn": {"r1": BEGUN, "r2": BEGUN, "r3": BEGUN},  # e.g. during another host's engine install
    "the canary's load": {"r1": ROLLING_OUT, "r2": BEGUN, "r3": BEGUN},
    "the canary's rollback": {"r1": ROLLING_BACK, "r2": BEGUN, "r3": BEGUN},
    "the second host's load": {"r2": ROLLING_OUT, "r3": BEGUN},  # r1 had finished
}


@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("cut", CUT_AT)
def test_the_next_run_restarts_only_hosts_left_mid_change_at_once_and_the_rest_in_turns(n, cut):
    hosts = [f"r{i}" for i in range(1, n + 1)]
    phases = {h: p for h, p in CUT_AT[cut].items() if h in hosts}
    t = turns([(h, h in phases and phases[h] != BEGUN) for h in hosts])
    mid = [h for h in hosts if phases.get(h) in (ROLLING_OUT, ROLLING_BACK)]
    assert sorted(t.first + t.rest) == hosts and set(t.first).isdisjoint(t.rest)
    assert t.mid_change == set(mid)
    assert list(t.first) == (mid or hosts[:1])  # mid-change ones stand for the canary; else the first host is it
    assert list(t.rest) == [h for h in hosts if h not in t.first]  # in inventory order, in turns


def test_a_run_killed_during_the_canary_finishes_it_then_rolls_the_others_in_turns(run_class):
    events, outcomes = run_class(1, mid_change={"r1"})
    assert events[:2] == [("start", "r1", 1), ("end", "r1")]
    assert max(e[2] for e in events if e[0] == "start") == 1  # never two at once
    assert sorted(e[1] for e in events if e[0] == "start") == HOSTS and all(o.ok for o in outcomes.values())


def test_two_hosts_left_mid_change_go_together_before_the_others(run_class):
    events, _ = run_class(1, mid_change={"r2", "r4"})
    assert {e[1] for e in events[:2]} == {"r2", "r4"} and events[1][2] == 2
    assert all(e[0] == "start" for e in events[:2]) and max(e[2] for e in events[2:] if e[0] == "start") == 1


def test_a_takeover_left_mid_change_that_fails_stops_the_class(run_class):
    events, outcomes = run_class(2, mid_change={"r3"}, failing={"r3"})
    assert [e[1] for e in events if e[0] == "start"] == ["r3"]
    assert all(outcomes[h].verdict == "NOT ROLLED (serving as before)" for h in HOSTS if h != "r3")


def test_a_takeover_dropped_before_its_turn_stops_the_class_at_once(run_class):
    events, outcomes = run_class(1, mid_change={"r2"}, failed_before={"r2"}, arriving=["r1", "r3", "r4", "r5"])
    assert events == []
    assert "the interrupted rollout of r2 could not be taken over" in outcomes["r1"].reasons[0]


def test_a_takeover_whose_turn_never_comes_still_ends_the_silence_its_killed_run_left():
    """Killed while r2 was leaving its gateway (its record only begun, its silence made); the next run's canary fails:
    r2 is not rolled, and its silence ends as a turn's does, not at the killed turn's bound."""
    old = "0a1b2c3d-0000-4000-8000-000000000001"
    left = [{"id": old, "status": {"state": "active"}, "createdBy": "sglang-fleet", "startsAt": "2027-01-15T08:00:00Z",
             "endsAt": "2027-01-15T09:00:00Z", "matchers": [{"name": "host", "value": "r2", "isRegex": False},
                                                            {"name": "gpu_class", "value": "c", "isRegex": False}]}]
    asked = []

    def command(cmd: str, what: str) -> str:
        asked.append(cmd)
        return json.dumps(left) if "--data-urlencode" in cmd else json.dumps({"silenceID": old})

    state = SimpleNamespace(failed_hosts=[])
    roll = rolling.ClassRoll("c", 1, 60, monitor=SimpleNamespace(spec=Monitoring(), host=SimpleNamespace(name="mon"),
                                                                   command=command))
    roll.order, roll.stopped = ["r1", "r2"], "after r1: FAILED (rolled back)"
    roll.canary_done.set()
    runs.of(state).rolls["c"] = roll
    pf = SimpleNamespace(group="c", plan=SimpleNamespace(interrupted=SimpleNamespace(mid_change=False)))
    outcome = rolling.take_turn(SimpleNamespace(name="r2", state=state), pf, Steps(), lambda: Outcome("OK"),
                                lambda reason: Outcome("FAILED (service untouched)", [reason]))
    assert outcome.verdict == "NOT ROLLED (serving as before)"
    assert len(asked) == 2 and f'"id": "{old}"' in asked[1]  # found, and given its end
    assert any(n.startswith(f"silence {old} on mon, an interrupted run's, taken over")
               for n in runs.of(state).report.host("r2").notes)
