"""The trust boundary: how a host's answer crosses to the controller, and the bounded readers of it.

Everything a host prints is untrusted input: a model's config.json, a drop-in, a process's
arguments, a record a crash left half-written, a server's JSON, nvidia-smi's CSV. So:

- Framing no content can forge. An answer is a sequence of records, each a marker line
  `@@key` or `@@key=value` (the value is text the command itself holds: a path from the spec,
  an exit status; never the host's) and one line of base64: the bytes the host produced for it.
  Content never travels raw, so no file can add a marker, and one without a final newline glues
  nothing to the next.
- Bytes decoded with replacement, and every control character but tab and newline shown as
  U+FFFD: a host's bytes can neither stop the reading (paramiko decodes UTF-8 strictly and
  drops the rest of the output) nor drive the operator's terminal.
- Bounded: every block is cut on the host at BLOCK_LIMIT (+1 byte, `head -c`) and a block over
  it is unreadable, never parsed short; JSON is read with finite numbers only and a depth limit.
What cannot be read raises Unreadable, which the callers turn into a refusal naming the host.

The shell side (`mark`, `block`, `captured`, `transported`) and the reading side live here
together so that one cannot change without the other.
"""

from __future__ import annotations

import binascii
import base64
import json
import math
import re
import shlex
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Callable

MARK = "@@"
BLOCK_LIMIT = 4 << 20  # bytes of one block: SGLang's --help is ~190 kB, a config.json a few kB
JSON_DEPTH = 64  # nesting a record or config.json may have (json.loads would recurse ~1000 deep)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# What a view's line may not hold besides those: tab and newline (a cell is one line), the line and paragraph
# separators, the bidirectional marks, embeddings, overrides and isolates (they reorder what follows them on the
# terminal), and lone surrogates (JSON's \ud800 escapes: printing one raises UnicodeEncodeError).
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
CELL = 100  # characters of a view's cell: a value a host or server said
LINE = 300  # characters of a view's line of its own: a reason, an alert, a diff's line
NO_ANSWER = "no answer from the host"  # a section or marker the command never printed
TIMED_OUT = "124"  # coreutils timeout's exit status (facts.bounded)
FIELD_LIMIT = 256  # characters of one value nvidia-smi or systemctl reports (a GPU name, a state)
_STRING = re.compile(r'"[^"]*"?')  # escapes removed first: a string ends at its next quote, or the text's end
_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # an opening bracket +1, a closing one -1 (signed bytes)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[{]}")))
_ASCII_INT = re.compile(r"-?[0-9]{1,18}")


class Unreadable(ValueError):
    """A host's answer that cannot be read: the message says what and why (host text only as a
    bounded, printable excerpt)."""


# --- the shell side ---------------------------------------------------------------------

def mark(key: str, value: str = "") -> str:
    """Shell printing the marker line `@@key[=value]` (printf: dash's echo rewrites backslashes)."""
    return f"printf '%s\\n' {shlex.quote(MARK + key + (f'={value}' if value else ''))}"


def data(command: str) -> str:
    """Shell printing what `command` writes on stdout as one base64 line (its stderr dropped)."""
    return f"{{ {command}\n}} 2>/dev/null | head -c {BLOCK_LIMIT + 1} | base64 -w0; echo"


def block(key: str, command: str, value: str = "") -> str:
    """A record: the marker, then `command`'s stdout as its data (its exit status not kept)."""
    return f"{mark(key, value)}; {data(command)}"


def captured(key: str, command: str, keep: str = "") -> str:
    """A record `@@key=<exit status>` whose data is `command`'s stdout and stderr, in order (where a
    failing command explains itself); `keep`, a filter, takes what of a successful output is sent.
    The output is held in $out, then encoded."""
    sent = f"if [ $rc = 0 ]; then printf '%s\\n' \"$out\" | {keep}; else printf '%s' \"$out\"; fi" if keep \
        else "printf '%s' \"$out\""
    return (f"out=$( {{ {command}\n}} 2>&1 ); rc=$?; printf '{MARK}{key}=%s\\n' $rc; "
            f"{{ {sent}; }} | head -c {BLOCK_LIMIT + 1} | base64 -w0; echo")


def transported(command: str) -> str:
    """`command` with its whole output (stdout and stderr, in order) crossing as one base64 line and
    its exit status kept: for the rollout's commands, whose output may hold any byte (a journal,
    a server's reply). The controller reads it back with `untransported`."""
    return (f"out=$( {{ {command}\n}} 2>&1 ); rc=$?; printf '%s' \"$out\" | head -c {BLOCK_LIMIT + 1} | "
            f"base64 -w0; echo; exit $rc")


# --- the reading side -------------------------------------------------------------------

def printable(text: str) -> str:
    """Text safe to show: control characters (but tab and newline) as U+FFFD."""
    return _CONTROL.sub("\ufffd", text)


def _cut(text: str, limit: int, unshown: re.Pattern) -> str:
    head = unshown.sub("\ufffd", text[:limit])  # cut first: a 4 MiB answer is rewritten no further than its limit
    return head if len(text) <= limit else head[: limit - 3] + "..."


def clipped(text: str, limit: int = 120) -> str:
    """Host text for a message: printable, stripped, at most `limit` characters."""
    return _cut(text.strip(), limit, _CONTROL)


def shown(value: object, limit: int = CELL, strip: bool = True) -> str:
    """What a host or server said (text, or a JSON value of any type), as a view shows it: one line, printable
    on any terminal (what _UNSHOWN lists as U+FFFD), stripped unless told (a diff's line keeps its indent), at most
    `limit` characters."""
    text = value if isinstance(value, str) else str(value)
    return _cut(text.strip() if strip else text, limit, _UNSHOWN)


def capped(items: list, most: int, line: Callable[[Any], str] = str) -> list[str]:
    """A view's list: the first `most` items, each as `line` writes it (only those: a server may send 40,000),
    then how many were left out."""
    lines = [line(item) for item in items[:most]]
    return lines if len(items) <= most else [*lines, f"... and {len(items) - most} more"]


def excerpt(text: str, limit: int = 120) -> str:
    """A bounded, printable quotation of host text for a message."""
    return repr(clipped(text, limit))


def _words(text: str | None) -> str:
    return clipped(" ".join((text or "").split()), 300)


def decode(line: str) -> str | None:
    """One data line -> its text; None if it is not base64 or exceeds BLOCK_LIMIT."""
    try:
        raw = base64.b64decode(line.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) > BLOCK_LIMIT:
        return None
    return printable(raw.decode("utf-8", "replace"))


def untransported(stdout: str) -> str:
    """What a `transported` command printed; text that is not its one base64 line (a shell that
    died before it, sudo's own words) is returned printable, as it came."""
    text = decode(stdout)
    return text if text is not None else printable(stdout)


@dataclass(frozen=True)
class Frame:
    key: str
    value: str
    text: str | None  # the record's data, decoded; None: none sent, or unreadable

    @property
    def marker(self) -> str:
        """The record's marker line, as the command printed it."""
        return f"{MARK}{self.key}" + (f"={self.value}" if self.value else "")


def lines_of(answer: str | list[str]) -> list[str]:
    """An answer's lines: a list as pyinfra gives them, or text (its final newline ends the last line)."""
    if isinstance(answer, list):
        return answer
    lines = answer.split("\n")
    return lines[:-1] if answer.endswith("\n") else lines


def frames(answer: str | list[str]) -> list[Frame]:
    """The records of an answer: each marker line, and the line after it as its data (an empty
    line is empty data). A line before the first marker (shell noise) is ignored; a marker
    followed by another marker, or by nothing, has no data (text None)."""
    found: list[Frame] = []
    key = value = None
    data_lines: list[str] = []
    has_data = False

    def close() -> None:
        if key is not None:
            found.append(Frame(key, value or "", decode("".join(data_lines)) if has_data else None))

    for line in lines_of(answer):
        if line.startswith(MARK):
            close()
            key, _, value = line[len(MARK):].partition("=")
            data_lines, has_data = [], False
        elif key is not None:
            data_lines.append(line)
            has_data = True
    close()
    return found


def sections(answer: str | list[str], key: str = "section") -> dict[str, list[str]]:
    """An answer made of parts (`@@section=NAME` markers, no data) -> NAME: that part's own lines."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    prefix = f"{MARK}{key}="
    for line in lines_of(answer):
        if line.startswith(prefix):
            current = parts.setdefault(line[len(prefix):], [])
        elif current is not None:
            current.append(line)
    return parts


def ascii_int(text: str | None, lo: int = 0, hi: int = 2**63 - 1) -> int | None:
    """An integer written in ASCII digits within [lo, hi]; None otherwise (a Unicode digit, [N/A],
    `[not set]`, 1e9, an absurd size)."""
    if text is None:
        return None
    text = text.strip()
    if not _ASCII_INT.fullmatch(text):
        return None
    n = int(text)
    return n if lo <= n <= hi else None


def finite(text: str | None) -> float | None:
    """A finite number, else None (nan, inf, 1e400, garbage)."""
    try:
        n = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return n if math.isfinite(n) else None


def _no_constants(name: str) -> Any:
    raise Unreadable(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    n = float(text)
    if not math.isfinite(n):
        raise Unreadable(f"{text[:40]} is not a finite number")
    return n


def _depth(text: str) -> int:
    r"""How deep text's arrays and objects nest, brackets in strings not counted: linear passes in C
    whatever the text (4 MiB of `[`, or an unterminated `"\"\"...`, on which a regex over whole strings
    backtracks quadratically). Escape pairs go first, left to right as JSON reads them (`\\`, then `\"`),
    then the strings, then the brackets' running sum."""
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    steps = _STRING.sub("", unescaped).encode("utf-8", "replace").translate(_STEPS, _NOT_BRACKETS)
    return max(accumulate(memoryview(steps).cast("b")), default=0)


def load_json(text: str | None, what: str) -> Any:
    """JSON a host sent, read with finite numbers only and at most JSON_DEPTH levels; Unreadable
    naming `what` and the reason otherwise."""
    if text is None:
        raise Unreadable(f"{what}: unreadable (not sent whole, or over {BLOCK_LIMIT} bytes)")
    deepest = _depth(text)
    if deepest > JSON_DEPTH:
        raise Unreadable(f"{what}: JSON nested {deepest} levels deep (at most {JSON_DEPTH})")
    try:
        return json.loads(text, parse_constant=_no_constants, parse_float=_finite_float)
    except Unreadable as e:
        raise Unreadable(f"{what}: {e}") from None
    except (ValueError, RecursionError) as e:
        raise Unreadable(f"{what}: not valid JSON ({str(e)[:120]})") from None
