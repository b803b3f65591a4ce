"""Rollout numbers on the default lab (a benchmark that prints, never a timed test).

    make bench            # or: .venv/bin/python bench/rollout.py [--runs N]

Prints:
  - wall time and SSH commands per host of a no-op converge (`pyinfra --debug` counts them);
  - a change run: one spec field changed (the PRO 6000 class's DFlash block size), so that
    host backs up, uploads, restarts, waits for /health and smoke-tests: wall time next to
    the server's own load time (start to "ready" in its journal), SSH commands and uploads;
  - time from /health turning 200 to the readiness gate seeing it;
  - time from a crash (SIGKILL of the server while it loads) to the gate reporting it.
The last two drive the deploy's own gate (tasks.activate.wait_ready) over pyinfra's connection.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import server_times  # noqa: E402
from fleet.spec.load import load_class_specs  # noqa: E402
from lab import lab as labmod  # noqa: E402
from ops.fleet import Fleet  # noqa: E402
from tasks.activate import wait_ready  # noqa: E402

PYINFRA = str(Path(sys.executable).parent / "pyinfra")
# As the deploy restarts: manual starts count towards the unit's start limit too.
RESTART = "systemctl reset-failed sglang.service; systemctl restart sglang.service"


def gate_host(lab, name: str):
    """The lab host as the deploy's own pyinfra Host (its connector settings, its runner), connected:
    the gate runs over it as in a rollout. Returns (fleet, host); fleet.close() disconnects."""
    fleet = Fleet(str(lab.inventory), [name])
    host = fleet.hosts[0]
    why = fleet.connect(host)
    if why:
        raise SystemExit(f"bench: cannot reach {name}: {why}")
    return fleet, host


def converge(lab, cwd: Path = REPO) -> tuple[float, dict[str, int], int, int]:
    """(wall, SSH commands per host, uploads, exit code) of one `pyinfra --debug` run."""
    t = time.monotonic()
    p = subprocess.run([PYINFRA, "-y", "--debug", str(lab.inventory), "deploy.py"], cwd=cwd,
                       capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t
    counts: dict[str, int] = {}
    for host in re.findall(r"Running command on (\S+?):", p.stdout + p.stderr):
        counts[host] = counts.get(host, 0) + 1
    return wall, counts, (p.stdout + p.stderr).count("Attempting upload of"), p.returncode


def change_runs(lab, runs: int) -> None:
    """Each run changes one field of the PRO 6000 class (the block size, 8 <-> 16)."""
    host = "pro6000-1"
    walls, stops, loads, counts, uploads = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        wd = Path(tmp)
        for name in ("deploy.py", "adapter", "tasks", "fleet", "facts", "templates"):
            (wd / name).symlink_to(REPO / name)
        shutil.copytree(REPO / "group_data", wd / "group_data")
        pro = wd / "group_data" / "pro6000.py"
        declared = pro.read_text()
        for i in range(runs):
            pro.write_text(declared + f'\nspeculative = {{**speculative, "block_size": {8 if i % 2 == 0 else 16}}}\n')
            wall, c, up, rc = converge(lab, wd)
            assert rc == 0, f"change run {i} failed (exit {rc})"
            walls.append(wall)
            stop, load = server_times(lab, host)
            stops.append(stop)
            loads.append(load)
            counts.append(c.get(host, 0))
            uploads.append(up)
    converge(lab)  # back to the declared spec
    wall, stop, load = (statistics.median(x) for x in (walls, stops, loads))
    print(f"change run on {host}, {runs} runs: wall median {wall:.2f}s, of which the old server's stop (drain) "
          f"{stop:.2f}s and the new one's load (start -> ready) {load:.2f}s: the rollout's own time "
          f"{wall - stop - load:.2f}s (pyinfra's start and preflight included)")
    print(f"  {host}: {statistics.median(counts):.0f} SSH commands and {statistics.median(uploads):.0f} uploads "
          f"(backup, upload, restart, gate, smoke test, record)")


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
    print(f"first converge of the default lab: {first[0]:.1f}s (exit {first[3]})")

    walls, counts = [], []
    for _ in range(runs):
        wall, c, _, rc = converge(lab)
        walls.append(wall)
        counts.append(c)
    print(f"no-op converge, {runs} runs: wall median {statistics.median(walls):.2f}s "
          f"(min {min(walls):.2f}s, max {max(walls):.2f}s)")
    for host in sorted(counts[-1]):
        print(f"  {host}: {counts[-1][host]} SSH commands")
    change_runs(lab, runs)

    host = "pro6000-1"
    spec = specs["pro6000"]
    fleet, gated = gate_host(lab, host)
    seen = []
    for _ in range(runs):
        lab.ssh(host, RESTART)
        verdict = wait_ready(gated, spec)
        t_seen = time.time()
        seen.append(t_seen - ready_at(lab, host))
        assert verdict.ready, verdict.reason
    print(f"/health 200 -> gate sees it: median {statistics.median(seen) * 1000:.0f} ms "
          f"(poll interval {spec.readiness.poll_interval_s:g}s)")

    crash = []
    for _ in range(runs):
        lab.ssh(host, RESTART)
        killed = {}

        def kill_later():
            time.sleep(1.0)
            killed["t"] = time.time()
            lab.ssh(host, "systemctl kill -s KILL --kill-whom=main sglang.service")

        threading.Thread(target=kill_later).start()
        verdict = wait_ready(gated, spec)
        crash.append(time.time() - killed["t"])
        assert not verdict.ready
        print(f"    crash reported: {verdict.reason}")
    lab.ssh(host, RESTART)
    wait_ready(gated, spec)
    fleet.close()
    print(f"crash -> gate reports it: median {statistics.median(crash) * 1000:.0f} ms, max {max(crash) * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    with labmod.claimed("sgllab"):  # a test process using one of these labs waits, and we for it
        sys.exit(main())
