"""What the declared launcher says of its SGLang: framed text in, an Engine out (its version, algorithms, flags).

The engine fact (facts/sglang.py) runs `import sglang` and `--help` at the launcher; the guards, the plan
and the engine's install read the answer. A reader of untrusted input, as fleet/rollout/parse.py says.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

from fleet.core.wire import NO_ANSWER, TIMED_OUT, _words, clipped, frames


class EngineStatus(StrEnum):
    """What the declared launcher came to: the guards and the plan steer by it (no launcher: an engine to install)."""

    OK = "ok"
    NO_LAUNCHER = "no launcher"
    NOT_IMPORTABLE = "not importable"


@dataclass(frozen=True)
class Engine:
    """SGLang at the declared launcher: its version, speculative algorithms and flags."""

    status: EngineStatus
    version: str = ""
    algorithms: tuple[str, ...] = ()
    flags: frozenset[str] = frozenset()
    message: str = ""  # why it is not importable
    cached: bool = False  # read from the host's engine cache: nothing was imported

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", EngineStatus(self.status))


def _last_line(text: str | None) -> str:
    return next((line.strip() for line in reversed((text or "").split("\n")) if line.strip()), "")


_OPTION_LINE = re.compile(r"^  (-\S.*)$")  # argparse: options at indent 2, help text deeper
_ALGORITHM = re.compile(r"[A-Za-z0-9_]{1,32}")


def parse_flags(help_text: str) -> frozenset[str]:
    """Every option string `--help` lists, aliases included (`--model-path, --model`)."""
    flags = set()
    for line in help_text.splitlines():
        m = _OPTION_LINE.match(line)
        if m:
            invocation = re.split(r"\s{2,}", m.group(1))[0]  # help text may follow on the same line
            flags.update(part.split(" ", 1)[0] for part in invocation.split(", "))
    return frozenset(flags)


def _option_help(help_text: str, flag: str) -> str:
    """An option's invocation and help text, joined into one line."""
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        m = _OPTION_LINE.match(line)
        if m and m.group(1).split(" ", 1)[0].rstrip(",") == flag:
            block = [line]
            for more in lines[i + 1 :]:
                if _OPTION_LINE.match(more) or not more.startswith(" "):
                    break
                block.append(more)
            return " ".join(b.strip() for b in block)
    return ""


def parse_algorithms(help_text: str) -> tuple[str, ...]:
    """The speculative algorithms `--help` names: 0.5.23 lists "Builtins: EAGLE, ..." in the
    help text; engines with fixed choices show them as `{EAGLE,EAGLE3,...}`."""
    text = _option_help(help_text, "--speculative-algorithm")
    m = re.search(r"--speculative-algorithm \{([^}]*)\}", text) or re.search(r"Builtins:\s*([A-Za-z0-9_, ]+)", text)
    if not m:
        return ()
    return tuple(a.strip() for a in m.group(1).split(",") if _ALGORITHM.fullmatch(a.strip()))


@functools.lru_cache(maxsize=16)
def _help_facts(help_text: str) -> tuple[tuple[str, ...], frozenset[str]]:
    # A fleet's hosts mostly run the same engine: its --help (190 kB) is parsed once per run.
    return parse_algorithms(help_text), parse_flags(help_text)


def parse_engine(answer: str | list[str]) -> Engine:
    """`@@launcher=missing`, or `@@version=RC` and `@@help=RC` records (import sglang; --help),
    either as they ran or inside `@@engine-cache=hit` (the host's cached answer, itself framed)."""
    found = frames(answer)
    parts = {f.key: f for f in found}
    if "launcher" in parts:
        return Engine(EngineStatus.NO_LAUNCHER)
    cached = "engine-cache" in parts
    if cached:
        parts = {f.key: f for f in frames(parts["engine-cache"].text or "")}
    for step, what in (("version", "import sglang"), ("help", "sglang.launch_server --help")):
        f = parts.get(step)
        if f is not None and f.value == TIMED_OUT:
            return Engine(EngineStatus.NOT_IMPORTABLE, message=f"{what} hung and was killed by the command timeout")
        if f is None or f.value != "0" or f.text is None:
            found_text = (f"{what} exited {_words(f.value)}: {clipped(_last_line(f.text), 300) or '(no message)'}"
                          if f is not None and f.value != "0" else NO_ANSWER)
            return Engine(EngineStatus.NOT_IMPORTABLE, message=found_text)
    algorithms, flags = _help_facts(parts["help"].text)
    return Engine(EngineStatus.OK, cached=cached, version=_last_line(parts["version"].text)[:64],  # after any warnings
                  algorithms=algorithms, flags=flags)
