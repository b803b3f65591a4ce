"""The host's deploy records and backup sets (never the backed-up files' content)."""

from __future__ import annotations

from pyinfra.api import FactBase

from facts import quiet
from fleet.rollout.history import History, history_command, parse_history


class DeployHistory(FactBase[History]):
    @staticmethod
    def default() -> History:
        return History()

    def command(self, records_file: str, backups_dir: str) -> str:
        return quiet(history_command(records_file, backups_dir))

    def process(self, output: list[str]) -> History:
        return parse_history(output)
