"""Small helpers shared by the task files (pyinfra-side only)."""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass

from pyinfra.api import StringCommand
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments

from fleet import wire
from fleet.report import RUN


@dataclass
class Begun:
    """A rollout that has begun on a host (lock taken, pending record written) and not ended."""

    pf: object  # tasks.preflight.Preflight
    applied: bool = False  # its files went live: the new service may have been started
    workloads_stopped: bool = False  # its workloads' stop was asked for: a rollback gives them back


# host name -> its begun rollout: a failed operation rolls it back; an interrupt leaves it to the next run
BEGUN: dict[str, Begun] = {}


def connector_arguments(host, **given) -> dict:
    """The host's connector settings (_sudo, _su_user, _doas ... from its data, as pyinfra's own
    operations and facts take them) with `given` over them."""
    arguments, _ = pop_global_arguments(host.state, host, dict(given))
    return {k: v for k, v in arguments.items() if k in CONNECTOR_ARGUMENT_KEYS}


ESCALATIONS = ("_sudo", "_su_user", "_doas")  # connector settings that run commands as another user


def escalates(arguments: dict) -> bool:
    """The commands run as another user than the login (sudo, su, doas)."""
    return any(arguments.get(k) for k in ESCALATIONS)


def as_login(arguments: dict) -> dict:
    """The same connector settings, as the login user itself."""
    return {k: v for k, v in arguments.items() if k not in ESCALATIONS}


def run(host, command: str, timeout: float | None = None) -> tuple[bool, str]:
    """Run one shell command on the host at execution time, as pyinfra's operations would (sudo
    if the host's data says so): (ok, what it printed, stdout and stderr in order). The output
    crosses as base64 (fleet.wire.transported) and is read back printable: any byte a host sends
    (a journal line, a server's reply) is text here, never an error of the reading."""
    extra = {"_timeout": int(timeout)} if timeout else {}
    ok, output = host.run_shell_command(StringCommand(wire.transported(command)),
                                        **connector_arguments(host, **extra))
    said = wire.untransported(output.stdout)
    # what ran the command (sudo, the login shell) speaks on stderr, outside the transport
    return ok, said if ok or not output.stderr else f"{said}\n{wire.printable(output.stderr)}"


def fail(host, *reasons: str, verdict: str = "FAILED") -> bool:
    """Fail the host at execution time: say why and put it in the summary. Returns False, which
    is how a python.call callback fails its host in pyinfra (a begun rollout then rolls back)."""
    report = RUN.host(host.name)
    report.verdict = verdict
    for reason in reasons:
        host.log_styled(reason, fg="red")
        report.reasons.append(reason)
    return False


@functools.cache
def repo_state() -> tuple[str, bool | None]:
    """The commit of the repo the deploy runs in (where its group_data is) and whether it has
    uncommitted changes: ('', None) outside git."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return "", None
        return head.stdout.strip(), bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return "", None
