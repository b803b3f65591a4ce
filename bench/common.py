"""What the lab benchmarks share: a copy of the deploy whose group_data they change, and a timed run."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYINFRA = str(Path(sys.executable).parent / "pyinfra")


def workdir(tmp: Path) -> Path:
    """tmp/wd: the deploy's code linked, its group_data copied (a benchmark rewrites a class file)."""
    wd = tmp / "wd"
    wd.mkdir()
    for name in ("deploy.py", "tasks", "fleet", "facts", "templates"):
        (wd / name).symlink_to(REPO / name)
    (wd / "group_data").mkdir()
    for f in (REPO / "group_data").glob("*.py"):
        (wd / "group_data" / f.name).write_text(f.read_text())
    return wd


def converge(lab, cwd: Path) -> tuple[float, str]:
    """(wall, output) of one `pyinfra --debug` run, which must succeed."""
    t = time.monotonic()
    p = subprocess.run([PYINFRA, "-y", "--debug", str(lab.inventory), "deploy.py"], cwd=cwd, capture_output=True,
                       text=True, timeout=900)
    if p.returncode:
        raise SystemExit(f"bench: the run failed (exit {p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    return time.monotonic() - t, p.stdout + p.stderr
