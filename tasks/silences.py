"""No page during a rollout: a host in its turn is silenced in the fleet's Alertmanager for exactly that turn.

The silence (every alert with the host's `host` and `gpu_class` labels) is made before the host leaves
its gateway and is expired once its turn has ended, served or rolled back. It is made to end by itself
at the most the turn can take (fleet.bounds.turn_s), so a controller killed mid-turn leaves no silence
for longer than that. A class's own alerts keep their `for:`. Where no monitoring host is in the
inventory, nothing is silenced; where Alertmanager does not answer, the turn goes on and the summary
says the host was not silenced (a rollout is not held back by its monitoring).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gevent.lock import Semaphore

from adapter import run as runs
from fleet.groupdata import load_class_specs, load_monitoring, monitoring_files
from fleet.monitoring import Monitoring, expire_command, silence_command, silence_id
from fleet.wire import Unreadable
from tasks.common import PeerError, on_peer


@dataclass
class Monitor:
    """The run's monitoring host, shared by every host's turn."""

    spec: Monitoring
    host: object  # pyinfra Host
    connect_lock: Semaphore = field(default_factory=Semaphore)

    def command(self, command: str, what: str) -> str:
        return on_peer(self.host, self.connect_lock, command, f"monitoring host {self.host.name}", what)


def monitor_of(state, group_dir: str = "group_data") -> Monitor | None:
    """The inventory's monitoring host (fleet.groupdata: at most one), found once per run."""
    run = runs.of(state)
    if "monitor" not in run.found:
        groups = monitoring_files(Path(group_dir))
        host = next((h for h in state.inventory if any(g in groups for g in h.groups)), None)
        run.found["monitor"] = None if host is None else Monitor(
            load_monitoring(Path(group_dir), load_class_specs(Path(group_dir)))[
                next(g for g in host.groups if g in groups)], host)
    return run.found["monitor"]


@contextmanager
def silenced(host, monitor: Monitor | None, gpu_class: str, turn_s: float, steps):
    """The host's turn, silenced in the monitor's Alertmanager from before it to its end (at most turn_s)."""
    if monitor is None:
        yield
        return
    report = runs.of(host.state).report.host(host.name)
    now = time.time()
    try:
        sid = silence_id(monitor.command(silence_command(
            monitor.spec, host.name, gpu_class, now, now + turn_s,
            f"{host.name}'s turn in a rollout of {gpu_class} (at most {turn_s:.0f} s)"), "a silence for a turn"))
    except (PeerError, Unreadable) as e:
        report.warnings.append(f"not silenced for its turn: {e}")
        steps.log(f"not silenced for its turn: {e}", "yellow")
        sid = None
    else:
        steps.log(f"silenced on {monitor.host.name} for its turn (silence {sid})", "cyan")
    try:
        yield
    finally:
        if sid is not None:
            try:
                expired = monitor.command(expire_command(monitor.spec, sid), "expiring its silence").strip()
            except PeerError as e:
                expired = str(e)
            if expired == "200":
                report.notes.append(f"silenced on {monitor.host.name} for its turn (silence {sid}, expired after it)")
            else:
                report.warnings.append(f"silence {sid} on {monitor.host.name} not expired ({expired}): it ends by "
                                       f"itself {turn_s:.0f} s after the turn began")
