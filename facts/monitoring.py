"""The monitoring host in one round trip: the packages installed, the live bundle, the units' arguments, the units."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import quiet
from fleet.monitoring.host import AUTH_CURL, DEFAULTS, LIVE, PACKAGES, SECRET_OWNERS, UNITS, WEB_CONFIG, \
    MonitoringHost, parse_monitoring_host
from fleet.core.wire import block, frames


class MonitoringFacts(FactBase[MonitoringHost]):
    def command(self, ready: str) -> str:
        """ready: fleet.monitoring.host.ready_command's, so a converged host is read, ready or not, in one command."""
        q = shlex.quote
        return quiet("; ".join([
            block("ready", ready),
            *(block(f"version:{p}", f"dpkg-query -W -f '${{db:Status-Status}} ${{Version}}' {q(p)} "
                                    "| sed -n 's/^installed //p'") for p in PACKAGES),
            block("live", f"basename \"$(readlink {q(LIVE)})\""),
            *(block(f"sha1:{path}", f"sha1sum < {q(path)} | cut -d' ' -f1") for path in (*DEFAULTS.values(),
                                                                                      *SECRET_OWNERS)),
            # the hash only (the deploy keeps it while the password matches), never the password's files
            block("hash", f"grep -o '[$]2[aby][$][0-9]*[$][./A-Za-z0-9]*' {q(WEB_CONFIG)} | head -n 1"),
            *(block(f"active:{u}", f"systemctl show -p ActiveState --value -- {q(u)}") for u in UNITS),
        ]))

    def process(self, output: list[str]) -> MonitoringHost:
        return parse_monitoring_host(output)


class MonitoringStatus(FactBase[tuple[MonitoringHost, str, str]]):
    """`make status` on the monitoring host, one round trip: what MonitoringFacts reads, both ready with their
    configuration, and the alerts Prometheus has (/api/v1/alerts)."""

    def command(self, ready: str, alerts_url: str) -> str:
        return quiet("; ".join([MonitoringFacts().command(ready),
                                block("alerts", f"{AUTH_CURL} -s --max-time 5 {shlex.quote(alerts_url)}")]))

    def process(self, output: list[str]) -> tuple[MonitoringHost, str, str]:
        """(what MonitoringFacts reads, ready_command's answer, /api/v1/alerts' body)."""
        said = {f.key: f.text or "" for f in frames(output)}
        return parse_monitoring_host(output), said.get("ready", ""), said.get("alerts", "")


class MonitorView(FactBase[dict[str, str]]):
    """`make monitor`, one round trip: Prometheus' targets and alerts, Alertmanager's silences."""

    def command(self, targets_url: str, alerts_url: str, silences_url: str) -> str:
        return quiet("; ".join(block(key, f"{AUTH_CURL} -s --max-time 5 {shlex.quote(url)}") for key, url in (
            ("targets", targets_url), ("alerts", alerts_url), ("silences", silences_url))))

    def process(self, output: list[str]) -> dict[str, str]:
        return {f.key: f.text or "" for f in frames(output)}
