"""The monitoring host in one round trip: the packages installed, the live bundle, the units' arguments, the units."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import quiet
from fleet.monitoring import DEFAULTS, LIVE, PACKAGES, UNITS, MonitoringHost, parse_monitoring_host
from fleet.wire import block


class MonitoringFacts(FactBase[MonitoringHost]):
    def command(self) -> str:
        q = shlex.quote
        return quiet("; ".join([
            *(block(f"version:{p}", f"dpkg-query -W -f '${{db:Status-Status}} ${{Version}}' {q(p)} "
                                    "| sed -n 's/^installed //p'") for p in PACKAGES),
            block("live", f"basename \"$(readlink {q(LIVE)})\""),
            *(block(f"sha1:{path}", f"sha1sum < {q(path)} | cut -d' ' -f1") for path in DEFAULTS.values()),
            *(block(f"active:{u}", f"systemctl show -p ActiveState --value -- {q(u)}") for u in UNITS),
        ]))

    def process(self, output: list[str]) -> MonitoringHost:
        return parse_monitoring_host(output)
