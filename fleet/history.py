"""What a host remembers of its rollouts: one record per rollout (deploys.jsonl) and the backup
sets taken before each change (backups/STAMP/). Read by `make history`, `make status` and
`make rollback`; written by every rollout. Plain functions over what the host printed.

A backup set holds the managed files as they were before the rollout named STAMP, its
spec.json among them: the spec those files came from, so a rollback knows what it puts back
(the gate's port, the smoke test's model) without the repo.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath

from pydantic import ValidationError

from fleet.parse import MARK, FileState, blocks, file_state
from fleet.render import server_argv
from fleet.rollout import ManagedFile, backups_dir, desired_files, spec_record
from fleet.secrets import unread
from fleet.spec import ClassSpec

RECORD_VERSION = 2
PREVIOUS = "previous"  # make rollback's default: the newest backup, the files before the last change

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


@dataclass(frozen=True)
class Record:
    """One rollout as its host recorded it. Records written before version 2 lack the
    engine, spec hash, repo commit and kind: those read as empty."""

    time: int
    by: str
    result: str  # ok, rolled-back, failed
    kind: str = "deploy"  # or rollback
    to: str = ""  # the backup a rollback put back
    group: str = ""
    stamp: str = ""
    algorithm: str = ""
    served_model: str = ""
    action: str = ""
    sglang: str = ""
    spec_sha256: str = ""
    commit: str = ""
    dirty: bool | None = None
    reason: str = ""
    left: str = ""

    @classmethod
    def from_json(cls, data: dict) -> Record:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**{"time": 0, "by": "", "result": "", **known})

    def describe_commit(self) -> str:
        if not self.commit:
            return "no commit"
        return self.commit[:12] + ("+dirty" if self.dirty else "")


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
            data = json.loads(self.spec_text)
            return ClassSpec.model_validate(data["spec"]), str(data["group"]), ""
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


def parse_history(text: str) -> History:
    """`@@records` (deploys.jsonl's lines), then per backup `@@backup=STAMP`, its files
    (`@@bfile=NAME`: stat, sha1) and `@@bspec` (its spec.json)."""
    records, unreadable = [], 0
    backups: dict[str, dict] = {}
    current = None
    for key, value, lines in blocks(text):
        if key == "records":
            for line in filter(str.strip, lines):
                try:
                    records.append(Record.from_json(json.loads(line)))
                except (ValueError, TypeError):
                    unreadable += 1
        elif key == "backup":
            current = backups.setdefault(value, {"files": {}, "spec": ""})
        elif key == "bfile" and current is not None:
            state = file_state(lines)
            if state is not None:
                current["files"][value] = state
        elif key == "bspec" and current is not None:
            current["spec"] = "\n".join(lines).strip()
    return History(records, [Backup(s, b["files"], b["spec"]) for s, b in sorted(backups.items())], unreadable)


def history_command(records: str, backups: str) -> str:
    """The shell that prints what parse_history reads: the records file, each backup set's files
    (stat, sha1: never their content) and its spec.json."""
    d = shlex.quote(backups)
    return (
        f"echo {MARK}records; cat {shlex.quote(records)} 2>/dev/null; "
        f"for b in {d}/*/; do [ -d \"$b\" ] || continue; echo \"{MARK}backup=$(basename \"$b\")\"; "
        f"for f in \"$b\"*; do [ -f \"$f\" ] || continue; echo \"{MARK}bfile=$(basename \"$f\")\"; "
        f"stat -c '%a %U:%G' \"$f\"; sha1sum \"$f\" | cut -d' ' -f1; done; "
        f"echo {MARK}bspec; cat \"$b\"spec.json 2>/dev/null; done; true"
    )


def choose_backup(history: History, to: str) -> tuple[Backup | None, str]:
    """The backup `make rollback TO=...` names (PREVIOUS: the newest), or why there is none."""
    if not history.backups:
        return None, "no backup on the host: nothing was ever replaced there"
    if to == PREVIOUS:
        return history.backups[-1], ""
    for b in history.backups:
        if b.stamp == to:
            return b, ""
    return None, f"backups/{to} does not exist; the backups there are: {', '.join(history.stamps())} (newest last)"


def rollback_files(spec: ClassSpec, group: str, backup: Backup) -> list[ManagedFile]:
    """The managed files as the backup holds them, copied on the host (their content never
    travels): a file the backup lacks was absent then, and is removed."""
    files = []
    for f in desired_files(spec, group, unread(spec), journal_filter=False):  # paths, modes, kinds only
        name = PurePosixPath(f.path).name
        state = backup.files.get(name)
        copied = f"{backups_dir(spec)}/{backup.stamp}/{name}" if state else None
        files.append(replace(f, content=None, copied_from=copied, copied_sha1=state.sha1 if state else None))
    return files


def spec_sha256(spec: ClassSpec, group: str) -> str:
    """One hash for a spec as deployed (its spec.json's text)."""
    return hashlib.sha256(spec_record(spec, group).encode()).hexdigest()


def new_record(*, kind: str, spec: ClassSpec, group: str, stamp: str, now: int, by: str, action: str, sglang: str,
               repo: tuple[str, bool | None], to: str = "") -> dict:
    """A rollout's record before its outcome (activation adds result, reason, left)."""
    commit, dirty = repo
    return {
        "version": RECORD_VERSION, "time": now, "by": by, "kind": kind, "to": to, "group": group, "stamp": stamp,
        "algorithm": spec.speculative.algorithm, "served_model": spec.service.served_model_name, "action": action,
        "sglang": sglang, "spec_sha256": spec_sha256(spec, group), "commit": commit, "dirty": dirty,
    }
