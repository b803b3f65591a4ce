"""systemd units' states (`systemctl show`), keyed by the names asked for."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import captured, quiet
from fleet.rollout.parse import UNIT_PROPERTIES, UnitState, parse_systemd_version, parse_unit_states
from fleet.core.wire import block, mark


class UnitStates(FactBase[dict[str, UnitState]]):
    @staticmethod
    def default() -> dict[str, UnitState]:
        return {}

    def command(self, units: list[str]) -> str:
        # One systemctl per unit: an alias answers with its canonical Id, so the marker keeps the asked name.
        show = "systemctl show -p " + ",".join(UNIT_PROPERTIES)
        return quiet("; ".join(f"{mark('unit', u)}; {captured('systemctl', f'{show} -- {shlex.quote(u)}')}"
                               for u in units) or "true")

    def process(self, output: list[str]) -> dict[str, UnitState]:
        return parse_unit_states(output)


class SystemdVersion(FactBase[int]):
    """The host's systemd version: which unit settings it understands (LogFilterPatterns= from 253)."""

    @staticmethod
    def default() -> int:
        return 0

    def command(self) -> str:
        return quiet(block("systemd", "systemctl --version"))

    def process(self, output: list[str]) -> int:
        return parse_systemd_version(output)
