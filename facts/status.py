"""`make status`'s one round trip: the preflight snapshot, the deploy history and /metrics."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import marker
from facts.preflight import HostSnapshot
from fleet.gate import CURL
from fleet.history import History, history_command, parse_history
from fleet.parse import HostFacts, sections


class StatusSnapshot(FactBase[tuple[HostFacts, History, str]]):
    def command(self, snapshot: dict, records_file: str, backups_dir: str, metrics_url: str) -> str:
        """snapshot: HostSnapshot's arguments (facts.preflight.snapshot_args)."""
        return "; ".join([
            HostSnapshot().command(**snapshot),
            marker("section", "history"), history_command(records_file, backups_dir),
            marker("section", "metrics"), f"{CURL} -s --max-time 5 {shlex.quote(metrics_url)}; echo",
        ])

    def process(self, output: list[str]) -> tuple[HostFacts, History, str]:
        parts = sections("\n".join(output))
        return (HostSnapshot().process(output), parse_history("\n".join(parts.get("history", []))),
                "\n".join(parts.get("metrics", [])))
