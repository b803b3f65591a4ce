"""The gateway's spec and the rolling rollout's decisions (fleet/gateway/models.py, fleet/gateway/smg.py): no hosts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.gateway.models import Gateway, check_routes, key_problems
from fleet.gateway.smg import (
    KEY_VARIABLE, LAUNCH_WITH_KEY, Replica, discovery_file, launch_args, parse_gateway_host, parse_workers,
    peer_problem, routed)
from fleet.spec.inventory import check_inventory
from fleet.spec.load import SpecError, load_class_specs, load_gateways
from fleet.rollout.render import render_gateway_unit
from fleet.rollout.commands import write_command
from fleet.spec import ClassSpec
from fleet.core.wire import Unreadable

from answers import answer, record

REPO = Path(__file__).resolve().parents[2]
GROUP_DATA = REPO / "group_data"
R = [Replica("a", "pro6000", "m", "http://10.0.0.1:30000"), Replica("b", "pro6000", "m", "http://10.0.0.2:30000"),
     Replica("c", "h200", "other", "http://10.0.0.3:30000")]


def test_repo_gateway_is_valid_and_routes_pro6000():
    gws = load_gateways(GROUP_DATA, load_class_specs(GROUP_DATA))
    assert gws["gateway"].routes == ["pro6000"]


def test_routes_are_checked_against_the_classes():
    classes = load_class_specs(GROUP_DATA)
    problems = check_routes({"gw": Gateway(routes=["nope", "pro6000"]), "gw2": Gateway(routes=["pro6000"])}, classes)
    assert any("'nope' is not a GPU class" in p for p in problems)
    assert any("already routed by gw" in p for p in problems)


def test_a_class_key_must_be_the_gateways():
    classes = load_class_specs(GROUP_DATA)
    data = classes["pro6000"].model_dump(exclude_none=True)
    keyed = ClassSpec.model_validate({**data, "service": {**data["service"], "api_key": {"env": "K"}}})
    problems = key_problems("gw", Gateway(routes=["pro6000"]), {"pro6000": keyed})
    assert problems and "gateway.api_key" in problems[0] and "environment variable K" in problems[0]
    assert not key_problems("gw", Gateway(routes=["pro6000"], api_key={"env": "K"}), {"pro6000": keyed})
    assert not check_routes({"gw": Gateway(routes=["pro6000"])}, {"pro6000": keyed})  # only where a gateway runs


def test_bad_gateway_file_names_file_and_field(tmp_path):
    g = tmp_path / "group_data"
    g.mkdir()
    for f in ("all.py", "pro6000.py"):
        (g / f).write_text((GROUP_DATA / f).read_text())
    (g / "gw.py").write_text('gateway = {"routes": ["pro6000"], "polcy": "random", "api_key": "plain"}\n')
    with pytest.raises(SpecError) as e:
        load_gateways(g, load_class_specs(g))
    text = "\n".join(e.value.problems)
    assert "gw.py: gateway.polcy: unknown key" in text and "allowed keys: routes" in text
    assert "gateway.api_key" in text and "plain" not in text


def test_inventory_takes_one_gateway_host_per_group():
    assert check_inventory({"pro6000": ["p1"], "gateway": ["g1"]}, {"p1": {}, "g1": {}}, GROUP_DATA)
    with pytest.raises(SpecError) as e:
        check_inventory({"pro6000": ["p1"], "gateway": ["g1", "g2"]}, {"p1": {}, "g1": {}, "g2": {}}, GROUP_DATA)
    assert "gateway group gateway has 2 hosts" in str(e.value)


def test_discovery_file_lists_replicas_but_those_out_with_known_keys_only():
    data = json.loads(discovery_file(R, out={"b"}))
    assert data == {"version": 1, "workers": [{"id": "a", "url": "http://10.0.0.1:30000"},
                                               {"id": "c", "url": "http://10.0.0.3:30000"}]}


def test_write_is_atomic_rename():
    cmd = write_command("/etc/smg/w.json", '{"x": 1}\n')
    assert cmd == "printf '%s' '{\"x\": 1}\n' > /etc/smg/w.json.tmp && mv -f /etc/smg/w.json.tmp /etc/smg/w.json"


def test_parse_workers_statuses():
    text = json.dumps({"workers": [{"url": "http://10.0.0.1:30000/", "status": "ready", "is_healthy": True},
                                   {"url": "http://10.0.0.2:30000", "status": "pending"}], "total": 2})
    assert parse_workers(text) == {"http://10.0.0.1:30000": "ready", "http://10.0.0.2:30000": "pending"}
    for bad in ('{"nodes": []}', '{"workers": [{"url": "u"}]}', "not json", None, "[" * 100 + "]" * 100,
                '{"workers": [{"url": 5, "status": "ready"}]}', '{"workers": {"url": "u"}}'):
        with pytest.raises(Unreadable):
            parse_workers(bad)


@pytest.mark.parametrize("statuses, ok", [
    ({"http://10.0.0.1:30000": "ready", "http://10.0.0.2:30000": "ready"}, True),  # a peer serves
    ({"http://10.0.0.1:30000": "ready", "http://10.0.0.2:30000": "draining"}, False),  # the only one routed
    ({"http://10.0.0.1:30000": "ready", "http://10.0.0.3:30000": "ready"}, False),  # another model is no peer
    ({"http://10.0.0.1:30000": "failed"}, True),  # carries no traffic: nothing to protect
    ({}, True),
])
def test_peer_rule(statuses, ok):
    problem = peer_problem(R[0], R, statuses)
    assert (problem is None) == ok
    if problem:
        assert "no other replica of m is ready" in problem


def test_routed_until_draining_or_gone():
    assert routed({"u": "ready"}, "u") and routed({"u": "pending"}, "u")
    assert not routed({"u": "draining"}, "u") and not routed({}, "u")


def test_unit_keeps_the_key_out_of_files_and_arguments_and_names_the_discovery_file():
    gw = Gateway(routes=["pro6000"], api_key={"env": "GW_KEY"})
    unit = render_gateway_unit(gw, "gateway")
    assert "EnvironmentFile=/etc/smg/smg.secret" in unit and "--api-key" not in unit and "${" not in unit
    assert "--discovery-provider file --discovery-file /etc/smg/smg-workers.json" in unit
    assert "KillMode=mixed" in unit
    assert launch_args(gw)[:3] == ["/opt/smg/venv/bin/python", "-c", LAUNCH_WITH_KEY]
    # the header the host's own requests send follows the key smg started with (a peer in a group's turns)
    assert "&& install -m 0600 /etc/smg/smg.auth.declared /etc/smg/smg.auth" in unit.split("ExecStartPre=")[1]
    open_gw = render_gateway_unit(Gateway(routes=["pro6000"]), "gateway")
    assert "--api-key" not in open_gw and "EnvironmentFile" not in open_gw and "smg.auth" not in open_gw
    assert launch_args(Gateway(routes=["pro6000"]))[:2] == ["/opt/smg/venv/bin/smg", "launch"]


# smg 1.13.0's own entry points, as LAUNCH_WITH_KEY calls them: what they were given, and the process's arguments
STUB_SMG = """import json, os, sys
def parse_router_args(argv):
    return type("RouterArgs", (), {"argv": argv, "api_key": None})()
def launch_router(args):
    with open(os.environ["SEEN"], "w") as f:
        json.dump({"argv": args.argv, "api_key": args.api_key, "environment": os.environ.get("SMG_API_KEY"),
                   "cmdline": open("/proc/self/cmdline").read().split(chr(0))}, f)
"""


def test_the_launcher_gives_smg_its_key_from_the_environment_never_in_an_argument(tmp_path):
    (tmp_path / "smg").mkdir()
    (tmp_path / "smg/__init__.py").write_text("")
    (tmp_path / "smg/launch_router.py").write_text(STUB_SMG)
    key = "sk-Launch0123456789"
    argv = launch_args(Gateway(routes=["pro6000"], api_key={"env": "GW_KEY"}))
    seen = tmp_path / "seen.json"
    subprocess.run([sys.executable, *argv[1:]], check=True, timeout=60,
                   env={"PYTHONPATH": str(tmp_path), "SEEN": str(seen), KEY_VARIABLE: key})
    got = json.loads(seen.read_text())
    assert got["argv"] == argv[3:] and got["api_key"] == key
    assert got["environment"] is None  # taken out: no child of smg inherits it
    assert not [a for a in got["cmdline"] if key in a]


def test_parse_gateway_host():
    h = parse_gateway_host(answer(record("python", "3.11\n"), record("machine", "x86_64\n"), record("smg", "")))
    assert (h.python, h.machine, h.smg, h.python_tag, h.problem) == ("3.11", "x86_64", "", "cp311", "")


@pytest.mark.parametrize("field, said", [("machine", "../../../tmp"), ("machine", "x86_64/../x"),
                                         ("python", "3.11/.."), ("python", "Python 3.11"), ("smg", "1.0 ; rm")])
def test_a_gateway_hosts_answer_that_would_name_another_directory_is_refused(field, said):
    fields = {"python": "3.11", "machine": "x86_64", "smg": "1.13.0", field: said}
    h = parse_gateway_host(answer(*(record(k, v) for k, v in fields.items())))
    assert getattr(h, field) == "" and field in h.problem and repr(said) in h.problem


def test_status_row_of_the_gateway():
    from fleet.rollout.status import DRIFT, OK, UNHEALTHY, judge_gateway

    gw = Gateway(routes=["pro6000"])
    workers = json.dumps({"workers": [{"url": R[0].url, "status": "ready"}, {"url": R[1].url, "status": "ready"}]})
    read = {"unit": "ActiveState=active\nSubState=running\nUnitFileState=enabled", "installed": "1.13.0",
            "readiness": "200", "workers": workers}
    row = judge_gateway("gw-1", "gateway", gw, read, R[:2])
    assert (row.verdict, row.served_model, row.health) == (OK, "2/2 replicas ready", 200)
    row = judge_gateway("gw-1", "gateway", gw, read, R)
    assert row.verdict == UNHEALTHY and any("c (http://10.0.0.3:30000): not in the gateway" in r for r in row.reasons)
    row = judge_gateway("gw-1", "gateway", gw, {**read, "installed": "1.12.0"}, R[:2])
    assert row.verdict == DRIFT and row.drift == "install smg 1.13.0"
    row = judge_gateway("gw-1", "gateway", gw, {**read, "readiness": "000", "workers": ""}, R[:2])
    assert row.verdict == UNHEALTHY and row.reasons[0] == "/readiness no answer"


def test_a_mismatched_key_refuses_only_an_inventory_that_runs_the_gateway(tmp_path):
    g = tmp_path / "group_data"
    g.mkdir()
    for f in GROUP_DATA.glob("*.py"):
        (g / f.name).write_text(f.read_text())
    with open(g / "pro6000.py", "a") as f:
        f.write('\nservice = {**service, "api_key": {"env": "OTHER_KEY"}}\n')
    assert check_inventory({"pro6000": ["p1"]}, {"p1": {}}, g)  # no gateway host: the class keys itself
    with pytest.raises(SpecError) as e:
        check_inventory({"pro6000": ["p1"], "gateway": ["g1"]}, {"p1": {}, "g1": {}}, g)
    assert "environment variable OTHER_KEY" in str(e.value) and "SGLANG_FLEET_GATEWAY_KEY" in str(e.value)


def _gateway_problems(tmp_path, gateway: str, pro6000_extra: str = "") -> list[str]:
    g = tmp_path / "group_data"
    g.mkdir(exist_ok=True)
    for f in ("all.py", "pro6000.py"):
        (g / f).write_text((GROUP_DATA / f).read_text())
    (g / "pro6000.py").write_text((GROUP_DATA / "pro6000.py").read_text() + pro6000_extra)
    (g / "gw.py").write_text(f"gateway = {gateway}\n")
    with pytest.raises(SpecError) as e:
        load_gateways(g, load_class_specs(g))
    return e.value.problems


@pytest.mark.parametrize("field, value, needle", [
    ("host", "0.0.0.0; rm -rf /", "an IP address (e.g. 0.0.0.0, 127.0.0.1, ::) or a host name"),
    ("host", "$(id)", "an IP address"),
    ("version", "1.13.0\nExecStartPre=/bin/sh", "a PEP 440 version as pip takes it"),
    ("version", "1.13.0; curl x | sh", "a PEP 440 version as pip takes it"),
    ("version", "latest", "a PEP 440 version as pip takes it"),
    ("version", "1.13.0\n", "a PEP 440 version as pip takes it"),
    ("version", "v1.13.0", "a PEP 440 version in its normalized form: 1.13.0"),
    ("version", "1.13.0-RC1", "normalized form: 1.13.0rc1"),
    ("unit", "..", "a systemd unit name"),
    ("unit", "-H", "not starting with - or ."),
    ("unit", "smg@x", "no '@'"),
    ("install_dir", "/opt/../etc", "no empty, '.' or '..' segment"),
    ("install_dir", "/opt/$HOME", "a path ExecStart= runs"),
    ("python", "/usr/bin/python3\r", "found a control character (U+000D)"),
    ("routes", ["pro6000\n"], "a GPU class's group name: letters, digits and _"),
])
def test_gateway_fields_refused_naming_file_field_and_value(tmp_path, field, value, needle):
    (p,) = _gateway_problems(tmp_path, repr({"routes": ["pro6000"], field: value}))
    assert p.startswith(f"{tmp_path}/group_data/gw.py: gateway.{field}"), p
    assert repr(value[0] if isinstance(value, list) else value)[:40] in p, p  # a list's bad item, named
    assert needle in p, p


@pytest.mark.parametrize("version", ["1.13.0", "1.14", "2.0.0rc1", "1.13.0.post1", "1!2.0", "1.13.0+local.1"])
def test_gateway_versions_pip_takes(version):
    assert Gateway(routes=["pro6000"], version=version).version == version


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e-9, 1e9])
@pytest.mark.parametrize("field", ["ready_timeout_s", "poll_interval_s", "drain_timeout_s"])
def test_rolling_durations_are_finite_and_bounded(tmp_path, field, value):
    (p,) = _gateway_problems(tmp_path, repr({"routes": ["pro6000"], "rolling": {field: value}})
                             .replace("inf", 'float("inf")').replace("nan", 'float("nan")'))
    assert f"gw.py: gateway.rolling.{field} = " in p


def test_no_drain_wait_is_still_a_rolling_setting():
    # 0 means "stop at once" there (the gateway lab test rolls that way)
    assert Gateway(routes=["pro6000"], rolling={"drain_timeout_s": 0}).rolling.drain_timeout_s == 0


def test_the_gateways_two_ports_differ(tmp_path):
    (p,) = _gateway_problems(tmp_path, '{"routes": ["pro6000"], "port": 9000, "prometheus_port": 9000}')
    assert p.startswith(f"{tmp_path}/group_data/gw.py: gateway = ")
    assert "port and prometheus_port both 9000: smg binds each, expected different ports" in p


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "::1", "::ffff:127.0.0.1", "localhost", "LOCALHOST",
                                  "gpu.localhost", "ip6-localhost"])
def test_a_routed_class_must_bind_an_address_the_gateway_reaches(tmp_path, host):
    (p,) = _gateway_problems(tmp_path, '{"routes": ["pro6000"]}', f'\nservice = {{**service, "host": "{host}"}}\n')
    assert p == (f"group_data/gw.py: gateway.routes: 'pro6000' binds service.host {host!r} (group_data/pro6000.py), "
                 "which smg on the gateway host cannot reach; expected an address of the replica's network, "
                 "or 0.0.0.0 / ::")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "gpu-1.fleet.example", "localhost-gpu"])
def test_a_routed_class_bound_to_a_reachable_address_passes(tmp_path, host):
    g = tmp_path / "group_data"
    g.mkdir()
    (g / "pro6000.py").write_text((GROUP_DATA / "pro6000.py").read_text() + f'\nservice = {{**service, "host": "{host}"}}\n')
    (g / "gw.py").write_text('gateway = {"routes": ["pro6000"]}\n')
    assert load_gateways(g, load_class_specs(g))["gw"].routes == ["pro6000"]


def test_a_route_listed_twice_is_named_once(tmp_path):
    (p,) = _gateway_problems(tmp_path, '{"routes": ["pro6000", "pro6000"]}')
    assert p == "group_data/gw.py: gateway.routes: 'pro6000' listed 2 times; expected once"


@pytest.mark.parametrize("route", ["a%nb", "pro6000\\", "pro-6000", "1x", ""])
def test_a_route_is_a_group_name(tmp_path, route):
    """It ends the smg unit's Description=: a % would be a specifier there, a trailing backslash would
    join the next line to it; an inventory group is a Python name anyway."""
    (p,) = _gateway_problems(tmp_path, repr({"routes": [route]}))
    assert p.startswith(f"{tmp_path}/group_data/gw.py: gateway.routes.0 = {route!r}: a GPU class's group name")
