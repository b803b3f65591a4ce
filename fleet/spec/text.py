"""Text and number types every section uses: constrained strings (text, paths), the strict
numbers and flags, the Strict base model, and Kind (how docs/spec.md names a type)."""

from __future__ import annotations

import typing
import unicodedata
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints


@dataclass(frozen=True)
class Kind:
    """How docs/spec.md names a constrained type (fleet/spec/docs.py); pydantic ignores it."""

    name: str


# --- text: every string that reaches argv, a unit, an env file or a shell ----------------------

# Unicode categories refused in any text: control characters (C0, DEL, C1 with U+0085), the line
# and paragraph separators U+2028/U+2029, lone surrogates. systemd, a shell or a log reader takes
# some of them for a line break (a newline in a unit adds a directive) or cannot encode them.
NOT_TEXT = {"Cc": "a control character", "Zl": "a line separator", "Zp": "a paragraph separator",
            "Cs": "a lone surrogate"}
TEXT_MAX = 4096  # characters in any text field: PATH_MAX, and far inside one argument (128 KiB)
NAME_MAX = 256  # characters of service.served_model_name (it is in every smoke request too)
# The smoke prompt travels as UTF-8 JSON (up to 4 bytes a character), base64 inside one `sh -c` argument
# (128 KiB at most, sudo's wrapping included): 4096 characters keep it under 30 KiB.
PROMPT_MAX = 4096


def _one_line(value: str) -> str:
    for i, c in enumerate(value):
        what = NOT_TEXT.get(unicodedata.category(c))
        if what:
            raise ValueError(f"expected text without control characters, line separators or lone surrogates; "
                             f"found {what} (U+{ord(c):04X}) at character {i}")
    return value


def text(max_length: int = TEXT_MAX) -> typing.Any:
    """A string type: at most max_length characters, none of NOT_TEXT."""
    return Annotated[str, StringConstraints(max_length=max_length), AfterValidator(_one_line),
                     Kind(f"text (≤ {max_length} chars)")]


Text = text()


PATH_BYTES, SEGMENT_BYTES = 4095, 255  # Linux's PATH_MAX (with its final NUL) and NAME_MAX


def _absolute(path: str) -> str:
    # The normal form systemd wants of an ExecStart= command (path_is_normalized), and one spelling
    # of each path for preflight's comparisons with what runs.
    segments = path.split("/")[1:]
    if not path.startswith("/") or any(s in ("", ".", "..") for s in segments):
        raise ValueError("an absolute path in normal form: starting with /, no empty, '.' or '..' segment "
                         "(no //, no trailing /)")
    if len(path.encode()) > PATH_BYTES or any(len(s.encode()) > SEGMENT_BYTES for s in segments):
        raise ValueError(f"a path Linux can hold: at most {PATH_BYTES} bytes, {SEGMENT_BYTES} a segment")
    return path


AbsPath = Annotated[Text, AfterValidator(_absolute), Kind("absolute path")]

NOT_IN_COMMAND = "\\\"'$"


def _command(path: str) -> str:
    # The path of ExecStart='s command: systemd refuses quotes and backslashes there (string_is_safe)
    # and expands no $ in it, where the quoting of an argument would double it.
    found = sorted(set(path) & set(NOT_IN_COMMAND))
    if found:
        raise ValueError(f"a path ExecStart= runs: none of {' '.join(NOT_IN_COMMAND)}; found {' '.join(found)}")
    return path


CommandPath = Annotated[AbsPath, AfterValidator(_command), Kind("absolute path, none of \\ \" ' $")]


class Strict(BaseModel):
    # Typos must not pass silently: every unknown key is an error. inf and nan are no durations.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# A number or flag as written: pydantic's lax mode would take "30000" or True for a port and 1 or "no" for
# a flag, silently. A whole number is a Number still (a timeout of 120).
Int = Annotated[int, Field(strict=True)]
Number = Annotated[float, Field(strict=True)]
Bool = Annotated[bool, Field(strict=True)]
