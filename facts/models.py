"""Model directories: present, with a config.json, and what it says (parsed locally). A revision the
deploy fetched (`fetched`) must also have its manifest, and every file it lists its size."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import BLOCK_LIMIT, captured, quiet
from fleet.weights.hub import MANIFEST, damaged_files
from fleet.weights.parse import ModelDir, parse_model_dirs
from fleet.core.wire import block, mark


DAMAGED = 'printf %s "$damaged"'


class ModelDirs(FactBase[dict[str, ModelDir]]):
    @staticmethod
    def default() -> dict[str, ModelDir]:
        return {}

    def command(self, paths: list[str], fetched: list[str] = ()) -> str:
        steps = []
        for path in paths:
            directory, config = shlex.quote(path), shlex.quote(path.rstrip("/") + "/config.json")
            complete = ""
            if path in fetched:
                complete = (f"elif [ ! -s {shlex.quote(f'{path}/{MANIFEST}')} ]; then {mark('missing', 'manifest')}; "
                            f"elif damaged=$({damaged_files(path)}); [ -n \"$damaged\" ]; then "
                            f"{block('damaged', DAMAGED)}; ")
            steps.append(
                f"{mark('path', path)}; "
                f"if [ ! -d {directory} ]; then {mark('missing', 'directory')}; "
                f"{complete}"
                f"elif [ ! -f {config} ]; then {mark('missing', 'config.json')}; "
                # head: a config.json of any size is read to the block's limit, never whole
                f"else {captured('config', f'head -c {BLOCK_LIMIT + 1} -- {config}')}; fi"
            )
        return quiet("; ".join(steps) or "true")

    def process(self, output: list[str]) -> dict[str, ModelDir]:
        return parse_model_dirs(output)
