"""A real pyinfra Host (its data, connector settings, state) whose commands and uploads are
answered by the test: the task code runs as in a deploy, no host is contacted."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import Callable

from pyinfra.api import Config, Inventory, State
from pyinfra.connectors.util import CommandOutput, OutputLine


@dataclass
class Call:
    command: str  # as the task built it (inside the transport wrapper, if any)
    sudo: bool
    kind: str = "command"  # or "upload"


@dataclass
class Fake:
    host: object
    answer: Callable[[str], tuple[bool, str]]  # command -> (ok, what it prints)
    calls: list[Call] = field(default_factory=list)
    uploads: dict[str, str] = field(default_factory=dict)
    upload_fails: bool = False

    def commands(self) -> list[str]:
        return [c.command for c in self.calls if c.kind == "command"]


_TRANSPORTED = re.compile(r"^out=\$\( \{ (.*)\n\} 2>&1 \); rc=\$\?; printf", re.S)


def fake_host(answer: Callable[[str], tuple[bool, str]], **data) -> Fake:
    """A host named `h` with `data` (e.g. _sudo=True); `answer` gets each command as the task built
    it (the transport's wrapper taken off) and returns (ok, stdout), sent back as the transport does."""
    inventory = Inventory(([("h", data)], {}))
    State(inventory, Config())
    host = inventory.get_host("h")
    fake = Fake(host, answer)

    def run_shell_command(command, **kwargs):
        text = str(command.get_raw_value() if hasattr(command, "get_raw_value") else command)
        m = _TRANSPORTED.match(text)
        inner = m.group(1) if m else text
        fake.calls.append(Call(inner, bool(kwargs.get("_sudo"))))
        ok, out = answer(inner)
        printed = base64.b64encode(out.encode()).decode() if m else out
        return ok, CommandOutput([OutputLine("stdout", line) for line in printed.split("\n")])

    def put_file(src, dest, **kwargs):
        fake.calls.append(Call(dest, bool(kwargs.get("_sudo")), "upload"))
        if fake.upload_fails:
            raise OSError("the SFTP subsystem is not there")
        fake.uploads[dest] = src.read()
        return True

    host.run_shell_command = run_shell_command
    host.put_file = put_file
    host.log_styled = lambda *a, **k: None
    host.log = lambda *a, **k: None
    return fake
