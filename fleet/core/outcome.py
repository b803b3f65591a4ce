"""What became of a host in a run, and of a rollout in its host's records, as types: code steers by these, and
the summary's (or the record's) words are their values (a wording edit changes no control flow)."""

from __future__ import annotations

from enum import StrEnum


class HostVerdict(StrEnum):
    PENDING = "pending"  # nothing said yet
    PASSED_PREFLIGHT = "passed preflight"  # its rollout has not ended (yet)
    OK = "OK"  # as declared: serving the spec, gate and smoke test passed
    REFUSED = "REFUSED"  # a check failed before anything changed
    UNREACHABLE = "UNREACHABLE"  # pyinfra could not connect
    LOST = "LOST"  # given up mid-run (a lost link, a lock taken over): it keeps its pending record
    INTERRUPTED = "INTERRUPTED"  # the run was stopped mid-rollout: it keeps its pending record
    FAILED = "FAILED"  # an operation failed
    ROLLED_BACK = "FAILED (rolled back)"  # the state from before the rollout serves again
    ROLLBACK_FAILED = "FAILED (rollback failed)"  # stopped and disabled, kept for inspection
    STOPPED = "FAILED (stopped: nothing to roll back to)"
    UNTOUCHED = "FAILED (service untouched)"  # the rollout ended before its restart
    NOT_READY_IN_GATEWAY = "FAILED (serving, not ready in the gateway)"
    NOT_ROLLED = "NOT ROLLED (serving as before)"  # its class's rollout stopped before its turn

    @property
    def ok(self) -> bool:
        return self is HostVerdict.OK

    @property
    def serves(self) -> bool:
        """After its activation the host serves: the new spec, or the old one rolled back."""
        return self in (HostVerdict.OK, HostVerdict.ROLLED_BACK)

    @property
    def said_why(self) -> bool:
        """It says already that the host did not end as declared (the summary adds nothing to it)."""
        return self not in (HostVerdict.PENDING, HostVerdict.PASSED_PREFLIGHT, HostVerdict.OK,
                            HostVerdict.INTERRUPTED)


class RecordKind(StrEnum):
    """What a rollout on record was (deploys.jsonl's "kind")."""

    DEPLOY = "deploy"
    ROLLBACK = "rollback"  # make rollback: a backup set put back
    TUNE = "tune"  # a make tune candidate, or the run that returned its host


class RecordResult(StrEnum):
    """How a rollout on record ended (deploys.jsonl's "result")."""

    OK = "ok"
    ROLLED_BACK = "rolled-back"
    FAILED = "failed"
