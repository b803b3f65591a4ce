"""Model directories: present, with a config.json, and what it says (parsed locally)."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import BLOCK_LIMIT, captured, quiet
from fleet.parse import ModelDir, parse_model_dirs
from fleet.wire import mark


class ModelDirs(FactBase[dict[str, ModelDir]]):
    @staticmethod
    def default() -> dict[str, ModelDir]:
        return {}

    def command(self, paths: list[str]) -> str:
        steps = []
        for path in paths:
            directory, config = shlex.quote(path), shlex.quote(path.rstrip("/") + "/config.json")
            steps.append(
                f"{mark('path', path)}; "
                f"if [ ! -d {directory} ]; then {mark('missing', 'directory')}; "
                f"elif [ ! -f {config} ]; then {mark('missing', 'config.json')}; "
                # head: a config.json of any size is read to the block's limit, never whole
                f"else {captured('config', f'head -c {BLOCK_LIMIT + 1} -- {config}')}; fi"
            )
        return quiet("; ".join(steps) or "true")

    def process(self, output: list[str]) -> dict[str, ModelDir]:
        return parse_model_dirs(output)
