"""The GPUs and the processes on them, as nvidia-smi reports them."""

from __future__ import annotations

from pyinfra.api import FactBase

from facts import captured_apart, quiet
from fleet.rollout.gpus import GpuList, GpuProcessList, parse_gpu_inventory, parse_gpu_processes
from fleet.core.wire import data, mark

GPU_QUERY = ("--query-gpu=index,name,uuid,memory.total,driver_version,pci.bus_id,mig.mode.current "
             "--format=csv,noheader,nounits")
PROCESS_QUERY = "--query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader,nounits"

# For each pid nvidia-smi listed ($out): its cgroup file (which systemd service or scope it runs in),
# its command line and its stat (its start time): what a workload is matched by, and what tells the
# process from a later one given the same pid. A process may end in between: its records stay empty (the
# parser drops it: it holds no GPU now), and the fact must still exit 0.
CGROUPS = (
    "printf '%s\\n' \"$out\" | while IFS=', ' read -r pid rest; do "
    "case \"$pid\" in ''|*[!0-9]*) continue;; esac; "
    + "; ".join(f"printf '@@{f}=%s\\n' \"$pid\"; {data(f'cat /proc/$pid/{f}')}" for f in ("cgroup", "cmdline", "stat"))
    + "; done"
)


def nvidia_smi(query: str, timeout_s: float, then: str = "") -> str:
    """`nvidia-smi QUERY` (then `then`), with "not installed" told apart from "failed" (`command -v`),
    its warnings apart from its CSV, and killed after timeout_s (0: no limit)."""
    run = "; ".join(filter(None, [captured_apart("nvidia-smi", f"nvidia-smi {query}", timeout_s), then]))
    return quiet(f"if command -v nvidia-smi >/dev/null 2>&1; then {run}; else {mark('nvidia-smi', 'missing')}; fi")


class GpuInventory(FactBase[GpuList]):
    """index, name, uuid, memory (MiB), driver, PCI bus id and MIG mode of every GPU."""

    def command(self, timeout_s: float = 0) -> str:
        return nvidia_smi(GPU_QUERY, timeout_s)

    def process(self, output: list[str]) -> GpuList:
        return parse_gpu_inventory(output)


class GpuProcesses(FactBase[GpuProcessList]):
    """Every compute process on a GPU: pid, name, memory (MiB), GPU uuid, its systemd service or scope,
    command line and start time."""

    def command(self, timeout_s: float = 0) -> str:
        return nvidia_smi(PROCESS_QUERY, timeout_s, then=CGROUPS)

    def process(self, output: list[str]) -> GpuProcessList:
        return parse_gpu_processes(output)
