"""`make verify`: testinfra checks of every host in an inventory against its declared spec.

The inventory is the same file pyinfra uses (--inventory; `make verify` passes INVENTORY,
default inventory.py), read by pyinfra's own loader, so each host's connection data is
what a deploy uses: its user, key, port, host name, and sudo (from the inventory or
group_data). The spec is the same group_data.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra

from fleet.gateway import Gateway, Replica
from fleet.spec import ClassSpec
from ops.fleet import Fleet
from tasks.rolling import replicas


@dataclass
class Target:
    name: str
    group: str
    spec: ClassSpec
    data: dict


@dataclass
class GatewayTarget:
    name: str
    group: str
    gw: Gateway
    data: dict
    replicas: list[Replica]  # every host of the classes it routes


@functools.cache
def load_targets(inventory: str) -> tuple[list[Target], list[GatewayTarget]]:
    fleet = Fleet(inventory)
    targets, gateways = [], []
    for host in fleet.hosts:
        group, gw = fleet.gateway_of(host)
        if gw is not None:
            gateways.append(GatewayTarget(host.name, group, gw, host.data.dict(), replicas(fleet.state, gw)))
            continue
        group, spec, problems = fleet.spec_of(host)
        if spec is None:
            raise pytest.UsageError("\n".join(problems))
        targets.append(Target(host.name, group, spec, host.data.dict()))
    return sorted(targets, key=lambda t: t.name), gateways


def ssh_config_for(targets: list[Target | GatewayTarget], path: Path) -> None:
    """One ssh_config stanza per host from its pyinfra data, for testinfra's paramiko backend."""
    lines = []
    for t in targets:
        d = t.data
        lines += [f"Host {t.name}", f"  HostName {d.get('ssh_hostname') or t.name}", f"  User {d.get('ssh_user') or 'root'}"]
        if d.get("ssh_port"):
            lines.append(f"  Port {d['ssh_port']}")
        if d.get("ssh_key"):
            lines.append(f"  IdentityFile {d['ssh_key']}")
        if str(d.get("ssh_strict_host_key_checking", "")).lower() == "no":
            lines.append("  StrictHostKeyChecking no")
    path.write_text("\n".join(lines) + "\n")


def pytest_ignore_collect(collection_path, config):
    """The gateway's checks only where the inventory has a gateway (else pytest reports them skipped)."""
    if collection_path.name == "test_gateway.py" and config.getoption("--inventory", None):
        return not load_targets(config.getoption("--inventory"))[1]
    return None


def pytest_generate_tests(metafunc):
    for name, i in (("target", 0), ("gateway", 1)):
        if name in metafunc.fixturenames:
            targets = load_targets(metafunc.config.getoption("--inventory"))[i]
            metafunc.parametrize(name, targets, ids=[t.name for t in targets], scope="module")


def _connect(target, tmp_path_factory):
    cfg = tmp_path_factory.mktemp("ssh") / "config"
    ssh_config_for([target], cfg)
    # as the deploy: root through sudo where the host's data says so
    return testinfra.get_host(f"paramiko://{target.name}", ssh_config=str(cfg), sudo=bool(target.data.get("_sudo")))


@pytest.fixture(scope="module")
def node(target, tmp_path_factory):
    return _connect(target, tmp_path_factory)


@pytest.fixture(scope="module")
def gw_node(gateway, tmp_path_factory):
    return _connect(gateway, tmp_path_factory)
