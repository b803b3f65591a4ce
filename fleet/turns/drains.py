"""Drains as state on the gateway host: which replicas are kept out of smg, by whom, until when.

A replica leaves a gateway only while another replica of its model serves there: counted by the controller from smg's
/workers, then checked again and taken on the gateway host under one lock with the set of drained replicas
(fleet/programs/drains.py), so two turns starting together (two classes serving one model) cannot each count the
other as the ready peer and both leave. The drains are kept on the host, each with its owner and a lease: a deploy's
gateway step, another run's turn, a make tune between its candidates all see them; only the owner ends one, or anyone
once its lease has passed (or, released by its owner, the next run that comes). A deploy turn's owner is its rollout (the host's pending record: a run that takes the record
over takes the drain over); a make tune's is the tune, for its whole run.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from enum import StrEnum

from fleet.core import controller, layout
from fleet.core.wire import excerpt, frames, load_json

PROGRAM = controller.program("drains.py")
LOCK_WAIT_S = 30  # the program's own wait for the drains' lock (programs/drains.py LOCK_WAIT_S)
OUT, IN, RELEASE, SYNC = "out", "in", "release", "sync"
LIMIT = 4096  # drains answered: more than any inventory's replicas
OWNER_TEXT = re.compile(r"[ -~]{1,256}")


@dataclass(frozen=True)
class Drain:
    replica: str
    owner: str
    why: str
    left_s: float  # of its lease, by the gateway host's clock when it answered

    def describe(self) -> str:
        return f"{self.replica} drained by {self.owner or 'no one now'} ({self.why}), its lease {self.left_s:.0f}s more"


class DrainResult(StrEnum):
    """What the drains program answered (programs/drains.py's `@@result=`), or that it did not."""

    OK = "ok"
    HELD = "held"  # another owner's drain holds the replica
    PEER = "peer"  # a peer counted as serving is drained now
    BUSY = "busy"  # the drains' lock stayed taken
    UNREADABLE = "unreadable"  # the drains file is not one
    NO_ANSWER = "no answer"


@dataclass(frozen=True)
class Answer:
    result: DrainResult
    standing: tuple[Drain, ...] = ()  # held, peer: the drains in the way
    drains: tuple[Drain, ...] = ()  # every drain now, after the change

    def __post_init__(self) -> None:
        object.__setattr__(self, "result", DrainResult(self.result))  # its words, read back: an unknown one raises

    @property
    def ok(self) -> bool:
        return self.result is DrainResult.OK

    def describe(self) -> str:
        if self.result is DrainResult.HELD:
            return f"held out by another: {'; '.join(d.describe() for d in self.standing)}"
        if self.result is DrainResult.PEER:
            return f"the peer it counted is drained now: {'; '.join(d.describe() for d in self.standing)}"
        if self.result is DrainResult.BUSY:
            return f"the drains' lock on the gateway host stayed taken for {LOCK_WAIT_S}s"
        if self.result is DrainResult.UNREADABLE:
            return "the drains file on the gateway host is not one (inspect it, then remove it)"
        return "no answer from the drains program"


def active(text: str | None, clock: str | None) -> set[str]:
    """The replicas drained now, from the drains file as the host has it and its clock (`date +%s`); a file that is
    not one drains nothing here (the drains program refuses to change it)."""
    try:
        said, now = load_json(text, "the drains"), int((clock or "").strip())
    except ValueError:
        return set()
    drains = said.get("drains") if isinstance(said, dict) else None
    if not isinstance(drains, dict):
        return set()
    return {k for k, v in list(drains.items())[:LIMIT] if isinstance(v, dict)
            and isinstance(v.get("until"), (int, float)) and v["until"] > now}


def state_file(unit: str) -> str:
    return f"{layout.STATE_ROOT}/{unit}.drains.json"


def workers(replicas) -> list[dict]:
    """smg's workers of the discovery file: only keys smg 1.13.0 knows (one unknown key and it rejects the file)."""
    return [{"id": r.host, "url": r.url} for r in replicas]


def command(python: str, unit: str, discovery: str, replicas, op: str, replica: str = "", owner: str = "",
            lease_s: float = 0.0, why: str = "", peers: tuple[str, ...] = ()) -> str:
    """The drains program's run on the gateway host: `op` on `replica`'s drain, the discovery file rewritten."""
    request = {"op": op, "replica": replica, "owner": owner, "lease_s": lease_s, "why": why, "peers": list(peers),
               "workers": workers(replicas)}
    return " ".join(shlex.quote(a) for a in [python, "-c", PROGRAM, state_file(unit), discovery,
                                              json.dumps(request, sort_keys=True)])


def _drains(text: str | None) -> tuple[Drain, ...]:
    try:
        said = load_json(text, "the drains")
    except ValueError:
        return ()
    if not isinstance(said, dict):
        return ()
    found = []
    for replica, d in list(said.items())[:LIMIT]:
        if isinstance(d, dict) and isinstance(d.get("owner"), str) and OWNER_TEXT.fullmatch(d["owner"] or "-") \
                and isinstance(d.get("left_s"), (int, float)) and isinstance(replica, str):
            why = d.get("why") if isinstance(d.get("why"), str) and OWNER_TEXT.fullmatch(d["why"]) else "?"
            found.append(Drain(replica if OWNER_TEXT.fullmatch(replica) else excerpt(replica, 64), d["owner"], why,
                               float(d["left_s"])))
    return tuple(found)


def parse(answer: str | list[str]) -> Answer:
    said = {f.key: f for f in frames(answer)}
    result = said.get("result")
    if result is None or result.value not in {r.value for r in DrainResult} - {DrainResult.NO_ANSWER.value}:
        return Answer(DrainResult.NO_ANSWER)
    said_result = DrainResult(result.value)
    return Answer(said_result, _drains(result.text) if said_result in (DrainResult.HELD, DrainResult.PEER) else (),
                  _drains(said["drains"].text) if "drains" in said else ())
