"""Rolling rollout behind the gateway (a benchmark that prints, never a timed test).

    .venv/bin/python bench/gateway.py [--concurrency 8] [--steady 10]   # make bench runs it last

On lab/gateway.toml (3 PRO 6000 replicas behind smg 1.13.0 on gw-1), converged first: a steady
load of streamed chat completions through the gateway for --steady seconds, then a spec change
(DFLASH block size) rolled out under the same load. Prints the failed requests, p50/p99 latency
through the gateway during the rollout vs. steady state, the fewest replicas `ready` in smg's
/workers seen during the rollout, and the rollout's wall time.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab import lab as labmod  # noqa: E402
from ops.loadgen import Load, WorkersSampler, min_ready  # noqa: E402
from tests.lab.e2e import deploy, workdir  # noqa: E402

KEY = "bench-gateway-key-0123456789"
MODEL = "qwen3.6-27b"


def ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds is not None else "n/a"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--steady", type=float, default=10.0, help="seconds of steady-state load before the rollout")
    args = ap.parse_args()
    os.environ["SGLANG_FLEET_GATEWAY_KEY"] = KEY
    lab = labmod.up(REPO / "lab" / "gateway.toml")
    url = f"http://{lab.host('gw-1').ip}:8000"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.monotonic()
            first = deploy(lab, workdir(Path(tmp) / "base"))
            print(f"first deploy (smg installed, 3 replicas rolled one by one): {time.monotonic() - t:.1f}s "
                  f"(exit {first.returncode})")
            changed = workdir(Path(tmp) / "change", pro6000='speculative = {**speculative, "block_size": 8}')
            with WorkersSampler(url, KEY) as sampler, Load(url, MODEL, KEY, concurrency=args.concurrency,
                                                         max_tokens=48) as load:
                time.sleep(args.steady)
                started = time.monotonic()
                run = deploy(lab, changed)
                ended = time.monotonic()
            report = load.report
            during = [s for s in sampler.samples if started <= s.at <= ended]
            print(f"rollout of 3 replicas under load (concurrency {args.concurrency}): {ended - started:.1f}s "
                  f"(exit {run.returncode})")
            print(f"  requests: {report.total}, failed: {report.failed}"
                  + (f" ({'; '.join(report.failures(3))})" if report.failed else ""))
            print(f"  latency steady state: p50 {ms(report.latency_percentile(50, end=started))}, "
                  f"p99 {ms(report.latency_percentile(99, end=started))}")
            print(f"  latency during the rollout: p50 {ms(report.latency_percentile(50, started, ended))}, "
                  f"p99 {ms(report.latency_percentile(99, started, ended))}")
            print(f"  fewest replicas ready in the gateway during the rollout: {min_ready(during)} "
                  f"({len(during)} samples of GET /workers)")
    finally:
        labmod.down()
    return 0


if __name__ == "__main__":
    with labmod.Session():  # as a test session: one lab at a time on this machine
        sys.exit(main())
