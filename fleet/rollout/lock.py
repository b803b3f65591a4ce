"""The per-host deploy lock: who holds it, whether that deploy still runs, and the shell that
takes it atomically. Plain functions; the task files only run the commands.

The lock is a file, /run/sglang-fleet/<unit>.lock, holding its owner as JSON. Besides who and
since when, the owner names the SSH session its deploy runs in (the sshd process on the host
and its start time): a controller that is killed or exits ends that session, so any later
deploy, from any machine, sees at once that the lock is stale. A lock without that session
(written by hand, or over a connector without sshd) goes stale by age.

A link that drops silently ends no session: sshd without ClientAliveInterval keeps it for hours.
So the lock has a lease beside it, /run/sglang-fleet/<unit>.lease: the host time until which its
deploy promises to renew it (readiness.link_timeout_s from each renewal). The deploy renews it
every quarter of that while the host's rollout runs (tasks.common.Lease) and gives the host up
after half of it without an answer; preflight reads the lease against the host's own clock in
the same command, and a lease that ran out makes the lock stale whatever its session.

Taking it is compare-and-replace under flock(1): the deploy says what it saw at preflight
(no lock, or the stale owner it judged), and the lock is taken only if that is still there.
Two operators who both judge a lock stale cannot both get it. Renewing and releasing it touch
only one's own: the lock must name the SSH session of the command that renews or releases it,
compared under the same flock, so a run whose lock was taken over never removes the new owner's.
"""

from __future__ import annotations

import functools
import json
import math
import shlex
import time
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fleet.core import controller, layout
from fleet.spec import ClassSpec
from fleet.core.wire import BLOCK_LIMIT, Unreadable, block, excerpt, load_json, mark, printable

REFUSED_EXIT = 75  # the lock is not what preflight saw: another deploy got there first
TAKEN_MARK, REFUSED_MARK = "@@lock=taken", "@@lock=refused"
RENEWED_MARK, NOT_OURS_MARK = "@@lease=renewed", "@@lease=not-ours"
FLOCK_WAIT_S = 30  # how long taking, renewing or releasing the lock waits for another of them
# What the preflight snapshot prints as the session's start time when the lock's lease has run
# out: no process starts at the boot's first clock tick, so no session's start time is "0".
LEASE_RAN_OUT = "0"

def _lock_sh(action: str, lock_path: str, *more: object) -> str:
    """The lock's programs on the host (taking, renewing, releasing it; the session preflight reads) are one file,
    fleet/programs/lock.sh: its ACTION for the lock at lock_path (fleet.core.controller.shell)."""
    return controller.shell("lock.sh", action, layout.LOCK_ROOT, lock_path, layout.lease_file(lock_path), FLOCK_WAIT_S,
                            *more)


def renew_every_s(spec: ClassSpec) -> float:
    """How often a deploy renews the lease of a host whose rollout runs."""
    return spec.readiness.link_timeout_s / 4


def lost_after_s(spec: ClassSpec) -> float:
    """How long without an answer to a renewal before the deploy gives the host up: half the lease,
    so it stops well before the host's lease runs out and another deploy may take the lock."""
    return spec.readiness.link_timeout_s / 2


@functools.cache
def owner() -> dict:
    """Who this deploy is, as written into the host's lock (the host adds the session): one answer
    for the whole run, since when it first asked."""
    return controller.operator()


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
    if facts.session_start_now == LEASE_RAN_OUT:
        return LockState("stale", f"stale deploy lock {held}: its lease ran out (not renewed within "
                                  "readiness.link_timeout_s by the host's clock: its deploy lost the link or was killed)")
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
    seen = ("present:" + expected.text.strip()) if expected.present else "absent"
    return _lock_sh("take", spec.lock_file, _lease_s(spec), BLOCK_LIMIT + 1, seen, json.dumps(who["holder"]),
                    int(who["pid"]), int(who["since"]))


def _lease_s(spec: ClassSpec) -> int:
    """How long a lease holds from its writing, by the host's clock: readiness.link_timeout_s."""
    return math.ceil(spec.readiness.link_timeout_s)


def renew_command(spec: ClassSpec) -> str:
    """Renew the lease of this run's lock: prints RENEWED_MARK, or NOT_OURS_MARK where the lock is
    gone or another deploy's (taken over: this run must not touch the host any more). The lock is
    this run's if it names the SSH session this command runs in, compared under the lock's flock
    (over a connector without sshd every lock's session is null: there, any such lock is one's own)."""
    return _lock_sh("renew", spec.lock_file, _lease_s(spec))


def release_command(spec: ClassSpec) -> str:
    """Remove the lock and its lease if they are this run's (as renew_command judges); another deploy's stay."""
    return _lock_sh("release", spec.lock_file)


def facts_command(lock_path: str) -> str:
    """For the preflight snapshot: `@@lock=present` (its text) or `@@lock=absent`, then
    `@@lock-session`: the start time of whatever process has the recorded session pid now, or
    LEASE_RAN_OUT where the lock's lease is past by the host's clock (a lease that is not a
    plain number is none: the session alone judges)."""
    path = shlex.quote(lock_path)
    return (f"if [ -e {path} ]; then {block('lock', f'cat {path}', 'present')}; "
            f"{block('lock-session', _lock_sh('session', lock_path))}; else {mark('lock', 'absent')}; fi")
