"""The gateway host: SGLang's model gateway (smg) as a systemd unit, converged like any pyinfra
deploy (each step changes only what differs, a second run changes nothing):

  install    smg's wheels, downloaded once by the controller into its cache for the host's
             Python and machine, uploaded, installed with pip --no-index (no package index needed);
             behind a floating address, Debian's keepalived and nftables (apt)
  configure  the unit, its key (0600, never shown), the discovery file listing the replicas, the
             generation a started smg records; keepalived's config (checked with keepalived -t), its
             password (0600), its notify script, the sysctls of a gateway behind a floating address
  activate   restart only where smg does not run what its files say; wait until it answers /health.
             A group behind a floating address restarts in turns (tasks/gateway_turns.py): the
             gateway holding the address hands it over first, so no request fails

The replicas' rolling rollout (tasks/rolling.py) then reads its /workers and rewrites the
discovery file as it takes replicas out and puts them back.
"""

from __future__ import annotations

import os
import shlex
import time
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.api import operation
from pyinfra.facts.files import Sha1File
from pyinfra.operations import files, python, server, systemd

from facts.gateway import GatewayFacts
from fleet.core import bounds, hosts
from fleet.gateway import floating
from fleet.turns import drains
from fleet.gateway.floating import interface_for
from fleet.gateway.models import Gateway, pem_problem, read_pem_file
from fleet.gateway.smg import GatewayHost, MeshNode, discovery_file, generation, health_command, mesh_file
from fleet.spec.load import SpecError, gateway_files, load_class_specs, load_gateways, monitoring_files
from fleet.core.layout import staged_path
from fleet.core.outcome import HostVerdict
from fleet.rollout.render import auth_header, render_gateway_secret, render_gateway_sysctl, render_gateway_unit, \
    render_keepalived, render_keepalived_dropin, render_vrrp_auth
from fleet.rollout.guards import program_violations
from fleet.rollout.prerequisites import gateway_programs
from fleet.rollout.commands import sha1, write_command
from fleet.spec.secrets import SecretError, for_host, read_key
from adapter import run as runs
from tasks import gateway_turns
from tasks.common import CACHE, HostLost, WheelError, downloaded, fail, run
from tasks.install import secret_commands
from tasks.preflight import contained, refused

HEALTH_TIMEOUT_S = 60  # smg answers /health within seconds of its start


def is_gateway(group_dir: str = "group_data") -> bool:
    return any(g in gateway_files(Path(group_dir)) for g in host.groups)


def converge(group_dir: str = "group_data") -> None:
    report = runs.of(host.state).report.host(host.name)
    report.gpu_class = "gateway"
    contained(report, "gateway", lambda: _converge(report, group_dir))


def _converge(report, group_dir: str) -> None:
    try:
        group = next(g for g in host.groups if g in gateway_files(Path(group_dir)))
        gw = load_gateways(Path(group_dir), load_class_specs(Path(group_dir)))[group]
        where = f"{group_dir}/{group}.py"
        key = read_key(gw.api_key, where, "gateway.api_key") if gw.api_key else None
        password = read_key(gw.floating.password, where, "gateway.floating.password", problem=floating.password_problem,
                            what="VRRP password") if gw.floating else None
        mesh_tls = _mesh_tls(gw, where)
        facts = host.get_fact(GatewayFacts, gw=gw, group=group)
        if facts.problem:
            what = "a Python version, a machine name and keepalived's state" if gw.floating else \
                "a Python version and a machine name"
            raise WheelError(f"expected {what}, found {facts.problem}")
        lacking = program_violations(host.name, gateway_programs(gw.python, gw.floating is not None), facts.programs)
        if lacking:  # before anything is installed or restarted
            return refused(report, [str(v) for v in lacking])
        wheels = cached_wheels(gw, facts) if facts.smg != gw.version else []  # a cold cache: fetched only if needed
        iface = None
        if gw.floating is not None:
            iface, why = interface_for(gw.floating.address, list(facts.interfaces))
            if iface is None:
                return refused(report, [f"{host.name}: {where}: gateway.floating.address: {why}"])
    except (SpecError, SecretError) as e:
        return refused(report, e.problems)
    except WheelError as e:
        return refused(report, [f"{host.name}: gateway: {e}"])

    installed = None
    if facts.smg != gw.version:  # the wheels only where pip needs them: a sync reads each one's checksum
        files.sync(name=f"smg {gw.version}'s wheels, from the controller's cache", src=str(wheels[0].parent),
                   dest=gw.wheels_dir, exclude="complete", mode="644")
        installed = server.shell(name=f"Install smg {gw.version} (pip --no-index)", commands=[install_command(gw, wheels)])
    unit_text = render_gateway_unit(gw, group, _mesh_node(gw, group))
    unit = files.put(name=f"Unit {gw.unit_file}", src=StringIO(unit_text), dest=gw.unit_file, mode="644")
    files.directory(name="smg's configuration directory", path=os.path.dirname(gw.discovery_file), mode="755")
    key_file = header = listed = None
    if key is not None:
        key_file = secret_file(name=f"Key {gw.secret_file} (0600, not shown)", path=gw.secret_file,
                               content=render_gateway_secret(key))
        header = secret_file(name=f"Header {gw.declared_auth_header_file} (0600, not shown)",
                             path=gw.declared_auth_header_file,
                             content=auth_header(key))
    mesh_files = [secret_file(name=f"Mesh TLS {path} (0600, not shown)", path=path, content=text)
                  for path, text in mesh_tls.items()]
    replicas = hosts.replicas(host.state.inventory, gw, Path(group_dir))
    content = discovery_file(replicas, out=facts.drained)  # a drain of another run or a make tune stays
    if host.get_fact(Sha1File, path=gw.discovery_file) != sha1(content):
        kept = f", {', '.join(sorted(facts.drained))} kept out (drained)" if facts.drained else ""
        listed = server.shell(name=f"Discovery file {gw.discovery_file} (every replica of {', '.join(gw.routes)}{kept})",
                              commands=[drains.command(gw.python, gw.unit, gw.discovery_file, replicas, drains.SYNC)])
    wanted = generation(unit_text, "".join([render_gateway_secret(key) if key is not None else "",
                                            *mesh_tls.values()]), gw.version)
    if facts.generation != wanted:
        server.shell(name=f"Generation {gw.generation_file} (what a restarted smg runs)",
                     commands=[write_command(gw.generation_file, wanted + "\n")])
    vrrp = _floating(gw, group, facts, iface, password) if gw.floating is not None else []
    systemd.daemon_reload(name="systemctl daemon-reload (the unit changed)", _if=unit.did_change)
    systemd.service(name=f"Enable {gw.service_unit}", service=gw.service_unit, enabled=True)
    restart_for = [op for op in (unit, installed, key_file, *mesh_files) if op is not None]
    restarts = any(op.will_change for op in restart_for) or facts.running != wanted or facts.active != "active"
    changes = [what for what, op in ((f"install smg {gw.version}", installed), (f"update {gw.service_unit}", unit),
                                     ("update key", key_file), ("update auth header", header),
                                     ("update discovery file", listed)) if op is not None and op.will_change]
    changes += ["update mesh TLS"] if any(op.will_change for op in mesh_files) else []
    held = facts.vrrp is not None and (facts.vrrp.handoff or facts.vrrp.on_loopback)  # a lost run left its turn
    report.action = ", ".join(changes + vrrp + (["restart"] if restarts else [])
                              + (["finish a lost run's turn"] if held and not restarts else [])) \
        or "none (already as declared)"
    report.verdict = HostVerdict.PASSED_PREFLIGHT
    if gw.floating is None:
        if restarts:
            systemd.service(name=f"Restart {gw.service_unit} (it does not run what its files say)",
                            service=gw.service_unit, restarted=True)
        python.call(name=f"Wait for {gw.service_unit} to answer /health", function=_wait_health, gw=gw)
    elif restarts or held:
        gateway_turns.enlist(host, group, first=held)
        python.call(name=f"Restart {gw.service_unit} in its turn (the floating address handed over first)",
                    function=gateway_turns.take_turn, gw=gw, group=group, restart=restarts)
    elif facts.ready:
        report.verdict = HostVerdict.OK  # read ready in the facts' one command: nothing to wait for
    else:
        python.call(name=f"Wait for {gw.service_unit} to answer /health", function=_wait_health, gw=gw)


def _mesh_node(gw: Gateway, group: str) -> MeshNode | None:
    """This gateway in smg's mesh: its inventory address, its group's others' (gateway.mesh)."""
    if gw.mesh is None:
        return None
    address = {h.name: hosts.address(h) for h in host.state.inventory if group in h.groups}
    return MeshNode(address[host.name], tuple(a for name, a in address.items() if name != host.name))


def _mesh_tls(gw: Gateway, where: str) -> dict[str, str]:
    """The mesh's CA certificate, this gateway's certificate and key, read where the deploy runs (SecretError
    naming the field and source, never the value): path on the host -> content."""
    tls = gw.mesh.tls if gw.mesh is not None else None
    if tls is None:
        return {}
    read = {}
    for field, which, source in (("ca_cert", "ca.pem", tls.ca_cert), ("cert", "crt", tls.cert), ("key", "key", tls.key)):
        name = f"gateway.mesh.tls.{field}"
        read[mesh_file(gw, which)] = read_key(for_host(source, host.name, where, name), where, name,
                                              problem=pem_problem, what="certificate or key",
                                              read_file=read_pem_file) + "\n"
    return read


def _floating(gw: Gateway, group: str, facts: GatewayHost, iface, password: str) -> list[str]:
    """keepalived and what the handoff needs, converged where they differ; the changes, in the row's words."""
    members = [h.name for h in host.state.inventory if group in h.groups]
    config = render_keepalived(gw, group, host.name, members, iface.name, iface.network.network.prefixlen)
    wanted = {floating.SYSCTL_FILE: render_gateway_sysctl(), floating.NOTIFY: floating.NOTIFY_PROGRAM,
              floating.DROPIN: render_keepalived_dropin(), floating.CONFIG: config}
    differ = {path for path, text in wanted.items() if facts.files.get(path) != sha1(text)}
    if not facts.vrrp.installed:
        server.shell(name=f"Install {', '.join(floating.PACKAGES)} (apt)",
                     commands=["DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
                               f"apt-get install -y -qq --no-install-recommends {' '.join(floating.PACKAGES)}"])
    if floating.SYSCTL_FILE in differ:
        server.shell(name=f"Sysctls {floating.SYSCTL_FILE} (ARP and redirects for the floating address)",
                     commands=[write_command(floating.SYSCTL_FILE, wanted[floating.SYSCTL_FILE]),
                               f"sysctl -q -p {floating.SYSCTL_FILE}"])
    if floating.NOTIFY in differ:
        server.shell(name=f"keepalived's notify script {floating.NOTIFY}",
                     commands=[f"mkdir -p {os.path.dirname(floating.NOTIFY)}",
                               write_command(floating.NOTIFY, wanted[floating.NOTIFY]), f"chmod 755 {floating.NOTIFY}"])
    if floating.DROPIN in differ:
        server.shell(name=f"keepalived's drop-in {floating.DROPIN} (its track files' directory first)",
                     commands=[f"mkdir -p {os.path.dirname(floating.DROPIN)} {floating.RUN_DIR}",
                               write_command(floating.DROPIN, wanted[floating.DROPIN]), "systemctl daemon-reload"])
    auth = render_vrrp_auth(password)
    if facts.files.get(floating.AUTH_FILE) != sha1(auth):
        secret_file(name=f"VRRP password {floating.AUTH_FILE} (0600, not shown)", path=floating.AUTH_FILE, content=auth)
        differ.add(floating.AUTH_FILE)
    if floating.CONFIG in differ:  # checked by keepalived itself before it goes live
        staged = staged_path(floating.CONFIG)
        server.shell(name=f"keepalived {floating.CONFIG} (checked with keepalived -t)",
                     commands=[write_command(staged, wanted[floating.CONFIG]), f"keepalived -t -f {staged}",
                               f"mv -f {staged} {floating.CONFIG}"])
    if not (facts.vrrp.active and facts.vrrp.enabled):
        systemd.service(name=f"Enable and start {floating.UNIT}", service=floating.UNIT, running=True, enabled=True)
    if differ & {floating.CONFIG, floating.AUTH_FILE} and facts.vrrp.active:
        systemd.service(name=f"Reload {floating.UNIT} (its configuration changed)", service=floating.UNIT,
                        reloaded=True)
    return [what for what, did in ((f"install {', '.join(floating.PACKAGES)}", not facts.vrrp.installed),
                                   ("update keepalived", bool(differ & {floating.CONFIG, floating.AUTH_FILE})),
                                   ("update sysctls", floating.SYSCTL_FILE in differ)) if did]


def converged(group_dir: str = "group_data") -> None:
    """One step on every host, after the gateway's own: pyinfra orders a step shared by all hosts
    after every earlier step of each, so the replicas' rollout begins once smg is converged, and the
    monitoring host's Alertmanager, which silences each turn. An inventory without either needs none (an
    operation costs each host its bookkeeping)."""
    first = {*gateway_files(Path(group_dir)), *monitoring_files(Path(group_dir))}
    if any(g in first for h in host.state.inventory for g in h.groups):
        python.call(name="Gateway converged (replicas roll after it)", function=lambda state, host: True)


@operation()
def secret_file(path: str, content: str):
    """A 0600 root file whose content is never shown (no diff): written only when its sha1 differs.
    It goes through the same upload as the replicas' secrets (sudo: the login user's 0700 directory)."""
    if host.get_fact(Sha1File, path=path) == sha1(content):
        host.noop(f"{path} is as declared")
        return
    yield from secret_commands(path, content)


def install_command(gw: Gateway, wheels: list[Path]) -> str:
    """A venv without pip (Debian's python3 has no ensurepip), then pip run from its own wheel."""
    pip = next(w.name for w in wheels if w.name.startswith("pip-"))
    venv, found = shlex.quote(gw.venv), shlex.quote(gw.wheels_dir)
    return (f"set -e; test -x {venv}/bin/python || {shlex.quote(gw.python)} -m venv --without-pip {venv}; "
            f"{venv}/bin/python {found}/{pip}/pip install --quiet --disable-pip-version-check --no-index "
            f"--find-links {found} smg=={gw.version}")


def platforms(machine: str) -> list[str]:
    """manylinux tags a host with a current glibc takes (smg's own is manylinux_2_17)."""
    return [f"manylinux{tag}_{machine}" for tag in ("1", "2010", "2014", "_2_17", "_2_28")]


def cached_wheels(gw: Gateway, facts: GatewayHost) -> list[Path]:
    """smg, its dependencies and pip, for the host's Python and machine: downloaded once, kept in the
    controller's cache."""
    if not facts.python or not facts.machine:
        raise WheelError(f"expected a Python at {gw.python} (gateway.python), found none")
    return downloaded(CACHE / "wheels" / f"smg-{gw.version}-{facts.python_tag}-{facts.machine}",
                      ["--only-binary=:all:", "--python-version", facts.python, "--implementation", "cp",
                       *[a for p in platforms(facts.machine) for a in ("--platform", p)], f"smg=={gw.version}", "pip"],
                      f"smg {gw.version} for Python {facts.python} on {facts.machine}")


def _wait_health(state, host, gw: Gateway) -> bool:
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while True:
        try:
            _, out = run(host, health_command(gw), bounds.gateway(f"{gw.service_unit}'s /health"))
        except HostLost as e:
            return fail(host, e.why)
        if out.strip() == "200":
            runs.of(host.state).report.host(host.name).verdict = HostVerdict.OK
            return True
        if time.monotonic() > deadline:
            return fail(host, f"{host.name}: {gw.service_unit}: expected /health 200 within {HEALTH_TIMEOUT_S}s, "
                              f"found {out.strip() or 'no answer'} (journalctl -u {gw.service_unit})")
        time.sleep(1)
