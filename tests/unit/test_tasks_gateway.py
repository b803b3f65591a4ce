"""tasks/gateway: the gateway host's convergence as the operations it queues (pyinfra's operations
recorded, not run: install only a missing smg, the key files only with a key, the discovery file only
when it differs, restart only for a change that needs one) and the row it gets; a refusal for a key or
Python it lacks; smg's wheels downloaded once into the controller's cache; the wait for smg's /health
over a fake host with a scripted clock."""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import replace
from types import SimpleNamespace

import pytest
from builders import make_spec
from fakehost import Clock, Script, fake_hosts, fresh_run, this_run  # noqa: F401
from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts.files import Sha1File

from facts.gateway import GatewayFacts
from fleet.turns import drains
from fleet.gateway import floating
from fleet.gateway.floating import Interface, Vrrp
from fleet.gateway.smg import GatewayHost, Replica, discovery_file, generation, health_command
from fleet.spec.load import load_class_specs, load_gateways
from fleet.core.layout import staged_path
from fleet.rollout.render import render_gateway_secret, render_gateway_sysctl, render_gateway_unit, render_keepalived, \
    render_keepalived_dropin, render_vrrp_auth
from fleet.rollout.commands import sha1, write_command
from tasks import common, gateway, gateway_turns, preflight

SPEC = make_spec(service={"host": "0.0.0.0"})
KEY = "sk-Gateway0123456789abcdef"
WHEELS = ["pip-24.0-py3-none-any.whl", "smg-1.13.0-cp311-cp311-manylinux_2_17_x86_64.whl"]
def gw_host(*args, **fields) -> GatewayHost:
    """What a gateway host answers, with every program the deploy runs there on its PATH."""
    return GatewayHost(*args, **{"programs": dict.fromkeys(("curl", "flock", "systemctl", "/usr/bin/python3", "ip",
                                                              "ss"), True), **fields})


HOST = gw_host("3.11", "x86_64", "")


@pytest.fixture
def group_dir(tmp_path, monkeypatch):
    d = tmp_path / "group_data"
    d.mkdir()
    data = SPEC.model_dump(mode="json", exclude_defaults=True)
    (d / "pro6000.py").write_text("".join(f"{k} = {v!r}\n" for k, v in data.items()))
    (d / "gw.py").write_text('gateway = {"routes": ["pro6000"], "api_key": {"env": "SGLANG_FLEET_GATEWAY_KEY"}}\n')
    monkeypatch.setattr(gateway, "CACHE", tmp_path / "cache")
    monkeypatch.setenv("SGLANG_FLEET_GATEWAY_KEY", KEY)
    return d


def cached(gw, facts=HOST):
    where = gateway.CACHE / "wheels" / f"smg-{gw.version}-{facts.python_tag}-{facts.machine}"
    where.mkdir(parents=True)
    (where / "complete").write_text("\n".join(WHEELS) + "\n")
    return [where / w for w in WHEELS]


class Ops:
    """pyinfra's operations as tasks/gateway queues them: (kind, arguments) in order; each would change
    something unless `unchanged` names its kind."""

    def __init__(self, monkeypatch, unchanged=()):
        self.queued, self.unchanged = [], set(unchanged)
        for module, names in (("files", ("sync", "put", "directory")), ("server", ("shell",)),
                              ("systemd", ("daemon_reload", "service")), ("python", ("call",))):
            monkeypatch.setattr(gateway, module, SimpleNamespace(**{n: self.op(f"{module}.{n}") for n in names}))
        monkeypatch.setattr(gateway, "secret_file", self.op("secret_file"))
        monkeypatch.setattr(preflight, "python", SimpleNamespace(call=self.op("refuse")))

    def op(self, kind):
        def queue(**kwargs):
            self.queued.append((kind, kwargs))
            changes = kind not in self.unchanged and kwargs.get("name", "").split(" ")[0] not in self.unchanged
            return SimpleNamespace(will_change=changes, did_change=lambda: changes)
        return queue

    def names(self) -> list[str]:
        return [kw["name"] for _, kw in self.queued]


def converging(group_dir, facts=HOST, discovery_sha1=None):
    hosts = fake_hosts({"r1": Script({}), "smg": Script({})}, {"r1": {"ssh_hostname": "10.0.0.1"}},
                       {"pro6000": (["r1"], SPEC.model_dump(mode="json", exclude_defaults=True)), "gw": (["smg"], {})})
    smg = hosts["smg"].host
    smg.get_fact = lambda cls, **kw: {GatewayFacts: facts, Sha1File: discovery_sha1}[cls]
    with ctx_state.use(smg.state), ctx_host.use(smg):
        assert gateway.is_gateway(str(group_dir))
        gateway.converge(str(group_dir))
    return this_run().report.hosts["smg"]


def test_a_new_gateway_host_gets_smg_its_unit_key_and_discovery_file_then_a_restart(group_dir, monkeypatch):
    gw = load_gateways(group_dir, load_class_specs(group_dir))["gw"]
    wheels, ops = cached(gw), Ops(monkeypatch)
    row = converging(group_dir)
    assert ops.names() == [
        "smg 1.13.0's wheels, from the controller's cache", "Install smg 1.13.0 (pip --no-index)", "Unit " + gw.unit_file,
        "smg's configuration directory", f"Key {gw.secret_file} (0600, not shown)",
        f"Header {gw.declared_auth_header_file} (0600, not shown)",
        f"Discovery file {gw.discovery_file} (every replica of pro6000)",
        f"Generation {gw.generation_file} (what a restarted smg runs)", "systemctl daemon-reload (the unit changed)",
        "Enable smg.service", "Restart smg.service (it does not run what its files say)",
        "Wait for smg.service to answer /health"]
    assert ops.queued[1] == ("server.shell", {"name": ops.names()[1], "commands": [gateway.install_command(gw, wheels)]})
    r1 = [Replica("r1", "pro6000", "qwen3.6-27b", "http://10.0.0.1:30000")]
    assert ops.queued[6][1]["commands"] == [drains.command(gw.python, gw.unit, gw.discovery_file, r1, drains.SYNC)]
    assert ops.queued[4][1]["content"].count(KEY) == 1 and ops.queued[5][1]["content"].count(KEY) == 1
    assert row.action == ("install smg 1.13.0, update smg.service, update key, update auth header, update discovery "
                          "file, restart") and row.verdict == "passed preflight" and row.gpu_class == "gateway"


def test_a_converged_gateway_host_is_left_as_it_is(group_dir, monkeypatch):
    gw = load_gateways(group_dir, load_class_specs(group_dir))["gw"]
    cached(gw)
    ops = Ops(monkeypatch, unchanged={"files.put", "secret_file"})
    listed = discovery_file([Replica("r1", "pro6000", "qwen3.6-27b", "http://10.0.0.1:30000")], set())
    wanted = generation(render_gateway_unit(gw, "gw"), render_gateway_secret(KEY), gw.version)
    running = gw_host("3.11", "x86_64", "1.13.0", active="active", running=wanted, generation=wanted, ready=True)
    row = converging(group_dir, running, discovery_sha1=sha1(listed))
    assert not any(n.startswith(("Install", "Discovery", "Generation", "Restart")) for n in ops.names())
    assert row.action == "none (already as declared)"


def test_a_replica_another_run_drained_stays_out_of_the_discovery_file_a_deploy_converges(group_dir, monkeypatch):
    """A make tune measuring r1 behind smg: every deploy rewrote the file with it back in."""
    gw = load_gateways(group_dir, load_class_specs(group_dir))["gw"]
    cached(gw)
    ops = Ops(monkeypatch, unchanged={"files.put", "secret_file"})
    r1 = [Replica("r1", "pro6000", "qwen3.6-27b", "http://10.0.0.1:30000")]
    wanted = generation(render_gateway_unit(gw, "gw"), render_gateway_secret(KEY), gw.version)
    running = gw_host("3.11", "x86_64", "1.13.0", active="active", running=wanted, generation=wanted, ready=True,
                      drained=frozenset({"r1"}))
    row = converging(group_dir, running, discovery_sha1=sha1(discovery_file(r1, {"r1"})))
    assert row.action == "none (already as declared)"
    row = converging(group_dir, running, discovery_sha1=sha1(discovery_file(r1, set())))
    assert f"Discovery file {gw.discovery_file} (every replica of pro6000, r1 kept out (drained))" in ops.names()
    (sync,) = [kw for _, kw in ops.queued if kw.get("name", "").startswith("Discovery file")]
    assert sync["commands"] == [drains.command(gw.python, gw.unit, gw.discovery_file, r1, drains.SYNC)]


@pytest.mark.parametrize("key_file_written", [False, True])
def test_a_new_key_restarts_smg_although_its_unit_is_the_same(group_dir, monkeypatch, key_file_written):
    """The key is in no argument: the unit stays the same and the generation (which reads the key file) tells.
    Written: a lost run wrote the new key file, not its restart."""
    gw = load_gateways(group_dir, load_class_specs(group_dir))["gw"]
    cached(gw)
    old = generation(render_gateway_unit(gw, "gw"), render_gateway_secret(KEY), gw.version)
    new_key = "sk-Rotated9876543210"
    monkeypatch.setenv("SGLANG_FLEET_GATEWAY_KEY", new_key)
    ops = Ops(monkeypatch, unchanged={"files.put", *(("secret_file",) if key_file_written else ())})
    listed = discovery_file([Replica("r1", "pro6000", "qwen3.6-27b", "http://10.0.0.1:30000")], set())
    running = gw_host("3.11", "x86_64", "1.13.0", active="active", running=old, generation=old, ready=True)
    row = converging(group_dir, running, discovery_sha1=sha1(listed))
    assert "Restart smg.service (it does not run what its files say)" in ops.names(), ops.names()
    assert row.action.endswith("restart") and ("update key" in row.action) != key_file_written, row.action
    new = generation(render_gateway_unit(gw, "gw"), render_gateway_secret(new_key), gw.version)
    written = [kw["commands"][0] for kind, kw in ops.queued if kw["name"].startswith("Generation")]
    assert written == [write_command(gw.generation_file, new + "\n")]
    assert KEY not in render_gateway_unit(gw, "gw") and new_key not in render_gateway_unit(gw, "gw")


@pytest.mark.parametrize("read, why", [
    ({"running": "0123456789abcdef"}, "a lost run wrote its files, not its restart"),
    ({"active": "failed"}, "smg is not running"),
])
def test_a_gateway_whose_smg_does_not_run_what_its_files_say_is_restarted(group_dir, monkeypatch, read, why):
    gw = load_gateways(group_dir, load_class_specs(group_dir))["gw"]
    cached(gw)
    ops = Ops(monkeypatch, unchanged={"files.put", "secret_file"})
    listed = discovery_file([Replica("r1", "pro6000", "qwen3.6-27b", "http://10.0.0.1:30000")], set())
    wanted = generation(render_gateway_unit(gw, "gw"), render_gateway_secret(KEY), gw.version)
    facts = gw_host("3.11", "x86_64", "1.13.0", **{"active": "active", "running": wanted, "generation": wanted,
                                                       "ready": True, **read})
    row = converging(group_dir, facts, discovery_sha1=sha1(listed))
    assert "Restart smg.service (it does not run what its files say)" in ops.names() and row.action == "restart", why


@pytest.mark.parametrize("facts, reason", [
    (gw_host("", "", "", problem="python '3.x' is not a Python version such as 3.11"),
     "smg: gateway: expected a Python version and a machine name, found python '3.x' is not a Python version"),
    (gw_host("", "x86_64", ""), "smg: gateway: expected a Python at /usr/bin/python3 (gateway.python), found none"),
    (HOST, "gateway.api_key"),
    (gw_host("3.11", "x86_64", "", programs={"curl": False, "flock": True}),
     "smg: host program curl: expected curl (for the readiness gate, the smoke test and the health check; Debian "
     "package curl) installed, found none: `command -v curl` finds nothing"),
])
def test_a_gateway_host_without_what_smg_needs_is_refused(group_dir, monkeypatch, facts, reason):
    if reason == "gateway.api_key":
        monkeypatch.delenv("SGLANG_FLEET_GATEWAY_KEY")
    ops = Ops(monkeypatch)
    row = converging(group_dir, facts)
    assert row.verdict == "REFUSED" and any(reason in r for r in row.reasons), row.reasons
    assert ops.names() == ["Refuse host (preflight failed)"]


# --- smg's wheels ------------------------------------------------------------------------

def downloading(monkeypatch, returncode=0, stderr="", raises=None):
    ran = []

    def run(command, **kwargs):
        ran.append(command)
        if raises:
            raise raises
        dest = command[command.index("--dest") + 1]
        for w in WHEELS:
            (gateway.Path(dest) / w).write_text("")
        return subprocess.CompletedProcess(command, returncode, "", stderr)

    monkeypatch.setattr(common.subprocess, "run", run)
    return ran


def test_wheels_are_downloaded_once_for_the_hosts_python_and_machine(group_dir, monkeypatch):
    gw = load_gateways(group_dir, load_class_specs(group_dir))["gw"]
    ran = downloading(monkeypatch)
    first = gateway.cached_wheels(gw, HOST)
    assert gateway.cached_wheels(gw, HOST) == first and len(ran) == 1
    assert [p.name for p in first] == WHEELS and first[0].parent.name == "smg-1.13.0-cp311-x86_64"
    command = ran[0]
    assert command[command.index("--python-version") + 1] == "3.11" and "smg==1.13.0" in command
    assert [command[i + 1] for i, a in enumerate(command) if a == "--platform"] == gateway.platforms("x86_64")


@pytest.mark.parametrize("kwargs, said", [
    ({"returncode": 1, "stderr": "ERROR: No matching distribution found for smg==1.13.0\n"},
     "could not download smg 1.13.0 for Python 3.11 on x86_64: ERROR: No matching distribution found for smg==1.13.0"),
    ({"returncode": 1}, "could not download smg 1.13.0 for Python 3.11 on x86_64: pip said nothing"),
    ({"raises": subprocess.TimeoutExpired("pip", common.DOWNLOAD_TIMEOUT_S)}, "downloading smg 1.13.0 for Python 3.11 on x86_64 took more than 600 s"),
])
def test_a_download_that_fails_is_a_wheel_error_and_caches_nothing(group_dir, monkeypatch, kwargs, said):
    gw = load_gateways(group_dir, load_class_specs(group_dir))["gw"]
    downloading(monkeypatch, **kwargs)
    with pytest.raises(gateway.WheelError) as e:
        gateway.cached_wheels(gw, HOST)
    assert str(e.value) == said
    assert not any(gateway.CACHE.glob("wheels/*/complete"))


# --- smg's /health -----------------------------------------------------------------------

@pytest.mark.parametrize("answers, ok, polls, reason", [
    (["000", "503", "200"], True, 3, None),
    (["503"], False, gateway.HEALTH_TIMEOUT_S + 2,
     "smg: smg.service: expected /health 200 within 60s, found 503 (journalctl -u smg.service)"),
    ([EOFError()], False, 1, "smg: smg.service's /health: expected an answer within"),
])
def test_the_wait_for_smgs_health(group_dir, monkeypatch, answers, ok, polls, reason):
    gw = load_gateways(group_dir, load_class_specs(group_dir))["gw"]
    clock = Clock()
    monkeypatch.setattr(gateway, "time", clock)
    smg = fake_hosts({"smg": Script({"/health": answers})})["smg"]
    assert gateway._wait_health(None, smg.host, gw) is ok
    assert smg.commands() == [health_command(gw)] * polls
    row = this_run().report.hosts["smg"]
    assert row.verdict == ("OK" if ok else "FAILED") and (reason is None or row.reasons[0].startswith(reason))


def test_the_replicas_roll_after_the_gateway_only_where_the_inventory_has_one(group_dir, monkeypatch):
    ops = Ops(monkeypatch)
    for groups in ({"gw": (["smg"], {})}, {}):
        host = fake_hosts({"smg": Script({})}, None, groups)["smg"].host
        with ctx_state.use(host.state), ctx_host.use(host):
            gateway.converged(str(group_dir))
    assert ops.names() == ["Gateway converged (replicas roll after it)"]
    assert ops.queued[0][1]["function"](None, None) is True


# --- a gateway group behind a floating address ----------------------------------------------------------

FLOATING = ('{"address": "10.0.0.100", "router_id": 51, "password": {"env": "SGLANG_FLEET_VRRP_PASSWORD"}}')
ETH0 = (Interface("eth0", ipaddress.IPv4Interface("10.0.0.13/24")),)


@pytest.fixture
def floating_dir(group_dir, monkeypatch):
    (group_dir / "gw.py").write_text('gateway = {"routes": ["pro6000"], "api_key": {"env": "SGLANG_FLEET_GATEWAY_KEY"}, '
                                     f'"floating": {FLOATING}}}\n')
    monkeypatch.setenv("SGLANG_FLEET_VRRP_PASSWORD", "vrrp1234")
    return group_dir


def test_a_new_gateway_of_a_group_gets_keepalived_and_restarts_in_its_turn(floating_dir, monkeypatch):
    gw = load_gateways(floating_dir, load_class_specs(floating_dir))["gw"]
    cached(gw)
    ops = Ops(monkeypatch)
    row = converging(floating_dir, replace(HOST, vrrp=Vrrp(), interfaces=ETH0))
    names = ops.names()
    assert names[names.index(f"Generation {gw.generation_file} (what a restarted smg runs)") + 1:] == [
        "Install keepalived, nftables (apt)",
        f"Sysctls {floating.SYSCTL_FILE} (ARP and redirects for the floating address)",
        f"keepalived's notify script {floating.NOTIFY}",
        f"keepalived's drop-in {floating.DROPIN} (its track files' directory first)",
        f"VRRP password {floating.AUTH_FILE} (0600, not shown)",
        f"keepalived {floating.CONFIG} (checked with keepalived -t)",
        "Enable and start keepalived.service",
        "systemctl daemon-reload (the unit changed)", "Enable smg.service",
        "Restart smg.service in its turn (the floating address handed over first)"]
    config = next(kw for _, kw in ops.queued if kw["name"].startswith("keepalived /etc"))["commands"]
    assert config[1] == f"keepalived -t -f {staged_path(floating.CONFIG)}" and "priority 200" in config[0]
    assert "interface eth0" in config[0] and "10.0.0.100/24 dev eth0" in config[0]
    password = next(kw for _, kw in ops.queued if kw["name"].startswith("VRRP password"))
    assert password["content"].endswith("auth_pass vrrp1234\n")
    assert "vrrp1234" not in " ".join(str(kw.get("commands", "")) for _, kw in ops.queued)  # never on a command line
    turn = ops.queued[-1][1]
    assert (turn["function"], turn["restart"], turn["group"]) == (gateway_turns.take_turn, True, "gw")
    assert this_run().gateway_turns["gw"].order == ["smg"]
    assert "install keepalived, nftables, update keepalived, update sysctls, restart" in row.action


@pytest.mark.parametrize("interfaces, password, reason", [
    ((Interface("eth0", ipaddress.IPv4Interface("10.9.0.13/24")),), "vrrp1234",
     "group_data/gw.py: gateway.floating.address: 10.0.0.100 is in the subnet of none of its interfaces"),
    (ETH0, "much-too-long", "gateway.floating.password: the value of environment variable SGLANG_FLEET_VRRP_PASSWORD "
                            "is not a usable VRRP password: expected 1 to 8 printable ASCII"),
])
def test_a_gateway_of_a_group_that_cannot_carry_the_address_is_refused(floating_dir, monkeypatch, interfaces,
                                                                        password, reason):
    monkeypatch.setenv("SGLANG_FLEET_VRRP_PASSWORD", password)
    ops = Ops(monkeypatch)
    row = converging(floating_dir, replace(HOST, vrrp=Vrrp(), interfaces=interfaces))
    assert row.verdict == "REFUSED" and any(reason in r for r in row.reasons), row.reasons
    assert ops.names() == ["Refuse host (preflight failed)"] and "much-too-long" not in str(row.reasons)


def test_a_converged_gateway_of_a_group_is_read_in_one_command_and_left_alone(floating_dir, monkeypatch):
    gw = load_gateways(floating_dir, load_class_specs(floating_dir))["gw"]
    cached(gw)
    ops = Ops(monkeypatch, unchanged={"files.put", "secret_file", "systemd.service"})
    listed = discovery_file([Replica("r1", "pro6000", "qwen3.6-27b", "http://10.0.0.1:30000")], set())
    wanted = generation(render_gateway_unit(gw, "gw"), render_gateway_secret(KEY), gw.version)
    on_disk = {floating.SYSCTL_FILE: sha1(render_gateway_sysctl()), floating.NOTIFY: sha1(floating.NOTIFY_PROGRAM),
               floating.AUTH_FILE: sha1(render_vrrp_auth("vrrp1234")), floating.DROPIN: sha1(render_keepalived_dropin()),
               floating.CONFIG: sha1(render_keepalived(gw, "gw", "smg", ["smg"], "eth0", 24))}
    facts = gw_host("3.11", "x86_64", "1.13.0", active="active", running=wanted, generation=wanted, ready=True,
                        vrrp=Vrrp(installed=True, active=True, enabled=True, state="MASTER", holds=True),
                        interfaces=ETH0,
                        files=on_disk)
    row = converging(floating_dir, facts, discovery_sha1=sha1(listed))
    assert not [n for n in ops.names() if n.startswith(("Install", "Sysctls", "keepalived", "VRRP", "Restart",
                                                          "Generation", "Reload", "Enable and start"))]
    assert row.action == "none (already as declared)" and row.verdict == "OK" and not this_run().gateway_turns


def test_a_gateway_a_lost_run_left_held_out_takes_its_turn_first(floating_dir, monkeypatch):
    gw = load_gateways(floating_dir, load_class_specs(floating_dir))["gw"]
    cached(gw)
    Ops(monkeypatch, unchanged={"files.put", "secret_file"})
    wanted = generation(render_gateway_unit(gw, "gw"), render_gateway_secret(KEY), gw.version)
    facts = gw_host("3.11", "x86_64", "1.13.0", active="active", running=wanted, generation=wanted, ready=True,
                        vrrp=Vrrp(installed=True, active=True, state="FAULT", handoff=True, on_loopback=True),
                        interfaces=ETH0)
    row = converging(floating_dir, facts)
    assert "finish a lost run's turn" in row.action and this_run().gateway_turns["gw"].first == {"smg"}


# --- smg's mesh: each gateway's own certificate, read where the deploy runs ------------------------------------

PEM_TEXT = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUX2p0\n-----END CERTIFICATE-----"


def mesh_dir(group_dir, tmp_path, hosts=("smg",)):
    pki = tmp_path / "pki"
    pki.mkdir()
    (pki / "ca.pem").write_text(PEM_TEXT + "\n")
    for h in hosts:
        (pki / f"{h}.crt").write_text(PEM_TEXT + "\n")
        (pki / f"{h}.key").write_text(PEM_TEXT.replace("CERTIFICATE", "PRIVATE KEY") + "\n")
    tls = {"ca_cert": {"file": f"{pki}/ca.pem"}, "cert": {"file": f"{pki}/{{host}}.crt"},
           "key": {"file": f"{pki}/{{host}}.key"}}
    (group_dir / "gw.py").write_text('gateway = {"routes": ["pro6000"], "api_key": {"env": "SGLANG_FLEET_GATEWAY_KEY"}, '
                                     f'"mesh": {{"tls": {tls!r}}}}}\n')
    return pki


def test_a_gateway_in_the_mesh_gets_its_own_certificate_and_restarts_for_a_new_one(group_dir, tmp_path, monkeypatch):
    mesh_dir(group_dir, tmp_path)
    gw = load_gateways(group_dir, load_class_specs(group_dir))["gw"]
    cached(gw)
    ops = Ops(monkeypatch, unchanged={"files.put", "secret_file"})
    row = converging(group_dir, gw_host("3.11", "x86_64", "1.13.0", active="active", ready=True))
    tls = {kw["path"]: kw["content"] for kind, kw in ops.queued if kw["name"].startswith("Mesh TLS")}
    assert tls == {"/etc/smg/smg-mesh.ca.pem": PEM_TEXT + "\n", "/etc/smg/smg-mesh.crt": PEM_TEXT + "\n",
                   "/etc/smg/smg-mesh.key": PEM_TEXT.replace("CERTIFICATE", "PRIVATE KEY") + "\n"}
    unit = next(kw for kind, kw in ops.queued if kind == "files.put")["src"].getvalue()
    assert "--enable-mesh --mesh-port 39527 --mesh-advertise-host smg --mesh-tls-ca-cert" in unit
    assert PEM_TEXT not in str([kw.get("commands") for _, kw in ops.queued])  # only ever uploaded, never a command
    assert "restart" in row.action  # its running smg never started with these


def test_a_gateways_missing_certificate_refuses_it_naming_the_file(group_dir, tmp_path, monkeypatch):
    pki = mesh_dir(group_dir, tmp_path, hosts=())
    ops = Ops(monkeypatch)
    row = converging(group_dir)
    assert row.verdict == "REFUSED" and ops.names() == ["Refuse host (preflight failed)"]
    assert any(f"gateway.mesh.tls.cert: file {pki}/smg.crt cannot be read" in r for r in row.reasons), row.reasons


def test_a_der_certificate_is_refused_naming_the_field_and_pem(group_dir, tmp_path, monkeypatch):
    """A DER file (binary, not UTF-8) is the operator's file's fault, named so; not "could not judge" the host."""
    pki = mesh_dir(group_dir, tmp_path)
    (pki / "smg.crt").write_bytes(b"0\x82\x01\xb30\x82\x01Y\xa0\x03\x02\x01\x02\x02\x14_jt\xff\xfe")
    ops = Ops(monkeypatch)
    row = converging(group_dir)
    assert row.verdict == "REFUSED" and ops.names() == ["Refuse host (preflight failed)"]
    (reason,) = [r for r in row.reasons if "gateway.mesh.tls.cert" in r]
    assert "expected PEM blocks (-----BEGIN ...-----), found binary data (DER?" in reason, row.reasons
    assert "could not judge" not in str(row.reasons)


def test_a_gateways_key_linked_out_of_the_declared_directory_refuses_it_uploading_nothing(group_dir, tmp_path,
                                                                                         monkeypatch):
    """{host} names a file in the declared directory: a link there to another environment's key is not read."""
    pki = mesh_dir(group_dir, tmp_path)
    other = tmp_path / "other-env"
    other.mkdir()
    (other / "gw-1.key").write_text(PEM_TEXT.replace("CERTIFICATE", "PRIVATE KEY") + "\n")
    (pki / "smg.key").unlink()
    (pki / "smg.key").symlink_to(other / "gw-1.key")
    ops = Ops(monkeypatch)
    row = converging(group_dir)
    assert row.verdict == "REFUSED" and ops.names() == ["Refuse host (preflight failed)"]
    assert any(f"gateway.mesh.tls.key: {pki}/smg.key is '{other}/gw-1.key': expected a file in {pki}" in r
               for r in row.reasons), row.reasons
