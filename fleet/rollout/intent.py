"""A run's intent: what one pyinfra run of the deploy is asked beyond converging to group_data, as data.

    pyinfra -y --limit HOST --data sglang_fleet_run='{"overlay": {"block_size": 8}, ...}' INVENTORY deploy.py

make tune's runs are such runs (ops/tune.py): a candidate is an overlay on the declared speculative table, kept out
of its gateway after its turn, its backup set dropped (it holds a candidate's files), its record kept as a tune's;
the tune's last run, with no overlay, returns the host. The deploy takes the intent as it is given (no branch on
who asked) and, where asked, writes each host's outcome as data (`outcome`: a JSON file on the controller).

The host remembers an overlay it serves (its mark, fleet/tune/search.py TuneMark: the file spec.tune_file): a run that
finds one and brings no overlay returns the host to its declared spec (restarted, whatever its files say) and keeps
its records as the overlay's run said (`returning`), so a make deploy after a cut-off tune returns the host too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from fleet.turns.drains import OWNER_TEXT  # written into the drains file and the mark as it is
from fleet.core.outcome import RecordKind
from fleet.spec import ClassSpec
from fleet.tune.search import TuneMark
from fleet.core.wire import excerpt

INTENT_DATA = "sglang_fleet_run"  # the one --data a run is given its intent by (never an environment variable)
RECORD_KINDS = (RecordKind.DEPLOY, RecordKind.TUNE)  # a rollback is make rollback's, never an intent's
OVERLAY_KEYS = ("block_size", "tree_budget")  # what an overlay may change: the draft length, the tree's width
MAX_LEASE_S = 7 * 86400


@dataclass(frozen=True)
class Intent:
    overlay: dict[str, int] = field(default_factory=dict)  # speculative keys over the declared spec; {}: as declared
    says: str = ""  # the overlay in the operator's words: the plan's action, the host's mark, the drain's why
    stay_out: bool = False  # kept out of its gateway after its turn (measured alone); the next run puts it back
    keep_backup: bool = True  # False: the backup set this run takes is dropped when it ends, and none is pruned
    record: RecordKind = RecordKind.DEPLOY  # the kind its history record is kept as
    owner: str = ""  # whose the host is for this run (its mark's and its drain's owner); '' the run's own
    lease_s: float = 0.0  # ... and for how long
    outcome: str = ""  # a path on the controller the run writes each host's outcome to (JSON); '' none

    @property
    def owned(self) -> tuple[str, float] | None:
        return (self.owner, self.lease_s) if self.owner else None

    def to_json(self) -> dict:
        return {"overlay": self.overlay, "says": self.says, "stay_out": self.stay_out, "keep_backup": self.keep_backup,
                "record": self.record, "owner": self.owner, "lease_s": self.lease_s, "outcome": self.outcome}

    def returning(self, overlaid: TuneMark | None) -> Intent:
        """This run's intent on a host that serves an overlay of an earlier run and gets none now: it returns the
        host, its backup set (of the overlay's files) dropped, its record kept as the overlay's runs' are."""
        if overlaid is None or self.overlay:
            return self
        return replace(self, keep_backup=False, record=overlaid.record)


PLAIN = Intent()


def requested(command_line_data: dict) -> Intent:
    """The intent this pyinfra run was given (--data INTENT_DATA, JSON), or PLAIN; ValueError: not one."""
    value = command_line_data.get(INTENT_DATA)
    if value is None:
        return PLAIN
    try:
        said = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        said = None
    if not isinstance(said, dict) or set(said) - set(Intent.__dataclass_fields__):
        raise ValueError(f"--data {INTENT_DATA}: expected a JSON object of {', '.join(Intent.__dataclass_fields__)}, "
                         f"found {excerpt(str(value), 120)}")
    overlay = said.get("overlay", {})
    if not isinstance(overlay, dict) or set(overlay) - set(OVERLAY_KEYS) \
            or not all(type(v) is int for v in overlay.values()):
        raise ValueError(f"--data {INTENT_DATA}: overlay: expected whole numbers for {', '.join(OVERLAY_KEYS)}, found "
                         f"{excerpt(json.dumps(overlay), 120)}")
    types = {"says": str, "stay_out": bool, "keep_backup": bool, "record": str, "owner": str, "outcome": str}
    for key, kind in types.items():
        if key in said and type(said[key]) is not kind:
            raise ValueError(f"--data {INTENT_DATA}: {key}: expected a {kind.__name__}, found "
                             f"{excerpt(json.dumps(said[key]), 80)}")
    if said.get("record", RecordKind.DEPLOY) not in RECORD_KINDS:
        raise ValueError(f"--data {INTENT_DATA}: record: expected one of {', '.join(RECORD_KINDS)}, found "
                         f"{excerpt(said['record'], 40)}")
    owner, lease = said.get("owner", ""), said.get("lease_s", 0)
    if owner and (not OWNER_TEXT.fullmatch(owner) or type(lease) not in (int, float) or not 0 < lease <= MAX_LEASE_S):
        raise ValueError(f"--data {INTENT_DATA}: expected an owner of printable characters and a lease of 0..7 days, "
                         f"found {excerpt(owner, 80)}, {excerpt(str(lease), 24)}")
    if said.get("says") and not OWNER_TEXT.fullmatch(said["says"]) or len(said.get("outcome", "")) > 4096:
        raise ValueError(f"--data {INTENT_DATA}: expected says of printable characters (at most 256) and an outcome "
                         f"path of at most 4096, found {excerpt(said.get('says', ''), 80)}")
    return Intent(dict(overlay), said.get("says", ""), said.get("stay_out", False), said.get("keep_backup", True),
                  RecordKind(said.get("record", RecordKind.DEPLOY)), owner, float(lease) if owner else 0.0, said.get("outcome", ""))


def applied(spec: ClassSpec, intent: Intent) -> ClassSpec:
    """The declared spec with the intent's overlay; ValueError where the spec refuses it (its algorithm has no such
    key, a bound)."""
    if not intent.overlay:
        return spec
    s = spec.speculative
    missing = [k for k in intent.overlay if k not in type(s).model_fields]
    if missing:
        raise ValueError(f"speculative.algorithm {s.algorithm} has no {', '.join(missing)}")
    try:
        return ClassSpec.model_validate({**spec.model_dump(), "speculative": {**s.model_dump(), **intent.overlay}})
    except ValidationError as e:
        first = e.errors()[0]
        raise ValueError(f"{intent.says or 'the overlay'}: {first['loc'][-1]}: {first['msg']}") from None
