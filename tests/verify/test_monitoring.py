"""The monitoring host: Prometheus and Alertmanager run and are ready with their configuration, and every
replica and gateway of the inventory is a target Prometheus scrapes, up."""

from __future__ import annotations

import json
import shlex
import time

from fleet.monitoring.host import AUTH_CURL, PASSWORD_FILE, SECRET_OWNERS, UNITS, is_ready, ready_command
from fleet.spec.secrets import HostSecret
from ops.verify_backend import secrets_shown


def test_prometheus_and_alertmanager_enabled_active_and_ready(mon_node, monitor):
    for unit in UNITS:
        svc = mon_node.service(unit.removesuffix(".service"))
        assert svc.is_enabled and svc.is_running, f"{unit}: enabled {svc.is_enabled}, running {svc.is_running}"
    answer = mon_node.check_output(ready_command(monitor.mon))
    assert is_ready(answer), f"expected /-/ready 200 and the configuration loaded, each; found {answer!r}"


def test_every_replica_and_gateway_is_scraped_and_up(mon_node, monitor):
    url = monitor.mon.url(monitor.mon.prometheus_port, "/api/v1/targets?state=active")
    expected = {(s.job, s.labels["host"]) for s in monitor.scraped}
    # a target not scraped yet is "unknown": right after a deploy, give it two scrape intervals
    deadline = time.monotonic() + 2 * monitor.mon.scrape_interval_s + 5
    while True:
        body = json.loads(mon_node.check_output(f"{AUTH_CURL} -s --max-time 10 {shlex.quote(url)}"))
        health = {(t["labels"].get("job"), t["labels"].get("host")): t["health"]
                  for t in body["data"]["activeTargets"]}
        seen = {k: health.get(k, "not a target") for k in expected}
        if "unknown" not in seen.values() or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert seen == {k: "up" for k in expected}


def test_the_password_files_are_0600_and_their_owners(mon_node):
    """The web configuration's hash, Prometheus' password file, the deploy's curl configuration: no other user
    reads them (and so cannot create a silence)."""
    found = {path: (oct(f.mode), f.user) for path in SECRET_OWNERS if (f := mon_node.file(path)).exists}
    assert found == {path: (oct(0o600), owner) for path, owner in SECRET_OWNERS.items()}


def test_no_process_shows_the_monitoring_password(mon_node):
    """Read back from Prometheus' 0600 password file; looked for in every process's arguments there."""
    assert secrets_shown(mon_node, [HostSecret("monitoring.password", PASSWORD_FILE, "")]) == []
