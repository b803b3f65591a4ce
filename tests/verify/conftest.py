"""`make verify`: testinfra checks of every host in an inventory against its declared spec.

The inventory is the same file pyinfra uses (--inventory; `make verify` passes INVENTORY,
default inventory.py), read by pyinfra's own loader, and every command goes through pyinfra's
own connection to the host (ops/verify_backend.py): its user, key, port, host name, known
hosts, ~/.ssh/config and sudo are what a deploy uses. The spec is the same group_data.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest

from fleet.gateway.models import Gateway
from fleet.gateway.smg import Replica
from fleet.spec import ClassSpec
from ops.fleet import GROUP_DIR, Fleet
from ops.verify_backend import as_node
from fleet.core.hosts import replicas, scrape_targets
from fleet.monitoring.models import Monitoring
from fleet.monitoring.rules import Scraped


@dataclass
class Target:
    name: str
    group: str
    spec: ClassSpec
    host: object  # pyinfra's Host, not yet connected


@dataclass
class GatewayTarget:
    name: str
    group: str
    gw: Gateway
    host: object  # pyinfra's Host, not yet connected
    replicas: list[Replica]  # every host of the classes it routes


@dataclass
class MonitoringTarget:
    name: str
    group: str
    mon: Monitoring
    host: object  # pyinfra's Host, not yet connected
    scraped: list[Scraped]  # every replica and gateway of the inventory


@functools.cache
def fleet_of(inventory: str) -> Fleet:
    try:
        return Fleet(inventory)
    except SystemExit as e:  # its footer's check refused it, naming each problem: pytest's traceback would bury them
        pytest.exit(f"{inventory}: refused by its check (above); no host was contacted", returncode=e.code)


@functools.cache
def load_targets(inventory: str) -> tuple[list[Target], list[GatewayTarget], list[MonitoringTarget]]:
    fleet = fleet_of(inventory)
    targets, gateways, monitors = [], [], []
    for host in fleet.hosts:
        group, mon = fleet.monitoring_of(host)
        if mon is not None:
            monitors.append(MonitoringTarget(host.name, group, mon, host, scrape_targets(fleet.state.inventory, GROUP_DIR)))
            continue
        group, gw = fleet.gateway_of(host)
        if gw is not None:
            gateways.append(GatewayTarget(host.name, group, gw, host, replicas(fleet.state.inventory, gw, GROUP_DIR)))
            continue
        group, spec, problems = fleet.spec_of(host)
        if spec is None:
            raise pytest.UsageError("\n".join(problems))
        targets.append(Target(host.name, group, spec, host))
    return sorted(targets, key=lambda t: t.name), gateways, monitors


def pytest_ignore_collect(collection_path, config):
    """The gateway's and monitoring host's checks only where the inventory has one (else pytest reports them
    skipped)."""
    which = {"test_gateway.py": 1, "test_monitoring.py": 2, "test_floating.py": 1}.get(collection_path.name)
    if which is not None and config.getoption("--inventory", None):
        found = load_targets(config.getoption("--inventory"))[which]
        return not (floating_groups(found) if collection_path.name == "test_floating.py" else found)
    return None


@dataclass
class FloatingGroup:
    group: str
    gw: Gateway
    members: list[GatewayTarget]  # inventory order


def floating_groups(gateways: list[GatewayTarget]) -> list[FloatingGroup]:
    """The gateway groups behind a floating address, each with its gateways."""
    groups: dict[str, FloatingGroup] = {}
    for g in gateways:
        if g.gw.floating is not None:
            groups.setdefault(g.group, FloatingGroup(g.group, g.gw, [])).members.append(g)
    return list(groups.values())


def pytest_generate_tests(metafunc):
    for name, i in (("target", 0), ("gateway", 1), ("monitor", 2)):
        if name in metafunc.fixturenames:
            targets = load_targets(metafunc.config.getoption("--inventory"))[i]
            metafunc.parametrize(name, targets, ids=[t.name for t in targets], scope="module")
    if "mesh_gateway" in metafunc.fixturenames:
        meshed = [g for g in load_targets(metafunc.config.getoption("--inventory"))[1]
                  if g.gw.mesh is not None and g.gw.mesh.tls is not None]
        metafunc.parametrize("mesh_gateway", meshed, ids=[g.name for g in meshed], scope="module")
    if "floating_group" in metafunc.fixturenames:
        groups = floating_groups(load_targets(metafunc.config.getoption("--inventory"))[1])
        metafunc.parametrize("floating_group", groups, ids=[g.group for g in groups], scope="module")


@pytest.fixture(scope="session")
def fleet(pytestconfig):
    fleet = fleet_of(pytestconfig.getoption("--inventory"))
    yield fleet
    fleet.close()


def _connect(fleet: Fleet, target):
    why = fleet.connect(target.host)
    if why:
        pytest.fail(f"{target.name}: cannot connect: {why}", pytrace=False)
    return as_node(target.host)


@pytest.fixture(scope="module")
def node(target, fleet):
    return _connect(fleet, target)


@pytest.fixture(scope="module")
def gw_node(gateway, fleet):
    return _connect(fleet, gateway)


@pytest.fixture(scope="module")
def mon_node(monitor, fleet):
    return _connect(fleet, monitor)


@pytest.fixture(scope="module")
def mesh_node(mesh_gateway, fleet):
    return _connect(fleet, mesh_gateway)


@pytest.fixture(scope="module")
def floating_nodes(floating_group, fleet):
    """(name, testinfra host) of each gateway of the group, inventory order."""
    return [(m.name, _connect(fleet, m)) for m in floating_group.members]
