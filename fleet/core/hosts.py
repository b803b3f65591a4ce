"""Which hosts are what, read off the inventory (pyinfra's hosts: their names, groups and data):
a host's GPU class, the gateway that routes a class, that gateway's replicas. The deploy, make
status, make verify and make tune all look them up here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from fleet.rollout.gate import url_host
from fleet.gateway.models import Gateway
from fleet.gateway.smg import Replica
from fleet.spec.load import SpecError, class_files, gateway_files, load_class_specs, load_gateways, validate_host
from fleet.monitoring.config import bundle
from fleet.monitoring.models import Monitoring
from fleet.monitoring.rules import TUNING, Scraped, floors, gateway_target, replica_target


def address(host) -> str:
    """Where pyinfra connects to the host (its ssh_hostname, else its inventory name): where the others reach it."""
    return host.data.get("ssh_hostname") or host.name


def gpu_classes(host, group_dir: Path) -> list[str]:
    """The host's groups that are GPU classes (group_data/<class>.py): exactly one, for a GPU host."""
    return [g for g in host.groups if g in class_files(group_dir)]


def gateway_group(host, group_dir: Path) -> str:
    """The host's gateway group (group_data/<group>.py declares `gateway`), or '' for none."""
    return next((g for g in host.groups if g in gateway_files(group_dir)), "")


def replicas(inventory, gw: Gateway, group_dir: Path) -> list[Replica]:
    """Every inventory host of the classes `gw` routes (limited or not), in inventory order, at the
    address pyinfra connects to."""
    out = []
    for h in inventory:
        cls = next((g for g in h.groups if g in gw.routes), None)
        if cls is None:
            continue
        spec = validate_host(f"{group_dir}/{cls}.py", h.data.dict())
        url = f"http://{url_host(address(h))}:{spec.service.port}"
        out.append(Replica(h.name, cls, spec.service.served_model_name, url))
    return out


def scrape_targets(inventory, group_dir: Path) -> list[Scraped]:
    """What the monitoring host scrapes: every replica of every class in the inventory (limited or not),
    and every gateway's smg, at the address pyinfra connects to."""
    classes = load_class_specs(group_dir)
    gateways = load_gateways(group_dir, classes)
    out = []
    for h in inventory:
        for cls in gpu_classes(h, group_dir):
            out.append(replica_target(h.name, address(h), cls, validate_host(f"{group_dir}/{cls}.py", h.data.dict())))
        if group := gateway_group(h, group_dir):
            out.append(gateway_target(h.name, address(h), group, gateways[group].prometheus_port))
    return out


def monitoring_bundle(inventory, group_dir: Path, mon: Monitoring,
                      urls: Mapping[str, str]) -> tuple[dict[str, str], list[Scraped]]:
    """The monitoring host's configuration for this inventory (fleet.monitoring.config.bundle), and the targets in it:
    the deploy writes it, make status compares it with the host's. urls: fleet.monitoring.config.webhook_urls'."""
    classes = load_class_specs(group_dir)
    scraped = scrape_targets(inventory, group_dir)
    return bundle(mon, scraped, classes, floors(mon, classes, TUNING),
                  sorted({t.labels["gateway"] for t in scraped if t.job == "smg"}), urls), scraped


@dataclass(frozen=True)
class Routing:
    """The gateway in the inventory that routes a class."""

    spec: Gateway
    group: str  # its gateway group (group_data/<group>.py)
    hosts: list  # every host of its group, inventory order (pyinfra's Hosts): one, or the group behind gateway.floating
    replicas: list[Replica]  # of every class it routes

    @property
    def name(self) -> str:
        return group_name([h.name for h in self.hosts])


def group_name(names: list[str]) -> str:
    """A gateway group in messages: `gw-1`, `gw-1 and gw-2`, `gw-1, gw-2 and gw-3`."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def routing(inventory, gpu_class: str, group_dir: Path) -> Routing | None:
    """The gateway that routes `gpu_class`, or None: none in this inventory does, or group_data does
    not load (the inventory's own check refuses that run)."""
    try:
        gateways = load_gateways(group_dir, load_class_specs(group_dir))
    except SpecError:
        return None
    for group, gw in gateways.items():
        hosts = [h for h in inventory if group in h.groups]
        if gpu_class in gw.routes and hosts:
            return Routing(gw, group, hosts, replicas(inventory, gw, group_dir))
    return None
