"""The per-host deploy lock: who holds it, whether that deploy still runs, and the shell that
takes it atomically. Plain functions; the task files only run the commands.

The lock is a file, /run/sglang-fleet/<unit>.lock, holding its owner as JSON. Besides who and
since when, the owner names the SSH session its deploy runs in (the sshd process on the host
and its start time): a controller that is killed or loses its link ends that session, so
any later deploy, from any machine, sees at once that the lock is stale. A lock without
that session (written by hand, or over a connector without sshd) goes stale by age.

Taking it is compare-and-replace under flock(1): the deploy says what it saw at preflight
(no lock, or the stale owner it judged), and the lock is taken only if that is still there.
Two operators who both judge a lock stale cannot both get it.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fleet.spec import ClassSpec
from fleet.wire import Unreadable, block, excerpt, load_json, mark, printable

LOCK_ROOT = "/run/sglang-fleet"
REFUSED_EXIT = 75  # the lock is not what preflight saw: another deploy got there first
TAKEN_MARK, REFUSED_MARK = "@@lock=taken", "@@lock=refused"

# The sshd process a command runs under (walking up from the shell) and its start time
# (field 22 of /proc/PID/stat), so a reused pid is never mistaken for the session.
_SESSION = (
    "_f() { sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -d' ' -f$2; }; "
    "s=$$; while [ \"${s:-1}\" -gt 1 ]; do "
    "case \"$(cat /proc/$s/comm 2>/dev/null)\" in sshd|sshd-session) break;; esac; s=$(_f $s 2); done; "
    "if [ \"${s:-1}\" -gt 1 ]; then session=$s; session_start=$(_f $s 20); else session=null; session_start=null; fi"
)


def lock_file(spec: ClassSpec) -> str:
    return f"{LOCK_ROOT}/{spec.service.unit}.lock"


def owner() -> dict:
    """Who this deploy is, as written into the host's lock (the host adds the session)."""
    return {
        "holder": f"{os.environ.get('USER', 'root')}@{socket.gethostname()}",
        "pid": os.getpid(),
        "since": int(time.time()),
    }


@dataclass(frozen=True)
class LockFacts:
    """The lock as preflight read it: present, its text, and the start time of the process
    that has the recorded session's pid now ('' if none)."""

    present: bool = False
    text: str = ""
    session_start_now: str = ""


@dataclass(frozen=True)
class LockState:
    kind: str  # "free" | "held" | "stale" | "ownerless"
    message: str

    @property
    def free_to_take(self) -> bool:
        return self.kind in ("free", "stale")


class _Owner(BaseModel):
    # A lock's owner as take_command writes it; any other shape is a lock without a readable owner.
    model_config = ConfigDict(strict=True)

    holder: Annotated[str, StringConstraints(max_length=256)]
    pid: Annotated[int, Field(ge=0, lt=1 << 32)] = 0
    since: Annotated[float, Field(ge=0, lt=1 << 40)]
    session: Annotated[int, Field(ge=1, lt=1 << 32)] | None = None
    session_start: Annotated[int, Field(ge=0, lt=1 << 63)] | None = None


def _read(text: str) -> _Owner | None:
    try:
        return _Owner.model_validate(load_json(text, "lock"))
    except (Unreadable, ValidationError):
        return None


def describe(text: str) -> str:
    """'held by WHO since WHEN' for a lock's text."""
    o = _read(text)
    if o is None:
        return f"a lock without a readable owner ({excerpt(text, 80)})"
    return f"held by {printable(o.holder)} since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(o.since))}"


def judge(facts: LockFacts, path: str, now: float, stale_after_s: float) -> LockState:
    if not facts.present:
        return LockState("free", "")
    o = _read(facts.text)
    if o is None:
        return LockState(
            "ownerless",
            f"a deploy lock without a readable owner at {path} ({excerpt(facts.text, 80)}); "
            f"if no deploy is running on this host, clear it with: rm -rf {path}",
        )
    session, session_start, held = o.session, o.session_start, describe(facts.text)
    if session is not None:
        if facts.session_start_now and facts.session_start_now == str(session_start):
            return LockState("held", f"another deploy is running: lock {held} (its SSH session, sshd pid {session}, is alive)")
        return LockState("stale", f"stale deploy lock {held}: its SSH session (sshd pid {session}) is gone")
    if now - o.since > stale_after_s:
        return LockState("stale", f"stale deploy lock {held}: older than {stale_after_s:g}s")
    return LockState("held", f"another deploy is running: lock {held}")


def stale_after(spec: ClassSpec) -> float:
    """For a lock that names no session: no honest rollout holds it longer than two load
    timeouts (new + rollback), the workloads' release and a margin."""
    r = spec.readiness
    return 2 * r.load_timeout_s + r.workload_release_timeout_s + 600


def take_command(spec: ClassSpec, who: dict, expected: LockFacts) -> str:
    """Take the lock if it is still what preflight saw (absent, or that exact stale text).
    Prints TAKEN_MARK, or REFUSED_MARK and the lock's text as its record, exit REFUSED_EXIT."""
    path = shlex.quote(lock_file(spec))
    seen = ("present:" + expected.text.strip()) if expected.present else "absent"
    fields = ", ".join(f'"{k}": %s' for k in ("holder", "pid", "since", "session", "session_start"))
    return (
        f"mkdir -p {LOCK_ROOT} && ( flock -w 30 9 || exit {REFUSED_EXIT}; "
        f"if [ -e {path} ]; then now=\"present:$(cat {path} 2>/dev/null)\"; else now=absent; fi; "
        f"if [ \"$now\" != {shlex.quote(seen)} ]; then {block('lock', f'cat {path}', 'refused')}; exit {REFUSED_EXIT}; fi; "
        f"{_SESSION}; "
        f"printf '{{{fields}}}\\n' {shlex.quote(json.dumps(who['holder']))} {int(who['pid'])} {int(who['since'])} "
        f"\"$session\" \"$session_start\" > {path}.new && mv -f {path}.new {path} "
        f") 9<{LOCK_ROOT} || exit $?; echo {TAKEN_MARK}"
    )


def release_command(spec: ClassSpec) -> str:
    return f"rm -f {shlex.quote(lock_file(spec))}"


def facts_command(lock_path: str) -> str:
    """For the preflight snapshot: `@@lock=present` (its text) or `@@lock=absent`, then
    `@@lock-session`: the start time of whatever process has the recorded session pid now."""
    path = shlex.quote(lock_path)
    start = (f"sp=$(sed -n 's/.*\"session\": *\\([0-9][0-9]*\\).*/\\1/p' {path} | head -n 1); "
             "[ -n \"$sp\" ] && sed 's/.*) //' /proc/$sp/stat | cut -d' ' -f20")
    return (f"if [ -e {path} ]; then {block('lock', f'cat {path}', 'present')}; {block('lock-session', start)}; "
            f"else {mark('lock', 'absent')}; fi")
