"""How long each remote command of a rollout may take at most, derived from the spec in this one
place: tasks.common.run takes one of these with every command (none runs unbounded), and a
class's turns (tasks/rolling.py) wait for each other at most what they add up to.

A command gets what it waits for itself (systemd's stop timeout, curl's --max-time, nvidia-smi's
timeout ...) plus MARGIN_S. Past its bound a command is given up, and with it the host for this
run (tasks.common.HostLost): its row says so, and the next run finishes or rolls back its rollout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleet.rollout.gate import METRICS_TIMEOUT_S, speculative
from fleet.gateway.models import GatewayRolling
from fleet.rollout.lock import FLOCK_WAIT_S
from fleet.spec import ClassSpec, ProcessWorkload

MARGIN_S = 30  # beyond what a command itself waits for: the SSH round trip, the shell's and systemctl's own work
GATEWAY_S = 30  # a command on the gateway host (smg's /workers, /health, its discovery file) or a replica's /metrics
DISK_S = 30  # a command that only moves a file on the host's disk
SERVER_INFO_S = 10  # the smoke test's /server_info read after the chat completion (its curl --max-time)


@dataclass(frozen=True)
class Bound:
    what: str  # the command, in the operator's words: "the restart of sglang.service"
    seconds: float
    basis: str  # where the figure comes from, for the message: "service.drain_timeout_s 120 + 30"


def _plus_margin(what: str, field: str, value: float) -> Bound:
    return Bound(what, value + MARGIN_S, f"{field} {value:g} + {MARGIN_S}")


def reading(spec: ClassSpec, what: str) -> Bound:
    """A command that reads the host or its disk (the gate's observation, nvidia-smi, the journal)."""
    return _plus_margin(what, "readiness.command_timeout_s", spec.readiness.command_timeout_s)


def stopping(spec: ClassSpec, what: str) -> Bound:
    """A command that may stop the service (putting files live and restarting, the rollback's restore
    and restart, a stop): systemd gives its server service.drain_timeout_s (TimeoutStopSec)."""
    return _plus_margin(what, "service.drain_timeout_s", spec.service.drain_timeout_s)


def waiting(spec: ClassSpec, budget_s: float) -> Bound:
    """The gate's wait on the host: its own budget."""
    return _plus_margin(f"the wait for {spec.service_unit}'s /health", "its budget", budget_s)


def smoke(spec: ClassSpec) -> Bound:
    """The gate's generation (the smoke test): the chat completion (curl --max-time smoke.timeout_s), then
    /server_info; for a speculative service with /metrics, the verify counter read before and after it."""
    reads = 2 * METRICS_TIMEOUT_S if speculative(spec) and spec.service.enable_metrics else 0
    return Bound("the gate's generation (the smoke test)", spec.smoke.timeout_s + SERVER_INFO_S + reads + MARGIN_S,
                 f"smoke.timeout_s {spec.smoke.timeout_s:g} + {SERVER_INFO_S} + " +
                 (f"2 x /metrics {METRICS_TIMEOUT_S} + " if reads else "") + f"{MARGIN_S}")


def workloads(spec: ClassSpec, what: str) -> Bound:
    """Stopping the workloads, or starting them again: systemd's own stop and start of the training,
    or a bare process's SIGTERM and, kill_after_s later, SIGKILL, whichever is longer."""
    release = spec.readiness.workload_release_timeout_s
    kill = max((w.kill_after_s for w in spec.workloads if isinstance(w, ProcessWorkload)), default=0)
    if kill > release:
        return _plus_margin(what, "process_workloads' kill_after_s", kill)
    return _plus_margin(what, "readiness.workload_release_timeout_s", release)


def begin(spec: ClassSpec) -> Bound:
    """Begin: the lock's flock wait, then the backup's copies and the pending record."""
    r = spec.readiness
    return Bound("the rollout's begin (lock, backup, pending record)", FLOCK_WAIT_S + r.command_timeout_s + MARGIN_S,
                 f"the lock's flock wait {FLOCK_WAIT_S} + readiness.command_timeout_s {r.command_timeout_s:g} + "
                 f"{MARGIN_S}")


def finish(spec: ClassSpec) -> Bound:
    """The rollout's end: its record, the pending record gone, the lock released under its flock."""
    return Bound("the rollout's record and the lock's release", FLOCK_WAIT_S + MARGIN_S,
                 f"the lock's flock wait {FLOCK_WAIT_S} + {MARGIN_S}")


def snapshot_s(spec: ClassSpec) -> int:
    """The preflight snapshot (pyinfra's _timeout, whole seconds): its commands that can hang, each
    bounded by readiness.command_timeout_s (nvidia-smi twice, the engine's import), and a margin."""
    return math.ceil(3 * spec.readiness.command_timeout_s + MARGIN_S)


def install(spec: ClassSpec) -> Bound:
    """An engine's install (tasks/engine.py): pip under its own timeout (killed 10 s after it)."""
    return _plus_margin("the install of the declared engine", "engine.install_timeout_s + 10",
                        spec.engine.install_timeout_s + 10)


def fetch(spec: ClassSpec) -> Bound:
    """One revision's fetch (tasks/hub.py): the wait for its lock (a fetch a lost run left) and the
    client, each under hub.fetch_timeout_s (the client killed 10 s after)."""
    return _plus_margin("the fetch of a declared revision", "2 x hub.fetch_timeout_s + 10",
                        2 * spec.hub.fetch_timeout_s + 10)


def client_install(what: str) -> Bound:
    """The hub client's install: pip from uploaded wheels, under a lock, each bounded by 600 s."""
    return _plus_margin(what, "2 x 600 s + 10", 1210)


def engine_check(spec: ClassSpec) -> Bound:
    """A new engine's checks (tasks/engine.py): its import and --help one after the other, its parser
    beside them, each bounded by readiness.command_timeout_s."""
    timeout = spec.readiness.command_timeout_s
    return Bound("the new engine's checks", 2 * timeout + MARGIN_S,
                 f"2 x readiness.command_timeout_s {timeout:g} + {MARGIN_S}")


def gateway(what: str) -> Bound:
    return Bound(what, GATEWAY_S, "a gateway command's bound")


def disk(what: str) -> Bound:
    """A command that only moves a file on the host's disk (an upload into its place)."""
    return Bound(what, DISK_S, "a command on the host's disk")


def turn_s(spec: ClassSpec, through: GatewayRolling | None = None) -> float:
    """The most one host's turn can take, every command at its bound and every wait at its timeout:
    the workloads' stop and release, the restart, the gate, the smoke test, the journal; a rollback's
    restore, restart, gate, journal, stop and give-back; the record; behind a gateway, the wait for a
    ready peer, the drain and the wait to be ready again, with their reads and writes of smg."""
    r = spec.readiness
    read, stop = reading(spec, "").seconds, stopping(spec, "").seconds
    gate = r.load_timeout_s + waiting(spec, r.progress_every_s).seconds
    release = workloads(spec, "").seconds + r.workload_release_timeout_s + read
    forward = release + stop + gate + smoke(spec).seconds + read
    back = 2 * stop + gate + read + stop + release
    total = forward + back + finish(spec).seconds
    if through is not None:  # each wait polls smg (and the drain the replica's /metrics) once more at its end
        total += 2 * (through.ready_timeout_s + GATEWAY_S) + through.drain_timeout_s + 2 * GATEWAY_S + 2 * GATEWAY_S
    return total


def bounded(command: str, timeout_s: float) -> str:
    """`command` killed after timeout_s (a GPU fallen off the bus makes nvidia-smi hang for good):
    it exits 124 then (coreutils timeout; fleet.core.wire.TIMED_OUT), and the fact still answers."""
    return f"timeout -k 5 {max(1, int(timeout_s + 0.999))} {command}" if timeout_s else command
