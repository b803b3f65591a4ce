"""A real pyinfra Host (its data, connector settings, state) whose commands and uploads are
answered by the test: the task code runs as in a deploy, no host is contacted."""

from __future__ import annotations

import base64
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Union

import pytest

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
    logged: list[str] = field(default_factory=list)  # what the task said on the host's log

    def commands(self) -> list[str]:
        return [c.command for c in self.calls if c.kind == "command"]


_TRANSPORTED = re.compile(r"^out=\$\( \{ (.*)\n\} 2>&1 \); rc=\$\?; printf", re.S)


def fake_host(answer: Callable[[str], tuple[bool, str]], groups: dict[str, dict] | None = None, **data) -> Fake:
    """A host named `h` with `data` (e.g. _sudo=True), in `groups` (name -> the group's data); `answer`
    gets each command as the task built it (the transport's wrapper taken off) and returns (ok, stdout),
    sent back as the transport does."""
    return fake_hosts({"h": answer}, {"h": data}, {g: (["h"], d) for g, d in (groups or {}).items()})["h"]


def fake_hosts(answers: dict[str, Callable[[str], tuple[bool, str]]], data: dict[str, dict] | None = None,
               groups: dict[str, tuple[list[str], dict]] | None = None) -> dict[str, Fake]:
    """Hosts of one inventory (in the order of `answers`), each answered by its own function;
    groups: name -> (its hosts, its data)."""
    inventory = Inventory(([(name, (data or {}).get(name, {})) for name in answers], {}), **(groups or {}))
    State(inventory, Config())
    return {name: _faked(inventory.get_host(name), answer) for name, answer in answers.items()}


def _faked(host, answer) -> Fake:
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
    host.log_styled = lambda message, *a, **k: fake.logged.append(message)
    host.log = lambda message, *a, **k: fake.logged.append(message)
    return fake


# --- shared by the tests of tasks/ ---------------------------------------------------------

Answer = Union[str, tuple[bool, str], BaseException]  # what a command prints (ok), (ok, what it prints), or raised


class Script:
    """An `answer` for fake_host: the first rule whose needle the command holds (in the rules' order)
    answers with its answers in turn, the last one again; any other command succeeds, printing nothing."""

    def __init__(self, rules: dict[str, Answer | list[Answer]], default: Answer = (True, ""),
                 key: Callable[[str], str] | None = None):
        """key: the rules' needles are matched whole against key(command) (a command's name) instead."""
        self.rules = [(needle, list(a) if isinstance(a, list) else [a]) for needle, a in rules.items()]
        self.default, self.key = default, key

    def __call__(self, command: str) -> tuple[bool, str]:
        for needle, answers in self.rules:
            if (needle == self.key(command)) if self.key else (needle in command):
                said = answers.pop(0) if len(answers) > 1 else answers[0]
                if isinstance(said, BaseException):  # the connection breaks under it, say
                    raise said
                return (True, said) if isinstance(said, str) else said
        return (True, self.default) if isinstance(self.default, str) else self.default


class Clock:
    """A scripted stand-in for the `time` module of a task: time() and monotonic() move only when
    the task sleeps; the rest is the real module's."""

    def __init__(self, t: float = 1_796_040_000.0):
        self.t, self.slept = t, []

    def time(self) -> float:
        return self.t

    monotonic = time

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds

    def __getattr__(self, name):
        return getattr(time, name)


class _Now:
    run = None  # the run of the test that runs now (fresh_run)


def this_run():
    """The test's run (adapter.run.Run): its summary rows, hosts begun and given up, classes rolling."""
    return _Now.run


@pytest.fixture(autouse=True)
def fresh_run(monkeypatch):
    """A run of its own for each test (import it into a test module), whatever State its fake hosts
    belong to: an empty summary that prints nothing at exit, no host given up or begun, no class rolling."""
    from fleet.core.report import RunReport
    from adapter import run as runs

    _Now.run = run = runs.Run(RunReport("test"))
    monkeypatch.setattr(runs, "of", lambda state: run)
    yield run
    for begun in run.begun.values():
        begun.end()
    _Now.run = None


def preflight_of(spec, facts, group: str = "pro6000", interrupted=None, rollback=None, stamp="20261130T120000Z"):
    """The Preflight a host of `facts` gets for `spec` (fleet.rollout.plan.plan, as tasks/preflight makes it)."""
    from builders import secrets_of
    from fleet.rollout.plan import declared_files, plan
    from tasks.preflight import Preflight

    secrets = secrets_of(spec)
    want = rollback.files if rollback else declared_files(spec, group, facts, secrets)
    return Preflight(group, spec, facts, secrets, plan(spec, want, facts, interrupted, stamp, 1_796_040_000,
                                                       "alice@laptop"), stamp, rollback)


# --- host answers, framed as the commands fleet/ builds print them ---------------------------

def observation(active: str = "active", sub: str = "running", pid: int = 4242, restarts: int = 0,
                health: int = 200, result: str = "success") -> str:
    """What fleet.rollout.gate.observe_command (or wait_command) prints."""
    from fleet.rollout.gate import OBSERVATION_MARK

    return (f"{OBSERVATION_MARK}\nActiveState={active}\nSubState={sub}\nMainPID={pid}\nNRestarts={restarts}\n"
            f"Result={result}\nhealth={health}\n")


def smoke_answer(http: int = 200, text: str = "Paris", tokens: int = 8, seconds: float = 0.5,
                 accept: float | None = 3.25, verify_ct: int = 3) -> str:
    """What fleet.rollout.gate.smoke_command prints: the chat completion's record (its meta_info saying the
    verify steps it took, as SGLang 0.5.23's does), then /server_info's."""
    import json

    from answers import answer, record

    reply = json.dumps({"choices": [{"message": {"content": text}, "meta_info": {"spec_verify_ct": verify_ct}}],
                        "usage": {"completion_tokens": tokens}})
    info = json.dumps({"internal_states": [{"avg_spec_accept_length": accept}]})
    return answer(record("chat", f"{reply}\nhttp={http} time={seconds}\n", value="0"), record("server-info", info))


def smi(*rows: tuple[int, str]) -> str:
    """What facts.gpu.GpuProcesses prints: nvidia-smi's process list, and each (pid, cgroup path)'s record."""
    from answers import answer, record

    listed = "\n".join(f"{pid}, python, 1024, GPU-0" for pid, _ in rows)
    return answer(record("nvidia-smi", listed, value="0"), *(record("cgroup", f"0::{cgroup}\n", value=str(pid))
                                                             for pid, cgroup in rows))
