"""The pending-rollout record (pending.json): how far a host's rollout got and what the host was before it.

A rollout writes it on the host before its first change and keeps it to its end; a run that finds one takes the
rollout over (fleet/rollout/plan.py) and its rollback returns to the record's before-state. Here: the record's
plain data (Pending, Before and what it holds of each unit and workload), its JSON, and the typed, bounded
reader of what a host sends back (read_pending), which refuses a record of any other shape.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fleet.rollout.gpus import COMMAND_LINE_LIMIT
from fleet.rollout.commands import ManagedFile, managed_paths
from fleet.spec import UNIT_NAME, UNIT_NAME_MAX, ClassSpec, ScopeWorkload, workload_name
from fleet.core.wire import Unreadable, excerpt, load_json

PENDING_VERSION = 3  # 3: the begun phase; 2: scope and process workloads (what was found of them); 1, 2 are read still
# How far a rollout got, as its host records it: begun (lock, backup, record; nothing live: waiting for
# its turn), rolling out (its turn came: workloads stopped, files live, the service restarted, or on the
# way to them), rolling back (it failed).
BEGUN, ROLLING_OUT, ROLLING_BACK = "begun", "rolling-out", "rolling-back"
RUNNING_STATES = ("active", "activating", "reloading")  # a workload runs (it holds or will hold GPUs)
SERVING_STATES = ("active",)  # the service serves: a rollback returns to a serving one


@dataclass(frozen=True)
class UnitBefore:
    enabled: str  # systemd's UnitFileState: enabled, disabled, "" (no unit file) ...
    active: str  # ActiveState: active, inactive, failed, activating ...

    given_back = True  # a service is always given back as it was

    @property
    def ran(self) -> bool:
        """Running, or enabled (it would come back at boot)."""
        return self.enabled == "enabled" or self.active in RUNNING_STATES


@dataclass(frozen=True)
class FoundProcess:
    pid: int
    start: int  # its start time (clock ticks after boot): a later process given the same pid is not it
    command_line: str


@dataclass(frozen=True)
class Held:
    """A scope or process workload as found holding GPUs: the scopes' full names, or its processes."""

    scopes: tuple[str, ...] = ()
    processes: tuple[FoundProcess, ...] = ()
    given_back: bool = True  # group_data declares how to start it again (the spec's word, not the record's)

    @property
    def ran(self) -> bool:
        return bool(self.scopes or self.processes)


@dataclass(frozen=True)
class Before:
    """The host before the rollout: what a rollback returns to."""

    files: dict[str, str | None]  # managed path -> sha1 (None: absent)
    backup: str | None  # backups/STAMP holding those files; None: no file changed, or none existed
    service: UnitBefore
    workloads: dict[str, UnitBefore | Held]  # every service workload; the others found holding GPUs

    @property
    def serving(self) -> bool:
        return self.service.active in SERVING_STATES

    @property
    def workloads_to_give_back(self) -> dict[str, UnitBefore | Held]:
        return {w: u for w, u in self.workloads.items() if u.ran and u.given_back}

    @property
    def workloads_not_given_back(self) -> list[str]:
        """Those that ran and group_data declares are not given back (give_back: false)."""
        return sorted(w for w, u in self.workloads.items() if u.ran and not u.given_back)


def _workload_json(u: UnitBefore | Held) -> dict:
    if isinstance(u, UnitBefore):
        return {"enabled": u.enabled, "active": u.active}
    return {"scopes": list(u.scopes)} if u.scopes else {"processes": [asdict(p) for p in u.processes]}


@dataclass(frozen=True)
class Pending:
    """An unfinished rollout, as recorded on the host (pending.json)."""

    phase: str  # BEGUN, ROLLING_OUT once its turn came, ROLLING_BACK once it has failed
    since: int
    by: str
    target: str  # target_of() the files it was rolling out
    restart: bool  # it (re)started the service with the new files
    reason: str  # why it is rolling back
    before: Before

    def to_json(self) -> dict:
        data = {"version": PENDING_VERSION, **asdict(self)}
        data["before"]["workloads"] = {w: _workload_json(u) for w, u in self.before.workloads.items()}
        return data

    def rolling_back(self, reason: str) -> Pending:
        return Pending(ROLLING_BACK, self.since, self.by, self.target, self.restart, reason, self.before)

    def rolling_out(self) -> Pending:
        return Pending(ROLLING_OUT, self.since, self.by, self.target, self.restart, "", self.before)

    @property
    def mid_change(self) -> bool:
        """Its turn had come: its workloads, files or service may be neither as before nor as declared."""
        return self.phase != BEGUN


class _Record(BaseModel):
    # What pending.json must hold, typed and bounded: it names files the rollback writes and
    # units it starts, so a record of any other shape is refused, never half-believed.
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


Sha1 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]
UnitWord = Annotated[str, StringConstraints(pattern=r"^[a-z-]{0,32}$")]  # UnitFileState, ActiveState
Stamp = Annotated[str, StringConstraints(pattern=r"^[0-9]{8}T[0-9]{6}Z$")]


def _scope_name(v: str) -> str:
    if not (v.endswith(".scope") and len(v) <= UNIT_NAME_MAX and UNIT_NAME.match(v)):
        raise ValueError("a scope's unit name")
    return v


class _UnitRecord(_Record):
    enabled: UnitWord
    active: UnitWord


FOUND_MAX = 1024  # scopes or processes of one workload in a record: 16 GPUs, many processes each


class _ScopesRecord(_Record):
    scopes: Annotated[list[Annotated[str, AfterValidator(_scope_name)]], Field(min_length=1, max_length=FOUND_MAX)]


class _ProcessRecord(_Record):
    pid: Annotated[int, Field(ge=1, lt=1 << 32)]
    start: Annotated[int, Field(ge=0, lt=1 << 62)]
    command_line: Annotated[str, StringConstraints(max_length=COMMAND_LINE_LIMIT)]


class _ProcessesRecord(_Record):
    processes: Annotated[list[_ProcessRecord], Field(min_length=1, max_length=FOUND_MAX)]


class _BeforeRecord(_Record):
    files: dict[str, Sha1 | None]
    backup: Stamp | None
    service: _UnitRecord
    workloads: dict[str, _UnitRecord | _ScopesRecord | _ProcessesRecord]


class _PendingRecord(_Record):
    version: Literal[1, 2, 3]  # 1: services only; 2: no begun phase
    phase: Literal["begun", "rolling-out", "rolling-back"]
    since: Annotated[int, Field(ge=0, lt=1 << 40)]
    by: Annotated[str, StringConstraints(max_length=256)]
    target: Sha1
    restart: bool
    reason: Annotated[str, StringConstraints(max_length=4096)] = ""
    before: _BeforeRecord


def read_pending(text: str, spec: ClassSpec) -> Pending:
    """pending.json's text -> Pending; ValueError naming what is wrong. Its files must be the
    spec's managed ones and its workloads the spec's: the rollback writes and starts them."""
    try:
        r = _PendingRecord.model_validate(load_json(text, "pending.json"))
    except Unreadable as e:
        raise ValueError(f"unreadable pending-rollout record ({e})") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ValueError(f"unreadable pending-rollout record ({where}: {first['msg']}; "
                         f"{e.error_count()} problem(s))") from None
    if r.phase == BEGUN and r.version < 3:
        raise ValueError(f"unreadable pending-rollout record (phase: {BEGUN} in a version {r.version} record)")
    outside = sorted(set(r.before.files) - set(managed_paths(spec)))
    if outside:
        raise ValueError(f"the pending-rollout record names files that are not {spec.service_unit}'s: "
                         f"{', '.join(excerpt(p, 80) for p in outside[:3])}")
    declared = {workload_name(w): w for w in spec.workloads}
    undeclared = sorted(set(r.before.workloads) - set(declared))
    if undeclared:
        raise ValueError(f"the pending-rollout record names workloads group_data does not declare: "
                         f"{', '.join(excerpt(w, 80) for w in undeclared[:3])}")
    for w, u in sorted(r.before.workloads.items()):
        kind = type(declared[w])
        expected = _UnitRecord if kind is str else _ScopesRecord if kind is ScopeWorkload else _ProcessesRecord
        if type(u) is not expected or (r.version == 1 and kind is not str):
            raise ValueError(f"the pending-rollout record holds {w} as {_RECORD_KINDS[type(u)]}; group_data declares "
                             f"{_RECORD_KINDS[expected]}")
    b = r.before
    before = Before(dict(b.files), b.backup, UnitBefore(b.service.enabled, b.service.active),
                    {w: _before_of_record(u, declared[w]) for w, u in b.workloads.items()})
    return Pending(r.phase, r.since, r.by, r.target, r.restart, r.reason, before)


_RECORD_KINDS = {_UnitRecord: "a service", _ScopesRecord: "a scope workload", _ProcessesRecord: "a process workload"}


def _before_of_record(u: _UnitRecord | _ScopesRecord | _ProcessesRecord, declared) -> UnitBefore | Held:
    if isinstance(u, _UnitRecord):
        return UnitBefore(u.enabled, u.active)
    given_back = declared.give_back is not False
    if isinstance(u, _ScopesRecord):
        return Held(scopes=tuple(u.scopes), given_back=given_back)
    return Held(processes=tuple(FoundProcess(p.pid, p.start, p.command_line) for p in u.processes),
                given_back=given_back)


def target_of(files: list[ManagedFile]) -> str:
    """One hash for the files a rollout is heading to (what its record calls its target)."""
    h = hashlib.sha1()
    for f in files:
        h.update(f"{f.path}\0{f.sha1}\0".encode())
    return h.hexdigest()
