"""The service as it runs: its main process's arguments, its drop-ins, and /health now."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from facts import quiet
from fleet.rollout.gate import CURL
from fleet.rollout.parse import ServiceRuntime, parse_service_runtime
from fleet.spec import SECRET_FLAGS
from fleet.core.wire import block, data

# A drop-in's path, then its text, as one record (the path is the host's text too).
DROPIN = data('printf "%s\\n" "$f"; cat -- "$f"')
# The process's argv a line each, secret flags' values masked (a server started by hand, or by
# an older deploy, may have its key there): facts are logged with --debug.
ARGV = "tr '\\0' '\\n' < /proc/$pid/cmdline | sed " + " ".join(
    f"-e '/^{flag}$/{{n;s/.*/***/;}}' -e 's/^{flag}=.*/{flag}=***/'" for flag in SECRET_FLAGS
)


class RunningService(FactBase[ServiceRuntime]):
    def command(self, unit: str, health_url: str) -> str:
        u = shlex.quote(unit)
        return quiet(
            f"pid=$(systemctl show -p MainPID --value -- {u}); case \"$pid\" in ''|*[!0-9]*) pid=0;; esac; "
            f"printf '@@cmdline=%s\\n' \"$pid\"; if [ \"$pid\" -gt 0 ]; then {data(ARGV)}; fi; "
            f"for f in $(systemctl show -p DropInPaths --value -- {u}); do "
            f"printf '@@dropin\\n'; {DROPIN}; done; "
            + block("health", f"{CURL} -s -o /dev/null -w '%{{http_code}}' --max-time 5 {shlex.quote(health_url)}")
        )

    def process(self, output: list[str]) -> ServiceRuntime:
        return parse_service_runtime(output)
