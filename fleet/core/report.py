"""The per-host table a run ends with: class, GPUs found, action, verdict, reasons."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable

from fleet.core.outcome import HostVerdict
from fleet.core.wire import capped, shown

# The summary's cells and lines carry what hosts said (a GPU's name, a smoke reply, a reason quoting an answer):
# printable and bounded as every view's, with room for the longest of the deploy's own words.
SUMMARY_CELL = 400
SUMMARY_LINE = 2000
SUMMARY_LINES = 50  # of one host's reasons, warnings or notes


@dataclass
class HostReport:
    host: str
    gpu_class: str = "-"
    gpus: str = "-"
    action: str = "-"
    verdict: HostVerdict = HostVerdict.PENDING
    ready_s: float | None = None
    smoke: str = ""
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # true whatever the verdict (an exposure, say)
    notes: list[str] = field(default_factory=list)  # what the run did beside its action (a silence, say)
    engine: str = "-"  # the SGLang it runs: the declared engine's name, or the version at its launcher


def describe_gpus(names: list[str]) -> str:
    """['NVIDIA RTX A6000', 'NVIDIA RTX A6000'] -> '2x NVIDIA RTX A6000'."""
    if not names:
        return "none"
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return ", ".join(f"{c}x {n}" for n, c in counts.items())


def describe_gpu_list(gpus) -> str:
    """GPUs (fleet.rollout.gpus.Gpu) by model, then their PCI bus ids: which boards, on a box with several."""
    buses = [g.bus_id[9:] if g.bus_id.startswith("00000000:") else g.bus_id for g in gpus]
    return describe_gpus([g.name for g in gpus]) + (f" at {', '.join(buses)}" if buses else "")


def table(reports: list[HostReport]) -> str:
    head = ("host", "class", "GPUs found", "engine", "action", "verdict", "ready", "smoke")
    rows = [
        tuple(shown(cell, SUMMARY_CELL) for cell in (
            r.host,
            r.gpu_class,
            r.gpus,
            r.engine,
            r.action,
            r.verdict,
            f"{r.ready_s:.1f}s" if r.ready_s is not None else "-",
            r.smoke or "-",
        ))
        for r in sorted(reports, key=lambda r: r.host)
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    for r, row in zip(sorted(reports, key=lambda r: r.host), rows):
        out.append(fmt.format(*row))
        for mark, said in (("- ", r.reasons), ("! warning: ", r.warnings), (". ", r.notes)):
            out += [f"    {mark}{line}" for line in capped(said, SUMMARY_LINES, lambda t: shown(t, SUMMARY_LINE))]
    return "\n".join(out)


class RunReport:
    """One per pyinfra run (adapter/run.py): its hosts' rows, printed as a table when it ends."""

    def __init__(self, title: str, failed_hosts: Callable[[], set[str]] = set):
        self.title = title
        self.hosts: dict[str, HostReport] = {}
        self.failed_hosts = failed_hosts  # names pyinfra itself failed

    def host(self, name: str) -> HostReport:
        return self.hosts.setdefault(name, HostReport(name))

    def outcome(self) -> dict:
        """Each host's outcome as data (a run intent's `outcome`, fleet/rollout/intent.py): what a caller steers by,
        never the table's words."""
        self._failed_hosts_said()
        return {name: {"verdict": r.verdict.value, "ok": r.verdict.ok, "action": r.action, "ready_s": r.ready_s,
                       "smoke": r.smoke, "reasons": r.reasons, "notes": r.notes}
                for name, r in sorted(self.hosts.items())}

    def _failed_hosts_said(self) -> None:
        for name in self.failed_hosts():
            # An operation pyinfra ran failed on its own (an upload, a systemctl): say so here too.
            r = self.hosts.get(name)
            if r is not None and not r.verdict.said_why:
                r.verdict = HostVerdict.FAILED
                r.reasons.append(f"{name}: an operation failed: see its error above")

    def print(self) -> None:
        self._failed_hosts_said()
        if self.hosts:
            print(f"\n--> {self.title}\n{table(list(self.hosts.values()))}", file=sys.stderr, flush=True)
