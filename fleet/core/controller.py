"""The controller's side of fleet/: what the decisions need from the machine the deploy runs on is read here, and
nowhere else in fleet/. The group_data files it runs (as pyinfra does), the environment and the secret files the
spec names, the programs it sends to hosts (fleet/programs/), who runs it. The decisions take what these return as
plain data, or one of these as a default their tests replace (environ, read_file)."""

from __future__ import annotations

import functools
import os
import runpy
import shlex
import socket
import time
from pathlib import Path
from typing import Any, Mapping

PROGRAMS = Path(__file__).parent.parent / "programs"
ENVIRON: Mapping[str, str] = os.environ  # where a secret's `env:` source is read


def read_file(path: Path) -> str:
    """A file the spec names on the controller (a secret's `file:` source, a certificate)."""
    return path.read_text()


def read_if_file(path: Path) -> str | None:
    """A file beside group_data (a tuning record) as text, None where there is none."""
    return path.read_text() if path.is_file() else None


def run_group_file(path: str) -> dict[str, Any]:
    """The names a group_data file defines, run as pyinfra runs it (the operator's own Python)."""
    return runpy.run_path(path)


def run_group_text(text: str, name: str) -> dict[str, Any]:
    """The names a group_data file's text defines, run as run_group_file runs the file."""
    namespace: dict[str, Any] = {}
    exec(compile(text, name, "exec"), namespace)  # noqa: S102 - the operator's own file
    return namespace


@functools.cache
def program(name: str) -> str:
    """fleet/programs/NAME, as sent whole (a Python program run with `python3 -c`, a file written on the host)."""
    return (PROGRAMS / name).read_text()


@functools.cache
def _shell_body(name: str) -> str:
    return "\n".join(line for line in program(name).splitlines() if line.strip() and not line.lstrip().startswith("#"))


def shell(name: str, *args: object) -> str:
    """fleet/programs/NAME (a POSIX sh program) run with ARGS as its positional parameters, each quoted, in a subshell
    of the command's shell (its exit ends only that); sent without its comments and blank lines."""
    return f"( set -- {' '.join(shlex.quote(str(a)) for a in args)}\n{_shell_body(name)}\n)"


@functools.cache
def operator() -> dict:
    """Who this deploy is, as written into a host's lock (the host adds the session): one answer for the whole run,
    since when it first asked."""
    return {"holder": f"{os.environ.get('USER', 'root')}@{socket.gethostname()}", "pid": os.getpid(),
            "since": int(time.time())}
