"""The gateway host: its Python and machine (which wheels to upload) and the smg installed."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import marker
from fleet.gate import CURL
from fleet.gateway import GatewayHost, parse_gateway_host
from fleet.parse import sections

VERSION = "import sys; print('%d.%d' % sys.version_info[:2])"
INSTALLED = "from importlib.metadata import version; print(version('smg'))"


class GatewayFacts(FactBase[GatewayHost]):
    def command(self, python: str, venv: str) -> str:
        return (f"echo python=$({shlex.quote(python)} -c {shlex.quote(VERSION)} 2>/dev/null); "
                f"echo machine=$(uname -m); "
                f"echo smg=$({shlex.quote(venv)}/bin/python -c {shlex.quote(INSTALLED)} 2>/dev/null); true")

    def process(self, output: list[str]) -> GatewayHost:
        return parse_gateway_host("\n".join(output))


class GatewayStatus(FactBase[dict[str, str]]):
    """`make status` on the gateway host, one round trip: the unit, smg's version, /readiness, /workers."""

    def command(self, unit: str, venv: str, readiness_url: str, workers_url: str, auth_file: str | None) -> str:
        auth = f"-H @{shlex.quote(auth_file)} " if auth_file else ""
        return "; ".join([
            marker("section", "unit"), f"systemctl show -p ActiveState,SubState,UnitFileState {shlex.quote(unit)}",
            marker("section", "installed"), f"{shlex.quote(venv)}/bin/python -c {shlex.quote(INSTALLED)} 2>/dev/null",
            marker("section", "readiness"),
            f"{CURL} -s -o /dev/null --max-time 5 -w '%{{http_code}}\\n' {shlex.quote(readiness_url)}",
            marker("section", "workers"), f"{CURL} -s --max-time 5 {auth}{shlex.quote(workers_url)}; echo",
        ])

    def process(self, output: list[str]) -> dict[str, str]:
        return {k: "\n".join(v).strip() for k, v in sections("\n".join(output)).items()}
