"""The inventory as pyinfra reads it, connected in parallel, one fact per host in parallel.

The same connection data as `pyinfra inventory.py deploy.py` (users, keys, ports, sudo):
pyinfra's own inventory loader and connectors do the work; no deploy runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import gevent
from pyinfra.api import Config, State
from pyinfra.api.exceptions import PyinfraError
from pyinfra.api.facts import get_fact
from pyinfra.context import ctx_host, ctx_inventory, ctx_state
from pyinfra_cli.inventory import make_inventory

from facts.gateway import GatewayStatus
from facts.monitoring import MonitoringStatus
from adapter.connection import watched
from fleet.core import hosts
from fleet.gateway.models import Gateway
from fleet.spec.load import SpecError, load_class_specs, load_gateways, load_monitoring, monitoring_files, \
    validate_host
from fleet.rollout import status
from fleet.monitoring.config import bundle_id, webhook_urls
from fleet.monitoring.host import ready_command
from fleet.monitoring.models import Monitoring
from fleet.weights.hub import pin_branches
from fleet.spec.secrets import SecretError, hub_token
from fleet.spec import ClassSpec

GROUP_DIR = Path("group_data")  # like pyinfra: group_data/ of the directory it runs in


class Fleet:
    def __init__(self, inventory: str, limit: list[str] | None = None):
        # as pyinfra's CLI does: a state in context while the inventory and group_data load
        self.state = State(check_for_changes=False)
        self.state.cwd = os.getcwd()
        ctx_state.set(self.state)
        inv = make_inventory(inventory, cwd=self.state.cwd)
        ctx_inventory.set(inv)
        self.state.init(inv, Config())
        # the inventory's footer arms the rollout summary for unreachable hosts: no rollout here;
        # its keepalive stays, and an inventory without the footer gets one: a lost link must not
        # hang make status or make verify
        watched(self.state, summary=False)
        self.hosts = [h for h in self.state.inventory if not limit or h.name in limit]
        self.resolved: dict[tuple[str, str, str], str] = {}  # branches asked of their endpoint, once each
        unknown = sorted(set(limit or []) - {h.name for h in self.hosts})
        if unknown:
            raise SystemExit(f"not in the inventory: {', '.join(unknown)}")

    def spec_of(self, host) -> tuple[str, ClassSpec | None, list[str]]:
        """(its GPU class, its spec, problems) as preflight reads them."""
        classes = hosts.gpu_classes(host, GROUP_DIR)
        if len(classes) != 1:
            return ",".join(classes) or "-", None, [
                f"{host.name}: gpu class: expected exactly one GPU class group, found {classes or 'none'}"]
        try:
            spec = validate_host(str(GROUP_DIR / f"{classes[0]}.py"), host.data.dict())
        except SpecError as e:
            return classes[0], None, e.problems
        # the commit a deploy now would serve
        spec, problems = pin_branches(spec, hub_token(spec), self.resolved)
        return classes[0], None if problems else spec, [f"{host.name}: {p}" for p in problems]

    def gateway_of(self, host) -> tuple[str, Gateway | None]:
        """(its gateway group, the gateway it runs), or ('', None) for a replica."""
        group = hosts.gateway_group(host, GROUP_DIR)
        if not group:
            return "", None
        return group, load_gateways(GROUP_DIR, load_class_specs(GROUP_DIR))[group]

    def monitoring_of(self, host) -> tuple[str, Monitoring | None]:
        """(its monitoring group, the monitoring it runs), or ('', None) for any other host."""
        group = next((g for g in host.groups if g in monitoring_files(GROUP_DIR)), "")
        if not group:
            return "", None
        return group, load_monitoring(GROUP_DIR, load_class_specs(GROUP_DIR))[group]

    def each(self, work) -> dict:
        """work(host) -> result, for every host at once (greenlets, as pyinfra runs its hosts)."""
        with ctx_state.use(self.state):
            jobs = {h.name: self.state.pool.spawn(self._in_context, h, work) for h in self.hosts}
            gevent.joinall(list(jobs.values()))
        return {name: job.get() for name, job in jobs.items()}

    @staticmethod
    def _in_context(host, work):
        with ctx_host.use(host):
            return work(host)

    def connect(self, host) -> str:
        """'' once connected, else why not, in the words of pyinfra's ConnectError, or of what its
        connector raises for connection data it cannot use (a key file that does not exist:
        PyinfraError; a host name that is no DNS name: UnicodeError, a ValueError)."""
        try:
            host.connect(show_errors=False, raise_exceptions=True)
        except (PyinfraError, ValueError) as e:
            return str(e.args[0]) if e.args else type(e).__name__
        return ""

    def run(self, host, command: str, timeout_s: float) -> tuple[bool, str]:
        """One shell command on the host (connected first): (ok, its stdout), or (False, why it could not run)."""
        why = "" if host.connected else self.connect(host)
        if why:
            return False, why
        with ctx_state.use(self.state), ctx_host.use(host):
            ok, output = host.run_shell_command(command, _timeout=timeout_s)
        return ok, output.stdout

    def fact(self, host, fact_class, **kwargs):
        return get_fact(self.state, host, fact_class, kwargs=kwargs, apply_failed_hosts=False)

    def close(self) -> None:
        for h in self.hosts:
            if h.connected:
                h.disconnect()


def monitoring_status(fleet: Fleet, host, group: str, mon: Monitoring):
    """The monitoring host's row, in one round trip (facts.monitoring); its bundle compared to the one this
    inventory makes (tasks/monitoring.py writes it)."""
    try:  # as the deploy reads them; where they cannot be read here, the bundle compared is not the deploy's
        urls = webhook_urls(mon, f"{GROUP_DIR}/{group}.py")
    except SecretError:
        urls = {r.name: "unread" for r in mon.receivers}
    files, _ = hosts.monitoring_bundle(fleet.state.inventory, GROUP_DIR, mon, urls)
    facts, ready, alerts = fleet.fact(host, MonitoringStatus, ready=ready_command(mon),
                                      alerts_url=mon.url(mon.prometheus_port, "/api/v1/alerts"))
    return status.judge_monitoring(host.name, group, facts, ready, alerts, bundle_id(files))


def gateway_status(fleet: Fleet, host, gw: Gateway, group: str) -> dict[str, str]:
    """The gateway host's unit, smg's version, /readiness and /workers (and keepalived's, behind a floating
    address), in one round trip (facts.gateway)."""
    return fleet.fact(host, GatewayStatus, gw=gw, group=group)
