"""Small helpers shared by the task files (pyinfra-side only)."""

from __future__ import annotations

from pyinfra.api import StringCommand

from fleet import rollout
from fleet.report import RUN
from fleet.spec import ClassSpec


def run(host, command: str, timeout: float | None = None) -> tuple[bool, str]:
    """Run one shell command on the host at execution time: (ok, stdout)."""
    kwargs = {"_timeout": int(timeout)} if timeout else {}
    ok, output = host.run_shell_command(StringCommand(command), **kwargs)
    return ok, output.stdout if ok else output.output


def fail(host, spec: ClassSpec, *reasons: str) -> bool:
    """Fail the host after changes began: say why, record it, and free the deploy lock.
    Returns False, which is how a python.call callback fails its host in pyinfra."""
    report = RUN.host(host.name)
    report.verdict = "FAILED"
    for reason in reasons:
        host.log_styled(reason, fg="red")
        report.reasons.append(reason)
    run(host, rollout.unlock_command(spec))
    return False
