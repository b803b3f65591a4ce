"""`make verify`: testinfra checks of every host in an inventory against its declared spec.

The inventory is the same file pyinfra uses (--inventory; `make verify` passes INVENTORY,
default inventory.py), read by pyinfra's own loader, so each host's connection data is
what a deploy uses: its user, key, port, host name, and sudo (from the inventory or
group_data). The spec is the same group_data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra

from fleet.spec import ClassSpec
from ops.fleet import Fleet


@dataclass
class Target:
    name: str
    group: str
    spec: ClassSpec
    data: dict


def load_targets(inventory: str) -> list[Target]:
    fleet = Fleet(inventory)
    targets = []
    for host in fleet.hosts:
        group, spec, problems = fleet.spec_of(host)
        if spec is None:
            raise pytest.UsageError("\n".join(problems))
        targets.append(Target(host.name, group, spec, host.data.dict()))
    return sorted(targets, key=lambda t: t.name)


def ssh_config_for(targets: list[Target], path: Path) -> None:
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


def pytest_generate_tests(metafunc):
    if "target" in metafunc.fixturenames:
        targets = load_targets(metafunc.config.getoption("--inventory"))
        metafunc.parametrize("target", targets, ids=[t.name for t in targets], scope="module")


@pytest.fixture(scope="module")
def node(target, tmp_path_factory):
    cfg = tmp_path_factory.mktemp("ssh") / "config"
    ssh_config_for([target], cfg)
    # as the deploy: root through sudo where the host's data says so
    return testinfra.get_host(f"paramiko://{target.name}", ssh_config=str(cfg), sudo=bool(target.data.get("_sudo")))
