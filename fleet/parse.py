"""Parsers of what the preflight commands (facts/) print on a host: text in, plain data out.

The commands always exit 0 and report what happened in marker lines `@@key=value`,
each followed by the output it introduces: pyinfra reads a fact's non-zero exit as
"no data", and "not installed", "failed" and "nothing there" must stay different
answers. Unreadable output becomes a failed answer carrying the text, never an
exception and never an empty list that would pass.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from fleet.lock import LockFacts

MARK = "@@"
NO_ANSWER = "no answer from the host"  # a section or marker the command never printed

NvidiaSmiStatus = Literal["ok", "nvidia-smi missing", "nvidia-smi failed", "nvidia-smi hung"]
TIMED_OUT = "124"  # coreutils timeout's exit status (facts.bounded)
EngineStatus = Literal["ok", "no launcher", "not importable"]
ModelStatus = Literal["ok", "no directory", "no config.json", "unreadable"]

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


@dataclass(frozen=True)
class GpuProcess:
    pid: int | None
    name: str
    used_memory_mib: int | None
    gpu_uuid: str
    unit: str | None  # the systemd service it runs in, from /proc/PID/cgroup; None: none or unknown


@dataclass(frozen=True)
class GpuProcessList:
    status: NvidiaSmiStatus
    processes: tuple[GpuProcess, ...] = ()
    message: str = ""


@dataclass(frozen=True)
class Engine:
    """SGLang at the declared launcher: its version, speculative algorithms and flags."""

    status: EngineStatus
    version: str = ""
    algorithms: tuple[str, ...] = ()
    flags: frozenset[str] = frozenset()
    message: str = ""  # why it is not importable
    cached: bool = False  # read from the host's engine cache: nothing was imported


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
    the files a diff shows, the deploy lock, and the pending-rollout record (None: none)."""

    files: dict[str, FileState | None]
    dirs: dict[str, FileState | None]
    contents: dict[str, str]
    lock: LockFacts
    pending: str | None

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


def _split(text: str, prefix: str) -> list[tuple[str, list[str]]]:
    """(what follows `prefix` on a marker line, the lines up to the next marker)."""
    parts: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith(prefix):
            parts.append((line[len(prefix) :], []))
        elif parts:  # lines before the first marker are shell noise
            parts[-1][1].append(line)
    return parts


def blocks(text: str) -> list[tuple[str, str, list[str]]]:
    """(key, value, lines) per `@@key=value` marker."""
    blocks = []
    for head, lines in _split(text, MARK):
        key, _, value = head.partition("=")
        blocks.append((key, value, lines))
    return blocks


def file_state(lines: list[str]) -> FileState | None:
    """`MODE USER:GROUP` then, for a file, its sha1; nothing: absent."""
    words = [line.strip() for line in lines if line.strip()]
    if not words or len(words[0].split()) != 2:
        return None
    mode, owner = words[0].split()
    return FileState(mode, owner, words[1] if len(words) > 1 else "")


def parse_deploy_state(text: str) -> DeployState:
    """`@@file=P`, `@@dir=P` (stat, sha1), `@@content=P` (text), `@@lock=present|absent` (text)
    with `@@lock-session=START`, `@@pending=present|absent` (text)."""
    files: dict[str, FileState | None] = {}
    dirs: dict[str, FileState | None] = {}
    contents: dict[str, str] = {}
    lock_present, lock_text, session_start, pending = False, "", "", None
    for key, value, lines in blocks(text):
        if key == "file":
            files[value] = file_state(lines)
        elif key == "dir":
            dirs[value] = file_state(lines)
        elif key == "content":
            contents[value] = "".join(line + "\n" for line in lines)
        elif key == "lock":
            lock_present, lock_text = value == "present", "\n".join(lines).strip()
        elif key == "lock-session":
            session_start = value.strip()
        elif key == "pending" and value == "present":
            pending = "\n".join(lines).strip()
    return DeployState(files, dirs, contents, LockFacts(lock_present, lock_text, session_start), pending)


def parse_service_runtime(text: str) -> ServiceRuntime:
    """`@@cmdline=PID` (argv, a line each), `@@dropin=PATH` (its text), `@@health=CODE`."""
    cmdline, dropins, health = None, {}, 0
    for key, value, lines in blocks(text):
        if key == "cmdline" and value.strip() not in ("", "0") and lines:
            cmdline = tuple(lines)
        elif key == "dropin":
            dropins[value] = "\n".join(lines)
        elif key == "health":
            health = _int(value) or 0
    return ServiceRuntime(cmdline, dropins, health)


def sections(text: str) -> dict[str, list[str]]:
    """The combined fact's output lines, by section name (`@@section=NAME`)."""
    return dict(_split(text, MARK + "section="))


def _words(lines: list[str]) -> str:
    return " ".join(line.strip() for line in lines if line.strip())


def _last_line(lines: list[str]) -> str:
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def _int(field: str) -> int | None:
    field = field.strip()
    return int(field) if field.isdigit() else None


def _nvidia_smi_rows(
    text: str,
) -> tuple[NvidiaSmiStatus, str, list[str], tuple[str, ...], list[tuple[str, str, list[str]]]]:
    """(status, message, the CSV rows, its stderr lines, the remaining blocks) of an nvidia-smi query."""
    found = blocks(text)
    if not found or found[0][0] != "nvidia-smi":
        return "nvidia-smi failed", NO_ANSWER, [], (), []
    _, rc, lines = found[0]
    rest = found[1:]
    stderr: tuple[str, ...] = ()
    if rest and rest[0][0] == "stderr":
        stderr, rest = tuple(line.strip() for line in rest[0][2] if line.strip()), rest[1:]
    if rc == "missing":
        return "nvidia-smi missing", "command not found", [], (), []
    if rc == TIMED_OUT:
        return "nvidia-smi hung", "no answer: killed by the command timeout", [], stderr, []
    if rc != "0":  # NVIDIA prints its failures on stdout; stderr may add to them
        return "nvidia-smi failed", f"exit {rc}: {_words([*lines, *stderr]) or '(no message)'}", [], stderr, []
    return "ok", "", [line for line in lines if line.strip()], stderr, rest


def _gpu(line: str) -> Gpu | None:
    try:
        index, rest = line.split(",", 1)
        name, uuid, memory, driver, bus_id, mig = (f.strip() for f in rest.rsplit(",", 5))
    except ValueError:
        return None
    if _int(index) is None:
        return None
    return Gpu(int(index), name, uuid, _int(memory), driver, bus_id, mig)


def parse_gpu_inventory(text: str) -> GpuList:
    """`nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version,pci.bus_id,mig.mode.current`
    (csv, noheader, nounits), its stderr apart."""
    status, message, rows, warnings, _ = _nvidia_smi_rows(text)
    if status != "ok":
        return GpuList(status, message=message, warnings=warnings)
    gpus = []
    for line in rows:
        gpu = _gpu(line)
        if gpu is None:  # a header, a warning on stdout: never guess past it
            return GpuList("nvidia-smi failed", message=f"unexpected line {line.strip()!r}", warnings=warnings)
        gpus.append(gpu)
    return GpuList("ok", tuple(gpus), warnings=warnings)


def unit_of_cgroup(lines: list[str]) -> str | None:
    """The systemd service a process runs in, from /proc/PID/cgroup (v2 `0::` or v1 `name=systemd`)."""
    for line in lines:
        parts = line.strip().split(":", 2)
        if len(parts) == 3 and parts[1] in ("", "name=systemd"):
            services = [c for c in parts[2].split("/") if c.endswith(".service")]
            if services:
                return services[-1]
    return None


def parse_gpu_processes(text: str) -> GpuProcessList:
    """`nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid` plus `@@cgroup=PID` blocks."""
    status, message, rows, _, rest = _nvidia_smi_rows(text)
    if status != "ok":
        return GpuProcessList(status, message=message)
    units = {pid: unit_of_cgroup(lines) for key, pid, lines in rest if key == "cgroup"}
    processes = []
    for line in rows:
        try:
            pid, rest_of_line = line.split(",", 1)
            name, memory, uuid = (f.strip() for f in rest_of_line.rsplit(",", 2))
        except ValueError:
            return GpuProcessList("nvidia-smi failed", message=f"unexpected line {line.strip()!r}")
        pid = pid.strip()
        processes.append(GpuProcess(_int(pid), name, _int(memory), uuid, units.get(pid)))
    return GpuProcessList("ok", tuple(processes))


_OPTION_LINE = re.compile(r"^  (-\S.*)$")  # argparse: options at indent 2, help text deeper


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
            return _words(block)
    return ""


def parse_algorithms(help_text: str) -> tuple[str, ...]:
    """The speculative algorithms `--help` names: 0.5.23 lists "Builtins: EAGLE, ..." in the
    help text; engines with fixed choices show them as `{EAGLE,EAGLE3,...}`."""
    text = _option_help(help_text, "--speculative-algorithm")
    m = re.search(r"--speculative-algorithm \{([^}]*)\}", text) or re.search(r"Builtins:\s*([A-Za-z0-9_, ]+)", text)
    if not m:
        return ()
    return tuple(a.strip() for a in m.group(1).split(",") if a.strip())


def parse_engine(text: str) -> Engine:
    """`@@launcher=missing`, or `@@version=RC` and `@@help=RC` blocks (import sglang; --help)."""
    parts = {key: (value, lines) for key, value, lines in blocks(text)}
    if "launcher" in parts:
        return Engine("no launcher")
    for step, what in (("version", "import sglang"), ("help", "sglang.launch_server --help")):
        rc, lines = parts.get(step, ("", []))
        if rc == TIMED_OUT:
            return Engine("not importable", message=f"{what} hung and was killed by the command timeout")
        if rc != "0":
            found = f"{what} exited {rc}: {_last_line(lines) or '(no message)'}" if rc else NO_ANSWER
            return Engine("not importable", message=found)
    help_text = "\n".join(parts["help"][1])
    return Engine(
        "ok",
        cached="engine-cache" in parts,
        version=_last_line(parts["version"][1]),  # after any warnings
        algorithms=parse_algorithms(help_text),
        flags=parse_flags(help_text),
    )


def _config_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_config(path: str, text: str) -> ModelDir:
    """A model's config.json; multimodal models keep their LM's values under text_config."""
    try:
        config = json.loads(text)
    except ValueError as e:
        return ModelDir(path, "unreadable", message=f"config.json is not valid JSON: {e}")
    if not isinstance(config, dict):
        return ModelDir(path, "unreadable", message="config.json is not a JSON object")
    inner = config.get("text_config")
    inner = inner if isinstance(inner, dict) else {}

    def get(key: str) -> Any:
        return config[key] if key in config else inner.get(key)

    architectures = config.get("architectures")
    dflash = config.get("dflash_config")
    return ModelDir(
        path,
        "ok",
        architectures=tuple(a for a in architectures if isinstance(a, str)) if isinstance(architectures, list) else (),
        model_type=config.get("model_type") if isinstance(config.get("model_type"), str) else None,
        vocab_size=_config_int(get("vocab_size")),
        hidden_size=_config_int(get("hidden_size")),
        num_hidden_layers=_config_int(get("num_hidden_layers")),
        block_size=_config_int(config.get("block_size")),
        dflash_config=dflash if isinstance(dflash, dict) else None,
        mtp_layers=max((_config_int(get(k)) or 0 for k in MTP_KEYS), default=0),
    )


def parse_model_dirs(text: str) -> dict[str, ModelDir]:
    """Per `@@path=P`: `@@missing=directory`, `@@missing=config.json`, or `@@config=RC` and its content."""
    models: dict[str, ModelDir] = {}
    path = ""
    for key, value, lines in blocks(text):
        if key == "path":
            path = value
        elif key == "missing":
            models[path] = ModelDir(path, "no directory" if value == "directory" else "no config.json")
        elif key == "config" and value != "0":
            models[path] = ModelDir(path, "unreadable", message=_words(lines))  # cat's own words
        elif key == "config":
            models[path] = parse_config(path, "\n".join(lines))
    return models


def parse_systemd_version(text: str) -> int:
    """`systemctl --version`'s first line, `systemd 252 (252.39-1~deb12u2)` -> 252; 0 if unreadable."""
    m = re.match(r"systemd (\d+)\b", text.strip())
    return int(m.group(1)) if m else 0


def parse_unit_states(text: str) -> dict[str, UnitState]:
    """Per `@@unit=NAME`: `@@systemctl=RC` and `systemctl show -p ...`'s KEY=VALUE lines."""
    units: dict[str, UnitState] = {}
    name = ""
    for key, value, lines in blocks(text):
        if key == "unit":
            name = value
        elif key == "systemctl" and value != "0":
            units[name] = UnitState(name, message=f"systemctl exited {value}: {_words(lines) or '(no message)'}")
        elif key == "systemctl":
            props = dict(line.partition("=")[::2] for line in lines if "=" in line)
            fields: dict[str, Any] = {f: props.get(p, "") for p, f in UNIT_PROPERTIES.items()}
            for f in ("main_pid", "n_restarts", "exec_main_status"):
                fields[f] = _int(fields[f])
            units[name] = UnitState(name, **fields)
    return units
