"""`make status` timings (a benchmark that prints, never a timed test).

    .venv/bin/python bench/status.py [--runs N] [--hosts N]   # make bench runs it after rollout.py

Prints the wall time of `python -m ops status` (what `make status` runs) on the default lab
and on a lab of N hosts (default 16, half PRO 6000, half A6000), each converged first, next
to a no-op `pyinfra deploy.py` on the same lab: both read each host with one SSH command. On
the N-host lab also the controller's CPU (user + system) of a no-op converge of all N hosts
against one of them alone (`--limit`), side by side: what reading, framing and judging each
host's answer costs.
"""

from __future__ import annotations

import argparse
import resource
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
    wall, _, rc = cpu_timed(argv)
    return wall, rc


def cpu_timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall, CPU seconds the command and what it waited for used on this machine: the controller's,
    exit status)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    p = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), p.returncode


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
    if len(lab.hosts) > 1:  # one run, side by side: all hosts, then the first alone (--limit), same lab
        every = [cpu_timed([PYINFRA, "-y", str(lab.inventory), "deploy.py"])[1] for _ in range(runs)]
        one = [cpu_timed([PYINFRA, "-y", "--limit", lab.hosts[0].name, str(lab.inventory), "deploy.py"])[1]
               for _ in range(runs)]
        print(f"  controller CPU of a no-op converge: {len(lab.hosts)} hosts {statistics.median(every):.2f}s, "
              f"1 host {statistics.median(one):.2f}s: {statistics.median(every) / statistics.median(one):.2f}x")


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
    with labmod.Session():  # as a test session: one lab at a time on this machine
        sys.exit(main())
