"""The workloads section: the GPU jobs stopped in the host's turn and given back on a rollback
(services, scopes, processes), and the glob their patterns match with."""

from __future__ import annotations

import re
import typing
from typing import Annotated, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    WrapValidator,
    model_validator,
)

from fleet.spec.names import UNIT_NAME_MAX, UNIT_RULE, WorkloadUnit
from fleet.spec.text import Kind, Number, Strict, Text, _absolute, text


def glob_matches(pattern: str, text: str) -> bool:
    """`text` matches `pattern` whole, where `*` is any characters (none too) and `?` one, every
    other character itself. Backtracks to the last `*` only: O(len(pattern) * len(text)) at worst,
    whatever a host's text is (a regex of many `.*` is not)."""
    p = t = 0
    star, mark = -1, 0
    while t < len(text):
        if p < len(pattern) and pattern[p] != "*" and pattern[p] in ("?", text[t]):
            p, t = p + 1, t + 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark, p = p, t, p + 1
        elif star >= 0:
            mark += 1
            p, t = star + 1, mark
        else:
            return False
    return pattern[p:].strip("*") == ""


# --- workloads: the GPU jobs stopped in the host's turn and given back on a rollback -------------

WORKLOAD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")  # no '.': never mistaken for a unit
SCOPE_PATTERN = re.compile(r"^(?![.-])[A-Za-z0-9:_.\\@*?-]{1,249}\.scope\Z")
GLOB_MAX = 1024  # characters of a process pattern: matching costs pattern x text at worst
GLOB_RULE = "`*` matches any characters, `?` one, every other character itself"
ARGV_MAX = 64  # arguments of a give-back command


def _workload_name(v: str) -> str:
    if not WORKLOAD_NAME.match(v):
        raise ValueError("a name of ASCII letters, digits, - and _, starting with a letter or digit, at most 64 "
                         "characters")
    return v


def _scope_pattern(v: str) -> str:
    if not SCOPE_PATTERN.match(v):
        raise ValueError(f"a scope's unit name ending in .scope, {GLOB_RULE}: {UNIT_RULE}, `*` and `?`, at most "
                         f"{UNIT_NAME_MAX} characters (e.g. 'docker-*.scope')")
    if not v.removesuffix(".scope").strip("*?"):
        raise ValueError("a pattern naming the scopes' kind, e.g. 'docker-*.scope': this one matches every scope, "
                         "ssh logins' session-N.scope too")
    return v


def _glob(v: str) -> str:
    if not v.strip("*?"):
        raise ValueError("a pattern with a character that is not a wildcard: this one matches every process")
    return v


def _argv(argv: tuple[str, ...]) -> tuple[str, ...]:
    try:
        _absolute(argv[0])  # no PATH lookup: the host's PATH does not choose the program
    except ValueError as e:
        raise ValueError(f"its first element, the program, as {e}") from None
    return argv


def _give_back_kind(v: typing.Any) -> str:
    # False is the declaration "not given back"; 0 or "false" would be a slip, not one
    return "false" if v is False else "command"


def _a_command(v: typing.Any) -> typing.Any:
    if not isinstance(v, (list, tuple)):
        raise ValueError("false (it is not given back) or the command that starts it again, an argv list such as "
                         "['/usr/bin/docker', 'start', 'trainer']")
    return v


WorkloadName = Annotated[str, AfterValidator(_workload_name), Kind("name")]
ScopePattern = Annotated[str, AfterValidator(_scope_pattern), Kind("scope pattern")]
Glob = Annotated[text(GLOB_MAX), AfterValidator(_glob), Kind(f"pattern (≤ {GLOB_MAX} chars)")]
# a tuple: a workload is hashable (frozen) like the spec's other values
Argv = Annotated[tuple[Text, ...], BeforeValidator(_a_command), Field(min_length=1, max_length=ARGV_MAX),
                 AfterValidator(_argv), Kind("argv list (absolute path first)")]
GiveBack = Annotated[Union[Annotated[Literal[False], Tag("false")], Annotated[Argv, Tag("command")]],
                     Discriminator(_give_back_kind), Kind("false | argv list (absolute path first)")]

GIVE_BACK = (
    "How a rollback starts it again, required (the deploy cannot restart a scope or a process by itself): "
    "`false`, it is not given back and the summary row and the deploy record say `<name> was not restarted "
    "(declared so)`; or the command that starts it, an argv list whose first element is an absolute path, e.g. "
    "`['/usr/bin/docker', 'start', 'trainer']`. The command runs as root on the host only if this run (or the "
    "interrupted one it took over) stopped the workload: each element quoted as one argument, run directly (no "
    "shell, no PATH lookup), stdin from /dev/null, its output to the state directory's `give-back.<name>.log`, "
    "killed after readiness.workload_release_timeout_s. It must return once the workload runs (as `docker start` "
    "does); the workload must then hold GPU memory again within readiness.workload_release_timeout_s. Root adds no "
    "trust: the command is group_data's, never a host's, and group_data already names what root runs "
    "(service.launcher)."
)


class ScopeWorkload(Strict):
    """A workload in a systemd scope: a container (docker-<id>.scope, libpod-<id>.scope), a Slurm step
    (slurmstepd.scope), a `systemd-run --scope` job. A GPU process is its if its cgroup's unit (the first
    unit below the slices, as `systemctl status PID` names it) matches `scope`."""

    name: WorkloadName = Field(description="What the summary, the plan and the deploy records call it: ASCII "
                               "letters, digits, - and _, at most 64 characters; unique among the workloads.")
    scope: ScopePattern = Field(description="The scope's unit name, " + GLOB_RULE + " (e.g. 'docker-*.scope'): "
                                "each matching scope that holds a GPU is stopped with `systemctl stop` (SIGTERM to "
                                "its processes, SIGKILL after the scope's TimeoutStopSec). A container with a restart "
                                "policy comes back by itself: the stop then fails on the release wait, and the "
                                "host rolls back.")
    give_back: GiveBack = Field(description=GIVE_BACK)

    def matches(self, unit: str | None, process_name: str, command_line: str | None) -> bool:
        return unit is not None and glob_matches(self.scope, unit)  # the pattern ends in .scope: scopes only


class ProcessWorkload(Strict):
    """A workload of bare processes (a `torchrun` started by hand in tmux, a job under nohup): a GPU process
    is its if its name or its command line matches the declared pattern. Only the GPU processes found are
    stopped: a supervisor that restarts them (torchrun --max-restarts, a restart loop) brings them back,
    and the stop then fails on the release wait; declare such a job by its service or scope."""

    name: WorkloadName = Field(description="What the summary, the plan and the deploy records call it: ASCII "
                               "letters, digits, - and _, at most 64 characters; unique among the workloads.")
    process_name: Glob | None = Field(None, description="The process name as nvidia-smi lists it "
                                      "(`process_name`, e.g. '/usr/bin/python3'), " + GLOB_RULE + ". Exactly one "
                                      "of process_name and command_line.")
    command_line: Glob | None = Field(None, description="The process's command line as /proc/PID/cmdline holds it, "
                                      "its arguments joined by single spaces (as `ps -o args` shows them; at most "
                                      "its first 8192 characters), " + GLOB_RULE + ", e.g. '*torchrun*train.py*'.")
    kill_after_s: Number = Field(30, ge=1, le=600, description="The stop sends SIGTERM to each process found, and "
                                 "SIGKILL to one still running after this, 1..600 s; a process whose pid another "
                                 "process took meanwhile (its start time differs) is not signalled.")
    give_back: GiveBack = Field(description=GIVE_BACK)

    @model_validator(mode="after")
    def _one_pattern(self) -> ProcessWorkload:
        if (self.process_name is None) == (self.command_line is None):
            raise ValueError("exactly one of process_name (nvidia-smi's process name) or command_line (its "
                             "arguments) to match the processes by")
        return self

    def matches(self, unit: str | None, process_name: str, command_line: str | None) -> bool:
        if self.process_name is not None:
            return glob_matches(self.process_name, process_name)
        return command_line is not None and glob_matches(self.command_line, command_line)


def _workload_kind(v: typing.Any) -> str | None:
    if isinstance(v, str):
        return "service"
    if isinstance(v, BaseModel):  # a spec validated again (model_validate of a ClassSpec's fields)
        v = v.model_dump()
    if isinstance(v, dict):
        return "scope" if "scope" in v else "process" if {"process_name", "command_line"} & set(v) else None
    return None


WORKLOAD_KINDS = ("a service's unit name (e.g. 'dflash-train'), or a table with `scope` (a scope workload) or "
                  "`process_name` or `command_line` (a process workload), each with name and give_back")


def _unit_at_the_element(v: typing.Any, handler: typing.Any) -> typing.Any:
    # A refused unit name is reported at workloads.N, as before tables came: not at workloads.N.service
    try:
        return handler(v)
    except ValidationError as e:
        if isinstance(v, str):
            raise ValueError(e.errors()[0]["msg"].removeprefix("Value error, ")) from None
        raise


Workload = Annotated[
    Union[Annotated[WorkloadUnit, Tag("service")], Annotated[ScopeWorkload, Tag("scope")],
          Annotated[ProcessWorkload, Tag("process")]],
    Discriminator(_workload_kind, custom_error_type="workload_kind", custom_error_message=f"expected {WORKLOAD_KINDS}"),
    WrapValidator(_unit_at_the_element),
]
HeldWorkload = ScopeWorkload | ProcessWorkload  # a workload systemd does not know by a name of ours


def workload_name(w: str | HeldWorkload) -> str:
    """A service workload's unit, another's declared name."""
    return w if isinstance(w, str) else w.name
