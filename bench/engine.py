"""An engine switch, timed (a benchmark that prints, never a timed test).

    .venv/bin/python bench/engine.py [--runs N]        # make bench runs it

One PRO 6000 box serving a hand-made SGLang beside its training, and the lab's package index
(pypiserver on a mirror host, serving the SGLang double's wheels). Each switch declares another
engine (0.5.23, then the DDTree build 0.5.24.dev29907, in turn, each from its own Python path so
every run installs a new venv): the install happens before anything stops, so the service's
downtime is the old server's stop and the new one's load only (from its journal), printed next to
the install (pip into a new venv, then the new engine's checks) and the run's wall time. Then a
no-op converge with the engine declared: SSH commands per host.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import converge, server_times, workdir  # noqa: E402
from lab import lab as labmod  # noqa: E402

HOST = "pro6000-1"
LAB = ('[lab]\nname = "benchengin"\nsubnet = "10.207.0.0/24"\n\n[[hosts]]\nname = "mirror-1"\nrole = "mirror"\n\n'
       f'[[hosts]]\nname = "{HOST}"\ngroup = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
       'gpu_count = 1\ngpu_memory_mib = 97887\nload_seconds = 3\nengine_import_seconds = 8\n'
       'workloads = ["dflash-train"]\npreinstalled = {}\n')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    runs = ap.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        path, wd = Path(tmp) / "engine.toml", workdir(Path(tmp))
        path.write_text(LAB)
        pro = wd / "group_data" / "pro6000.py"
        declared = pro.read_text()
        lab = labmod.up(path)
        try:
            index = lab.index_url()
            walls, installs, checks, stops, loads = [], [], [], [], []
            for i in range(runs * 2):
                version = ("0.5.23", "0.5.24.dev29907")[i % 2]
                python = "/usr/bin/python3" if i < 2 else "/usr/bin/python3.11"  # a new declaration: a new venv
                pro.write_text(declared + '\nservice = {k: v for k, v in service.items() if k != "launcher"}\n'
                               f'engine = {{"sglang": "sglang=={version}", "index_url": "{index}", "disk_mib": 1, '
                               f'"python": "{python}", "keep": 0}}\n')
                if i == 2:  # the first two made their venvs: the next two make new ones again
                    lab.ssh(HOST, "rm -rf /opt/sglang-fleet/engines/sglang-*", timeout=60)
                wall, out = converge(lab, wd)
                installed = re.search(r"engine \S+ installed in ([\d.]+)s", out)
                checked = re.search(r"engine \S+ checked in ([\d.]+)s", out)
                if installed is None or checked is None:
                    raise SystemExit(f"bench: run {i} installed no engine:\n{out[-3000:]}")
                walls.append(wall)
                installs.append(float(installed.group(1)))
                checks.append(float(checked.group(1)))
                stop, load = server_times(lab, HOST)
                stops.append(stop)
                loads.append(load)
            print(f"engine switch on {HOST} ({len(walls)} runs, 0.5.23 <-> the DDTree build, each a new venv), "
                  f"medians: run {statistics.median(walls):.1f}s; before anything stops: the install (venv + pip from "
                  f"the lab's index) {statistics.median(installs):.1f}s and the new engine's checks (3 imports of "
                  f"8 s, the lab's engine_import_seconds, the parser's beside the other two) {statistics.median(checks):.1f}s; downtime (old server's stop "
                  f"{statistics.median(stops):.1f}s + new one's load {statistics.median(loads):.1f}s) "
                  f"{statistics.median(stops) + statistics.median(loads):.1f}s")
            wall, out = converge(lab, wd)
            print(f"no-op converge with the engine declared: {wall:.2f}s, "
                  f"{len(re.findall(rf'Running command on {HOST}:', out))} SSH command(s) on {HOST}")
        finally:
            labmod.down(lab.name)
    return 0


if __name__ == "__main__":
    with labmod.claimed("benchengin"):  # a test process using one of these labs waits, and we for it
        sys.exit(main())
