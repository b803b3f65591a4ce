"""Which programs are on the host's PATH (`command -v`), keyed by the names asked for."""

from __future__ import annotations

from pyinfra.api import FactBase

from facts import quiet
from fleet.rollout.prerequisites import parse_probe, probe_command


class HostPrograms(FactBase[dict[str, bool]]):
    @staticmethod
    def default() -> dict[str, bool]:
        return {}

    def command(self, names: list[str]) -> str:
        return quiet(probe_command(names))

    def process(self, output: list[str]) -> dict[str, bool]:
        return parse_probe(output)
