"""Workloads: stop the jobs that hold the GPUs (the training), and wait until their memory is free."""

from __future__ import annotations

import time

from pyinfra.operations import python

from facts.gpu import GpuProcesses
from fleet import guards, rollout
from fleet.parse import parse_gpu_processes
from tasks.common import fail, run
from tasks.preflight import Preflight


def stop(pf: Preflight) -> None:
    units = pf.plan.stop_workloads
    if units:
        python.call(
            name=f"Stop {', '.join(units)} and wait until the GPUs are released",
            function=_stop_and_wait,
            pf=pf,
            units=units,
        )


def _stop_and_wait(state, host, pf: Preflight, units: list[str]) -> bool:
    spec = pf.spec
    # A rollback gives them back as they were (the pending record holds their states).
    ok, out = run(host, rollout.stop_workloads_command(list(units)))
    if not ok:
        return fail(host, f"{host.name}: workloads: expected {', '.join(units)} to stop, found: {out.strip()}")
    deadline = time.monotonic() + spec.readiness.workload_release_timeout_s
    command = GpuProcesses().command(pf.spec.readiness.command_timeout_s)
    while True:
        _, out = run(host, command)
        processes = parse_gpu_processes(out)
        held = [p for p in processes.processes if p.unit in spec.workloads]
        if not held:
            busy = guards.busy_gpus(host.name, spec, processes, ignore_units=())
            return fail(host, *map(str, busy)) if busy else True
        if time.monotonic() > deadline:
            return fail(host, *(
                f"{host.name}: workloads: expected {p.unit} to release GPU memory within "
                f"{spec.readiness.workload_release_timeout_s:g}s, found pid {p.pid} still holding "
                f"{p.used_memory_mib} MiB" for p in held
            ))
        time.sleep(1)
