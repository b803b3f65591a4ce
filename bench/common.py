"""What the lab benchmarks share: a copy of the deploy whose group_data they change, a timed run, and the
server's own stop and load times from its journal. No pyinfra here: tests/unit/test_bench.py loads the
benches that import only this in its own process."""

from __future__ import annotations

import json
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
    for name in ("deploy.py", "adapter", "tasks", "fleet", "facts", "templates"):
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


def server_times(lab, host: str) -> tuple[float, float]:
    """(stop, load) of the server's last restart, from its journal (systemd's clock): the old
    server's stop (SGLang drains, checking every 5 s), then start to "ready to roll"."""
    out = lab.ssh(host, "journalctl -u sglang.service -o json --no-pager -n 400", timeout=30).stdout
    entries = [json.loads(line) for line in out.splitlines()]

    def last(prefix: str) -> int:
        return int([e for e in entries if str(e.get("MESSAGE", "")).startswith(prefix)][-1]["__REALTIME_TIMESTAMP"])

    ready = [e for e in entries if "ready to roll" in str(e.get("MESSAGE", ""))]
    stop = (last("Stopped sglang.service") - last("Stopping sglang.service")) / 1e6
    return stop, (int(ready[-1]["__REALTIME_TIMESTAMP"]) - last("Started sglang.service")) / 1e6
