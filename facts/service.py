"""The service as it runs: its main process's arguments, its drop-ins, and /health now."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from fleet.gate import CURL
from fleet.parse import MARK, ServiceRuntime, parse_service_runtime
from fleet.spec import SECRET_FLAGS

# The process's argv a line each, secret flags' values masked (a server started by hand, or by
# an older deploy, may have its key there): facts are logged with --debug.
ARGV = "tr '\\0' '\\n' < /proc/$pid/cmdline 2>/dev/null | sed " + " ".join(
    f"-e '/^{flag}$/{{n;s/.*/***/;}}' -e 's/^{flag}=.*/{flag}=***/'" for flag in SECRET_FLAGS
)


class RunningService(FactBase[ServiceRuntime]):
    def command(self, unit: str, health_url: str) -> str:
        u = shlex.quote(unit)
        return (
            f"pid=$(systemctl show -p MainPID --value {u} 2>/dev/null); "
            f"echo \"{MARK}cmdline=$pid\"; if [ \"${{pid:-0}}\" -gt 0 ]; then {ARGV}; fi; "
            f"for f in $(systemctl show -p DropInPaths --value {u} 2>/dev/null); do "
            f"echo \"{MARK}dropin=$f\"; cat \"$f\" 2>/dev/null; done; "
            f"echo \"{MARK}health=$({CURL} -s -o /dev/null -w '%{{http_code}}' --max-time 5 {shlex.quote(health_url)})\"; true"
        )

    def process(self, output: list[str]) -> ServiceRuntime:
        return parse_service_runtime("\n".join(output))
