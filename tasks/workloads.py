"""Workloads: stop the jobs that hold the GPUs (the training), and wait until their memory is free.

Run in the host's own turn of its class's rollout, just before its restart (fleet/activation.py):
a host whose turn never comes keeps its training running.
"""

from __future__ import annotations

import time

from facts.gpu import GpuProcesses
from fleet import bounds, guards, rollout
from fleet.parse import parse_gpu_processes
from tasks.common import run


def stop_and_wait(host, pf) -> list[str]:
    """Stop (and disable) the plan's workloads, then wait until no GPU process is theirs; the
    problems, [] when the GPUs are free of all but the service's own. A rollback gives them back
    as they were (the pending record holds their states)."""
    spec, units = pf.spec, list(pf.plan.stop_workloads)
    ok, out = run(host, rollout.stop_workloads_command(units), bounds.workloads(spec, f"the stop of {', '.join(units)}"))
    if not ok:
        return [f"{host.name}: workloads: expected {', '.join(units)} to stop, found: {out.strip()}"]
    deadline = time.monotonic() + spec.readiness.workload_release_timeout_s
    command = GpuProcesses().command(spec.readiness.command_timeout_s)
    poll = bounds.reading(spec, "nvidia-smi's GPU processes")
    while True:
        processes = parse_gpu_processes(run(host, command, poll)[1])
        held = [p for p in processes.processes if p.unit in spec.workloads]
        if not held:
            return [str(v) for v in guards.busy_gpus(host.name, spec, processes, ignore_units=())]
        if time.monotonic() > deadline:
            return [f"{host.name}: workloads: expected {p.unit} to release GPU memory within "
                    f"{spec.readiness.workload_release_timeout_s:g}s, found pid {p.pid} still holding "
                    f"{p.used_memory_mib} MiB" for p in held]
        time.sleep(1)
