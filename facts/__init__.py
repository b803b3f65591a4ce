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


def captured(key: str, command: str) -> str:
    """Shell that runs `command` and prints `@@key=<exit status>`, then its output.

    stderr is kept: that is where a failing command explains itself. The output
    stays in $out for a following step.
    """
    return f"out=$({command} 2>&1); printf '{MARK}{key}=%s\\n%s\\n' \"$?\" \"$out\""
