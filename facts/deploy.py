"""What earlier rollouts left: the managed files and directories (mode, owner, sha1), the text of
the files a diff shows, the deploy lock and the pending-rollout record."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import marker
from fleet import lock
from fleet.parse import DeployState, parse_deploy_state

STAT = "stat -c '%a %U:%G'"


class DeployedFiles(FactBase[DeployState]):
    def command(self, files: list[str], dirs: list[str], shown: list[str], lock_file: str, pending_file: str) -> str:
        parts = [
            f"{marker('file', f)}; {STAT} {shlex.quote(f)} 2>/dev/null && sha1sum {shlex.quote(f)} | cut -d' ' -f1"
            for f in files
        ]
        parts += [f"{marker('dir', d)}; [ -d {shlex.quote(d)} ] && {STAT} {shlex.quote(d)}" for d in dirs]
        parts += [f"{marker('content', f)}; cat {shlex.quote(f)} 2>/dev/null" for f in shown]
        parts.append(lock.facts_command(lock_file))
        p = shlex.quote(pending_file)
        parts.append(f"if [ -e {p} ]; then {marker('pending', 'present')}; cat {p}; else {marker('pending', 'absent')}; fi")
        return "; ".join(parts) + "; true"

    def process(self, output: list[str]) -> DeployState:
        return parse_deploy_state("\n".join(output))
