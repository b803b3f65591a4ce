"""What earlier rollouts left: the managed files and directories and the deploy records (mode,
owner, sha1: begin checks them again), the text of the files a diff shows, the deploy lock and
the pending-rollout record."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import quiet
from fleet.rollout import lock
from fleet.rollout.parse import DeployState, parse_deploy_state
from fleet.core.wire import block, mark

STAT = "stat -c '%a %U:%G'"


class DeployedFiles(FactBase[DeployState]):
    def command(self, files: list[str], dirs: list[str], shown: list[str], lock_file: str, pending_file: str,
                tune_file: str = "") -> str:
        parts = [block("file", f"{STAT} {shlex.quote(f)} && sha1sum {shlex.quote(f)} | cut -d' ' -f1", f) for f in files]
        parts += [block("dir", f"[ -d {shlex.quote(d)} ] && {STAT} {shlex.quote(d)}", d) for d in dirs]
        parts += [block("content", f"cat {shlex.quote(f)}", f) for f in shown]
        parts.append(lock.facts_command(lock_file))
        p = shlex.quote(pending_file)
        parts.append(f"if [ -e {p} ]; then {block('pending', f'cat {p}', 'present')}; else {mark('pending', 'absent')}; fi")
        if tune_file:
            t = shlex.quote(tune_file)
            parts.append(f"if [ -e {t} ]; then {block('tune', f'head -c 4096 {t}', 'present')}; fi")
        return quiet("; ".join(parts))

    def process(self, output: list[str]) -> DeployState:
        return parse_deploy_state(output)
