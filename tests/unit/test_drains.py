"""fleet/turns/drains.py: a make tune's owner read from --data, the drains a host's file keeps now, the program's answers
read as untrusted input. The program itself runs in tests/unit/test_tasks_rolling.py (GatewayDisk)."""

from __future__ import annotations

import base64
import json


from fleet.turns import drains
from fleet.gateway.smg import Replica, discovery_file

NOW = 1_796_040_000


def state(**drained) -> str:
    return json.dumps({"version": 1, "drains": {r: {"owner": "o", "until": until, "why": ""}
                                                for r, until in drained.items()}})


def test_the_drains_in_force_are_those_whose_lease_has_not_passed_by_the_hosts_clock():
    assert drains.active(state(r1=NOW + 5, r2=NOW - 5), str(NOW)) == {"r1"}
    for text, clock in ((None, str(NOW)), ("[1]", str(NOW)), (state(r1=NOW + 5), "soon"), ('{"drains": 1}', "0"),
                        (json.dumps({"drains": {"r1": {"until": "later"}}}), "0")):
        assert drains.active(text, clock) == set()


def test_the_programs_answer_is_read_whatever_the_host_sends():
    ok = "@@result=ok\n\n@@drains=1\n" + base64.b64encode(
        json.dumps({"r1": {"owner": "run A", "why": "its turn", "left_s": 59.5, "until": 1}}).encode()).decode()
    answer = drains.parse(ok)
    assert answer.ok and answer.drains == (drains.Drain("r1", "run A", "its turn", 59.5),)
    assert drains.parse("@@result=maybe\n\n").result == "no answer"
    assert drains.parse("").describe() == "no answer from the drains program"
    odd = "@@result=held\n" + base64.b64encode(json.dumps(
        {"r1\x1b[2J": {"owner": "\x1b]0;x\x07", "left_s": 1}, "r2": {"owner": "b", "left_s": "x"}}).encode()).decode()
    assert drains.parse(odd).standing == ()


def test_the_program_lists_workers_as_the_deploy_does():
    replicas = [Replica("r1", "c", "m", "http://10.0.0.1:30000"), Replica("r2", "c", "m", "http://10.0.0.2:30000")]
    assert json.loads(discovery_file(replicas, {"r1"}))["workers"] == [w for w in drains.workers(replicas)
                                                                      if w["id"] != "r1"]
