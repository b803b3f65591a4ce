"""Workloads: stop the jobs that hold the GPUs (the training), and wait until their memory is free.

Run in the host's own turn of its class's rollout, just before its restart (fleet/rollout/activation.py):
a host whose turn never comes keeps its training running. Each kind is stopped with its own verb
(fleet.rollout.commands.stop_workloads_command): a service stopped and disabled, a scope stopped, a process
sent SIGTERM, then SIGKILL after its bound.
"""

from __future__ import annotations

import time

from facts.gpu import GpuProcesses
from fleet.core import bounds
from fleet.rollout import commands as rollout, guards
from fleet.rollout.gpus import GpuProcessList, parse_gpu_processes
from fleet.rollout.plan import workload_of
from fleet.spec import ClassSpec
from tasks.common import run


def gpu_processes(host, spec: ClassSpec) -> GpuProcessList:
    """The GPU processes as nvidia-smi lists them now, with their units and command lines."""
    return parse_gpu_processes(run(host, GpuProcesses().command(spec.readiness.command_timeout_s),
                                   bounds.reading(spec, "nvidia-smi's GPU processes"))[1])


def stop_and_wait(host, pf) -> list[str]:
    """Stop the plan's workloads (services disabled too), then wait until no GPU process is a declared
    workload's; the problems, [] when the GPUs are free of all but the service's own. A rollback gives
    them back as they were (the pending record holds what was found of them)."""
    spec, plan = pf.spec, pf.plan
    names = list(plan.stop_workloads)
    held = {n: plan.found[n] for n in names if n in plan.found}
    command = rollout.stop_workloads_command(
        [n for n in names if n in spec.service_workloads],
        [s for h in held.values() for s in h.scopes],
        [(p.pid, p.start, spec.workload(n).kill_after_s) for n, h in held.items() for p in h.processes])
    ok, out = run(host, command, bounds.workloads(spec, f"the stop of {', '.join(names)}"))
    if not ok:
        return [f"{host.name}: workloads: expected {', '.join(names)} to stop, found: {out.strip()}"]
    deadline = time.monotonic() + spec.readiness.workload_release_timeout_s
    while True:
        processes = gpu_processes(host, spec)
        holding = [(w, p) for p in processes.processes if (w := workload_of(spec, p))]
        if not holding:
            return [str(v) for v in guards.busy_gpus(host.name, spec, processes, workloads=False)]
        if time.monotonic() > deadline:
            return [f"{host.name}: workloads: expected {w} to release GPU memory within "
                    f"{spec.readiness.workload_release_timeout_s:g}s, found pid {p.pid} (in "
                    f"{p.unit or 'no systemd unit'}) still holding {p.used_memory_mib} MiB" for w, p in holding]
        time.sleep(1)
