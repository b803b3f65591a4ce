"""LAB DOUBLE support: the lab host contract as the SGLang double reads and writes it.

- host.json: $LAB_HOST_JSON, else /etc/lab/host.json (missing: a healthy default host).
- _build.json beside this file, in a wheel of the double (lab/wheels.py) only: the build's own
  identity (version, algorithms, load), laid over host.json's, as an installed engine's version
  and abilities are its package's, whatever host it runs on. The preinstalled double has none.
- GPU registry: $LAB_GPU_DIR, else /run/lab-gpu; one <pid>.json per live GPU process:
  {"pid", "process_name", "gpus": [..], "used_memory_mib"} (per GPU). The SGLang double
  writes one per scheduler process (its pid, its GPU), as CUDA would count them.
- control file: $LAB_SGLANG_CONTROL, else beside the GPU registry (/run/lab-sglang-control.json):
  {"acceptance": <0..1 or null>, "metrics": <bool>, "generation": "serve"|"hang"}, what a lab test
  changes in a running server (the speed model's acceptance; /metrics hung; generation hung). Missing: as configured. Written by write_control
  (`python3 -m sglang._lab_control`), re-read whenever it changes.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading

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


def control_path() -> str:
    # beside the GPU registry: the lab's runtime dir on a host, the test's tmp dir under $LAB_GPU_DIR
    return os.environ.get("LAB_SGLANG_CONTROL") or os.path.join(
        os.path.dirname(gpu_dir().rstrip("/")) or "/", "lab-sglang-control.json")


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


# ---------------------------------------------------------------------------------------------
# The speed model (host.json "speculation"): a documented stand-in for a real GPU. With it, TP0's
# decode steps take s(b, n) seconds and give each running request a(b) tokens on average; every
# lab figure of tokens/s, accept length or verify calls comes from these formulas, not from a GPU.
# ---------------------------------------------------------------------------------------------

SPECULATION_KEYS = ("step_ms", "per_request", "per_draft_token", "per_draft_token_sq", "acceptance")
DFLASH_DEFAULT_BLOCK_SIZE = 16  # SGLang's block size when neither the flag nor the draft's config gives one
BLOCK_ALGORITHMS = ("DFLASH", "DDTREE")  # b is the DFlash block size


def check_speculation(value) -> str | None:
    """Why host.json's `speculation` is not a valid speed model (None: it is): a table of exactly
    SPECULATION_KEYS, numbers, step_ms > 0, the per_* >= 0, 0 < acceptance <= 1."""
    if not isinstance(value, dict):
        return "not a table"
    missing = [k for k in SPECULATION_KEYS if k not in value]
    extra = sorted(k for k in value if k not in SPECULATION_KEYS)
    if missing or extra:
        return (f"missing {missing}" if missing else "") + ("; " if missing and extra else "") + (
            f"unknown {extra}" if extra else "")
    bad = [k for k in SPECULATION_KEYS if not isinstance(value[k], (int, float)) or isinstance(value[k], bool)
           or value[k] != value[k] or value[k] in (float("inf"), float("-inf"))]
    if bad:
        return f"not a finite number: {bad}"
    if not value["step_ms"] > 0:
        return "step_ms must be > 0"
    neg = [k for k in ("per_request", "per_draft_token", "per_draft_token_sq") if value[k] < 0]
    if neg:
        return f"must be >= 0: {neg}"
    if not 0 < value["acceptance"] <= 1:
        return "acceptance must be > 0 and <= 1"
    return None


def speculation() -> dict | None:
    """host.json's speed model, as floats; None when the host has none (the fixed decode rate)."""
    value = host_config().get("speculation")
    if value is None:
        return None
    err = check_speculation(value)
    if err:
        raise ValueError(f"{host_json_path()}: speculation = {value!r}: {err}")
    return {k: float(value[k]) for k in SPECULATION_KEYS}


def speculation_knobs(algorithm: str | None, dflash_block_size: int | None, num_draft_tokens: int | None,
                      ddtree_budget: int | None) -> tuple[int, int]:
    """(b, c): the knob b (tokens a request can advance in one verify step) and c (tokens verified
    per request per step), from the server's resolved arguments.
    DFLASH, DDTREE: b = the block size (--speculative-dflash-block-size; unset: what the server
    resolved, i.e. the draft's config block_size, else 16); other algorithms:
    --speculative-num-draft-tokens (as resolved), else 1; no speculation: 1. c = b, except DDTREE:
    c = --speculative-ddtree-budget (the tree's nodes; unset: b)."""
    if not algorithm:
        return 1, 1
    if algorithm in BLOCK_ALGORITHMS:
        b = int(dflash_block_size or num_draft_tokens or DFLASH_DEFAULT_BLOCK_SIZE)
    else:
        b = int(num_draft_tokens or 1)
    c = int(ddtree_budget) if algorithm == "DDTREE" and ddtree_budget else b
    return max(1, b), max(1, c)


def ddtree_alpha(alpha: float, b: int, c: int) -> float:
    """DDTREE's acceptance per position: α_tree = 1 − (1 − α)·sqrt(b / max(b, c)); a tree of c
    nodes wider than its depth b more often holds the next token."""
    return 1.0 - (1.0 - alpha) * (b / max(b, c)) ** 0.5


def accept_length(alpha: float, b: int) -> float:
    """Mean tokens a request advances per verify step, the bonus token included:
    a(b) = (1 − α^b) / (1 − α) (α = 1: b). b = 1 (no speculation): 1."""
    if alpha >= 1.0:
        return float(b)
    return (1.0 - alpha ** b) / (1.0 - alpha)


def step_seconds(model: dict, n: int, c: int) -> float:
    """One decode step of n running requests, each verifying c tokens:
    s = step_ms/1000 × (1 + per_request·n + n·(per_draft_token·c + per_draft_token_sq·c²))."""
    return model["step_ms"] / 1000.0 * (
        1.0 + model["per_request"] * n + n * (model["per_draft_token"] * c + model["per_draft_token_sq"] * c * c))


def throughput(model: dict, algorithm: str | None, b: int, n: int, c: int | None = None) -> float:
    """Tokens/s of n requests decoding together: n·a(b) / s(b, n) (the optimum a tuner looks for)."""
    c = b if c is None else c
    alpha = model["acceptance"]
    if algorithm == "DDTREE":
        alpha = ddtree_alpha(alpha, b, c)
    return n * accept_length(alpha, b) / step_seconds(model, n, c)


def speed_plan(model: dict, algorithm: str | None, dflash_block_size: int | None, num_draft_tokens: int | None,
               ddtree_budget: int | None) -> dict:
    """What TP0 runs with: {"algorithm", "b", "c", "alpha", "accept_length", and the model's keys}."""
    b, c = speculation_knobs(algorithm, dflash_block_size, num_draft_tokens, ddtree_budget)
    return {**model, "algorithm": algorithm, "b": b, "c": c, **acceptance_at(algorithm, model["acceptance"], b, c)}


def acceptance_at(algorithm: str | None, acceptance: float, b: int, c: int) -> dict:
    """{"alpha", "accept_length"} of a server at this acceptance (DDTREE's α_tree; 1 without an algorithm)."""
    alpha = ddtree_alpha(acceptance, b, c) if algorithm == "DDTREE" else acceptance
    return {"alpha": alpha, "accept_length": accept_length(alpha, b) if algorithm else 1.0}


def with_acceptance(plan: dict, acceptance: float | None) -> dict:
    """The plan at another acceptance (the control file's, at run time); None: the plan as it is."""
    if acceptance is None:
        return plan
    return {**plan, "acceptance": float(acceptance),
            **acceptance_at(plan["algorithm"], float(acceptance), plan["b"], plan["c"])}


# A draft declares the acceptance it gets with which target: a lab-only key of its config.json (the real
# SGLang ignores it), so that a drafter trained for another target is data in the lab, not a test's switch.
DRAFT_ACCEPTANCE_KEY = "lab_acceptance"
ANY_TARGET = "*"


def check_draft_acceptance(value) -> str | None:
    """Why a draft config's `lab_acceptance` is not valid (None: it is): a non-empty table of target ->
    acceptance; a target is "*" (any other), an absolute path, or a repository id ORG/NAME; an acceptance a
    number > 0 and <= 1."""
    if not isinstance(value, dict) or not value:
        return "not a non-empty table of target -> acceptance"
    bad_targets = [k for k in value if not isinstance(k, str) or not (
        k == ANY_TARGET or k.startswith("/") or (k.count("/") == 1 and all(k.split("/"))))]
    if bad_targets:
        return f"not '*', an absolute path or a repository id ORG/NAME: {bad_targets}"
    bad = [k for k, v in value.items() if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v <= 1]
    return f"acceptance must be a number > 0 and <= 1: {[f'{k} = {value[k]!r}' for k in bad]}" if bad else None


def _serves(key: str, target: str) -> bool:
    """Whether the target a server loads (--model-path) is the one a `lab_acceptance` key names: the same
    path, or the repository ORG/NAME, fetched into .../ORG/NAME/REVISION (the deploy's hub models) or at
    .../ORG/NAME."""
    path = target.rstrip("/")
    if key.startswith("/"):
        return path == key.rstrip("/")
    return path == key or path.endswith("/" + key) or os.path.dirname(path).endswith("/" + key)


def declared_acceptance(draft_config: dict, draft_path: str, target: str) -> float | None:
    """The acceptance a draft's config declares for `target`: its entry for that target, else its "*", else
    None (the host's). A malformed `lab_acceptance` is a lab file's mistake: ValueError naming the file."""
    value = draft_config.get(DRAFT_ACCEPTANCE_KEY)
    if value is None:
        return None
    err = check_draft_acceptance(value)
    if err:
        raise ValueError(f"{os.path.join(draft_path, 'config.json')}: {DRAFT_ACCEPTANCE_KEY} = {value!r}: {err}")
    for key, acceptance in value.items():
        if key != ANY_TARGET and _serves(key, target):
            return float(acceptance)
    return float(value[ANY_TARGET]) if ANY_TARGET in value else None


def credit_tokens(credit: float, a: float, left: int) -> tuple[int, float]:
    """One verify step of one request: (tokens it makes, its credit after). Whole tokens out of a
    fractional credit, so runs are deterministic: credit += a; k = floor(credit); credit −= k;
    at least 1, never more than `left`."""
    credit += a
    k = int(credit)
    credit -= k
    return max(1, min(k, left)), credit


# ---------------------------------------------------------------------------------------------
# The control file (control_path()): how a lab test changes a running server without a restart.
# ---------------------------------------------------------------------------------------------

CONTROL_DEFAULT = {"acceptance": None, "metrics": True, "generation": "serve"}  # as configured: what a missing file means
GENERATION = ("serve", "hang")  # the control's "generation": hang holds every generate request unanswered

_control_lock = threading.Lock()
_control_seen: tuple = (None, CONTROL_DEFAULT)  # (the file's identity when read, what it said)


def check_control(value) -> str | None:
    """Why `value` is not a valid control file (None: it is): an object of CONTROL_DEFAULT's keys (any
    may be left out), acceptance null or a number 0..1, metrics true or false, generation serve or hang."""
    if not isinstance(value, dict):
        return "not a JSON object"
    extra = sorted(k for k in value if k not in CONTROL_DEFAULT)
    if extra:
        return f"unknown {extra}"
    acc = value.get("acceptance")
    if acc is not None and (not isinstance(acc, (int, float)) or isinstance(acc, bool) or not 0 <= acc <= 1):
        return f"acceptance must be null or a number 0..1, not {acc!r}"
    if not isinstance(value.get("metrics", True), bool):
        return f"metrics must be true or false, not {value['metrics']!r}"
    if value.get("generation", "serve") not in GENERATION:
        return f"generation must be serve or hang, not {value['generation']!r}"
    return None


def control() -> dict:
    """What the control file says now ({"acceptance", "metrics", "generation"}). One stat per call, the file read
    only when it changed: cheap enough for each decode step. Missing or malformed: as configured; a
    malformed one (half-written by hand, say) is logged once, never raised: the server keeps serving."""
    global _control_seen
    path = control_path()
    try:
        st = os.stat(path)
        key = (path, st.st_ino, st.st_mtime_ns, st.st_size)  # write_control's rename: a new inode
    except OSError:
        key = None
    with _control_lock:
        if key != _control_seen[0]:
            value, err = dict(CONTROL_DEFAULT), None
            if key is not None:
                try:
                    with open(path, encoding="utf-8") as f:
                        got = json.load(f)
                    err = check_control(got)
                except (OSError, ValueError) as e:
                    err = str(e)
                if err:
                    print(f"lab: {path} ignored (as if missing): {err}", file=sys.stderr, flush=True)
                else:
                    value.update(got)
            _control_seen = (key, value)
        return dict(_control_seen[1])


def write_control(**changes) -> dict:
    """Set keys of the control file over what it says now, atomically (tmp + rename: a server never
    reads half a file); the one writer for tests and lab tooling. Returns what it says now."""
    path = control_path()
    value = {**control(), **changes}
    err = check_control(value)
    if err:
        raise ValueError(err)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f)
        f.write("\n")
    os.replace(tmp, path)
    return value


def reset_control() -> None:
    """As configured again: no control file."""
    try:
        os.unlink(control_path())
    except FileNotFoundError:
        pass


def _acceptance_arg(text: str) -> float | None:
    return None if text.lower() in ("none", "null") else float(text)


def control_main(argv: list[str]) -> int:
    """The CLI of sglang/_lab_control.py: --reset first, then the keys given; prints the result."""
    import argparse

    p = argparse.ArgumentParser(
        prog="python3 -m sglang._lab_control",
        description=f"LAB: change a running SGLang double without a restart ({control_path()}).")
    p.add_argument("--acceptance", type=_acceptance_arg, default=argparse.SUPPRESS, metavar="ALPHA|none",
                   help="the speed model's acceptance, 0..1, for steps from now on (none: host.json's)")
    p.add_argument("--metrics", choices=("on", "off"), default=argparse.SUPPRESS,
                   help="off: /metrics hangs (no answer, then the connection closes)")
    p.add_argument("--generation", choices=GENERATION, default=argparse.SUPPRESS,
                   help="hang: generate requests (chat, completions, /generate) hang as /metrics does; "
                        "/health stays 200")
    p.add_argument("--reset", action="store_true", help="as configured: remove the control file")
    args = vars(p.parse_args(argv))
    if args.pop("reset"):
        reset_control()
    if "metrics" in args:
        args["metrics"] = args["metrics"] == "on"
    try:
        value = write_control(**args) if args else control()
    except ValueError as e:
        p.error(str(e))
    print(json.dumps(value))
    return 0
