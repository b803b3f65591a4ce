"""make tune's wall time: 4 candidates x 2 concurrencies on one replica behind the gateway (a benchmark that
prints, never a timed test).

    .venv/bin/python bench/tune.py [--runs 2]   # make bench runs it

On lab/gateway.toml (3 PRO 6000 replicas behind smg on gw-1 and gw-2, the SGLang double's speed model planting the
best block size at 8 for concurrency 1 and at 4 for 32), converged first: `python -m ops tune` of pro6000-1
over block sizes 4, 8, 12, 16 at concurrency 1 and 32 (max_tokens 32, one round: 8 and 32 requests), timed
whole, and split into its candidates' deploys, their measurements and the return to the declared spec, from
the tune's own lines. Prints the winners it found, against the planted ones.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab import lab as labmod  # noqa: E402
from tests.lab.e2e import BIN, VRRP_ENV, deploy, floating, workdir  # noqa: E402

KEY = "bench-tune-key-0123456789"
TUNE = 'tune = {"concurrency": [1, 32], "rounds": 1, "max_tokens": 32}'
PLANTED = {"1": {"block_size": 8}, "32": {"block_size": 4}}


def tune(lab, cwd: Path) -> tuple[float, str]:
    t = time.monotonic()
    p = subprocess.run([str(BIN / "python"), "-m", "ops", "tune", str(lab.inventory), "--class", "pro6000", "--host",
                        "pro6000-1"], cwd=cwd, env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True,
                       text=True, timeout=900)
    if p.returncode:
        raise SystemExit(f"bench: the tune failed (exit {p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    return time.monotonic() - t, p.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    args = ap.parse_args()
    os.environ.update({"SGLANG_FLEET_GATEWAY_KEY": KEY, **VRRP_ENV})
    lab = labmod.up(REPO / "lab" / "gateway.toml")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cwd = workdir(Path(tmp) / "wd", pro6000=TUNE, gateway=floating(lab.subnet))
            first = deploy(lab, cwd)
            if first.returncode:
                raise SystemExit(f"bench: the first deploy failed:\n{first.out[-3000:]}")
            for i in range(1, args.runs + 1):
                wall, out = tune(lab, cwd)
                deploys = [float(s) for s in re.findall(r"serving in ([0-9.]+)s", out)]
                rec = json.loads((cwd / "tuning" / "pro6000.json").read_text())
                measured = sum(lv["wall_s"] for c in rec["candidates"] for lv in c["levels"])
                found = rec["winner_per_concurrency"]
                print(f"run {i}: make tune, 4 candidates x 2 concurrencies: {wall:.1f}s; candidates' deploys "
                      f"{sum(deploys):.1f}s ({', '.join(f'{d:.1f}' for d in deploys)}), measuring {measured:.1f}s, "
                      f"the rest (checks, return to the declared spec, record) {wall - sum(deploys) - measured:.1f}s")
                best = ", ".join(f"concurrency {c}: {w['block_size'] if w else 'none'}" for c, w in found.items())
                print(f"  best block size found: {best} "
                      f"({'as planted' if found == PLANTED else 'NOT as planted: ' + json.dumps(PLANTED)})")
    finally:
        labmod.down(lab.name)
    return 0


if __name__ == "__main__":
    with labmod.claimed("sglgw"):  # a test process using one of these labs waits, and we for it
        sys.exit(main())
