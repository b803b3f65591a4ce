"""What monitoring costs (a benchmark that prints, never a timed test).

    .venv/bin/python bench/monitoring.py [--scrapes N] [--runs N]   # make bench runs it

On the monitoring lab (lab/monitoring.toml: two PRO 6000 replicas behind smg, and mon-1 with Debian's
Prometheus and Alertmanager), converged first:
  - a replica's side: the CPU (user + system, from /proc) the SGLang double's server process spends per
    /metrics request, N requests in a row on the host, idle and under load through the gateway;
  - the deploy's side: SSH commands per host of a no-op converge with monitoring declared (`pyinfra
    --debug` counts them: one per host is the aim), and its wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.rollout import converge  # noqa: E402
from lab import lab as labmod  # noqa: E402
from ops.loadgen import Load  # noqa: E402

KEY = "bench-monitoring-key-0123456789"
MODEL = "qwen3.6-27b"
# the server's CPU ticks (utime + stime, /proc/PID/stat fields 14 and 15), N /metrics, the ticks again
SCRAPES = ("pid=$(systemctl show -p MainPID --value sglang.service); t() {{ awk '{{print $14 + $15}}' /proc/$pid/stat; }}; "
           "a=$(t); for i in $(seq {n}); do curl -s -o /dev/null --max-time 5 http://127.0.0.1:30000/metrics; done; "
           "echo $a $(t) $(getconf CLK_TCK)")


def cpu_ms_per_scrape(lab, n: int) -> float:
    out = lab.ssh("pro6000-1", SCRAPES.format(n=n), timeout=300).stdout.split()
    before, after, hz = (float(x) for x in out)
    return (after - before) / hz * 1000 / n


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--scrapes", type=int, default=300)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    os.environ["SGLANG_FLEET_GATEWAY_KEY"] = KEY
    os.environ.setdefault("SGLANG_FLEET_MONITORING_PASSWORD", "bench-monitoring-0123")  # group_data's source
    lab = labmod.up(REPO / "lab/monitoring.toml")
    try:
        wall, counts, _, rc = converge(lab)
        if rc:
            raise SystemExit(f"bench: the first converge failed (exit {rc})")
        print(f"monitoring lab converged in {wall:.1f} s (Prometheus and Alertmanager installed on mon-1)")
        idle = cpu_ms_per_scrape(lab, args.scrapes)
        with Load(f"http://{lab.host('gw-1').ip}:8000", MODEL, KEY, concurrency=4, max_tokens=64):
            busy = cpu_ms_per_scrape(lab, args.scrapes)
        print(f"replica: the double's /metrics costs {idle:.2f} ms of its server's CPU per scrape idle "
              f"({idle / 150:.4f}% of a core at Prometheus' default 15 s interval); {busy:.2f} ms under load (an "
              f"upper bound: the streaming of the load's own requests is in it); {args.scrapes} scrapes each")
        walls, per_host = [], {}
        for _ in range(args.runs):
            wall, counts, _, rc = converge(lab)
            if rc:
                raise SystemExit(f"bench: a no-op converge failed (exit {rc})")
            walls.append(wall)
            for h, c in counts.items():
                per_host.setdefault(h, []).append(c)
        print(f"no-op converge with monitoring declared: {statistics.median(walls):.2f} s (median of {args.runs})")
        for h in sorted(per_host):
            print(f"  {h}: {statistics.median(per_host[h]):.0f} SSH commands")
    finally:
        labmod.down(lab.name)


if __name__ == "__main__":
    with labmod.claimed("sglmon"):  # a test process using this lab waits, and we for it
        main()
