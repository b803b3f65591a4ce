"""The programs a deploy runs on a host, per feature: checked in the host's first round trip, before anything stops.

A missing program must refuse the host there, naming it, what needs it and the Debian package that gives it: found
later it reads as an answer (no curl: "/health not ready" until the load timeout, and the rollback's own health
check fails the same way; no ss: "0 connections"). Debian's essential packages (coreutils, sed, grep, dash) are
taken as given: a host without them runs no deploy at all.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from fleet.spec import ClassSpec
from fleet.core.wire import NO_ANSWER, data, frames, mark


@dataclass(frozen=True)
class Program:
    name: str  # as the deploy runs it: a name on the PATH, or an absolute path
    package: str  # Debian's package that gives it
    needed_by: str  # the feature, in the operator's words

    def describe(self) -> str:
        return f"{self.name} (for {self.needed_by}; Debian package {self.package})"


CURL = Program("curl", "curl", "the readiness gate, the smoke test and the health check")
FLOCK = Program("flock", "util-linux", "the deploy lock")
SYSTEMCTL = Program("systemctl", "systemd", "the service's unit")
JOURNALCTL = Program("journalctl", "systemd", "the journal of a start that failed")
IP = Program("ip", "iproute2", "the floating address")
SS = Program("ss", "iproute2", "counting the client connections left before a gateway's restart")


def python(path: str, needed_by: str) -> Program:
    return Program(path, "python3", needed_by)


def replica_programs(spec: ClassSpec) -> list[Program]:
    """A replica's: every rollout's; the engine install's (its venv made by engine.python) where an engine is
    declared; the models' fetch and check (hub.python) where a revision is declared."""
    found = [CURL, FLOCK, SYSTEMCTL, JOURNALCTL]
    if spec.engine is not None:
        found.append(python(spec.engine.python, "the engine's install (engine.python: `-m venv`)"))
    if spec.hub_models:
        found.append(python(spec.hub.python, "the models' fetch and check (hub.python)"))
    return found


def gateway_programs(python_for_smg: str, floating: bool) -> list[Program]:
    """A gateway's: smg's venv, its health and discovery; behind a floating address, the address and the connections
    (keepalived and nft come from the packages the deploy installs)."""
    return [CURL, FLOCK, SYSTEMCTL, python(python_for_smg, "smg's venv"), *([IP, SS] if floating else [])]


_NAME = re.compile(r"[ -~]{1,255}")  # printable ASCII: the spec's names and paths
PROBED = 64  # more programs than any feature set asks for


def probe_command(names: list[str]) -> str:
    """One record per program: `@@program=NAME`, then where `command -v` finds it (empty: nowhere)."""
    return "; ".join(f"{mark('program', n)}; {data(f'command -v -- {shlex.quote(n)}')}"
                     for n in dict.fromkeys(names)) or "true"


def parse_probe(answer: str | list[str]) -> dict[str, bool]:
    """Each program the host answered for -> found; at most PROBED names, each a plain name or path (the guard
    reads a program it asked for and finds no record of as not answered)."""
    said: dict[str, bool] = {}
    for f in frames(answer):
        if f.key == "program" and _NAME.fullmatch(f.value) and f.text is not None and len(said) < PROBED:
            said.setdefault(f.value, bool(f.text.strip()))
    return said


def missing(programs: list[Program], found: dict[str, bool]) -> list[tuple[Program, str]]:
    """(program, what the host said) for each program not there or not answered for: each refuses the host."""
    return [(p, f"none: `command -v {p.name}` finds nothing on the host's PATH" if found.get(p.name) is False
             else NO_ANSWER) for p in programs if found.get(p.name) is not True]
