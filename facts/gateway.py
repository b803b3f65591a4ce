"""The gateway host: its Python and machine (which wheels to upload) and the smg installed."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import quiet
from fleet.gate import CURL
from fleet.gateway import GatewayHost, parse_gateway_host
from fleet.wire import block, frames

VERSION = "import sys; print('%d.%d' % sys.version_info[:2])"
INSTALLED = "from importlib.metadata import version; print(version('smg'))"


class GatewayFacts(FactBase[GatewayHost]):
    def command(self, python: str, venv: str) -> str:
        return quiet("; ".join([
            block("python", f"{shlex.quote(python)} -c {shlex.quote(VERSION)}"),
            block("machine", "uname -m"),
            block("smg", f"{shlex.quote(venv)}/bin/python -c {shlex.quote(INSTALLED)}"),
        ]))

    def process(self, output: list[str]) -> GatewayHost:
        return parse_gateway_host(output)


class GatewayStatus(FactBase[dict[str, str]]):
    """`make status` on the gateway host, one round trip: the unit, smg's version, /readiness, /workers."""

    def command(self, unit: str, venv: str, readiness_url: str, workers_url: str, auth_file: str | None) -> str:
        auth = f"-H @{shlex.quote(auth_file)} " if auth_file else ""
        return quiet("; ".join([
            block("unit", f"systemctl show -p ActiveState,SubState,UnitFileState -- {shlex.quote(unit)}"),
            block("installed", f"{shlex.quote(venv)}/bin/python -c {shlex.quote(INSTALLED)}"),
            block("readiness", f"{CURL} -s -o /dev/null --max-time 5 -w '%{{http_code}}' {shlex.quote(readiness_url)}"),
            block("workers", f"{CURL} -s --max-time 5 {auth}{shlex.quote(workers_url)}"),
        ]))

    def process(self, output: list[str]) -> dict[str, str]:
        return {f.key: (f.text or "").strip() for f in frames(output)}
