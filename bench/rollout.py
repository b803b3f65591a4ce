"""Rollout numbers on the default lab (a benchmark that prints, never a timed test).

    make bench            # or: .venv/bin/python bench/rollout.py [--runs N]

Prints:
  - wall time and SSH commands per host of a no-op converge (`pyinfra --debug` counts them);
  - time from /health turning 200 to the readiness gate seeing it;
  - time from a crash (SIGKILL of the server while it loads) to the gate reporting it.
The last two drive the deploy's own gate (tasks.activate.wait_ready) over the lab's SSH.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleet.groupdata import load_class_specs  # noqa: E402
from lab import lab as labmod  # noqa: E402
from tasks.activate import wait_ready  # noqa: E402

PYINFRA = str(Path(sys.executable).parent / "pyinfra")


class LabHost:
    """The two things the gate asks of a pyinfra host, over the lab's ssh."""

    def __init__(self, lab, name: str):
        self.lab, self.name = lab, name

    def run_shell_command(self, command, **_):
        p = self.lab.ssh(self.name, str(command), timeout=60)
        return p.returncode == 0, SimpleNamespace(stdout=p.stdout, output=p.stdout + p.stderr)

    def log(self, message: str) -> None:
        print(f"    [{self.name}] {message}")


def converge(lab) -> tuple[float, dict[str, int], int]:
    t = time.monotonic()
    p = subprocess.run([PYINFRA, "-y", "--debug", str(lab.inventory), "deploy.py"], cwd=REPO,
                       capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t
    counts: dict[str, int] = {}
    for host in re.findall(r"Running command on (\S+?):", p.stdout + p.stderr):
        counts[host] = counts.get(host, 0) + 1
    return wall, counts, p.returncode


def ready_at(lab, host: str) -> float:
    """When the server double logged that it serves (host clock = this machine's clock)."""
    out = lab.ssh(host, "journalctl -u sglang.service -o json --no-pager -n 200", timeout=30).stdout
    times = [int(e["__REALTIME_TIMESTAMP"]) / 1e6 for e in map(json.loads, out.splitlines())
             if "ready to roll" in str(e.get("MESSAGE", ""))]
    return times[-1] if times else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    runs = ap.parse_args().runs
    lab = labmod.up(labmod.DEFAULT_LAB)
    specs = load_class_specs(REPO / "group_data")
    first = converge(lab)
    print(f"first converge of the default lab: {first[0]:.1f}s (exit {first[2]})")

    walls, counts = [], []
    for _ in range(runs):
        wall, c, rc = converge(lab)
        walls.append(wall)
        counts.append(c)
    print(f"no-op converge, {runs} runs: wall median {statistics.median(walls):.2f}s "
          f"(min {min(walls):.2f}s, max {max(walls):.2f}s)")
    for host in sorted(counts[-1]):
        print(f"  {host}: {counts[-1][host]} SSH commands")

    host = "pro6000-1"
    spec = specs["pro6000"]
    seen = []
    for _ in range(runs):
        lab.ssh(host, "systemctl restart sglang.service")
        verdict = wait_ready(LabHost(lab, host), spec)
        t_seen = time.time()
        seen.append(t_seen - ready_at(lab, host))
        assert verdict.ready, verdict.reason
    print(f"/health 200 -> gate sees it: median {statistics.median(seen) * 1000:.0f} ms "
          f"(poll interval {spec.readiness.poll_interval_s:g}s)")

    crash = []
    for _ in range(runs):
        lab.ssh(host, "systemctl restart sglang.service")
        killed = {}

        def kill_later():
            time.sleep(1.0)
            killed["t"] = time.time()
            lab.ssh(host, "systemctl kill -s KILL --kill-whom=main sglang.service")

        threading.Thread(target=kill_later).start()
        verdict = wait_ready(LabHost(lab, host), spec)
        crash.append(time.time() - killed["t"])
        assert not verdict.ready
        print(f"    crash reported: {verdict.reason}")
    lab.ssh(host, "systemctl restart sglang.service")
    wait_ready(LabHost(lab, host), spec)
    print(f"crash -> gate reports it: median {statistics.median(crash) * 1000:.0f} ms, max {max(crash) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
