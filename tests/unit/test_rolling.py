"""The turn-taking of a class behind the gateway (tasks/rolling.take_turn), with greenlets as
pyinfra runs its hosts and the per-replica work faked: canary alone first, then at most
max_unavailable at once, and the first failure stops the hosts whose turn has not come."""

from __future__ import annotations

from types import SimpleNamespace

import gevent
import pytest

from fleet.activation import Outcome
from fleet.gateway import Gateway, Replica
from tasks import rolling

HOSTS = ["r1", "r2", "r3", "r4", "r5"]


class Steps:
    def log(self, message, color=None):
        pass


@pytest.fixture
def run_class(monkeypatch):
    def run(max_unavailable: int, failing: set[str] = frozenset(), failed_before: set[str] = frozenset(),
            arriving: list[str] = HOSTS):
        gw = Gateway(routes=["c"], rolling={"max_unavailable": max_unavailable})
        state = SimpleNamespace(failed_hosts=[SimpleNamespace(name=n) for n in failed_before])
        roll = rolling.ClassRoll("c", gw, None, [Replica(h, "c", "m", f"http://{h}:1") for h in HOSTS])
        roll.order = list(HOSTS)
        monkeypatch.setitem(rolling.ROLLS, "c", roll)
        events, active = [], set()

        def fake_roll_one(roll, host, pf, steps, go, leave):
            active.add(host.name)
            events.append(("start", host.name, len(active)))
            gevent.sleep(0.01)
            active.discard(host.name)
            events.append(("end", host.name))
            return Outcome("FAILED (rolled back)" if host.name in failing else "OK")

        monkeypatch.setattr(rolling, "_roll_one", fake_roll_one)
        pf = SimpleNamespace(group="c")
        jobs = {h: gevent.spawn(rolling.take_turn, SimpleNamespace(name=h, state=state), pf, Steps(),
                                lambda: Outcome("OK"), lambda reason: Outcome("FAILED (service untouched)", [reason]))
                for h in reversed(arriving)}  # greenlets start in any order
        gevent.joinall(list(jobs.values()), raise_error=True, timeout=10)
        return events, {h: j.value for h, j in jobs.items()}
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
