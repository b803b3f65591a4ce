"""The gateway host: its Python and machine (which wheels to upload), the smg installed, what its running smg
started with, and behind a floating address its keepalived, its handoff and its interfaces: one command."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import quiet
from fleet.gateway import floating
from fleet.turns import drains
from fleet.rollout.gate import CURL
from fleet.gateway.models import Gateway
from fleet.gateway.smg import GatewayHost, parse_gateway_host
from fleet.rollout.prerequisites import gateway_programs, probe_command
from fleet.core.wire import block, frames

VERSION = "import sys; print('%d.%d' % sys.version_info[:2])"
INSTALLED = "from importlib.metadata import version; print(version('smg'))"
FLOATING_FILES = (floating.CONFIG, floating.AUTH_FILE, floating.NOTIFY, floating.SYSCTL_FILE, floating.DROPIN)


def host_command(gw: Gateway, group: str) -> str:
    """What GatewayFacts reads, as one shell command: also what a gateway's turn reads of each gateway of
    its group (tasks/gateway_turns.py), parsed by fleet.gateway.smg.parse_gateway_host."""
    q = shlex.quote
    parts = [
        block("python", f"{q(gw.python)} -c {q(VERSION)}"),
        block("machine", "uname -m"),
        block("smg", f"{q(gw.venv)}/bin/python -c {q(INSTALLED)}"),
        block("active", f"systemctl is-active -- {q(gw.service_unit)}"),
        block("running", f"cat {q(gw.running_file)}"),
        block("generation", f"cat {q(gw.generation_file)}"),
        block("ready", f"{CURL} -s -o /dev/null --max-time 2 -w '%{{http_code}}' {q(gw.url('/readiness'))}"),
        probe_command([p.name for p in gateway_programs(gw.python, gw.floating is not None)]),
        block("drains", f"cat {q(drains.state_file(gw.unit))}"),
        block("clock", "date +%s"),
    ]
    if gw.floating is not None:
        parts += vrrp_blocks(gw, group) + [
            block("interfaces", "ip -o -4 addr show"),
            block("files", "sha1sum " + " ".join(q(p) for p in FLOATING_FILES)),
        ]
    return quiet("; ".join(parts))


def vrrp_blocks(gw: Gateway, group: str) -> list[str]:
    """keepalived's and the handoff's records (fleet.gateway.floating.parse_vrrp reads them)."""
    q, address = shlex.quote, gw.floating.address
    return [
        block("vrrp-installed", "command -v keepalived >/dev/null && command -v nft >/dev/null && echo yes"),
        block("vrrp-active", f"systemctl is-active -- {floating.UNIT}"),
        block("vrrp-enabled", f"systemctl is-enabled -- {floating.UNIT}"),
        block("vrrp-state", f"cat {q(floating.state_file(group))}"),
        block("vrrp-address", f"ip -o -4 addr show to {address}/32 | awk '{{print $2}}'"),
        block("vrrp-forward", f"ip -4 route show table {floating.ROUTES} | sed -n 's/.* via \\([0-9.]*\\).*/\\1/p'"),
        block("vrrp-handoff", f"cat {q(floating.handoff_file(gw.unit))}"),
        block("vrrp-stopped", f"cat {q(floating.stopped_file(gw.unit))}"),
        block("vrrp-connections", floating.connections_command(gw.port)),
    ]


class GatewayFacts(FactBase[GatewayHost]):
    def command(self, gw: Gateway, group: str) -> str:
        return host_command(gw, group)

    def process(self, output: list[str]) -> GatewayHost:
        return parse_gateway_host(output)


class GatewayStatus(FactBase[dict[str, str]]):
    """`make status` on the gateway host, one round trip: the unit, smg's version, /readiness, /workers; behind a
    floating address, keepalived's and the handoff's records too."""

    def command(self, gw: Gateway, group: str) -> str:
        q = shlex.quote
        auth = f"-H @{q(gw.auth_header_file)} " if gw.api_key is not None else ""
        return quiet("; ".join([
            block("unit", f"systemctl show -p ActiveState,SubState,UnitFileState -- {q(gw.service_unit)}"),
            block("installed", f"{q(gw.venv)}/bin/python -c {q(INSTALLED)}"),
            block("readiness", f"{CURL} -s -o /dev/null --max-time 5 -w '%{{http_code}}' {q(gw.url('/readiness'))}"),
            block("workers", f"{CURL} -s --max-time 5 {auth}{q(gw.url('/workers'))}"),
            *(vrrp_blocks(gw, group) if gw.floating is not None else []),
        ]))

    def process(self, output: list[str]) -> dict[str, str]:
        return {f.key: (f.text or "").strip() for f in frames(output)}
