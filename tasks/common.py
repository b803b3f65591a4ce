"""Small helpers shared by the task files (pyinfra-side only)."""

from __future__ import annotations

from pyinfra.api import StringCommand


def run(host, command: str, timeout: float | None = None) -> tuple[bool, str]:
    """Run one shell command on the host at execution time: (ok, stdout)."""
    kwargs = {"_timeout": int(timeout)} if timeout else {}
    ok, output = host.run_shell_command(StringCommand(command), **kwargs)
    return ok, output.stdout if ok else output.output
