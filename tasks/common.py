"""Small helpers shared by the task files (pyinfra-side only)."""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra.api import StringCommand

from fleet.report import RUN


@dataclass
class Begun:
    """A rollout that has begun on a host (lock taken, pending record written) and not ended."""

    pf: object  # tasks.preflight.Preflight
    applied: bool = False  # its files went live: the new service may have been started


# host name -> its begun rollout: a failed operation rolls it back; an interrupt leaves it to the next run
BEGUN: dict[str, Begun] = {}


def run(host, command: str, timeout: float | None = None) -> tuple[bool, str]:
    """Run one shell command on the host at execution time: (ok, stdout; stdout and stderr if it failed)."""
    kwargs = {"_timeout": int(timeout)} if timeout else {}
    ok, output = host.run_shell_command(StringCommand(command), **kwargs)
    return ok, output.stdout if ok else output.output


def fail(host, *reasons: str, verdict: str = "FAILED") -> bool:
    """Fail the host at execution time: say why and put it in the summary. Returns False, which
    is how a python.call callback fails its host in pyinfra (a begun rollout then rolls back)."""
    report = RUN.host(host.name)
    report.verdict = verdict
    for reason in reasons:
        host.log_styled(reason, fg="red")
        report.reasons.append(reason)
    return False
