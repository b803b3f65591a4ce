"""One pyinfra run as one value, and every place the deploy touches pyinfra's run machinery.

pyinfra executes deploy.py once per host, all hosts in one gevent process; what the hosts of a
run share (the summary, the hosts begun and given up, each class's turns, each gateway, the
fetch slots, the resolved branches) lives in one Run, found from the pyinfra State the hosts
belong to. A second State in the same process (make tune's candidates, a library user) gets a
Run of its own: two runs share nothing. The hooks into pyinfra (the inventory's callbacks, the
callback that rolls a host back, Ctrl-C and SIGTERM, the summary at exit) are armed here too.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from gevent.lock import BoundedSemaphore
from pyinfra.api.state import BaseStateCallback

from fleet.core.report import RunReport

INTERRUPTED_EXIT = 130
TITLE = "SGLang fleet rollout summary"


@dataclass
class Run:
    """The run's shared parts, each kept per concern. The parts the deploy's steps own are typed where they are
    defined (named in each comment), not here: the adapter sits below tasks/ and imports none of it."""

    report: RunReport
    begun: dict[str, Any] = field(default_factory=dict)  # host -> its rollout begun and not ended (tasks.common.Begun)
    lost: dict[str, str] = field(default_factory=dict)  # host -> why this run gave it up
    rolls: dict[str, Any] = field(default_factory=dict)  # gpu class -> its turns (tasks.rolling.ClassRoll)
    # gateway (its hosts) -> the one object that writes its files (tasks.rolling.Gateway)
    gateways: dict[str, Any] = field(default_factory=dict)
    # gateway group -> its hosts' restarts, in turn (tasks.gateway_turns.GroupTurns)
    gateway_turns: dict[str, Any] = field(default_factory=dict)
    slots: dict[tuple[str, int], BoundedSemaphore] = field(default_factory=dict)  # hub endpoint -> its fetch slots
    resolved: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (endpoint, repo, branch) -> commit
    found: dict[str, object] = field(default_factory=dict)  # what is looked up once per run (the monitoring host)
    armed: bool = False  # the rollback callback and the signal handlers are in place
    outcome: str = ""  # where the run's intent asks each host's outcome written, as JSON (fleet/rollout/intent.py)

    def ended(self) -> None:
        """The summary printed, and the outcome written where the run's intent asked for it."""
        self.report.print()
        if self.outcome:
            tmp = f"{self.outcome}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.report.outcome(), f, indent=2)
            os.replace(tmp, self.outcome)


_ATTRIBUTE = "sglang_fleet_run"  # the Run, kept on the State it belongs to


def of(state) -> Run:
    """The run of pyinfra's `state` (host.state), made at its first use; its summary prints at exit."""
    run = getattr(state, _ATTRIBUTE, None)
    if run is None:
        run = Run(RunReport(TITLE, failed_hosts=lambda: {h.name for h in getattr(state, "failed_hosts", ())}))
        setattr(state, _ATTRIBUTE, run)
        atexit.register(run.ended)
    return run


def on_inventory_loaded(state, *handlers: BaseStateCallback) -> None:
    """Add `handlers` to pyinfra's callbacks once it has initialised its state (which it does after
    loading the inventory, and which resets them), before it connects anywhere."""
    init = state.init

    def init_then_watch(*args, **kwargs):
        init(*args, **kwargs)
        for handler in handlers:
            state.add_callback_handler(handler)

    state.init = init_then_watch


def arm(state, on_failure: Callable[[object, object, str], None],
        unfinished: Callable[[Run, str], None]) -> None:
    """Once per run, at the first begun rollout: on_failure(state, host, what failed) after any of its
    operations fails on a host; unfinished(run, how) for the hosts still begun when the run is
    interrupted (Ctrl-C, SIGTERM: stop at once, print the summary, exit 130) or ends on an error."""
    run = of(state)
    if run.armed:
        return
    run.armed = True

    class RollBackOnFailure(BaseStateCallback):
        @staticmethod
        def operation_host_error(state, host, op_hash, retry_count=0, max_retries=0):
            names = ", ".join(state.get_op_meta(op_hash).names) or "an operation"
            on_failure(state, host, f"'{names}' failed")

    state.add_callback_handler(RollBackOnFailure())

    def interrupted(signum, frame) -> None:  # pyinfra's own handler would exit 0
        unfinished(run, "interrupted")
        print(f"\nInterrupted ({signal.Signals(signum).name}): no further command runs on any host.", file=sys.stderr)
        run.ended()
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(INTERRUPTED_EXIT)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupted)
    atexit.register(unfinished, run, "the run ended (see its error above)")  # runs before the summary prints
