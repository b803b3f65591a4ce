"""LAB DOUBLE support: the lab host contract as the SGLang double reads and writes it.

- host.json: $LAB_HOST_JSON, else /etc/lab/host.json (missing: a healthy default host).
- _build.json beside this file, in a wheel of the double (lab/wheels.py) only: the build's own
  identity (version, algorithms, load), laid over host.json's, as an installed engine's version
  and abilities are its package's, whatever host it runs on. The preinstalled double has none.
- GPU registry: $LAB_GPU_DIR, else /run/lab-gpu; one <pid>.json per live GPU process:
  {"pid", "process_name", "gpus": [..], "used_memory_mib"} (per GPU). The SGLang double
  writes one per scheduler process (its pid, its GPU), as CUDA would count them.
"""

from __future__ import annotations

import functools
import json
import os
import sys

BUILTIN_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO"]

_DEFAULT_HOST = {
    "name": "lab-default",
    "group": None,
    "gpu_model": "NVIDIA H200",
    "gpu_count": 1,
    "gpu_memory_mib": 143771,
    "driver_version": "580.159.03",
    "nvidia_smi": "ok",
    "sglang_version": "0.5.23",
    "sglang_algorithms": BUILTIN_ALGORITHMS,
    "load": "ok",
    "load_seconds": 0.0,
    "preinstalled_argv": None,
    "decode_tokens_per_s": 100.0,
    "engine_import_seconds": 0.0,
}

# keys a build sets: sglang_version, sglang_algorithms, load (lab/wheels.py)
BUILD_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_build.json")


def note_import() -> None:
    """One line per import outside a server start: how a test sees the engine check ran."""
    try:
        with open(os.environ.get("LAB_SGLANG_IMPORT_LOG") or "/run/lab-sglang-imports.log", "a") as f:
            f.write(" ".join(sys.argv) + "\n")
    except OSError:
        pass


def host_json_path() -> str:
    return os.environ.get("LAB_HOST_JSON") or "/etc/lab/host.json"


def gpu_dir() -> str:
    return os.environ.get("LAB_GPU_DIR") or "/run/lab-gpu"


@functools.lru_cache(maxsize=1)
def build() -> dict:
    """The keys this package's build sets ({} for the preinstalled double)."""
    try:
        with open(BUILD_FILE, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


@functools.lru_cache(maxsize=1)
def host_config() -> dict:
    cfg = dict(_DEFAULT_HOST)
    try:
        with open(host_json_path(), encoding="utf-8") as f:
            cfg.update(json.load(f))
    except FileNotFoundError:
        pass
    cfg.update(build())
    return cfg


def algorithms() -> list[str]:
    algos = host_config().get("sglang_algorithms")
    return [str(a).upper() for a in (algos if algos is not None else BUILTIN_ALGORITHMS)]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for nvidia-smi's purposes (it holds no GPU memory).
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return True


def live_entries() -> list[dict]:
    out = []
    try:
        names = sorted(os.listdir(gpu_dir()))
    except FileNotFoundError:
        return out
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(gpu_dir(), name), encoding="utf-8") as f:
                entry = json.load(f)
            if pid_alive(int(entry["pid"])):
                out.append(entry)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def register(pid: int, process_name: str, gpus: list[int], used_memory_mib: int) -> str:
    os.makedirs(gpu_dir(), exist_ok=True)
    path = os.path.join(gpu_dir(), f"{pid}.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(
            {"pid": pid, "process_name": process_name, "gpus": list(gpus), "used_memory_mib": int(used_memory_mib)},
            f,
        )
    os.replace(tmp, path)
    return path


def unregister(pid: int) -> None:
    try:
        os.unlink(os.path.join(gpu_dir(), f"{pid}.json"))
    except FileNotFoundError:
        pass


def used_mib_on(gpu: int) -> int:
    return sum(int(e.get("used_memory_mib", 0)) for e in live_entries() if gpu in e.get("gpus", []))
