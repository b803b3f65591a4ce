"""Model directories: present, with a config.json, and what it says (parsed locally)."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import captured, marker
from fleet.parse import ModelDir, parse_model_dirs


class ModelDirs(FactBase[dict[str, ModelDir]]):
    @staticmethod
    def default() -> dict[str, ModelDir]:
        return {}

    def command(self, paths: list[str]) -> str:
        steps = []
        for path in paths:
            directory, config = shlex.quote(path), shlex.quote(path.rstrip("/") + "/config.json")
            steps.append(
                f"{marker('path', path)}; "
                f"if [ ! -d {directory} ]; then {marker('missing', 'directory')}; "
                f"elif [ ! -f {config} ]; then {marker('missing', 'config.json')}; "
                f"else {captured('config', f'cat {config}')}; fi"
            )
        return "; ".join(steps) or "true"

    def process(self, output: list[str]) -> dict[str, ModelDir]:
        return parse_model_dirs("\n".join(output))
