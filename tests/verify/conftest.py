"""`make verify`: testinfra checks of every host in an inventory against its declared spec.

The inventory is the same file pyinfra uses (--inventory; `make verify` passes INVENTORY,
default inventory.py); the
spec is the same group_data. SSH settings come from the inventory's host data.
"""

from __future__ import annotations

import runpy
from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra

from fleet.groupdata import check_inventory, class_files, inventory_groups
from fleet.spec import ClassSpec

# Like pyinfra: group_data/ of the directory it runs in.
GROUP_DATA = Path("group_data")


@dataclass
class Target:
    name: str
    group: str
    spec: ClassSpec
    data: dict


def load_targets(inventory: str) -> list[Target]:
    groups, hosts_data = inventory_groups(runpy.run_path(inventory))
    specs = check_inventory(groups, hosts_data, GROUP_DATA)
    classes = class_files(GROUP_DATA)
    targets = []
    for group, hosts in groups.items():
        if group in classes:
            targets += [Target(h, group, specs[group], hosts_data[h]) for h in hosts]
    return sorted(targets, key=lambda t: t.name)


def ssh_config_for(targets: list[Target], path: Path) -> None:
    """One ssh_config stanza per host from its pyinfra data, for testinfra's paramiko backend."""
    lines = []
    for t in targets:
        d = t.data
        lines += [f"Host {t.name}", f"  HostName {d.get('ssh_hostname', t.name)}", f"  User {d.get('ssh_user', 'root')}"]
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
    return testinfra.get_host(f"paramiko://{target.name}", ssh_config=str(cfg))
