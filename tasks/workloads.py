"""Workloads: stop the jobs that hold the GPUs (the training), and wait until their memory is free."""

from __future__ import annotations

import time

from pyinfra.operations import python, systemd

from facts.gpu import GpuProcesses
from fleet import guards
from fleet.parse import parse_gpu_processes
from tasks.common import run
from tasks.preflight import Preflight


def running(pf: Preflight) -> list[str]:
    """Declared workloads that are active, or enabled (they would come back at boot)."""
    units = pf.facts.units
    return [
        w for w in pf.spec.workloads
        if w in units and (units[w].active_state in ("active", "activating", "reloading") or units[w].unit_file_state == "enabled")
    ]


def stop(pf: Preflight) -> None:
    units = running(pf)
    if not units:
        return
    for unit in units:
        # Disabled too: a reboot must not hand the GPUs back to the training job.
        systemd.service(name=f"Stop workload {unit}", service=unit, running=False, enabled=False)
    python.call(name="Wait until the GPUs are released", function=_wait_released, pf=pf)


def _wait_released(state, host, pf: Preflight) -> bool:
    spec = pf.spec
    deadline = time.monotonic() + spec.readiness.workload_release_timeout_s
    command = GpuProcesses().command()
    while True:
        ok, out = run(host, command)
        processes = parse_gpu_processes(out)
        held = [p for p in processes.processes if p.unit in spec.workloads]
        if not held:
            busy = guards.busy_gpus(host.name, spec, processes, ignore_units=())
            for v in busy:
                host.log_styled(str(v), fg="red")
            return not busy
        if time.monotonic() > deadline:
            for p in held:
                host.log_styled(
                    f"{host.name}: workloads: expected {p.unit} to release GPU memory within "
                    f"{spec.readiness.workload_release_timeout_s:g}s, found pid {p.pid} still holding "
                    f"{p.used_memory_mib} MiB", fg="red",
                )
            return False
        time.sleep(1)
