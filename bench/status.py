"""`make status` timings and a fleet's scale (a benchmark that prints, never a timed test).

    .venv/bin/python bench/status.py [--runs N] [--lab lab/fleet48.toml]   # make bench runs it after rollout.py

Prints the wall time of `python -m ops status` (what `make status` runs) on the default lab and on a large lab
(lab/fleet48.toml: 48 hosts, 32 PRO 6000 and 16 A6000), each converged first, next to a no-op `pyinfra deploy.py`
on the same lab: both read each host with one SSH command. On the large lab also its boot (the kernel's inotify
limits raised as it needs: lab/inotify.py), and a no-op converge of all its hosts against one of them alone
(`--limit`), side by side, wall and the controller's CPU (user + system): what reading, framing and judging each
host's answer costs.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab import inotify  # noqa: E402
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


def measure(lab_file: Path | str, runs: int, label: str) -> None:
    t = time.monotonic()
    lab = labmod.up(lab_file)
    print(f"{label}: {len(lab.hosts)} hosts up in {time.monotonic() - t:.1f}s (booted, or found up)")
    wall, rc = timed([PYINFRA, "-y", str(lab.inventory), "deploy.py"])
    print(f"  converged in {wall:.1f}s (exit {rc})")
    status = [timed([sys.executable, "-m", "ops", "status", str(lab.inventory)]) for _ in range(runs)]
    noop = [timed([PYINFRA, "-y", str(lab.inventory), "deploy.py"])[0] for _ in range(runs)]
    walls = [w for w, _ in status]
    print(f"  make status: wall median {statistics.median(walls):.2f}s (min {min(walls):.2f}s, max {max(walls):.2f}s), "
          f"exit {status[-1][1]}")
    print(f"  no-op deploy: wall median {statistics.median(noop):.2f}s")
    if len(lab.hosts) > 1:  # side by side: all hosts, then the first alone (--limit), same lab
        every = [cpu_timed([PYINFRA, "-y", str(lab.inventory), "deploy.py"]) for _ in range(runs)]
        one = [cpu_timed([PYINFRA, "-y", "--limit", lab.hosts[0].name, str(lab.inventory), "deploy.py"])
               for _ in range(runs)]
        (w_all, c_all), (w_one, c_one) = [[statistics.median(r[i] for r in rs) for i in (0, 1)] for rs in (every, one)]
        print(f"  no-op converge, {len(lab.hosts)} hosts against 1: wall {w_all:.2f}s vs {w_one:.2f}s "
              f"({w_all / w_one:.2f}x); controller CPU {c_all:.2f}s vs {c_one:.2f}s ({c_all / c_one:.2f}x)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--lab", type=Path, default=REPO / "lab" / "fleet48.toml", help="the large lab")
    args = ap.parse_args()
    measure(labmod.DEFAULT_LAB, args.runs, "default lab")
    labmod.down("sgllab")
    measure(args.lab, args.runs, f"{args.lab.name}")
    labmod.down(labmod.lab_name(args.lab))
    print(f"  inotify limits now: {', '.join(f'{k} {v}' for k, v in _inotify().items())}")
    return 0


def _inotify() -> dict[str, int]:
    return {key: int((inotify.SYSCTL / key).read_text()) for key in inotify.PER_HOST}


if __name__ == "__main__":
    with labmod.claimed("sgllab", "sgl48"):  # a test process using one of these labs waits, and we for it
        sys.exit(main())
