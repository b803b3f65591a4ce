"""The real SGLang 0.5.23 server in the lab, timed (a benchmark that prints, never a timed test).

    .venv/bin/python bench/real.py [--runs N]        # make bench runs it

One lab host running the real server on this machine's CPU (lab file key real_sglang, class cpu_real:
a tiny random Qwen3; lab/realsglang.py). Its start-up, from systemd's start of the unit to the first
/health answered 200 (both from the host's journal: the deploy's readiness wait polls /health, the
real server logs each answer), for the first install and for each restart after; the old server's
SIGTERM drain, idle, on each restart; then a no-op converge: wall time and SSH commands on the host.
Most of a start-up is SGLang's imports: on 2 busy cores expect 20-80 s.
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

from bench.common import converge, workdir  # noqa: E402
from lab import lab as labmod  # noqa: E402

HOST = "real-1"
LOAD_TIMEOUT_S = 1200  # group_data/cpu_real.py's readiness.load_timeout_s
# lab/real.toml's name and subnet (a benchmark does not run beside its test), its real host alone
LAB = ('[lab]\nname = "reallab"\nsubnet = "10.225.0.0/24"\n\n'
       f'[[hosts]]\nname = "{HOST}"\ngroup = "cpu_real"\ngpu_model = "NVIDIA L4"\ngpu_count = 1\n'
       'gpu_memory_mib = 23034\nreal_sglang = true\n')


def journal_times(lab) -> tuple[float, float | None]:
    """(start-up, stop) of the unit's last start, from its journal (systemd's clock): its start to the first /health
    answered 200 after it; the stop before it (SIGTERM to the old server's exit), None on a first start."""
    out = lab.ssh(HOST, "journalctl -u sglang.service -o json --no-pager -n 2000", timeout=30).stdout
    entries = [json.loads(line) for line in out.splitlines()]

    def at(e: dict) -> int:
        return int(e["__REALTIME_TIMESTAMP"])

    started = [at(e) for e in entries if str(e.get("MESSAGE", "")).startswith("Started sglang.service")][-1]
    healthy = [at(e) for e in entries if at(e) > started and '"GET /health HTTP/1.1" 200' in str(e.get("MESSAGE", ""))]
    if not healthy:
        raise SystemExit("bench: no /health answered 200 in the journal since the unit's last start")
    stopping = [at(e) for e in entries if at(e) < started and str(e.get("MESSAGE", "")).startswith("Stopping sglang")]
    stopped = [at(e) for e in entries if at(e) < started and str(e.get("MESSAGE", "")).startswith("Stopped sglang")]
    stop = (stopped[-1] - stopping[-1]) / 1e6 if stopping and stopped else None
    return (healthy[0] - started) / 1e6, stop


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2, help="restarts after the first install (default 2)")
    runs = ap.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        path, wd = Path(tmp) / "real.toml", workdir(Path(tmp))
        path.write_text(LAB)
        lab = labmod.up(path)
        try:
            wall, _ = converge(lab, wd)
            first, _ = journal_times(lab)
            starts, stops = [], []
            for _ in range(runs):
                # the unit's stop (SIGTERM, the drain) and start, then /health polled on the host as the deploy's
                # readiness wait polls it, within the class's load timeout; reset-failed first: cpu_real allows one
                # start per window (restarts_on_crash 0), which a restart by hand would exceed
                p = lab.ssh(HOST, "systemctl reset-failed sglang.service; systemctl restart sglang.service && "
                            f"for i in $(seq {int(LOAD_TIMEOUT_S * 2)}); do [ \"$(curl -s -o /dev/null -w '%{{http_code}}' "
                            "--max-time 5 http://127.0.0.1:30000/health)\" = 200 ] && exit 0; sleep 0.5; done; "
                            "exit 1", timeout=LOAD_TIMEOUT_S * 4)
                if p.returncode:
                    raise SystemExit(f"bench: the real server did not answer /health 200 after its restart: {p.stderr}")
                start, stop = journal_times(lab)
                starts.append(start)
                stops.append(stop)
            print(f"real SGLang 0.5.23 on this CPU ({HOST}, tiny Qwen3): first install {wall:.1f}s, its start-up to "
                  f"/health 200 {first:.1f}s; {runs} restart(s), medians: start-up to /health 200 "
                  f"{statistics.median(starts):.1f}s, idle SIGTERM drain {statistics.median(stops):.1f}s")
            wall, out = converge(lab, wd)
            print(f"no-op converge against the real server: {wall:.2f}s, "
                  f"{len(re.findall(rf'Running command on {HOST}:', out))} SSH command(s) on {HOST}")
        finally:
            labmod.down(lab.name)
    return 0


if __name__ == "__main__":
    with labmod.claimed("reallab"):  # the test process using this lab waits, and we for it
        sys.exit(main())
