"""`make verify`'s connection: testinfra's commands run through pyinfra's own connection to a host.

testinfra's own backends connect by themselves (paramiko from an ssh_config file, ...). This one
runs each command on the pyinfra Host the inventory loader made, connected by pyinfra's
connector: the same user, key, port, host name, known hosts and ~/.ssh/config as
`pyinfra inventory.py deploy.py`, and as root through sudo/su/doas where the host's data says
so, as the deploy's own commands run (tasks.common.run). No connection setting is written
anywhere.
"""

from __future__ import annotations

from typing import Any

import testinfra.host
from pyinfra.api import StringCommand
from testinfra.backend.base import BaseBackend, CommandResult

from adapter.connection import connector_arguments
from fleet.spec.secrets import ARGUMENTS, HostSecret, parse_arguments, secrets_in_arguments


class CommandDidNotRun(RuntimeError):
    """The host did not run a command to its end (sudo refused, the connection lost)."""


# pyinfra hands a command's output over as lines with their newlines cut, and only whether it
# succeeded; testinfra's checks need both exact (a file's content, `systemctl is-active`'s 3).
# A newline after each stream and the exit status on a last line of stdout carry them across.
# The command runs in a subshell of the shell pyinfra starts (the host's _shell_executable, as
# the deploy's commands), so its own `exit` ends only it.
def framed(command: str) -> str:
    return f"(\n{command}\n); status=$?; printf '\\n' >&2; printf '\\n%s\\n' \"$status\""


def unframed(host: str, command: str, ok: bool, stdout: str, stderr: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the command as it ran; raises if the frame did not
    finish (its last command always succeeds, so a failure means the command never ran or was cut)."""
    out, _, status = stdout.rpartition("\n")
    if not ok or not status.isdigit():
        found = "\n".join(s for s in (stdout, stderr) if s) or "no output"
        raise CommandDidNotRun(f"{host}: expected `{command}` to run to its end, found: {found}")
    return int(status), out, stderr


class PyinfraBackend(BaseBackend):
    NAME = "pyinfra"

    def __init__(self, host):
        self.pyinfra_host = host  # connected by pyinfra
        # testinfra's own sudo stays off unless a check asks for it (host.sudo()): pyinfra's
        # connector arguments already escalate as the host's data says
        super().__init__(host.name)

    def run(self, command: str, *args: str, **kwargs: Any) -> CommandResult:
        command = self.get_command(command, *args)
        host = self.pyinfra_host
        ok, output = host.run_shell_command(StringCommand(framed(command)), **connector_arguments(host))
        rc, stdout, stderr = unframed(host.name, command, ok, output.stdout, output.stderr)
        return self.result(rc, self.encode(command), stdout, stderr)


def as_node(host) -> testinfra.host.Host:
    """A testinfra Host (host.file, host.service, host.run ...) over a connected pyinfra Host."""
    node = testinfra.host.Host(PyinfraBackend(host))
    node.backend.set_host(node)
    return node


def secrets_shown(node: testinfra.host.Host, secrets: list[HostSecret]) -> list[str]:
    """Where the host's processes' arguments hold one of its secrets, read from the 0600 files the deploy left
    there (make verify runs without the operator's secrets); a secret its file does not hold is named too."""
    values, problems = {}, []
    for s in secrets:
        f = node.file(s.path)
        values[s.name] = s.value(f.content_string) if f.exists else None
        if values[s.name] is None:
            problems.append(f"{s.name}: expected a line '{s.before}...' in {s.path}, found none: not looked for")
    processes, unreadable = parse_arguments(node.check_output(ARGUMENTS))
    return problems + unreadable + secrets_in_arguments(processes, {k: v for k, v in values.items() if v})
