"""What earlier rollouts left: the managed files' sha1 and the deploy lock's owner."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import marker
from fleet.parse import DeployState, parse_deploy_state


class DeployedFiles(FactBase[DeployState]):
    def command(self, files: list[str], lock_owner: str) -> str:
        parts = [f"{marker('file', f)}; sha1sum {shlex.quote(f)} 2>/dev/null | cut -d' ' -f1" for f in files]
        parts.append(f"{marker('lock', lock_owner)}; cat {shlex.quote(lock_owner)} 2>/dev/null; true")
        return "; ".join(parts)

    def process(self, output: list[str]) -> DeployState:
        return parse_deploy_state("\n".join(output))
