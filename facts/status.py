"""`make status`'s one round trip: the preflight snapshot, the deploy history and /metrics."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import quiet
from facts.preflight import HostSnapshot
from fleet.rollout.gate import CURL
from fleet.rollout.history import History, history_command, parse_history
from fleet.rollout.parse import HostFacts
from fleet.core.wire import block, frames, mark, sections


class StatusSnapshot(FactBase[tuple[HostFacts, History, str]]):
    def command(self, snapshot: dict, records_file: str, backups_dir: str, metrics_url: str) -> str:
        """snapshot: HostSnapshot's arguments (facts.preflight.snapshot_args)."""
        return "; ".join([
            HostSnapshot().command(**snapshot),
            mark("section", "history"), quiet(history_command(records_file, backups_dir)),
            mark("section", "metrics"), quiet(block("metrics", f"{CURL} -s --max-time 5 {shlex.quote(metrics_url)}")),
        ])

    def process(self, output: list[str]) -> tuple[HostFacts, History, str]:
        parts = sections(output)
        metrics = next((f.text or "" for f in frames(parts.get("metrics", [])) if f.key == "metrics"), "")
        return HostSnapshot().process(output), parse_history(parts.get("history", [])), metrics
