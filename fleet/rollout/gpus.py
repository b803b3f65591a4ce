"""What nvidia-smi says of a host's GPUs and of the processes holding them: framed text in, typed data out.

The GPU facts (facts/gpu.py) and the guards and the plan that read them: the inventory, the compute
processes, and for each process the unit, command line and start time /proc tells (the workloads a run
stops are told apart by them). Readers of untrusted input, as fleet/rollout/parse.py says.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from fleet.spec import UNIT_NAME, UNIT_NAME_MAX
from fleet.core.wire import FIELD_LIMIT, NO_ANSWER, TIMED_OUT, Frame, _words, ascii_int, excerpt, frames


class NvidiaSmiStatus(StrEnum):
    """What nvidia-smi's run came to: the guards steer by it, a row shows its words."""

    OK = "ok"
    MISSING = "nvidia-smi missing"
    FAILED = "nvidia-smi failed"
    HUNG = "nvidia-smi hung"



@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    memory_mib: int | None  # None: nvidia-smi printed [N/A] or similar
    driver: str
    bus_id: str
    mig: str = "[N/A]"  # mig.mode.current: Enabled, Disabled, or [N/A] (a GPU without MIG)


@dataclass(frozen=True)
class GpuList:
    """nvidia-smi --query-gpu: status "ok" with no GPUs means the host has none."""

    status: NvidiaSmiStatus
    gpus: tuple[Gpu, ...] = ()
    message: str = ""  # nvidia-smi's own words when it failed
    warnings: tuple[str, ...] = ()  # what it said on stderr (e.g. "WARNING: infoROM is corrupted at gpu ...")

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", NvidiaSmiStatus(self.status))  # its words, read back: an unknown one raises


@dataclass(frozen=True)
class GpuProcess:
    pid: int | None
    name: str
    used_memory_mib: int | None
    gpu_uuid: str
    unit: str | None  # the systemd service or scope it runs in, from /proc/PID/cgroup; None: none or unknown
    command_line: str | None = None  # /proc/PID/cmdline, arguments joined by spaces; None: unknown
    start: int | None = None  # when it started (clock ticks after boot, /proc/PID/stat): a reused pid is not it


@dataclass(frozen=True)
class GpuProcessList:
    status: NvidiaSmiStatus
    processes: tuple[GpuProcess, ...] = ()
    message: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", NvidiaSmiStatus(self.status))


def _nvidia_smi_rows(answer: str | list[str]) -> tuple[NvidiaSmiStatus, str, list[str], tuple[str, ...], list[Frame]]:
    """(status, message, the CSV rows, its stderr lines, the remaining records) of an nvidia-smi query."""
    found = frames(answer)
    if not found or found[0].key != "nvidia-smi":
        return NvidiaSmiStatus.FAILED, NO_ANSWER, [], (), []
    first, rest = found[0], found[1:]
    stderr: tuple[str, ...] = ()
    if rest and rest[0].key == "stderr":
        stderr, rest = tuple(line.strip() for line in (rest[0].text or "").split("\n") if line.strip()), rest[1:]
    rc = first.value
    if rc == "missing":
        return NvidiaSmiStatus.MISSING, "command not found", [], (), []
    if rc == TIMED_OUT:
        return NvidiaSmiStatus.HUNG, "no answer: killed by the command timeout", [], stderr, []
    if rc != "0":  # NVIDIA prints its failures on stdout; stderr may add to them
        said = _words("\n".join([first.text or "", *stderr]))
        return NvidiaSmiStatus.FAILED, f"exit {_words(rc)}: {said or '(no message)'}", [], stderr, []
    if first.text is None:
        return NvidiaSmiStatus.FAILED, "its answer could not be read (not sent whole)", [], stderr, []
    return NvidiaSmiStatus.OK, "", [line for line in first.text.split("\n") if line.strip()], stderr, rest


def _field(text: str) -> str | None:
    text = text.strip()
    return text if len(text) <= FIELD_LIMIT else None


def _gpu(line: str) -> Gpu | None:
    try:
        index, rest = line.split(",", 1)
        fields = [_field(f) for f in rest.rsplit(",", 5)]
    except ValueError:
        return None
    if len(fields) != 6 or None in fields or ascii_int(index, 0, 1023) is None:
        return None
    name, uuid, memory, driver, bus_id, mig = fields
    return Gpu(int(index), name, uuid, ascii_int(memory, 0, 1 << 40), driver, bus_id, mig)


def parse_gpu_inventory(answer: str | list[str]) -> GpuList:
    """`nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version,pci.bus_id,mig.mode.current`
    (csv, noheader, nounits), its stderr apart."""
    status, message, rows, warnings, _ = _nvidia_smi_rows(answer)
    if status is not NvidiaSmiStatus.OK:
        return GpuList(status, message=message, warnings=warnings)
    gpus = []
    for line in rows:
        gpu = _gpu(line)
        if gpu is None:  # a header, a warning on stdout: never guess past it
            return GpuList(NvidiaSmiStatus.FAILED, message=f"unexpected line {excerpt(line)}", warnings=warnings)
        gpus.append(gpu)
    return GpuList(NvidiaSmiStatus.OK, tuple(gpus), warnings=warnings)


def unit_of_cgroup(lines: list[str]) -> str | None:
    """The systemd service or scope a process runs in, from /proc/PID/cgroup (v2 `0::` or v1
    `name=systemd`): the first service or scope of its path, as the host's systemd names a process's
    unit. Below it is another manager's (a user's systemd under user@UID.service, a container's
    under its scope), which the host's systemctl cannot stop; above it, slices, or the directories
    of a container's own cgroup where it has no cgroup namespace. None: neither (the root cgroup)."""
    for line in lines:
        parts = line.strip().split(":", 2)
        if len(parts) == 3 and parts[1] in ("", "name=systemd"):
            return next((c for c in parts[2].split("/") if c.rpartition(".")[2] in ("service", "scope")
                         and len(c) <= UNIT_NAME_MAX and UNIT_NAME.match(c)), None)
    return None


COMMAND_LINE_LIMIT = 8192  # characters of a command line kept: what a process pattern is matched against


def command_line_of(text: str | None) -> str | None:
    """/proc/PID/cmdline as text (fleet.core.wire shows its NULs as U+FFFD) -> its arguments joined by spaces,
    at most COMMAND_LINE_LIMIT characters; None: not read (the process ended, a kernel thread)."""
    if not text:
        return None
    return " ".join(text.removesuffix("\ufffd").split("\ufffd"))[:COMMAND_LINE_LIMIT]


def start_of_stat(text: str | None) -> int | None:
    """/proc/PID/stat -> its starttime (field 22, counted after the name in parentheses, which may hold
    spaces and parentheses itself); None if unreadable."""
    fields = (text or "").rpartition(")")[2].split()
    return ascii_int(fields[19], 0, 1 << 62) if len(fields) > 19 else None


def parse_gpu_processes(answer: str | list[str]) -> GpuProcessList:
    """`nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid` plus `@@cgroup=PID`,
    `@@cmdline=PID` and `@@stat=PID` records."""
    status, message, rows, _, rest = _nvidia_smi_rows(answer)
    if status is not NvidiaSmiStatus.OK:
        return GpuProcessList(status, message=message)
    units = {f.value: unit_of_cgroup((f.text or "").split("\n")) for f in rest if f.key == "cgroup"}
    command_lines = {f.value: command_line_of(f.text) for f in rest if f.key == "cmdline"}
    starts = {f.value: start_of_stat(f.text) for f in rest if f.key == "stat"}
    # nvidia-smi listed it, and it ended before its /proc was read (a crash loop's scheduler): it holds no GPU now
    ended = {f.value for f in rest if f.key == "stat" and not (f.text or "").strip()}
    processes = []
    for line in rows:
        try:
            pid, rest_of_line = line.split(",", 1)
            name, memory, uuid = (_field(f) for f in rest_of_line.rsplit(",", 2))
        except ValueError:
            name = None
        if name is None or memory is None or uuid is None:
            return GpuProcessList(NvidiaSmiStatus.FAILED, message=f"unexpected line {excerpt(line)}")
        pid = pid.strip()
        if pid in ended:
            continue
        processes.append(GpuProcess(ascii_int(pid, 1, 1 << 32), name, ascii_int(memory, 0, 1 << 40), uuid,
                                    units.get(pid), command_lines.get(pid), starts.get(pid)))
    return GpuProcessList(NvidiaSmiStatus.OK, tuple(processes))
