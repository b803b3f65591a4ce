"""Thin pyinfra facts: one command each, parsed by fleet/rollout/parse.py (and gpus.py, fleet/engine/parse.py,
fleet/weights/parse.py).

Every command exits 0 and reports outcomes in records (fleet/core/wire.py: a marker line
`@@key=value`, then the host's bytes for it as one base64 line): pyinfra turns a fact's
non-zero exit into "no data", which would make "nvidia-smi missing" look the same as "no
GPUs", and nothing a host holds (a config.json, a drop-in, a process's arguments) may
travel raw, where it could forge a marker or stop the reading. Each command's own stderr
is dropped (`quiet`): what a step has to say is in its records.
"""

from __future__ import annotations

from fleet.core import wire
from fleet.core.bounds import bounded
from fleet.core.wire import BLOCK_LIMIT, block

def quiet(command: str) -> str:
    """A fact's whole command, its stray stderr dropped: pyinfra reads stderr as UTF-8 too."""
    return f"{{ {command}\n}} 2>/dev/null; true"


def captured(key: str, command: str, timeout_s: float = 0, keep: str = "") -> str:
    """A record `@@key=<exit status>` whose data is the (bounded) command's stdout and stderr (of a
    successful one, what the filter `keep` keeps)."""
    return wire.captured(key, bounded(command, timeout_s), keep)


def captured_apart(key: str, command: str, timeout_s: float = 0) -> str:
    """As captured(), but stderr in a record of its own, `@@stderr`: a program that warns on
    stderr (nvidia-smi: "WARNING: infoROM is corrupted") keeps its stdout parseable. The stdout
    stays in $out for a following step."""
    stderr = block("stderr", 'cat "$err"')
    return (f"err=$(mktemp) || err=/dev/null; out=$({bounded(command, timeout_s)} 2>\"$err\"); "
            f"printf '@@{key}=%s\\n' \"$?\"; printf '%s' \"$out\" | head -c {BLOCK_LIMIT + 1} | base64 -w0; echo; "
            f"{stderr}; [ \"$err\" = /dev/null ] || rm -f \"$err\"")
