"""The SGLang engine at the declared launcher: version, speculative algorithms, flags."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import captured, marker
from fleet.parse import Engine, parse_engine


class SglangEngine(FactBase[Engine]):
    def command(self, launcher: str, timeout_s: float = 0) -> str:
        py = shlex.quote(launcher)
        return (
            f"if [ -x {py} ]; then "
            f"{captured('version', py + ' -c ' + shlex.quote('import sglang; print(sglang.__version__)'), timeout_s)}; "
            # --help is the engine's own list of algorithms and flags (imports torch: a few seconds)
            f"{captured('help', py + ' -m sglang.launch_server --help', timeout_s)}; "
            f"else {marker('launcher', 'missing')}; fi"
        )

    def process(self, output: list[str]) -> Engine:
        return parse_engine("\n".join(output))
