"""Parsers of what the preflight commands (facts/) print on a host: framed text in, typed data out.

The commands always exit 0 and report what happened in records (fleet/core/wire.py: a marker line
`@@key=value`, then the host's bytes for it in base64): pyinfra reads a fact's non-zero exit
as "no data", and "not installed", "failed" and "nothing there" must stay different answers.
Everything here is a reader of untrusted input: numbers are ASCII and bounded, text is
printable and bounded, and what cannot be read becomes a failed answer saying why, never an
exception and never an empty list that would pass.

Here: systemd's units, the managed files and the deploy state, the running service, and HostFacts, which
gathers every fact's answer; the GPUs' readers are in fleet/rollout/gpus.py, the engine's in fleet/engine/parse.py,
a model directory's in fleet/weights/parse.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from fleet.engine.parse import Engine
from fleet.rollout.gpus import GpuList, GpuProcessList
from fleet.rollout.lock import LockFacts
from fleet.weights.parse import ModelDir
from fleet.core.wire import FIELD_LIMIT, Unreadable, _words, ascii_int, excerpt, frames

# systemctl show property -> UnitState field; the units fact asks for exactly these.
UNIT_PROPERTIES = {
    "Id": "id",
    "LoadState": "load_state",
    "ActiveState": "active_state",
    "SubState": "sub_state",
    "MainPID": "main_pid",
    "NRestarts": "n_restarts",
    "UnitFileState": "unit_file_state",
    "ExecMainStatus": "exec_main_status",
    "NeedDaemonReload": "need_daemon_reload",
}


@dataclass(frozen=True)
class UnitState:
    name: str  # as asked; `id` is systemd's canonical name
    id: str = ""
    load_state: str = ""
    active_state: str = ""
    sub_state: str = ""
    main_pid: int | None = None
    n_restarts: int | None = None
    unit_file_state: str = ""
    exec_main_status: int | None = None
    need_daemon_reload: str = ""  # "yes": the unit file changed on disk since systemd loaded it
    message: str = ""  # systemctl's words when it could not answer


@dataclass(frozen=True)
class FileState:
    """A managed file or directory as `stat -c '%a %U:%G'` (and sha1sum, for files) saw it."""

    mode: str
    owner: str
    sha1: str = ""


@dataclass(frozen=True)
class DeployState:
    """What earlier rollouts left: each managed file and directory (None: absent), the text of
    the files a diff shows, the deploy lock, the pending-rollout record (None: none) and the mark of a
    make tune that has not returned the host (None: none)."""

    files: dict[str, FileState | None]
    dirs: dict[str, FileState | None]
    contents: dict[str, str]
    lock: LockFacts
    pending: str | None
    unreadable: tuple[str, ...] = ()  # what the host answered that cannot be read (a refusal)
    tune: str | None = None

    def sha1(self, path: str) -> str | None:
        state = self.files.get(path)
        return state.sha1 if state else None


@dataclass(frozen=True)
class ServiceRuntime:
    """The service as it runs now: its main process's arguments (None: no process; an API key
    shown as ***), its drop-in files' text, and what /health answers (0: nothing)."""

    cmdline: tuple[str, ...] | None
    dropins: dict[str, str]
    health: int


@dataclass(frozen=True)
class HostFacts:
    """Everything preflight reads from a host, gathered in one round trip."""

    gpus: GpuList
    gpu_processes: GpuProcessList
    engine: Engine
    models: dict[str, ModelDir]
    units: dict[str, UnitState]
    deployed: DeployState
    runtime: ServiceRuntime
    systemd_version: int  # 0: unknown
    programs: dict[str, bool]  # each program the host answered for -> on its PATH (fleet/rollout/prerequisites.py)


_MODE = re.compile(r"[0-7]{3,4}")
_OWNER = re.compile(r"[^\s:]{1,64}:[^\s:]{1,64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")


def file_state(text: str | None) -> FileState | None:
    """`MODE USER:GROUP` then, for a file, its sha1; nothing: absent. Unreadable if it is anything else."""
    words = (text or "").split()
    if not words:
        return None
    if (len(words) not in (2, 3) or not _MODE.fullmatch(words[0]) or not _OWNER.fullmatch(words[1])
            or (len(words) == 3 and not _SHA1.fullmatch(words[2]))):
        raise Unreadable(f"stat and sha1sum answered {excerpt(text or '')}")
    return FileState(words[0], words[1], words[2] if len(words) == 3 else "")


def parse_deploy_state(answer: str | list[str]) -> DeployState:
    """Records `@@file=P`, `@@dir=P` (stat, sha1), `@@content=P` (text), `@@lock=present|absent`
    (its text) with `@@lock-session` (a start time), `@@pending=present|absent` and `@@tune=present|absent`
    (their text)."""
    files: dict[str, FileState | None] = {}
    dirs: dict[str, FileState | None] = {}
    contents: dict[str, str] = {}
    unreadable: list[str] = []
    lock_present, lock_text, session_start, pending, tune = False, "", "", None, None
    for f in frames(answer):
        if f.key in ("file", "dir"):
            try:
                (files if f.key == "file" else dirs)[f.value] = file_state(f.text)
            except Unreadable as e:
                unreadable.append(f"{f.value}: {e}")
        elif f.key == "content":
            contents[f.value] = f.text or ""
        elif f.key == "lock":
            lock_present, lock_text = f.value == "present", (f.text or "").strip()
        elif f.key == "lock-session":
            start = ascii_int(f.text)
            session_start = str(start) if start is not None else ""
        elif f.key == "pending" and f.value == "present":
            pending = (f.text or "").strip()
        elif f.key == "tune" and f.value == "present":
            tune = (f.text or "").strip()
    return DeployState(files, dirs, contents, LockFacts(lock_present, lock_text, session_start), pending,
                       tuple(unreadable), tune)


def parse_service_runtime(answer: str | list[str]) -> ServiceRuntime:
    """`@@cmdline=PID` (its argv, a line each), `@@dropin` (its path, then its text), `@@health` (a code)."""
    cmdline, dropins, health = None, {}, 0
    for f in frames(answer):
        if f.key == "cmdline" and f.text:
            cmdline = tuple(f.text.removesuffix("\n").split("\n"))
        elif f.key == "dropin" and f.text:
            path, _, text = f.text.partition("\n")
            dropins[path] = text
        elif f.key == "health":
            health = ascii_int(f.text, 0, 999) or 0
    return ServiceRuntime(cmdline, dropins, health)


def parse_systemd_version(answer: str | list[str]) -> int:
    """The `@@systemd` record, `systemctl --version`: its first line `systemd 252 (252.39-1~deb12u2)`
    -> 252; 0 if unreadable."""
    text = next((f.text or "" for f in frames(answer) if f.key == "systemd"), "")
    m = re.match(r"systemd ([0-9]{1,5})\b", text.strip())
    return int(m.group(1)) if m else 0


def parse_unit_states(answer: str | list[str]) -> dict[str, UnitState]:
    """Per `@@unit=NAME`: `@@systemctl=RC` and `systemctl show -p ...`'s KEY=VALUE lines."""
    units: dict[str, UnitState] = {}
    name = ""
    for f in frames(answer):
        if f.key == "unit":
            name = f.value
        elif f.key == "systemctl" and f.text is None:
            units[name] = UnitState(name, message="its answer could not be read (not sent whole)")
        elif f.key == "systemctl" and f.value != "0":
            units[name] = UnitState(name, message=f"systemctl exited {_words(f.value)}: {_words(f.text) or '(no message)'}")
        elif f.key == "systemctl":
            props = dict(line.partition("=")[::2] for line in f.text.split("\n") if "=" in line)
            fields: dict[str, Any] = {f_: props.get(p, "")[:FIELD_LIMIT] for p, f_ in UNIT_PROPERTIES.items()}
            for f_ in ("main_pid", "n_restarts", "exec_main_status"):
                fields[f_] = ascii_int(fields[f_])
            units[name] = UnitState(name, **fields)
    return units
