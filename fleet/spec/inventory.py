"""The inventory's use of group_data, checked before anything connects: host names that reach files and
commands, each host in one GPU class or one gateway or monitoring group, one host per such group (more only
behind a gateway's floating address), no spec set per host or group; and the call an inventory file ends with.
Apart from loading group_data (fleet/spec/load.py), which needs no inventory.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fleet.gateway import floating
from fleet.gateway.models import key_problems
from fleet.monitoring.rules import scrape_problems
from fleet.spec import SPEC_KEYS, ClassSpec, host_name_problem, shown_name
from fleet.spec.load import SpecError, load_class_specs, load_gateways, load_monitoring, spec_data


def _sets_the_spec(kind: str, name: str, data: dict) -> str | None:
    overrides = sorted(set(spec_data(data)) & set(SPEC_KEYS))
    if not overrides:
        return None
    return (f"inventory: {kind} {name} sets {', '.join(overrides)}; the service is declared per GPU class "
            f"in group_data/, not per {kind}")


def name_problems(groups: dict[str, list[str]], hosts_data: dict[str, dict], source: str = "inventory") -> list[str]:
    """Each host name, and ssh_hostname, that may not reach a file, a path or a command (fleet.spec.host_name_problem):
    keepalived.conf's router_id, the mesh TLS files' {host}, URLs and labels take them as they are."""
    problems = []
    for h in dict.fromkeys([*(h for hosts in groups.values() for h in hosts), *hosts_data]):
        if broken := host_name_problem(h):
            problems.append(f"{source}: host {shown_name(h)}: its name: {broken}")
            continue
        address = hosts_data.get(h, {}).get("ssh_hostname")
        if address is not None and (broken := host_name_problem(address)):
            problems.append(f"{source}: host {h}: ssh_hostname: {broken}")
    return problems


def check_inventory(groups: dict[str, list[str]], hosts_data: dict[str, dict], group_dir: Path,
                    groups_data: dict[str, dict] | None = None, source: str = "inventory") -> dict[str, ClassSpec]:
    """Validate group_data and the inventory's use of it, before anything connects.

    groups: inventory group -> host names; hosts_data: host name -> its inventory data;
    groups_data: group -> the data of a pyinfra group tuple `group = ([hosts], {data})`.
    A host belongs to exactly one GPU class (two would mean two services, possibly on
    one port) or one gateway, and the inventory may not override the spec (group_data is the
    one place): host and group data alike. A host name that is no DNS name or address is refused first, before
    any message or check takes it as it is.
    """
    bad_names = name_problems(groups, hosts_data, source)
    if bad_names:
        raise SpecError(bad_names)
    specs = load_class_specs(group_dir)
    gateways = load_gateways(group_dir, specs)
    monitors = load_monitoring(group_dir, specs)
    in_inventory = {c for c in specs if groups.get(c)}
    # a monitoring group: one host; a gateway group one, or more behind its floating address; each checked against
    # the classes once the inventory has it
    one_host = [("monitoring", g, "one Prometheus scrapes the fleet, one Alertmanager sends its alerts",
                 lambda g=g: scrape_problems(g, specs, in_inventory)) for g in monitors]
    one_host += [("gateway", g, f"clients would not know which to use: declare gateway.floating in group_data/{g}.py, "
                  "the address in front of them", lambda g=g, gw=gw: key_problems(g, gw, specs))
                 for g, gw in gateways.items()]
    problems = floating.address_problems({g: gw.floating for g, gw in gateways.items() if gw.floating is not None},
                                         groups, hosts_data)
    for kind, group, why, checked_against_classes in one_host:
        hosts = groups.get(group, [])
        if hosts:
            problems += checked_against_classes()
        if len(hosts) > 1 and not (group in gateways and gateways[group].floating is not None):
            problems.append(f"inventory: {kind} group {group} has {len(hosts)} hosts ({', '.join(hosts)}); "
                            f"expected one: {why}")
    classes_of: dict[str, list[str]] = {}
    gateways_of: dict[str, list[str]] = {}
    for group, hosts in groups.items():
        roles = classes_of if group in specs else gateways_of if group in gateways or group in monitors else None
        if roles is None:
            continue
        for h in hosts:
            roles.setdefault(h, []).append(group)
    for h, classes in sorted(classes_of.items()):
        if len(classes) > 1:
            ports = ", ".join(f"{c} (service.port {specs[c].service.port})" for c in classes)
            same = len({specs[c].service.port for c in classes}) < len(classes)
            problems.append(
                f"inventory: host {h} is filed under {len(classes)} GPU classes: {ports}; "
                f"expected exactly one" + ("; two services on one port" if same else "")
            )
    for h, gws in sorted(gateways_of.items()):
        if h in classes_of:
            why = ("Prometheus would page for its own host's restarts" if gws[0] in monitors else
                   "the rolling rollout restarts a replica while its gateway keeps routing to the others")
            kind = "monitoring" if gws[0] in monitors else "gateway"
            problems.append(f"inventory: host {h} is filed under GPU class {', '.join(classes_of[h])} and {kind} "
                            f"group {', '.join(gws)}; expected one or the other: {why}")
        if len(gws) > 1:
            problems.append(f"inventory: host {h} is filed under {len(gws)} gateway or monitoring groups: "
                            f"{', '.join(gws)}; expected one (one smg, or one Prometheus, per host)")
    for group, data in sorted((groups_data or {}).items()):
        problem = _sets_the_spec("group", group, data)
        if problem:
            problems.append(problem)
    for h, data in sorted(hosts_data.items()):
        problem = _sets_the_spec("host", h, data)
        if problem:
            problems.append(problem)
    unfiled = sorted(set(hosts_data) - set(classes_of) - set(gateways_of))
    for h in unfiled:
        problems.append(f"inventory: host {h} is in no GPU class group; expected one of {', '.join(specs)}"
                        + (f" (or the gateway or monitoring group {', '.join([*gateways, *monitors])})"
                           if gateways or monitors else ""))
    if problems:
        raise SpecError(problems)
    return specs


def inventory_groups(inventory_namespace: dict[str, Any]) -> tuple[dict[str, list[str]], dict[str, dict],
                                                                   dict[str, dict]]:
    """(group -> host names, host -> its data, group -> its data) from an inventory module's globals,
    as pyinfra reads them: public lists of names or (name, data) tuples, or a group tuple
    ([those], {group data})."""
    groups: dict[str, list[str]] = {}
    hosts_data: dict[str, dict] = {}
    groups_data: dict[str, dict] = {}
    for name, value in inventory_namespace.items():
        if name.startswith("_"):
            continue
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], list) and isinstance(value[1], dict):
            value, groups_data[name] = value
        if not isinstance(value, list):
            continue
        for entry in value:
            host, data = entry if isinstance(entry, tuple) else (entry, {})
            groups.setdefault(name, []).append(host)
            hosts_data.setdefault(host, {}).update(data)
    return groups, hosts_data, groups_data


def check_or_exit(inventory_namespace: dict[str, Any], group_dir: Path = Path("group_data")) -> None:
    """Called at the end of an inventory file (with its globals()): refuse to connect anywhere
    if the data is wrong."""
    try:
        groups, hosts_data, groups_data = inventory_groups(inventory_namespace)
        check_inventory(groups, hosts_data, group_dir, groups_data, inventory_namespace.get("__file__", "inventory"))
    except SpecError as e:
        print("group_data / inventory check failed; no host was contacted:", file=sys.stderr)
        for problem in e.problems:
            print(f"  - {problem}", file=sys.stderr)
        raise SystemExit(2) from None
