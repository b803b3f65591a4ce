"""Contract tests: what fleet/rollout/render.py writes is read by the REAL SGLang 0.5.23.

The real SGLang lives in its own CPU-only venv (tools/sglang-venv.sh: built once, cached
under ${SGLANG_FLEET_CACHE:-~/.cache/sglang-fleet}; a cold build takes a few minutes and
needs PyPI). Set SGLANG_FLEET_NO_REAL_SGLANG=1 to skip these tests where it cannot be built.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def real_sglang_python() -> str:
    if os.environ.get("SGLANG_FLEET_NO_REAL_SGLANG") == "1":
        pytest.skip("SGLANG_FLEET_NO_REAL_SGLANG=1: the real SGLang venv is not built here")  # allowed: opt-out for machines without PyPI; make test never sets it
    proc = subprocess.run(
        ["bash", str(ROOT / "tools" / "sglang-venv.sh")], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"tools/sglang-venv.sh failed:\n{proc.stderr[-4000:]}"
    return proc.stdout.strip().splitlines()[-1]
