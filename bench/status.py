"""`make status` timings (a benchmark that prints, never a timed test).

    .venv/bin/python bench/status.py [--runs N] [--hosts N]   # make bench runs it after rollout.py

Prints the wall time of `python -m ops status` (what `make status` runs) on the default lab
and on a lab of N hosts (default 16, half PRO 6000, half A6000), each converged first, next
to a no-op `pyinfra deploy.py` on the same lab: both read each host with one SSH command.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab import lab as labmod  # noqa: E402

PYINFRA = str(Path(sys.executable).parent / "pyinfra")


def timed(argv: list[str]) -> tuple[float, int]:
    t = time.monotonic()
    p = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)
    return time.monotonic() - t, p.returncode


def big_lab(n: int) -> str:
    hosts = []
    for i in range(n):
        if i % 2 == 0:
            hosts.append(f'[[hosts]]\nname = "pro-{i:02d}"\ngroup = "pro6000"\n'
                         'gpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\ngpu_count = 1\n'
                         'gpu_memory_mib = 97887\nload_seconds = 1\n')
        else:
            hosts.append(f'[[hosts]]\nname = "a6k-{i:02d}"\ngroup = "a6000"\ngpu_model = "NVIDIA RTX A6000"\n'
                         'gpu_count = 2\ngpu_memory_mib = 49140\nload_seconds = 1\n')
    return '[lab]\nname = "benchlab"\n\n' + "\n".join(hosts)


def measure(lab_file: Path | str, runs: int, label: str) -> None:
    lab = labmod.up(lab_file)
    wall, rc = timed([PYINFRA, "-y", str(lab.inventory), "deploy.py"])
    print(f"{label}: {len(lab.hosts)} hosts, converged in {wall:.1f}s (exit {rc})")
    status = [timed([sys.executable, "-m", "ops", "status", str(lab.inventory)]) for _ in range(runs)]
    noop = [timed([PYINFRA, "-y", str(lab.inventory), "deploy.py"])[0] for _ in range(runs)]
    walls = [w for w, _ in status]
    print(f"  make status: wall median {statistics.median(walls):.2f}s (min {min(walls):.2f}s, max {max(walls):.2f}s), "
          f"exit {status[-1][1]}")
    print(f"  no-op deploy: wall median {statistics.median(noop):.2f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=16)
    args = ap.parse_args()
    measure(labmod.DEFAULT_LAB, args.runs, "default lab")
    labmod.down()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench-status.toml"
        path.write_text(big_lab(args.hosts))
        measure(path, args.runs, f"{args.hosts}-host lab")
        labmod.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
