"""Parsers of what the preflight commands (facts/) print on a host: framed text in, typed data out.

The commands always exit 0 and report what happened in records (fleet/core/wire.py: a marker line
`@@key=value`, then the host's bytes for it in base64): pyinfra reads a fact's non-zero exit
as "no data", and "not installed", "failed" and "nothing there" must stay different answers.
Everything here is a reader of untrusted input: numbers are ASCII and bounded, text is
printable and bounded, and what cannot be read becomes a failed answer saying why, never an
exception and never an empty list that would pass.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fleet.rollout.lock import LockFacts
from fleet.spec import UNIT_NAME, UNIT_NAME_MAX
from fleet.core.wire import Frame, Unreadable, ascii_int, clipped, excerpt, frames, lines_of, load_json

NO_ANSWER = "no answer from the host"  # a section or marker the command never printed



class NvidiaSmiStatus(StrEnum):
    """What nvidia-smi's run came to: the guards steer by it, a row shows its words."""

    OK = "ok"
    MISSING = "nvidia-smi missing"
    FAILED = "nvidia-smi failed"
    HUNG = "nvidia-smi hung"


TIMED_OUT = "124"  # coreutils timeout's exit status (facts.bounded)


class EngineStatus(StrEnum):
    """What the declared launcher came to: the guards and the plan steer by it (no launcher: an engine to install)."""

    OK = "ok"
    NO_LAUNCHER = "no launcher"
    NOT_IMPORTABLE = "not importable"




class ModelStatus(StrEnum):
    """What a model directory came to: the guards refuse all but OK; the hub fetches NOT_FETCHED ones (again)."""

    OK = "ok"
    NO_DIRECTORY = "no directory"
    NO_CONFIG = "no config.json"
    UNREADABLE = "unreadable"
    NO_MANIFEST = "no manifest"
    DAMAGED = "damaged"


NOT_FETCHED = (ModelStatus.NO_DIRECTORY, ModelStatus.NO_MANIFEST, ModelStatus.DAMAGED)  # fetched (again) by the deploy

# systemctl show property -> UnitState field; the units fact asks for exactly these.
UNIT_PROPERTIES = {
    "Id": "id",
    "LoadState": "load_state",
    "ActiveState": "active_state",
    "SubState": "sub_state",
    "MainPID": "main_pid",
    "NRestarts": "n_restarts",
    "UnitFileState": "unit_file_state",
    "ExecMainStatus": "exec_main_status",
    "NeedDaemonReload": "need_daemon_reload",
}

# config.json keys that count a model's built-in draft (MTP) layers: DeepSeek-V3, GLM,
# MiMo say num_nextn_predict_layers; Qwen3-Next and Qwen3.5/3.6 say mtp_num_hidden_layers.
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")


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


@dataclass(frozen=True)
class Engine:
    """SGLang at the declared launcher: its version, speculative algorithms and flags."""

    status: EngineStatus
    version: str = ""
    algorithms: tuple[str, ...] = ()
    flags: frozenset[str] = frozenset()
    message: str = ""  # why it is not importable
    cached: bool = False  # read from the host's engine cache: nothing was imported

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", EngineStatus(self.status))


@dataclass(frozen=True)
class ModelDir:
    """A model directory and what its config.json says (text_config's values for multimodal models)."""

    path: str
    status: ModelStatus
    message: str = ""
    architectures: tuple[str, ...] = ()
    model_type: str | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    num_hidden_layers: int | None = None
    block_size: int | None = None  # top-level: a DFlash draft's trained block size
    dflash_config: dict | None = None
    mtp_layers: int = 0  # built-in draft layers (MTP_KEYS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", ModelStatus(self.status))


@dataclass(frozen=True)
class UnitState:
    name: str  # as asked; `id` is systemd's canonical name
    id: str = ""
    load_state: str = ""
    active_state: str = ""
    sub_state: str = ""
    main_pid: int | None = None
    n_restarts: int | None = None
    unit_file_state: str = ""
    exec_main_status: int | None = None
    need_daemon_reload: str = ""  # "yes": the unit file changed on disk since systemd loaded it
    message: str = ""  # systemctl's words when it could not answer


@dataclass(frozen=True)
class FileState:
    """A managed file or directory as `stat -c '%a %U:%G'` (and sha1sum, for files) saw it."""

    mode: str
    owner: str
    sha1: str = ""


@dataclass(frozen=True)
class DeployState:
    """What earlier rollouts left: each managed file and directory (None: absent), the text of
    the files a diff shows, the deploy lock, the pending-rollout record (None: none) and the mark of a
    make tune that has not returned the host (None: none)."""

    files: dict[str, FileState | None]
    dirs: dict[str, FileState | None]
    contents: dict[str, str]
    lock: LockFacts
    pending: str | None
    unreadable: tuple[str, ...] = ()  # what the host answered that cannot be read (a refusal)
    tune: str | None = None

    def sha1(self, path: str) -> str | None:
        state = self.files.get(path)
        return state.sha1 if state else None


@dataclass(frozen=True)
class ServiceRuntime:
    """The service as it runs now: its main process's arguments (None: no process; an API key
    shown as ***), its drop-in files' text, and what /health answers (0: nothing)."""

    cmdline: tuple[str, ...] | None
    dropins: dict[str, str]
    health: int


@dataclass(frozen=True)
class HostFacts:
    """Everything preflight reads from a host, gathered in one round trip."""

    gpus: GpuList
    gpu_processes: GpuProcessList
    engine: Engine
    models: dict[str, ModelDir]
    units: dict[str, UnitState]
    deployed: DeployState
    runtime: ServiceRuntime
    systemd_version: int  # 0: unknown
    programs: dict[str, bool]  # each program the host answered for -> on its PATH (fleet/rollout/prerequisites.py)


_MODE = re.compile(r"[0-7]{3,4}")
_OWNER = re.compile(r"[^\s:]{1,64}:[^\s:]{1,64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")
FIELD_LIMIT = 256  # characters of one value nvidia-smi or systemctl reports (a GPU name, a state)


def file_state(text: str | None) -> FileState | None:
    """`MODE USER:GROUP` then, for a file, its sha1; nothing: absent. Unreadable if it is anything else."""
    words = (text or "").split()
    if not words:
        return None
    if (len(words) not in (2, 3) or not _MODE.fullmatch(words[0]) or not _OWNER.fullmatch(words[1])
            or (len(words) == 3 and not _SHA1.fullmatch(words[2]))):
        raise Unreadable(f"stat and sha1sum answered {excerpt(text or '')}")
    return FileState(words[0], words[1], words[2] if len(words) == 3 else "")


def parse_deploy_state(answer: str | list[str]) -> DeployState:
    """Records `@@file=P`, `@@dir=P` (stat, sha1), `@@content=P` (text), `@@lock=present|absent`
    (its text) with `@@lock-session` (a start time), `@@pending=present|absent` and `@@tune=present|absent`
    (their text)."""
    files: dict[str, FileState | None] = {}
    dirs: dict[str, FileState | None] = {}
    contents: dict[str, str] = {}
    unreadable: list[str] = []
    lock_present, lock_text, session_start, pending, tune = False, "", "", None, None
    for f in frames(answer):
        if f.key in ("file", "dir"):
            try:
                (files if f.key == "file" else dirs)[f.value] = file_state(f.text)
            except Unreadable as e:
                unreadable.append(f"{f.value}: {e}")
        elif f.key == "content":
            contents[f.value] = f.text or ""
        elif f.key == "lock":
            lock_present, lock_text = f.value == "present", (f.text or "").strip()
        elif f.key == "lock-session":
            start = ascii_int(f.text)
            session_start = str(start) if start is not None else ""
        elif f.key == "pending" and f.value == "present":
            pending = (f.text or "").strip()
        elif f.key == "tune" and f.value == "present":
            tune = (f.text or "").strip()
    return DeployState(files, dirs, contents, LockFacts(lock_present, lock_text, session_start), pending,
                       tuple(unreadable), tune)


def parse_service_runtime(answer: str | list[str]) -> ServiceRuntime:
    """`@@cmdline=PID` (its argv, a line each), `@@dropin` (its path, then its text), `@@health` (a code)."""
    cmdline, dropins, health = None, {}, 0
    for f in frames(answer):
        if f.key == "cmdline" and f.text:
            cmdline = tuple(f.text.removesuffix("\n").split("\n"))
        elif f.key == "dropin" and f.text:
            path, _, text = f.text.partition("\n")
            dropins[path] = text
        elif f.key == "health":
            health = ascii_int(f.text, 0, 999) or 0
    return ServiceRuntime(cmdline, dropins, health)


def _words(text: str | None) -> str:
    return clipped(" ".join((text or "").split()), 300)


def _last_line(text: str | None) -> str:
    return next((line.strip() for line in reversed((text or "").split("\n")) if line.strip()), "")


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
        processes.append(GpuProcess(ascii_int(pid, 1, 1 << 32), name, ascii_int(memory, 0, 1 << 40), uuid,
                                    units.get(pid), command_lines.get(pid), starts.get(pid)))
    return GpuProcessList(NvidiaSmiStatus.OK, tuple(processes))


_OPTION_LINE = re.compile(r"^  (-\S.*)$")  # argparse: options at indent 2, help text deeper
_ALGORITHM = re.compile(r"[A-Za-z0-9_]{1,32}")


def parse_flags(help_text: str) -> frozenset[str]:
    """Every option string `--help` lists, aliases included (`--model-path, --model`)."""
    flags = set()
    for line in help_text.splitlines():
        m = _OPTION_LINE.match(line)
        if m:
            invocation = re.split(r"\s{2,}", m.group(1))[0]  # help text may follow on the same line
            flags.update(part.split(" ", 1)[0] for part in invocation.split(", "))
    return frozenset(flags)


def _option_help(help_text: str, flag: str) -> str:
    """An option's invocation and help text, joined into one line."""
    lines = help_text.splitlines()
    for i, line in enumerate(lines):
        m = _OPTION_LINE.match(line)
        if m and m.group(1).split(" ", 1)[0].rstrip(",") == flag:
            block = [line]
            for more in lines[i + 1 :]:
                if _OPTION_LINE.match(more) or not more.startswith(" "):
                    break
                block.append(more)
            return " ".join(b.strip() for b in block)
    return ""


def parse_algorithms(help_text: str) -> tuple[str, ...]:
    """The speculative algorithms `--help` names: 0.5.23 lists "Builtins: EAGLE, ..." in the
    help text; engines with fixed choices show them as `{EAGLE,EAGLE3,...}`."""
    text = _option_help(help_text, "--speculative-algorithm")
    m = re.search(r"--speculative-algorithm \{([^}]*)\}", text) or re.search(r"Builtins:\s*([A-Za-z0-9_, ]+)", text)
    if not m:
        return ()
    return tuple(a.strip() for a in m.group(1).split(",") if _ALGORITHM.fullmatch(a.strip()))


@functools.lru_cache(maxsize=16)
def _help_facts(help_text: str) -> tuple[tuple[str, ...], frozenset[str]]:
    # A fleet's hosts mostly run the same engine: its --help (190 kB) is parsed once per run.
    return parse_algorithms(help_text), parse_flags(help_text)


def parse_engine(answer: str | list[str]) -> Engine:
    """`@@launcher=missing`, or `@@version=RC` and `@@help=RC` records (import sglang; --help),
    either as they ran or inside `@@engine-cache=hit` (the host's cached answer, itself framed)."""
    found = frames(answer)
    parts = {f.key: f for f in found}
    if "launcher" in parts:
        return Engine(EngineStatus.NO_LAUNCHER)
    cached = "engine-cache" in parts
    if cached:
        parts = {f.key: f for f in frames(parts["engine-cache"].text or "")}
    for step, what in (("version", "import sglang"), ("help", "sglang.launch_server --help")):
        f = parts.get(step)
        if f is not None and f.value == TIMED_OUT:
            return Engine(EngineStatus.NOT_IMPORTABLE, message=f"{what} hung and was killed by the command timeout")
        if f is None or f.value != "0" or f.text is None:
            found_text = (f"{what} exited {_words(f.value)}: {clipped(_last_line(f.text), 300) or '(no message)'}"
                          if f is not None and f.value != "0" else NO_ANSWER)
            return Engine(EngineStatus.NOT_IMPORTABLE, message=found_text)
    algorithms, flags = _help_facts(parts["help"].text)
    return Engine(EngineStatus.OK, cached=cached, version=_last_line(parts["version"].text)[:64],  # after any warnings
                  algorithms=algorithms, flags=flags)


def _config_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 40 else None


def parse_config(path: str, text: str | None) -> ModelDir:
    """A model's config.json; multimodal models keep their LM's values under text_config."""
    try:
        config = load_json(text, "config.json")
    except Unreadable as e:
        return ModelDir(path, ModelStatus.UNREADABLE, message=str(e))
    if not isinstance(config, dict):
        return ModelDir(path, ModelStatus.UNREADABLE, message="config.json is not a JSON object")
    inner = config.get("text_config")
    inner = inner if isinstance(inner, dict) else {}

    def get(key: str) -> Any:
        return config[key] if key in config else inner.get(key)

    architectures = config.get("architectures")
    dflash = config.get("dflash_config")
    model_type = config.get("model_type")
    return ModelDir(
        path,
        ModelStatus.OK,
        architectures=tuple(a[:FIELD_LIMIT] for a in architectures if isinstance(a, str))
        if isinstance(architectures, list) else (),
        model_type=model_type[:FIELD_LIMIT] if isinstance(model_type, str) else None,
        vocab_size=_config_int(get("vocab_size")),
        hidden_size=_config_int(get("hidden_size")),
        num_hidden_layers=_config_int(get("num_hidden_layers")),
        block_size=_config_int(config.get("block_size")),
        dflash_config=dflash if isinstance(dflash, dict) else None,
        mtp_layers=max((_config_int(get(k)) or 0 for k in MTP_KEYS), default=0),
    )


def parse_model_dirs(answer: str | list[str]) -> dict[str, ModelDir]:
    """Per `@@path=P`: `@@missing=directory`, `@@missing=config.json`, or `@@config=RC` and its content."""
    models: dict[str, ModelDir] = {}
    path = ""
    for f in frames(answer):
        if f.key == "path":
            path = f.value
        elif f.key == "missing":
            models[path] = ModelDir(path, {"directory": ModelStatus.NO_DIRECTORY, "manifest": ModelStatus.NO_MANIFEST}.get(
                f.value, ModelStatus.NO_CONFIG))
        elif f.key == "damaged":
            models[path] = ModelDir(path, ModelStatus.DAMAGED, message=clipped(
                "size differs from its manifest: " + ", ".join(lines_of(f.text or "")), 300))
        elif f.key == "config" and f.value != "0":
            models[path] = ModelDir(path, ModelStatus.UNREADABLE, message=_words(f.text))  # the reader's own words
        elif f.key == "config":
            models[path] = parse_config(path, f.text)
    return models


def parse_systemd_version(answer: str | list[str]) -> int:
    """The `@@systemd` record, `systemctl --version`: its first line `systemd 252 (252.39-1~deb12u2)`
    -> 252; 0 if unreadable."""
    text = next((f.text or "" for f in frames(answer) if f.key == "systemd"), "")
    m = re.match(r"systemd ([0-9]{1,5})\b", text.strip())
    return int(m.group(1)) if m else 0


def parse_unit_states(answer: str | list[str]) -> dict[str, UnitState]:
    """Per `@@unit=NAME`: `@@systemctl=RC` and `systemctl show -p ...`'s KEY=VALUE lines."""
    units: dict[str, UnitState] = {}
    name = ""
    for f in frames(answer):
        if f.key == "unit":
            name = f.value
        elif f.key == "systemctl" and f.text is None:
            units[name] = UnitState(name, message="its answer could not be read (not sent whole)")
        elif f.key == "systemctl" and f.value != "0":
            units[name] = UnitState(name, message=f"systemctl exited {_words(f.value)}: {_words(f.text) or '(no message)'}")
        elif f.key == "systemctl":
            props = dict(line.partition("=")[::2] for line in f.text.split("\n") if "=" in line)
            fields: dict[str, Any] = {f_: props.get(p, "")[:FIELD_LIMIT] for p, f_ in UNIT_PROPERTIES.items()}
            for f_ in ("main_pid", "n_restarts", "exec_main_status"):
                fields[f_] = ascii_int(fields[f_])
            units[name] = UnitState(name, **fields)
    return units
