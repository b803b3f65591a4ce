"""Thin pyinfra facts: one command each, parsed by fleet/parse.py.

Every command exits 0 and reports outcomes in `@@key=value` marker lines: pyinfra
turns a fact's non-zero exit into "no data", which would make "nvidia-smi missing"
look the same as "no GPUs". These helpers write those lines.
"""

from __future__ import annotations

import shlex

from fleet.parse import MARK


def marker(key: str, value: str) -> str:
    """Shell that prints the marker line `@@key=value`."""
    return f"echo {shlex.quote(f'{MARK}{key}={value}')}"


def bounded(command: str, timeout_s: float) -> str:
    """`command` killed after timeout_s (a GPU fallen off the bus makes nvidia-smi hang for good):
    it exits 124 then (coreutils timeout; fleet.parse.TIMED_OUT), and the fact still answers."""
    return f"timeout -k 5 {max(1, int(timeout_s + 0.999))} {command}" if timeout_s else command


def captured(key: str, command: str, timeout_s: float = 0) -> str:
    """Shell that runs `command` and prints `@@key=<exit status>`, then its output.

    stderr is kept: that is where a failing command explains itself. The output
    stays in $out for a following step.
    """
    return f"out=$({bounded(command, timeout_s)} 2>&1); printf '{MARK}{key}=%s\\n%s\\n' \"$?\" \"$out\""


def captured_apart(key: str, command: str, timeout_s: float = 0) -> str:
    """As captured(), but stderr apart, after `@@stderr`: a program that warns on stderr (nvidia-smi:
    "WARNING: infoROM is corrupted") keeps its stdout parseable."""
    return (f"err=$(mktemp); out=$({bounded(command, timeout_s)} 2>\"$err\"); printf '{MARK}{key}=%s\\n%s\\n' "
            f"\"$?\" \"$out\"; echo {MARK}stderr; cat \"$err\"; rm -f \"$err\"")
