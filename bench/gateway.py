"""Rolling rollouts behind the gateway pair, and its failover (a benchmark that prints, never a timed test).

    .venv/bin/python bench/gateway.py [--concurrency 8] [--steady 10] [--runs 3]   # make bench runs it

On lab/gateway.toml (3 PRO 6000 replicas behind smg 1.13.0 on gw-1 and gw-2, behind the floating address
keepalived moves between them), converged first. Under a steady load of streamed chat completions to the
floating address:
  - a spec change (DFLASH block size) rolled out through both gateways' drains: failed requests, p50/p99
    latency during the rollout vs. steady state, the fewest replicas `ready` seen, the rollout's wall time;
  - an smg change (its policy) rolled one gateway at a time, the address handed over: failed requests, time;
  - failover, --runs times each: the holder's smg killed -9, its link dropped, its box powered off. For each:
    how long until the other gateway held the address (keepalived's own record of the moment), the client's
    gap (the fault to the first token of a probe request, started after it, given up after 1 s), the requests
    of the load lost and those that were in flight at the fault, and how long the failed gateway took to rejoin.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fleet.gateway import floating as floating_lib  # noqa: E402
from lab import lab as labmod  # noqa: E402
from ops.loadgen import Load, WorkersSampler, min_ready  # noqa: E402
from tests.lab.e2e import (FAILOVER_S, GATEWAY_FAULTS, VRRP_ENV, deploy, floating, floating_address,  # noqa: E402
                           gateway_fault, sh, workdir)

KEY = "bench-gateway-key-0123456789"
MODEL = "qwen3.6-27b"
GATEWAYS = ["gw-1", "gw-2"]


def ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds is not None else "n/a"


def spread(values: list[float]) -> str:
    return (f"min {min(values):.2f}s, median {statistics.median(values):.2f}s, max {max(values):.2f}s"
            if values else "n/a")


def vrrp(lab, gateway: str) -> tuple[str, float]:
    state, since = sh(lab, gateway, f"cat {floating_lib.state_file('gateway')}").split()
    return state, float(since)


def until(check, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def holder(lab, vip: str) -> str:
    return next(g for g in GATEWAYS if " eth0 " in f" {sh(lab, g, f'ip -o -4 addr show to {vip}/32')} ")


def failover(lab, url: str, vip: str, what: str) -> dict:
    """One fault of the holder under load; what it cost."""
    # the load, and a probe: short requests given up after 1 s, so that one stuck on the dead gateway (whose
    # client waits on a stream that will never come) holds no probe back from the new one
    with Load(url, MODEL, KEY, concurrency=8, max_tokens=48, timeout_s=15) as load, \
            Load(url, MODEL, KEY, concurrency=4, max_tokens=2, timeout_s=1) as probe:
        time.sleep(3)
        failed = holder(lab, vip)
        other = next(g for g in GATEWAYS if g != failed)
        t, start = time.time(), time.monotonic()
        gateway_fault(lab, failed, what, on=True)
        end = time.monotonic()
        until(lambda: vrrp(lab, other)[0] == "MASTER" and vrrp(lab, other)[1] > t, 3 * FAILOVER_S)
        moved = vrrp(lab, other)[1] - t
        time.sleep(3)
        back = time.time()
        gateway_fault(lab, failed, what, on=False)
        until(lambda: vrrp(lab, failed)[0] == "BACKUP" and vrrp(lab, failed)[1] > back, 60)
        rejoined = vrrp(lab, failed)[1] - back
        time.sleep(2)
    r = load.report.requests
    first = min((q.first_token for q in probe.report.requests if q.ok and q.started > end and q.first_token),
                default=None)
    return {"moved": moved, "gap": (first - start) if first else None, "rejoined": rejoined,
            "lost": sum(not q.ok for q in r), "in_flight": sum(q.started < end and q.ended > start for q in r),
            "total": len(r)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--steady", type=float, default=10.0, help="seconds of steady-state load before the rollout")
    ap.add_argument("--runs", type=int, default=3, help="faults of each kind")
    args = ap.parse_args()
    os.environ.update({"SGLANG_FLEET_GATEWAY_KEY": KEY, **VRRP_ENV})
    lab = labmod.up(REPO / "lab" / "gateway.toml")
    vip = floating_address(lab.subnet)
    url = f"http://{vip}:8000"
    pair = floating(lab.subnet)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t = time.monotonic()
            first = deploy(lab, workdir(Path(tmp) / "base", gateway=pair))
            print(f"first deploy (smg and keepalived on 2 gateways, 3 replicas rolled one by one): "
                  f"{time.monotonic() - t:.1f}s (exit {first.returncode})")
            changed = workdir(Path(tmp) / "change", pro6000='speculative = {**speculative, "block_size": 8}',
                              gateway=pair)
            with WorkersSampler(url, KEY) as sampler, Load(url, MODEL, KEY, concurrency=args.concurrency,
                                                         max_tokens=48) as load:
                time.sleep(args.steady)
                started = time.monotonic()
                run = deploy(lab, changed)
                ended = time.monotonic()
            report = load.report
            during = [s for s in sampler.samples if started <= s.at <= ended]
            print(f"rollout of 3 replicas under load (concurrency {args.concurrency}), drained out of both gateways: "
                  f"{ended - started:.1f}s (exit {run.returncode})")
            print(f"  requests: {report.total}, failed: {report.failed}"
                  + (f" ({'; '.join(report.failures(3))})" if report.failed else ""))
            print(f"  latency steady state: p50 {ms(report.latency_percentile(50, end=started))}, "
                  f"p99 {ms(report.latency_percentile(99, end=started))}")
            print(f"  latency during the rollout: p50 {ms(report.latency_percentile(50, started, ended))}, "
                  f"p99 {ms(report.latency_percentile(99, started, ended))}")
            print(f"  fewest replicas ready in the gateways during the rollout: {min_ready(during)} "
                  f"({len(during)} samples of GET /workers)")
            smg = workdir(Path(tmp) / "smg", gateway=f'{pair}\ngateway["policy"] = "least_load"')
            # a client resending what a kept-alive connection closed unanswered, as the OpenAI SDK does: smg's exit
            with Load(url, MODEL, KEY, concurrency=args.concurrency, max_tokens=48, resend_unanswered=True) as load:
                time.sleep(2)
                started = time.monotonic()
                run = deploy(lab, smg)
                ended = time.monotonic()
            print(f"smg change rolled one gateway at a time under load: {ended - started:.1f}s (exit "
                  f"{run.returncode}); requests: {load.report.total}, failed: {load.report.failed}, sent again "
                  f"(closed unanswered by smg's exit): {load.report.retried}")
        print(f"failover under load (concurrency 8; gateway.floating.failover_s {FAILOVER_S}, advertisements 1 s), "
              f"{args.runs} runs each:")
        for what in GATEWAY_FAULTS:
            runs = [failover(lab, url, vip, what) for _ in range(args.runs)]
            print(f"  {what}: address moved in {spread([r['moved'] for r in runs])}; client gap "
                  f"{spread([r['gap'] for r in runs if r['gap'] is not None])}; lost "
                  f"{[r['lost'] for r in runs]} of in flight {[r['in_flight'] for r in runs]} "
                  f"({sum(r['total'] for r in runs)} requests); rejoined in {spread([r['rejoined'] for r in runs])}")
    finally:
        labmod.down(lab.name)
    return 0


if __name__ == "__main__":
    with labmod.claimed("sglgw"):  # a test process using one of these labs waits, and we for it
        sys.exit(main())
