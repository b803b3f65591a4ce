"""The gateway host: SGLang's model gateway (smg) as a systemd unit, converged like any pyinfra
deploy (each step changes only what differs, a second run changes nothing):

  install    smg's wheels, downloaded once by the controller into its cache for the host's
             Python and machine, uploaded, installed with pip --no-index (no package index needed)
  configure  the unit, its key (0600, never shown), the discovery file listing the replicas
  activate   restart only if the unit, key or smg changed; wait until it answers /health

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
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.facts.files import Sha1File
from pyinfra.operations import files, python, server, systemd
from pyinfra.operations.util import any_changed

from facts.gateway import GatewayFacts
from fleet import hosts
from fleet import bounds
from fleet.gateway import Gateway, GatewayHost, discovery_file, health_command
from fleet.groupdata import SpecError, gateway_files, load_class_specs, load_gateways, monitoring_files
from fleet.layout import staged_path
from fleet.outcome import HostVerdict
from fleet.render import auth_header, render_gateway_secret, render_gateway_unit
from fleet.rollout import sha1, write_command
from fleet.secrets import SecretError, read_key
from adapter import run as runs
from tasks.common import CACHE, HostLost, WheelError, downloaded, fail, run
from tasks.install import upload
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
        key = read_key(gw.api_key, f"{group_dir}/{group}.py", "gateway.api_key") if gw.api_key else None
        facts = host.get_fact(GatewayFacts, python=gw.python, venv=gw.venv)
        wheels = cached_wheels(gw, facts) if facts.smg != gw.version else []  # a cold cache: fetched only if needed
    except (SpecError, SecretError) as e:
        return refused(report, e.problems)
    except WheelError as e:
        return refused(report, [f"{host.name}: gateway: {e}"])

    installed = None
    if facts.smg != gw.version:  # the wheels only where pip needs them: a sync reads each one's checksum
        files.sync(name=f"smg {gw.version}'s wheels, from the controller's cache", src=str(wheels[0].parent),
                   dest=gw.wheels_dir, exclude="complete", mode="644")
        installed = server.shell(name=f"Install smg {gw.version} (pip --no-index)", commands=[install_command(gw, wheels)])
    unit = files.put(name=f"Unit {gw.unit_file}", src=StringIO(render_gateway_unit(gw, group)), dest=gw.unit_file,
                     mode="644")
    files.directory(name="smg's configuration directory", path=os.path.dirname(gw.discovery_file), mode="755")
    key_file = header = listed = None
    if key is not None:
        key_file = secret_file(name=f"Key {gw.secret_file} (0600, not shown)", path=gw.secret_file,
                               content=render_gateway_secret(key))
        header = secret_file(name=f"Header {gw.auth_header_file} (0600, not shown)", path=gw.auth_header_file,
                             content=auth_header(key))
    content = discovery_file(hosts.replicas(host.state.inventory, gw, Path(group_dir)), out=set())
    if host.get_fact(Sha1File, path=gw.discovery_file) != sha1(content):
        listed = server.shell(name=f"Discovery file {gw.discovery_file} (every replica of {', '.join(gw.routes)})",
                              commands=[write_command(gw.discovery_file, content)])
    systemd.daemon_reload(name="systemctl daemon-reload (the unit changed)", _if=unit.did_change)
    systemd.service(name=f"Enable and start {gw.service_unit}", service=gw.service_unit, running=True, enabled=True)
    restart_for = [op for op in (unit, installed, key_file) if op is not None]
    systemd.service(name=f"Restart {gw.service_unit} (its unit, key or smg changed)", service=gw.service_unit,
                    restarted=True, _if=any_changed(*restart_for))
    changes = [what for what, op in ((f"install smg {gw.version}", installed), (f"update {gw.service_unit}", unit),
                                     ("update key", key_file), ("update auth header", header),
                                     ("update discovery file", listed)) if op is not None and op.will_change]
    restarts = any(op.will_change for op in restart_for)
    report.action = ", ".join(changes + (["restart"] if restarts else [])) or "none (already as declared)"
    report.verdict = "passed preflight"
    python.call(name=f"Wait for {gw.service_unit} to answer /health", function=_wait_health, gw=gw)


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
    staged = shlex.quote(staged_path(path))
    yield StringCommand(f"install -m 0600 /dev/null {staged}")
    yield FunctionCommand(upload, (path, content, True), {})
    yield StringCommand(f"mv -f {staged} {shlex.quote(path)}")


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
    if facts.problem:
        raise WheelError(f"expected a Python version and a machine name, found {facts.problem}")
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
