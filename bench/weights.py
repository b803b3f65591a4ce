"""A draft change by revision, timed (a benchmark that prints, never a timed test).

    .venv/bin/python bench/weights.py [--runs N] [--kbit K]       # make bench runs it

One A6000 box serving the lab's Qwen3-8B and its DFlash draft by revision, from the lab's mirror
(olah), beside its training job; the mirror's link throttled to K kbit/s (default 40000: a 24 MiB
draft revision takes seconds, as a real one of a few GB does from a real hub). Each run starts the
training again, removes the new draft revision from the host, and declares it: the deploy fetches
it before anything stops. Printed: the fetch; the GPUs' downtime, from the training's stop to the
new server's "ready to roll" (both from the journals); and what that downtime would be had the fetch
come after the stop (the same two plus the fetch); and the old server's stop and the new one's load.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import converge, server_times, workdir  # noqa: E402
from lab import hf  # noqa: E402
from lab import lab as labmod  # noqa: E402

HOST = "a6000-1"
MODELS = "/opt/sglang-fleet/models"
LAB = ('[lab]\nname = "benchhub"\nsubnet = "10.208.0.0/24"\n\n[[hosts]]\nname = "mirror-1"\nrole = "mirror"\n\n'
       f'[[hosts]]\nname = "{HOST}"\ngroup = "a6000"\ngpu_model = "NVIDIA RTX A6000"\ngpu_count = 2\n'
       'gpu_memory_mib = 49140\nload_seconds = 3\nworkloads = ["dflash-train"]\npreinstalled = {}\n')


def declared(endpoint: str, target: str, draft: str) -> str:
    return ('service = {k: v for k, v in service.items() if k != "model_path"}\n'
            f'service["model"] = {{"repo": "{hf.TARGET}", "revision": "{target}"}}\n'
            f'speculative = {{"algorithm": "DFLASH", "draft_model": {{"repo": "{hf.DRAFT}", "revision": "{draft}"}}, '
            f'"block_size": 16}}\nhub = {{"endpoint": "{endpoint}", "disk_margin_mib": 0, "keep": 2}}\n'
            'workloads = ["dflash-train.service"]\n')


def journal_time(lab, unit: str, text: str) -> float:
    """When `unit`'s journal last said a line holding `text` (seconds since the epoch)."""
    out = lab.ssh(HOST, f"journalctl -u {unit} -o json --no-pager -n 400", timeout=30).stdout
    times = [int(e["__REALTIME_TIMESTAMP"]) / 1e6 for e in map(json.loads, out.splitlines())
             if text in str(e.get("MESSAGE", ""))]
    if not times:
        raise SystemExit(f"bench: {unit}'s journal has no line holding {text!r}")
    return times[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kbit", type=int, default=40000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path, wd = Path(tmp) / "weights.toml", workdir(Path(tmp))
        path.write_text(LAB)
        a6000 = wd / "group_data" / "a6000.py"
        base = a6000.read_text()
        lab = labmod.up(path)
        try:
            endpoint, target = lab.hf_endpoint(), lab.hf_revisions(hf.TARGET)[0]
            small, big = lab.hf_revisions(hf.DRAFT)[0], lab.hf_revisions(hf.DRAFT)[2]
            lab.throttle("mirror-1", args.kbit)
            fetches, downs, stops, loads = [], [], [], []
            for i in range(args.runs):
                a6000.write_text(base + declared(endpoint, target, small))  # from the small draft, not timed
                converge(lab, wd)
                lab.ssh(HOST, f"rm -rf {MODELS}/{hf.DRAFT}/{big} && systemctl enable --now dflash-train.service",
                        timeout=60)
                a6000.write_text(base + declared(endpoint, target, big))
                _, out = converge(lab, wd)
                fetched = re.search(rf"fetched {re.escape(hf.DRAFT)}@\w+: .* downloaded in ([\d.]+)s", out)
                if fetched is None:
                    raise SystemExit(f"bench: run {i} fetched no draft:\n{out[-3000:]}")
                fetches.append(float(fetched.group(1)))
                ready = journal_time(lab, "sglang.service", "ready to roll")
                downs.append(ready - journal_time(lab, "dflash-train.service", "Stopping dflash-train.service"))
                stop, load = server_times(lab, HOST)
                stops.append(stop)
                loads.append(load)
            fetch, down = statistics.median(fetches), statistics.median(downs)
            print(f"draft change by revision on {HOST} ({args.runs} runs, a {hf.DRAFT} revision of 24 MiB from the "
                  f"lab's olah at {args.kbit} kbit/s), medians: the fetch {fetch:.1f}s, before anything stops; the "
                  f"GPUs' downtime (the training's stop to the new server ready) {down:.1f}s, against {down + fetch:.1f}s "
                  f"had the fetch come after the stop; the old server's stop {statistics.median(stops):.1f}s + the new "
                  f"one's load {statistics.median(loads):.1f}s")
        finally:
            labmod.down(lab.name)
    return 0


if __name__ == "__main__":
    with labmod.claimed("benchhub"):  # a test process using one of these labs waits, and we for it
        sys.exit(main())
