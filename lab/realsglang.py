"""The real SGLang 0.5.23 server on a lab host (lab file key `real_sglang = true`), on this machine's CPU.

What the host gets (../shared/reference/sglang-cpu.md has the measured recipe and behaviour):
- the project's CPU venvs, read-only, bound (not copied: 2.2 GB) at REAL_DIR: the parser venv
  (tools/sglang-venv.sh) and its serving layer (`--serve`: 15 packages, a stand-in sgl_kernel), side by
  side as in the cache, so that the layer finds the parser venv's packages relative to itself; the
  layer's python (LAUNCHER) is the class's service.launcher, and the deploy's unit runs
  `LAUNCHER -m sglang.launch_server` as it would on a GPU box;
- a tiny model made offline here (tools/sglang-serve/tiny_model.py: a 1024-token byte-level BPE tokenizer
  and a random 2-layer Qwen3), written at the class's service.model_path; cached by its recipe.
Its nvidia-smi double stays (the deploy's preflight asks it); the SGLang double is not installed at the
launcher. What a CPU host needs from the server's flags and environment is the class's group_data
(group_data/cpu_real.py), as any class says what its hosts need.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from lab.base import cache_dir

REPO = Path(__file__).resolve().parents[1]
VERSION = "0.5.23"
REAL_DIR = "/opt/sglang-real"  # inside a host: the two venvs, bound read-only
LAUNCHER = f"{REAL_DIR}/sglang-{VERSION}-serve/bin/python"
VENV_SCRIPT = REPO / "tools" / "sglang-venv.sh"
MODEL_MAKER = REPO / "tools" / "sglang-serve" / "tiny_model.py"
# The tokenizer's training text: local, fixed files every Debian has (the model is keyed by their bytes too).
MODEL_TEXT = (Path("/usr/share/common-licenses/GPL-3"), Path("/usr/share/common-licenses/Apache-2.0"))


def venv_dirs() -> tuple[Path, Path]:
    """(the parser venv, its serving layer) in the cache, as tools/sglang-venv.sh makes them."""
    parser = cache_dir() / f"sglang-{VERSION}"
    return parser, parser.with_name(parser.name + "-serve")


def binds() -> list[str]:
    """systemd-nspawn's arguments binding both venvs read-only into a host, side by side at REAL_DIR."""
    return [f"--bind-ro={d}:{REAL_DIR}/{d.name}" for d in venv_dirs()]


def ensure() -> Path:
    """Both venvs and the tiny model, built the first time (about 2 min, 20 s and 5 s), cached after. Returns the
    model's directory."""
    p = subprocess.run(["bash", str(VENV_SCRIPT), "--serve"], capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"tools/sglang-venv.sh --serve failed:\n{p.stderr[-4000:]}")
    python = Path(p.stdout.strip().splitlines()[-1])
    recipe = hashlib.sha256(MODEL_MAKER.read_bytes() + (python.parent.parent / ".sglang-fleet-recipe").read_bytes()
                            + b"".join(t.read_bytes() for t in MODEL_TEXT)).hexdigest()[:12]
    model = cache_dir() / f"tiny-qwen3-{recipe}"
    if not (model / "complete").exists():
        shutil.rmtree(model, ignore_errors=True)
        made = subprocess.run([str(python), str(MODEL_MAKER), str(model), *map(str, MODEL_TEXT)], cwd="/",
                              capture_output=True, text=True, timeout=600)
        if made.returncode != 0:
            raise RuntimeError(f"{MODEL_MAKER.name} failed:\n{made.stderr[-4000:]}")
        (model / "complete").write_text(recipe + "\n")
    return model


def install(root: Path, model_path: str, model: Path) -> None:
    """Into a host's root: the tiny model at the class's model path, and the venvs' mount points (made before the
    first boot, so a reset finds them as provisioned)."""
    dest = root / model_path.lstrip("/")
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(model, dest, ignore=shutil.ignore_patterns("complete"))
    for d in venv_dirs():
        (root / REAL_DIR.lstrip("/") / d.name).mkdir(parents=True, exist_ok=True)


# What the SGLang double does otherwise than the real server, on purpose (lab/doubles/README.md, "Checked against
# the real server"): tests/lab/test_real_sglang_e2e.py sends both the same requests and fails on any other
# difference in what the deploy, the gateway, the rules and make status read. Key: where the difference is.
DOUBLE_DELIBERATE = {
    "server_info.lab_double": "the double says it is one (the tuner records that its figures come from a double)",
    "server_info.config": "the double's own resolved configuration (host.json), for the lab's tests",
    "speed": "the double's tokens/s and latencies are its speed model's (host.json), not a CPU's or a GPU's",
    "speculation": "the double speculates (any algorithm, its speed model's accept lengths); the real server on a "
                   "CPU cannot, so its speculative gauges stay 0 here and spec_verify_calls_total never appears",
}
