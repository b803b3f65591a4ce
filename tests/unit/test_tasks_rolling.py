"""tasks/rolling's talking to the gateway, over fake hosts of one inventory (two replicas of a routed
class, the gateway host, a host of another class): who the replicas are and where smg reaches them,
the class's roll found at enlisting, the gateway's commands (/workers, the discovery file) and every
way they fail as a GatewayError, a replica's /metrics, and a replica's turn through the gateway
(out, drained, activated, back in) as the commands sent to each host; the clock is scripted."""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from builders import make_spec
from fakehost import Clock, Script, fake_hosts, fresh_run, this_run  # noqa: F401

from fleet.core import bounds
from fleet.rollout import gate
from fleet.tune import measure
from fleet.turns import canary, drains
from fleet.rollout.activation import Outcome
from fleet.gateway.smg import Replica, discovery_file, workers_command
from fleet.spec.load import load_gateways, load_class_specs
from fleet.core.hosts import replicas
from fleet.rollout.intent import PLAIN
from fleet.rollout.render import server_argv
from fleet.turns.rolling import GatewayError
from tasks import rolling

SPEC = make_spec(service={"host": "0.0.0.0"})  # smg on another host reaches it
R1, R2 = (Replica("r1", "pro6000", "qwen3.6-27b", "http://10.0.0.1:30000"),
          Replica("r2", "pro6000", "qwen3.6-27b", "http://[fd00::2]:30000"))


RECORD = {"class": "pro6000", "target": SPEC.target_path, "algorithm": "DFLASH", "candidates": [
    {"candidate": {"block_size": 16}, "deployed": True, "levels": [
        {"concurrency": 4, "requests": 16, "failed": 0, "tokens_per_s": 410.0, "accept_length": 4.6}]}]}


def workers(*ready: Replica) -> str:
    return json.dumps({"workers": [{"url": r.url, "status": "ready"} for r in ready]})


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    """group_data (pro6000, a6000, the gateway `gw` routing pro6000) and an inventory r1, smg, r2, x."""
    data = SPEC.model_dump(mode="json", exclude_defaults=True)
    for cls in ("pro6000", "a6000"):
        (tmp_path / f"{cls}.py").write_text("".join(f"{k} = {v!r}\n" for k, v in data.items()))
    (tmp_path / "gw.py").write_text('gateway = {"routes": ["pro6000"], "health_check_interval_s": 1}\n')
    monkeypatch.setattr(rolling, "time", Clock())

    def make(answers: dict) -> tuple[dict, object]:
        names = ["r1", "smg", "r2", "x", *(["smg2"] if "smg2" in answers else [])]
        hosts = fake_hosts({n: answers.get(n, Script({})) for n in names},
                           {"r1": {"ssh_hostname": "10.0.0.1"}, "r2": {"ssh_hostname": "fd00::2"}},
                           {"pro6000": (["r1", "r2"], data), "a6000": (["x"], data),
                            "gw": ([n for n in names if n.startswith("smg")], {})})
        for n in names:
            if n.startswith("smg"):
                hosts[n].host.connected = True
        gw = load_gateways(tmp_path, load_class_specs(tmp_path))["gw"]
        return hosts, gw
    make.dir, make.root = str(tmp_path), tmp_path
    return make


def test_the_replicas_are_the_routed_classes_hosts_in_inventory_order_at_their_ssh_address(fleet):
    hosts, gw = fleet({})
    assert replicas(hosts["r1"].host.state.inventory, gw, Path(fleet.dir)) == [R1, R2]


def test_a_class_behind_a_gateway_rolls_through_it_and_one_without_does_not(fleet):
    hosts, gw = fleet({})
    pf = preflight_like()
    rolling.enlist(hosts["r2"].host, pf, fleet.dir)
    rolling.enlist(hosts["r1"].host, pf, fleet.dir)
    roll = this_run().rolls["pro6000"]
    assert roll.order == ["r1", "r2"] and roll.at_once == 1 and roll.turn_s == bounds.turn_s(SPEC, gw.rolling)
    assert roll.gateway.hosts == [hosts["smg"].host] and roll.gateway.replicas == [R1, R2]
    assert rolling.gateway_of(hosts["x"].host.state, "a6000", fleet.dir) is None


def test_group_data_that_does_not_load_gives_no_gateway(fleet, tmp_path):
    hosts, _ = fleet({})
    (tmp_path / "gw.py").write_text('gateway = {"routes": ["nope"]}\n')
    assert rolling.gateway_of(hosts["r1"].host.state, "pro6000", fleet.dir) is None


def preflight_like(spec=SPEC, serving=False, old_argv=None):
    """old_argv: the running server's command line (default: the spec's own: it drafts as the new one)."""
    return SimpleNamespace(group="pro6000", spec=spec, facts=SimpleNamespace(runtime=SimpleNamespace(
        cmdline=tuple(server_argv(spec)) if old_argv is None else old_argv)), plan=SimpleNamespace(
        restart=True, interrupted=None, intent=PLAIN, record=SimpleNamespace(since=1796040000, by="root@controller"),
        before=SimpleNamespace(serving=serving)))


def gateway_of(hosts, gw) -> rolling.Gateway:
    return rolling.Gateway(gw, [hosts["smg"].host], [R1, R2])


class GatewayDisk:
    """A gateway host whose drains program (fleet/programs/drains.py) really runs, here, its drains and discovery
    files under `root`; /workers answers `workers`."""

    def __init__(self, root: Path, workers: str | list[str]):
        self.root, self.script = root, Script({"/workers": workers})
        root.mkdir(parents=True, exist_ok=True)

    def __call__(self, command: str) -> tuple[bool, str]:
        if ".drains.json" in command:
            argv = shlex.split(command)
            argv[0], argv[3], argv[4] = sys.executable, str(self.root / "drains.json"), str(self.root / "workers.json")
            done = subprocess.run(argv, capture_output=True, text=True)
            return done.returncode == 0, done.stdout + done.stderr
        return self.script(command)

    def listed(self) -> list[str]:
        return [w["id"] for w in json.loads((self.root / "workers.json").read_text())["workers"]]

    def ops(self, fake) -> list[tuple[str, str]]:
        """The drains program's runs on the fake host: (op, replica) each."""
        return [(r["op"], r["replica"]) for r in (json.loads(shlex.split(c)[-1]) for c in fake.commands()
                                                    if ".drains.json" in c)]

    def drained(self) -> dict:
        return json.loads((self.root / "drains.json").read_text())["drains"]


def test_the_gateway_is_read_and_its_discovery_file_written_by_the_drains_program_on_its_host(fleet, tmp_path):
    disk = GatewayDisk(tmp_path / "smg", workers(R1, R2))
    hosts, gw = fleet({"smg": disk})
    g = gateway_of(hosts, gw)
    assert g.statuses() == {R1.url: "ready", R2.url: "ready"}
    assert g.change(drains.OUT, "r1", "run A", 600, "its turn", ("r2",)).ok
    assert disk.listed() == ["r2"] and disk.drained()["r1"]["owner"] == "run A" and g.out == {"r1"}
    assert (tmp_path / "smg" / "workers.json").read_text() == discovery_file([R1, R2], {"r1"})
    assert g.change(drains.IN, "r1", "run A").ok
    assert disk.listed() == ["r1", "r2"] and disk.drained() == {} and g.out == set()


def test_two_turns_of_one_model_never_both_leave_each_counting_the_other(fleet, tmp_path):
    """Two classes' canaries, one model: each saw the other ready in smg; the second finds its peer drained."""
    disk = GatewayDisk(tmp_path / "smg", workers(R1, R2))
    hosts, gw = fleet({"smg": disk})
    g = gateway_of(hosts, gw)
    assert g.change(drains.OUT, "r1", "run A", 600, "its turn", ("r2",)).ok
    second = g.change(drains.OUT, "r2", "run B", 600, "its turn", ("r1",))
    assert second.result == "peer" and [d.replica for d in second.standing] == ["r1"]
    assert "the peer it counted is drained now: r1 drained by run A (its turn)" in second.describe()
    assert disk.listed() == ["r2"] and set(disk.drained()) == {"r1"}


def test_a_drain_is_ended_by_its_owner_or_once_its_lease_has_passed(fleet, tmp_path):
    disk = GatewayDisk(tmp_path / "smg", workers(R1, R2))
    hosts, gw = fleet({"smg": disk})
    g = gateway_of(hosts, gw)
    assert g.change(drains.OUT, "r1", "make tune 1", 600, "a make tune candidate").ok
    held = g.change(drains.IN, "r1", "the rollout of r1")
    assert held.result == "held" and "r1 drained by make tune 1 (a make tune candidate)" in held.describe()
    assert g.change(drains.OUT, "r1", "the rollout of r1", 600).result == "held" and disk.listed() == ["r2"]
    state = json.loads((tmp_path / "smg" / "drains.json").read_text())
    state["drains"]["r1"]["until"] = 1.0  # its lease passed: the tune that took it was killed
    (tmp_path / "smg" / "drains.json").write_text(json.dumps(state))
    assert g.change(drains.OUT, "r1", "the rollout of r1", 600).ok
    assert disk.drained()["r1"]["owner"] == "the rollout of r1"


def test_a_drain_its_owner_released_stays_out_until_the_next_run_takes_it_over(fleet, tmp_path):
    """An interrupted make tune: its host serves a candidate, out of smg, until a deploy returns it."""
    disk = GatewayDisk(tmp_path / "smg", workers(R1, R2))
    hosts, gw = fleet({"smg": disk})
    g = gateway_of(hosts, gw)
    assert g.change(drains.OUT, "r1", "make tune 1", 600, "a make tune candidate").ok
    assert g.change(drains.RELEASE, "r1", "someone else", why="x").result == "held"
    assert g.change(drains.RELEASE, "r1", "make tune 1", why="left by an interrupted make tune").ok
    assert disk.listed() == ["r2"] and disk.drained()["r1"]["owner"] == ""
    assert g.change(drains.OUT, "r1", "the rollout of r1", 600, "its turn").ok
    assert disk.drained()["r1"]["owner"] == "the rollout of r1" and disk.listed() == ["r2"]
    assert g.change(drains.IN, "r1", "the rollout of r1").ok and disk.listed() == ["r1", "r2"]


def test_a_drains_file_that_is_not_ours_is_never_overwritten(fleet, tmp_path):
    disk = GatewayDisk(tmp_path / "smg", workers(R1, R2))
    (tmp_path / "smg" / "drains.json").write_text("[1, 2]")
    hosts, gw = fleet({"smg": disk})
    answer = gateway_of(hosts, gw).change(drains.OUT, "r1", "run A", 600)
    assert answer.result == "unreadable" and (tmp_path / "smg" / "drains.json").read_text() == "[1, 2]"


def test_a_gateway_group_is_read_as_one_and_every_gateways_file_written(fleet, tmp_path):
    """Behind a floating address: out once no gateway routes to it, back once ready in all."""
    one = GatewayDisk(tmp_path / "smg", workers(R1, R2))
    two = GatewayDisk(tmp_path / "smg2", json.dumps({"workers": [{"url": R1.url, "status": "pending"},
                                                                 {"url": R2.url, "status": "ready"}]}))
    hosts, gw = fleet({"smg": one, "smg2": two})
    g = rolling.Gateway(gw, [hosts["smg"].host, hosts["smg2"].host], [R1, R2])
    assert g.name == "smg and smg2"
    assert g.statuses() == {R1.url: "ready in smg, pending in smg2", R2.url: "ready"}
    assert g.change(drains.OUT, "r1", "run A", 600).ok
    assert one.listed() == two.listed() == ["r2"]


def test_a_refusal_on_the_second_gateway_undoes_the_drain_on_the_first(fleet, tmp_path):
    one, two = GatewayDisk(tmp_path / "smg", workers(R1, R2)), GatewayDisk(tmp_path / "smg2", workers(R1, R2))
    hosts, gw = fleet({"smg": one, "smg2": two})
    g = rolling.Gateway(gw, [hosts["smg"].host, hosts["smg2"].host], [R1, R2])
    assert rolling.Gateway(gw, [hosts["smg2"].host], [R1, R2]).change(drains.OUT, "r2", "run B", 600).ok
    assert g.change(drains.OUT, "r1", "run A", 600, "its turn", ("r2",)).result == "peer"
    assert one.listed() == ["r1", "r2"] and one.drained() == {} and g.out == set()


@pytest.mark.parametrize("answer, connects, said", [
    ((False, "curl: (22) The requested URL returned error: 401"), True,
     "gateway smg: curl: (22) The requested URL returned error: 401"),
    ("<html>not smg</html>", True, "gateway smg: /workers: not valid JSON"),
    ('{"workers": [{"url": 1}]}', True, "gateway smg: /workers: expected {\"workers\": [{\"url\", \"status\"}"),
    ("", False, "gateway smg: cannot connect"),
    (EOFError(), True, "smg: gateway smg: GET /workers: expected an answer within"),
])
def test_a_gateway_that_cannot_be_read_is_a_gateway_error(fleet, answer, connects, said):
    hosts, gw = fleet({"smg": Script({"/workers": answer})})
    smg = hosts["smg"].host
    smg.connected = False
    smg.connect = lambda **kw: setattr(smg, "connected", connects)
    with pytest.raises(GatewayError) as e:
        gateway_of(hosts, gw).statuses()
    assert str(e.value).startswith(said)
    assert hosts["smg"].commands() == ([] if not connects else [workers_command(gw)])


@pytest.mark.parametrize("metrics, load", [
    ('sglang:num_running_reqs{model_name="m"} 2\nsglang:num_queue_reqs{model_name="m"} 1.0\n', 3.0),
    ("sglang:num_running_reqs 2\n", None),  # not both: not known to be idle
])
def test_a_replicas_load_is_its_running_and_queued_requests(fleet, metrics, load):
    hosts, gw = fleet({"r1": Script({"/metrics": metrics})})
    through = rolling.ReplicaThrough(gateway_of(hosts, gw), hosts["r1"].host, preflight_like(), Steps(), 600)
    assert through.load() == load and hosts["r1"].commands() == [gate.metrics_command(SPEC)]


class Steps:
    def __init__(self):
        self.logged = []

    def log(self, message, color=None):
        self.logged.append(message)


def rolling_through(fleet, smg_answers, go):
    hosts, gw = fleet({"smg": GatewayDisk(fleet.root / "smg", smg_answers["/workers"]),
                       "r1": Script({"/metrics": "sglang:num_running_reqs 0\nsglang:num_queue_reqs 0\n"})})
    roll = rolling.ClassRoll("pro6000", 1, 100, gateway_of(hosts, gw), order=["r1", "r2"])
    this_run().rolls["pro6000"] = roll
    steps = Steps()
    outcome = rolling.take_turn(hosts["r1"].host, preflight_like(), steps, go=go,
                                leave=lambda why: Outcome("FAILED (service untouched)", [why]))
    return outcome, hosts, gw, roll, steps


def test_a_canary_behind_the_gateway_goes_out_drains_activates_and_comes_back(fleet):
    ran = []
    outcome, hosts, gw, roll, steps = rolling_through(
        fleet, {"/workers": [workers(R1, R2), workers(R2), workers(R1, R2)]}, lambda: ran.append(1) or Outcome("OK"))
    assert outcome.ok and ran == [1] and roll.canary_done.is_set() and not roll.stopped
    smg = hosts["smg"].answer
    assert smg.ops(hosts["smg"]) == [("out", "r1"), ("in", "r1")] and smg.listed() == ["r1", "r2"]
    assert hosts["r1"].commands()[0] == gate.metrics_command(SPEC)  # drained: none running, none queued
    assert "canary of pro6000: the other hosts wait for it" in steps.logged


def loaded(tokens_per_s: float, accept: float, failed: int = 0, requests: int = 16) -> str:
    """fleet/programs/measure.py's answer: `requests` of 1 s each, their tokens making `tokens_per_s` over 4 s."""
    tokens = int(tokens_per_s * 4 / (requests - failed))
    made = tokens * (requests - failed)
    done = [[1.0, True, tokens, 0.1, ""]] * (requests - failed) + [[1.0, False, 0, None, "HTTP 500"]] * failed
    data = {"wall_s": 4.0, "before": {"sglang:generation_tokens_total": 0, "sglang:spec_verify_calls_total": 0},
            "after": {"sglang:generation_tokens_total": made, "sglang:spec_verify_calls_total": made / accept},
            "requests": done}
    return "@@measure\n" + base64.b64encode(json.dumps(data).encode()).decode() + "\n"


def canary_through(fleet, loads: list[str], spec=SPEC, serving=True):
    """r1, the canary of two behind smg, its activation a fake that runs its analysis as fleet.rollout.activation does."""
    hosts, gw = fleet({"smg": GatewayDisk(fleet.root / "smg", [workers(R1, R2), workers(R2), workers(R1, R2)]),
                       "r1": Script({"@@measure": loads,
                                     "/metrics": "sglang:num_running_reqs 0\nsglang:num_queue_reqs 0\n"})})
    roll = rolling.ClassRoll("pro6000", 1, 100, gateway_of(hosts, gw), order=["r1", "r2"])
    this_run().rolls["pro6000"] = roll
    steps, analyses = Steps(), []

    def go():
        ops = hosts["smg"].answer.ops(hosts["smg"])
        steps.ops_at_go = list(ops)
        analyses.append(steps.analyse())
        return Outcome("OK" if analyses[-1] is None or analyses[-1].passed else "FAILED (rolled back)")
    steps.analyse = lambda: steps.analysis() if getattr(steps, "analysis", None) else None
    outcome = rolling.take_turn(hosts["r1"].host, preflight_like(spec, serving), steps, go=go,
                                leave=lambda why: Outcome("FAILED (service untouched)", [why]))
    return outcome, hosts, roll, steps, analyses


def measures(hosts) -> int:
    return sum("@@measure" in c for c in hosts["r1"].commands())


def test_the_canary_is_measured_out_of_its_gateway_before_and_after_and_judged_against_the_old_spec(fleet):
    outcome, hosts, roll, steps, (analysis,) = canary_through(fleet, [loaded(400, 2.5), loaded(380, 4.7)])
    assert outcome.ok and analysis.passed and not roll.stopped
    assert steps.ops_at_go == [("out", "r1")] and measures(hosts) == 2  # both loads while out of routing
    # make tune's routine (fleet.tune.measure), the analysis's load: the very command, on the replica itself
    shared = measure.command(SPEC, canary.load(SPEC.canary, SPEC))
    assert [c for c in hosts["r1"].commands() if "@@measure" in c] == [shared, shared]
    assert hosts["smg"].answer.ops(hosts["smg"]) == [("out", "r1"), ("in", "r1")]
    assert analysis.summary == ("canary analysis passed: 380.0 tok/s, accept length 4.70 against the baseline's 400.0 "
                                "tok/s, accept length 2.50 (the same load on the canary before its turn (the old "
                                "spec)); bounds: 0.7 x its tok/s, 0.8 x its accept length")
    assert this_run().report.hosts["r1"].notes == [analysis.summary]
    assert f"canary analysis: {SPEC.canary.requests} requests of 128 tokens, 4 at a time" in steps.logged


def test_a_canary_that_accepts_little_fails_its_analysis_and_stops_the_class(fleet):
    outcome, hosts, roll, steps, (analysis,) = canary_through(fleet, [loaded(400, 4.7), loaded(390, 1.2)])
    assert not outcome.ok and not analysis.passed and roll.stopped == "after r1: FAILED (rolled back)"
    assert "accept length 1.20 below 0.8 x 4.70 = 3.76" in analysis.summary
    assert "r1" not in this_run().report.hosts  # no note of a pass: its rollback says why


def test_a_make_tune_record_is_the_baseline_where_it_has_the_spec_at_the_concurrency(fleet, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tuning").mkdir()
    (tmp_path / "tuning" / "pro6000.json").write_text(json.dumps(RECORD))
    outcome, hosts, _, _, (analysis,) = canary_through(fleet, [loaded(380, 4.7)])
    assert outcome.ok and measures(hosts) == 1  # no load on the old spec
    assert "(make tune record tuning/pro6000.json (block size 16, concurrency 4))" in analysis.summary
    (tmp_path / "tuning" / "pro6000.json").write_text("{not json")
    _, hosts, _, _, (analysis,) = canary_through(fleet, [loaded(400, 2.5), loaded(380, 4.7)])
    assert measures(hosts) == 2 and "before its turn" in analysis.summary


def test_a_load_that_says_nothing_readable_fails_the_canary_and_no_baseline_passes_it(fleet):
    _, _, _, steps, (analysis,) = canary_through(fleet, ["python: not found", loaded(380, 4.7)])
    assert analysis.passed and "not compared: no baseline" in analysis.summary
    assert any("the old spec's load could not be measured" in line for line in steps.logged)
    _, _, _, _, (analysis,) = canary_through(fleet, [loaded(400, 4.7), "Killed"])
    assert not analysis.passed and analysis.summary.startswith("canary analysis: its load could not be measured:")


def test_no_analysis_when_declared_off_or_no_old_spec_serves(fleet):
    off = SPEC.model_copy(update={"canary": SPEC.canary.model_copy(update={"analysis": False})})
    outcome, hosts, _, _, analyses = canary_through(fleet, [loaded(1, 1.0)], spec=off)
    assert outcome.ok and analyses == [None] and measures(hosts) == 0
    _, hosts, _, _, (analysis,) = canary_through(fleet, [loaded(380, 4.7)], serving=False)
    assert measures(hosts) == 1 and "no baseline" in analysis.summary


def test_a_turn_that_breaks_off_behind_the_gateway_leaves_the_replica_out_and_stops_the_class(fleet):
    def go():
        raise RuntimeError("the controller is broken")

    with pytest.raises(RuntimeError):
        rolling_through(fleet, {"/workers": [workers(R1, R2), workers(R2)]}, go)
    roll = this_run().rolls["pro6000"]
    assert roll.stopped == "after r1: an error" and roll.gateway.out == {"r1"} and roll.canary_done.is_set()
    assert this_run().report.hosts["r1"].reasons == ["r1: left out of gateway smg: its rollout broke off (RuntimeError: "
                                       "'the controller is broken'); a later run that serves it puts it back"]


@pytest.mark.parametrize("verdict, out, back", [("FAILED (rolled back)", {"r1"}, True),
                                                ("FAILED (rollback failed)", {"r1"}, False),
                                                ("FAILED (rolled back)", set(), False)])
def test_a_replica_rolled_back_outside_its_turn_goes_back_in_only_if_it_serves_and_was_out(fleet, verdict, out, back):
    hosts, gw = fleet({"smg": GatewayDisk(fleet.root / "smg", workers(R2))})
    g = gateway_of(hosts, gw)
    g.out = set(out)
    this_run().rolls["pro6000"] = rolling.ClassRoll("pro6000", 1, 100, g, order=["r1"])
    steps = Steps()
    rolling.after_rollback(hosts["r1"].host, preflight_like(), steps, Outcome(verdict))
    assert hosts["smg"].answer.ops(hosts["smg"]) == ([("in", "r1")] if back else [])
    assert ("rolled back and serving: back in gateway smg" in steps.logged) == back
    assert "r1" not in this_run().lost


def taking_over(fleet, smg_answers, go):
    """r1 takes over an interrupted rollout left mid-change (first in the class's turns: none to wait for)."""
    hosts, gw = fleet({"smg": GatewayDisk(fleet.root / "smg", smg_answers["/workers"]),
                       "r1": Script({"/metrics": "sglang:num_running_reqs 0\nsglang:num_queue_reqs 0\n"})})
    this_run().rolls["pro6000"] = rolling.ClassRoll("pro6000", 1, 100, gateway_of(hosts, gw), order=["r1", "r2"],
                                                 mid_change={"r1"})
    steps = Steps()
    outcome = rolling.take_turn(hosts["r1"].host, preflight_like(), steps, go=go,
                                leave=lambda why: pytest.fail(f"a takeover never leaves its rollout: {why}"))
    return outcome, hosts, gw, steps


def test_a_takeover_left_mid_change_goes_first_and_its_class_knows_its_gateway(fleet):
    hosts, gw = fleet({})
    pf = preflight_like()
    # its new server loads already: only the wait is left
    pf.plan.interrupted, pf.plan.restart = SimpleNamespace(mid_change=True), False
    rolling.enlist(hosts["r1"].host, pf, fleet.dir)
    roll = this_run().rolls["pro6000"]
    assert roll.turns().first == ("r1",) and roll.mid_change == {"r1"} and roll.gateway.hosts == [hosts["smg"].host]


def test_a_takeover_behind_the_gateway_goes_at_once_out_and_back_in_once_it_serves(fleet):
    # a run given up mid-rollout left r1 out of smg: not ready, it needs no peer to go out again
    outcome, hosts, gw, steps = taking_over(fleet, {"/workers": [workers(R2), workers(R2), workers(R1, R2)]},
                                            lambda: Outcome("OK"))
    assert outcome.ok and "back in gateway smg: ready" in steps.logged
    assert hosts["smg"].answer.ops(hosts["smg"]) == [("out", "r1"), ("in", "r1")]


def test_a_takeover_whose_peers_are_not_ready_goes_at_once_where_it_is(fleet):
    ran = []
    r2_down = json.dumps({"workers": [{"url": R1.url, "status": "ready"}, {"url": R2.url, "status": "pending"}]})
    outcome, hosts, _, steps = taking_over(fleet, {"/workers": r2_down}, lambda: ran.append(1) or Outcome("OK"))
    assert outcome.ok and ran == [1]
    assert hosts["smg"].answer.ops(hosts["smg"]) == []  # never taken out
    assert any("it takes over its interrupted rollout all the same" in m for m in steps.logged)


def test_one_gateway_routing_two_classes_is_one_object_that_keeps_each_classs_drained_replica_out(fleet, tmp_path):
    # each class had a Gateway of its own: class a6000's write of the file put pro6000's drained r1 back
    (tmp_path / "gw.py").write_text('gateway = {"routes": ["pro6000", "a6000"], "health_check_interval_s": 1}\n')
    hosts, gw = fleet({"smg": GatewayDisk(tmp_path / "smg", workers(R1, R2))})
    state = hosts["r1"].host.state
    pro, a6000 = rolling.gateway_of(state, "pro6000", fleet.dir), rolling.gateway_of(state, "a6000", fleet.dir)
    assert pro is a6000 and [r.host for r in pro.replicas] == ["r1", "r2", "x"]
    assert pro.change(drains.OUT, "r1", "run A", 600).ok and a6000.change(drains.OUT, "x", "run A", 600).ok
    assert hosts["smg"].answer.listed() == ["r2"]
