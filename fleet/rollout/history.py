"""What a host remembers of its rollouts: one record per rollout (deploys.jsonl) and the backup
sets taken before each change (backups/STAMP/). Read by `make history`, `make status` and
`make rollback`; written by every rollout. Plain functions over what the host printed.

A backup set holds the managed files as they were before the rollout named STAMP, its
spec.json among them: the spec those files came from, so a rollback knows what it puts back
(the gate's port, the smoke test's model) without the repo.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import time
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Annotated

from pydantic import ConfigDict, Field, StringConstraints, ValidationError
from pydantic.dataclasses import dataclass as checked_dataclass

from fleet.weights.hub import declared_weights
from fleet.core.outcome import RecordKind, RecordResult
from fleet.rollout.parse import FileState, file_state
from fleet.rollout.render import server_argv
from fleet.rollout.commands import KEEP_BACKUPS, ManagedFile, desired_files, spec_record
from fleet.spec.secrets import unread
from fleet.spec import ClassSpec
from fleet.core.wire import LINE, Unreadable, block, capped, frames, load_json, shown

RECORD_VERSION = 2
PREVIOUS = "previous"  # make rollback's default: the set from before the last successful change (before_last_change)

SPECULATIVE_FLAGS = {  # flag -> how status and history name it
    "--speculative-draft-model-path": "draft",
    "--speculative-dflash-block-size": "block size",
    "--speculative-num-steps": "steps",
    "--speculative-eagle-topk": "topk",
    "--speculative-num-draft-tokens": "draft tokens",
    "--speculative-ngram-max-bfs-breadth": "bfs breadth",
    "--speculative-ddtree-budget": "tree budget",
}


def describe_serving(cmdline: tuple[str, ...] | list[str] | None) -> tuple[str, str]:
    """(served model, speculative algorithm and knobs) from a server's arguments."""
    if not cmdline:
        return "-", "-"
    args = list(cmdline)

    def value(flag: str) -> str | None:
        return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None

    model = value("--served-model-name") or value("--model-path") or "-"
    algorithm = value("--speculative-algorithm")
    if not algorithm:
        return model, "none"
    knobs = [f"{name} {value(flag)}" for flag, name in SPECULATIVE_FLAGS.items() if value(flag) is not None]
    return model, algorithm + (f" ({', '.join(knobs)})" if knobs else "")


RECORDS_SHOWN = 200  # the newest records history and status read (deploys.jsonl only grows)
STAMP = re.compile(r"[0-9]{8}T[0-9]{6}Z", re.ASCII)  # a backup set's name: when its rollout began (UTC)
BACKUP_NAME, BACKUP_SPEC = 'basename "$b"', 'cat "$b"spec.json'  # history_command, per backup set
Word = Annotated[str, StringConstraints(max_length=256)]
Text = Annotated[str, StringConstraints(max_length=4096)]


# Typed and bounded as the host's file says it: a record of other types is unreadable, not a crash later.
@checked_dataclass(frozen=True, config=ConfigDict(strict=True))
class Record:
    """One rollout as its host recorded it. Records written before version 2 lack the
    engine, spec hash, repo commit and kind: those read as empty."""

    time: Annotated[int, Field(ge=0, lt=1 << 40)]
    by: Word
    # as the host's file says them: RecordResult's and RecordKind's words (an unknown one is none of them)
    result: Word
    kind: Word = RecordKind.DEPLOY.value
    to: Word = ""  # the backup a rollback put back
    group: Word = ""
    stamp: Word = ""
    algorithm: Word = ""
    served_model: Word = ""
    action: Text = ""
    sglang: Word = ""
    engine: Word = ""  # the declared engine's name (fleet.spec.EngineSpec.name); none for a hand-made one
    weights: Text = ""  # the declared revisions, ORG/NAME@COMMIT (target + draft); none for directories by hand
    spec_sha256: Word = ""
    commit: Word = ""
    dirty: bool | None = None
    reason: Text = ""
    left: Text = ""

    @classmethod
    def from_json(cls, data: dict) -> Record:
        """ValueError (pydantic's ValidationError is one) when a field has another type or size."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**{"time": 0, "by": "", "result": "", **known})

    def describe_commit(self) -> str:
        if not self.commit:
            return "no commit"
        return self.commit[:12] + ("+dirty" if self.dirty else "")


def when(ts: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def describe_record(r: Record | None) -> str:
    if r is None:
        return "-"
    what = f"rollback to {r.to}" if r.kind == RecordKind.ROLLBACK else "deploy"
    return f"{when(r.time)} {what} by {r.by}: {r.result or '?'} ({r.describe_commit()})"


@dataclass(frozen=True)
class Backup:
    stamp: str
    files: dict[str, FileState]  # base name -> mode, owner, sha1
    spec_text: str  # its spec.json ('' if none)

    def spec(self) -> tuple[ClassSpec | None, str, str]:
        """(the spec these files came from, its group, '') or (None, '', why it cannot be read)."""
        if not self.spec_text:
            return None, "", "it holds no spec.json (nothing to tell what it serves)"
        try:
            data = load_json(self.spec_text, "spec.json")
            return ClassSpec.model_validate(data["spec"]), str(data["group"])[:256], ""
        except (ValueError, KeyError, TypeError, ValidationError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            return None, "", f"its spec.json cannot be read as a spec ({first})"

    def summary(self) -> str:
        spec, _, problem = self.spec()
        if spec is None:
            return problem
        model, speculative = describe_serving(server_argv(spec))
        return f"{model}, {speculative}"


@dataclass(frozen=True)
class History:
    records: list[Record] = field(default_factory=list)  # oldest first, as written
    backups: list[Backup] = field(default_factory=list)  # oldest first (stamps sort by time)
    unreadable: int = 0  # record lines that are not JSON

    @property
    def last(self) -> Record | None:
        return self.records[-1] if self.records else None

    def stamps(self) -> list[str]:
        return [b.stamp for b in self.backups]


BACKUPS_SHOWN = 50  # backup sets make history lists (the deploy keeps KEEP_BACKUPS; a host may have any number)
FILES_SHOWN = 32  # files named per set


def describe_history(name: str, history: History) -> str:
    """make history: the host's rollouts and backup sets, newest first; whatever the host's records and file names
    hold, each line printable and bounded (wire.shown), the sets at most BACKUPS_SHOWN."""
    out = [f"{name}: rollouts, newest first"]
    for r in reversed(history.records):
        line = f"{describe_record(r)}; {r.algorithm or '?'} {r.served_model or ''}".rstrip()
        line += "".join(f"; {label}{value}" for label, value in (
            ("engine ", r.engine), ("weights ", r.weights), ("", r.action), ("", r.reason)) if value)
        out.append(f"  {shown(line, LINE)}")
    if history.unreadable:
        out.append(f"  ({history.unreadable} unreadable record lines)")
    out.append(f"{name}: backups, newest first (make rollback HOST={name} TO=<stamp>; default: previous, the set "
               "before the last successful change)")
    for b in reversed(history.backups[-BACKUPS_SHOWN:]):
        files = ", ".join(capped(sorted(b.files), FILES_SHOWN, shown))
        out.append(f"  {shown(f'{b.stamp}  {shown(b.summary(), LINE)}  [{files}]', LINE)}")
    if len(history.backups) > BACKUPS_SHOWN:
        out.append(f"  ... and {len(history.backups) - BACKUPS_SHOWN} older")
    if not history.backups:
        out.append("  none")
    return "\n".join(out)


def parse_history(answer: str | list[str]) -> History:
    """`@@records` (the newest lines of deploys.jsonl), then per backup `@@backup` (its name), its
    files (`@@bfile`: name, stat, sha1) and `@@bspec` (its spec.json). A record that cannot be read
    is counted, not kept; a directory not named like a backup is not one."""
    records, unreadable = [], 0
    backups: dict[str, dict] = {}
    current = None
    for f in frames(answer):
        if f.key == "records":
            for line in filter(str.strip, (f.text or "").split("\n")):
                try:
                    data = load_json(line, "record")
                    records.append(Record.from_json(data if isinstance(data, dict) else {"time": None}))
                except (Unreadable, ValueError, TypeError):
                    unreadable += 1
        elif f.key == "backup":
            name = (f.text or "").strip()
            current = backups.setdefault(name, {"files": {}, "spec": ""}) if STAMP.fullmatch(name) else None
        elif f.key == "bfile" and current is not None and f.text:
            name, _, stat = f.text.partition("\n")
            try:
                state = file_state(stat)
            except Unreadable:
                continue
            if state is not None:
                current["files"][name] = state
        elif f.key == "bspec" and current is not None:
            current["spec"] = (f.text or "").strip()
    return History(records, [Backup(s, b["files"], b["spec"]) for s, b in sorted(backups.items())], unreadable)


def history_command(records: str, backups: str) -> str:
    """The shell that prints what parse_history reads: the newest records, each backup set's files
    (stat, sha1: never their content) and its spec.json."""
    d = shlex.quote(backups)
    each_file = block("bfile", 'basename "$f"; stat -c \'%a %U:%G\' "$f"; sha1sum "$f" | cut -d\' \' -f1')
    return (
        f"{block('records', f'tail -n {RECORDS_SHOWN} {shlex.quote(records)}')}; "
        f"for b in {d}/*/; do [ -d \"$b\" ] || continue; {block('backup', BACKUP_NAME)}; "
        f"for f in \"$b\"*; do [ -f \"$f\" ] || continue; {each_file}; done; "
        f"{block('bspec', BACKUP_SPEC)}; done; true"
    )


def choose_backup(history: History, to: str) -> tuple[Backup | None, str]:
    """The backup `make rollback TO=...` names (PREVIOUS: before_last_change), or why there is none."""
    if not history.backups:
        return None, "no backup on the host: nothing was ever replaced there"
    if to == PREVIOUS:
        return before_last_change(history)
    for b in history.backups:
        if b.stamp == to:
            return b, ""
    return None, f"backups/{to} does not exist; the backups there are: {', '.join(history.stamps())} (newest last)"


def before_last_change(history: History) -> tuple[Backup | None, str]:
    """The set from before the last successful change: the one the newest rollout recorded as
    "ok" took before it replaced files. That is the set named by its record's stamp or, for a
    rollout that took over an interrupted one (and kept the backup that one took), the set no
    record names between the record before it and its own. Rollouts that failed are passed
    over: after a failed deploy that was rolled back, the newest set holds the live files; and so are
    make tune's runs (kind tune), which keep no set. With
    no such set on the host (no successful rollout replaced files, or its set is older than the
    last KEEP_BACKUPS kept) there is no default: the refusal lists the sets to name with TO=."""
    sets = {b.stamp: b for b in history.backups}
    recorded = {r.stamp for r in history.records}
    for i in range(len(history.records) - 1, -1, -1):
        r = history.records[i]
        since = history.records[i - 1].stamp if i else ""
        taken = sets.get(r.stamp) or next(
            (b for b in reversed(history.backups) if since < b.stamp < r.stamp and b.stamp not in recorded), None)
        if r.result == RecordResult.OK and r.kind != RecordKind.TUNE and taken is not None:
            return taken, ""
    return None, (f"no rollout on record that succeeded left a backup set here (only the last {KEEP_BACKUPS} are "
                  f"kept): name the set to put back with TO=<stamp> (make history shows what each holds); the "
                  f"backups there are: {', '.join(history.stamps())} (newest last)")


def rollback_files(spec: ClassSpec, group: str, backup: Backup) -> list[ManagedFile]:
    """The managed files as the backup holds them, copied on the host (their content never
    travels): a file the backup lacks was absent then, and is removed."""
    files = []
    for f in desired_files(spec, group, unread(spec), journal_filter=False):  # paths, modes, kinds only
        name = PurePosixPath(f.path).name
        state = backup.files.get(name)
        copied = f"{spec.backups_dir}/{backup.stamp}/{name}" if state else None
        files.append(replace(f, content=None, copied_from=copied, copied_sha1=state.sha1 if state else None))
    return files


def spec_sha256(spec: ClassSpec, group: str) -> str:
    """One hash for a spec as deployed (its spec.json's text)."""
    return hashlib.sha256(spec_record(spec, group).encode()).hexdigest()


def new_record(*, kind: RecordKind, spec: ClassSpec, group: str, stamp: str, now: int, by: str, action: str, sglang: str,
               repo: tuple[str, bool | None], to: str = "") -> dict:
    """A rollout's record before its outcome (activation adds result, reason, left)."""
    commit, dirty = repo
    return {
        "version": RECORD_VERSION, "time": now, "by": by, "kind": RecordKind(kind), "to": to, "group": group, "stamp": stamp,
        "algorithm": spec.speculative.algorithm, "served_model": spec.service.served_model_name, "action": action,
        "sglang": spec.engine.version if spec.engine else sglang, "engine": spec.engine.name if spec.engine else "",
        "weights": declared_weights(spec),
        "spec_sha256": spec_sha256(spec, group), "commit": commit, "dirty": dirty,
    }
