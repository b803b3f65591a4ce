"""No page during a rollout: a host in its turn is silenced in the fleet's Alertmanager until its alerts have
resolved after that turn.

The silence (every alert with the host's `host` and `gpu_class` labels) is made before the host leaves
its gateway. Once its turn has ended, served or rolled back, it ends when the alerts it covers have resolved
(Monitoring.resolve_s after the turn): a replica serving again pages no one, one that does not pages then. It is
made to end by itself at the most the turn can take (fleet.core.bounds.turn_s); a controller killed mid-turn leaves it
that long, until the run that takes the turn over ends it with its own. A class's own alerts keep their `for:`.
Where no monitoring host is in the inventory, nothing is silenced; where Alertmanager does not answer, the turn
goes on and the summary says the host was not silenced (a rollout is not held back by its monitoring).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gevent.lock import Semaphore

from adapter import run as runs
from fleet.spec.load import load_class_specs, load_monitoring, monitoring_files
from fleet.monitoring.models import Monitoring
from fleet.monitoring.silences import Silence, ours, silence_command, silence_id, silences_command, turn_ended
from fleet.core.wire import Unreadable
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
    """The inventory's monitoring host (fleet.spec.load: at most one), found once per run."""
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
    """The host's turn, silenced in the monitor's Alertmanager from before it until its alerts have resolved after
    it (at most turn_s, should the controller be killed in it)."""
    if monitor is None:
        yield
        return
    report = runs.of(host.state).report.host(host.name)
    now = time.time()
    try:
        own = Silence(silence_id(monitor.command(silence_command(
            monitor.spec, host.name, gpu_class, now, now + turn_s,
            f"{host.name}'s turn in a rollout of {gpu_class} (at most {turn_s:.0f} s)"), "a silence for a turn")),
            now, now + turn_s)
    except (PeerError, Unreadable) as e:
        report.warnings.append(f"not silenced for its turn: {e}")
        steps.log(f"not silenced for its turn: {e}", "yellow")
        own = None
    else:
        steps.log(f"silenced on {monitor.host.name} for its turn (silence {own.id})", "cyan")
    try:
        yield
    finally:
        turn_over(host, monitor, gpu_class, steps, own)


def turn_over(host, monitor: Monitor, gpu_class: str, steps, own: Silence | None = None) -> None:
    """Every silence of the host's turns, this one's (`own`) and any a killed run left (found in Alertmanager by
    fleet.monitoring.silences.ours), ends once the alerts it covers have resolved (Monitoring.resolve_s from now): not at
    once (Prometheus would still have the replica down until its next scrape and evaluation), nor at the turn
    bound. A silence that cannot be changed ends by itself when it was made to."""
    report = runs.of(host.state).report.host(host.name)
    mon, now = monitor.spec, time.time()
    try:
        found = ours(monitor.command(silences_command(mon, host.name), "reading its silences"), host.name, gpu_class)
    except (PeerError, Unreadable) as e:
        report.warnings.append(f"silences on {monitor.host.name} not read ({e}): one left by an interrupted run "
                               "ends by itself at its turn's bound")
        found = []
    silences = {s.id: s for s in ([own] if own is not None else []) + found}
    after = f"ending {mon.resolve_s():g} s after the turn, once its alerts have resolved"
    for sid, ends in turn_ended(list(silences.values()), now, mon).items():
        mine = own is not None and sid == own.id
        try:
            silence_id(monitor.command(silence_command(
                mon, host.name, gpu_class, silences[sid].starts, ends,
                f"{host.name}'s turn in a rollout of {gpu_class}, over: until its alerts have resolved", sid),
                "ending a silence once its alerts have resolved"))
        except (PeerError, Unreadable) as e:
            report.warnings.append(f"silence {sid} on {monitor.host.name} not ended ({e}): it ends by itself at "
                                   f"{time.strftime('%H:%M:%S', time.gmtime(silences[sid].ends))} UTC")
            continue
        said = (f"silenced on {monitor.host.name} for its turn (silence {sid}, {after})" if mine
                else f"silence {sid} on {monitor.host.name}, an interrupted run's, taken over: {after}")
        report.notes.append(said)
        steps.log(said, "cyan")
