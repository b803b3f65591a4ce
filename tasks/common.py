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


def fail(host, spec: ClassSpec, *reasons: str, ours: bool = True) -> bool:
    """Fail the host at execution time: say why, record it, and free the deploy lock if it is
    ours (ours=False: another deploy holds it, and the host is refused untouched).
    Returns False, which is how a python.call callback fails its host in pyinfra."""
    report = RUN.host(host.name)
    report.verdict = "FAILED" if ours else "REFUSED"
    for reason in reasons:
        host.log_styled(reason, fg="red")
        report.reasons.append(reason)
    if ours:
        run(host, rollout.unlock_command(spec))
    else:
        report.action = "none"
    return False
