"""Operator commands, read-only, over the hosts of an inventory:

    python -m ops status  [INVENTORY] [--limit H ...] [--json]   # make status
    python -m ops history INVENTORY HOST [--json]                # make history HOST=h
    python -m ops monitor [INVENTORY]                            # make monitor
    python -m ops tune    INVENTORY --class C [--host H] [...]     # make tune CLASS=c (ops/tune.py)

status: one SSH round trip per host, all hosts at once; a row per host (unreachable and
refused ones too) with what it serves now and how it differs from group_data, in the words
`make dry` uses. Exit 1 if any host drifts, is unhealthy, refused or unreachable.
history: the host's deploy records and backup sets, newest first (the stamps `make rollback
TO=...` takes).
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()  # first, as pyinfra's CLI does: its hosts are read at once only with cooperative sockets

import argparse
import json
import logging
import sys
import time
from dataclasses import asdict

from facts.history import DeployHistory
from facts.preflight import snapshot_args
from facts.monitoring import MonitorView
from facts.status import StatusSnapshot
from fleet.core import hosts
from fleet.rollout import status
from fleet.rollout.gate import base_url, url_host
from fleet.rollout.history import describe_history
from fleet.monitoring.views import describe_monitor
from fleet.spec.secrets import SecretError, resolve
from fleet.core.wire import excerpt
from ops import tune
from ops.fleet import GROUP_DIR, Fleet, gateway_status, monitoring_status


def host_status(fleet: Fleet, host) -> status.HostStatus:
    group, mon = fleet.monitoring_of(host)
    if mon is not None:
        why = fleet.connect(host)
        return status.unreachable(host.name, group, why) if why else monitoring_status(fleet, host, group, mon)
    group, gw = fleet.gateway_of(host)
    if gw is not None:
        why = fleet.connect(host)
        if why:
            return status.unreachable(host.name, group, why)
        return status.judge_gateway(host.name, group, gw, gateway_status(fleet, host, gw, group),
                                    hosts.replicas(fleet.state.inventory, gw, GROUP_DIR))
    group, spec, problems = fleet.spec_of(host)
    if spec is None:
        return status.refused(host.name, group, problems)
    why = fleet.connect(host)
    if why:
        return status.unreachable(host.name, group, why)
    try:
        secrets, problem = resolve(spec, str(GROUP_DIR / f"{group}.py")), ""
    except SecretError as e:
        secrets, problem = None, "; ".join(e.problems)
    facts, history, metrics = fleet.fact(
        host, StatusSnapshot, snapshot=snapshot_args(spec), records_file=spec.records_file,
        backups_dir=spec.backups_dir, metrics_url=f"{base_url(spec)}/metrics")
    return status.judge(host.name, group, spec, facts, history, metrics, secrets, problem, time.time())


def contained_status(fleet: Fleet, host) -> status.HostStatus:
    """host_status, or a row saying what could not be read: one host's answer never stops the table."""
    try:
        return host_status(fleet, host)
    except Exception as e:  # noqa: BLE001 - whatever it was, it was about this host
        group = (next(iter(hosts.gpu_classes(host, GROUP_DIR)), "") or hosts.gateway_group(host, GROUP_DIR)
                 or fleet.monitoring_of(host)[0] or "-")
        return status.refused(host.name, group, [f"{host.name}: status: could not judge what the host answered "
                                                 f"({type(e).__name__}: {excerpt(str(e), 300)})"])


def show_status(args) -> int:
    fleet = Fleet(args.inventory, args.limit)
    try:
        rows = status.with_floating(status.with_alerts(sorted(fleet.each(lambda h: contained_status(fleet, h)).values(),
                                                              key=lambda r: r.host)))
    finally:
        fleet.close()
    if args.json:
        print(json.dumps([r.to_json() for r in rows], indent=2))
    else:
        print(status.table(rows))
    return status.exit_code(rows)


def show_history(args) -> int:
    fleet = Fleet(args.inventory, [args.host])
    host = fleet.hosts[0]
    try:
        group, spec, problems = fleet.spec_of(host)
        if spec is None:
            print("\n".join(problems), file=sys.stderr)
            return 2
        why = fleet.connect(host)
        if why:
            print(f"{host.name}: unreachable: {why}", file=sys.stderr)
            return 1
        history = fleet.fact(host, DeployHistory, records_file=spec.records_file, backups_dir=spec.backups_dir)
    finally:
        fleet.close()
    if args.json:
        print(json.dumps({"records": [asdict(r) for r in reversed(history.records)],
                          "backups": [{"stamp": b.stamp, "serves": b.summary(), "files": sorted(b.files)}
                                      for b in reversed(history.backups)]}, indent=2))
    else:
        print(describe_history(host.name, history))
    return 0


def show_monitor(args) -> int:
    """What the inventory's monitoring host scrapes, what fires, what is silenced (make monitor)."""
    fleet = Fleet(args.inventory)
    try:
        found = [(h, *fleet.monitoring_of(h)) for h in fleet.hosts]
        found = [(h, group, mon) for h, group, mon in found if mon is not None]
        if not found:
            print(f"{args.inventory}: no monitoring host (a group whose group_data file declares `monitoring`)",
                  file=sys.stderr)
            return 2
        host, _, mon = found[0]
        why = fleet.connect(host)
        if why:
            print(f"{host.name}: unreachable: {why}", file=sys.stderr)
            return 1
        read = fleet.fact(host, MonitorView, targets_url=mon.url(mon.prometheus_port, "/api/v1/targets?state=active"),
                          alerts_url=mon.url(mon.prometheus_port, "/api/v1/alerts"),
                          silences_url=mon.url(mon.alertmanager_port, "/api/v2/silences"))
    finally:
        fleet.close()
    where = url_host(mon.tls.name if mon.tls else hosts.address(host))  # with TLS, the certificate's name
    link = f"{mon.scheme}://{where}:{mon.prometheus_port}/alerts (Alertmanager :{mon.alertmanager_port})"
    print(describe_monitor(host.name, link, read.get("targets", ""), read.get("alerts", ""), read.get("silences", "")))
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("pyinfra").setLevel(logging.ERROR)  # its connection chatter; failures are in the rows
    parser = argparse.ArgumentParser(prog="python -m ops")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("status", help="what every host serves, and its drift from group_data")
    s.add_argument("inventory", nargs="?", default="inventory.py")
    s.add_argument("--limit", action="append", help="only this host (repeatable)")
    s.add_argument("--json", action="store_true")
    h = sub.add_parser("history", help="a host's rollouts and backups, newest first")
    h.add_argument("inventory")
    h.add_argument("host")
    h.add_argument("--json", action="store_true")
    m = sub.add_parser("monitor", help="what the monitoring host scrapes, what fires, what is silenced")
    m.add_argument("inventory", nargs="?", default="inventory.py")
    tune.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "tune":
        return tune.main(args, host_status)
    if args.command == "monitor":
        return show_monitor(args)
    return show_status(args) if args.command == "status" else show_history(args)


if __name__ == "__main__":
    sys.exit(main())
