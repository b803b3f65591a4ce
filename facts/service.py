"""The service as it runs: its main process's arguments, its drop-ins, and /health now."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from fleet.parse import MARK, ServiceRuntime, parse_service_runtime

# The process's argv a line each, the API key's value masked: facts are logged with --debug.
ARGV = (
    "tr '\\0' '\\n' < /proc/$pid/cmdline 2>/dev/null "
    "| sed -e '/^--api-key$/{n;s/.*/***/;}' -e 's/^--api-key=.*/--api-key=***/'"
)


class RunningService(FactBase[ServiceRuntime]):
    def command(self, unit: str, health_url: str) -> str:
        u = shlex.quote(unit)
        return (
            f"pid=$(systemctl show -p MainPID --value {u} 2>/dev/null); "
            f"echo \"{MARK}cmdline=$pid\"; if [ \"${{pid:-0}}\" -gt 0 ]; then {ARGV}; fi; "
            f"for f in $(systemctl show -p DropInPaths --value {u} 2>/dev/null); do "
            f"echo \"{MARK}dropin=$f\"; cat \"$f\" 2>/dev/null; done; "
            f"echo \"{MARK}health=$(curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 {shlex.quote(health_url)})\"; true"
        )

    def process(self, output: list[str]) -> ServiceRuntime:
        return parse_service_runtime("\n".join(output))
