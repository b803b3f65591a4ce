"""A class's turns, timed (a benchmark that prints, never a timed test).

    .venv/bin/python bench/turns.py [--runs N]        # make bench runs it

A class of three PRO 6000 boxes without a gateway, each change run changing one spec field (the
DFlash block size) so every host restarts: the canary alone and then one host at a time
(rolling.max_unavailable 1, the default), against the canary alone and then the other two at once
("100%"), side by side; and a no-op converge of the class (one SSH command per host).
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

from bench.common import converge, workdir  # noqa: E402
from lab import lab as labmod  # noqa: E402

HOSTS = ("turn-1", "turn-2", "turn-3")
LAB = '[lab]\nname = "benchturn"\n' + "".join(
    f'\n[[hosts]]\nname = "{h}"\ngroup = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
    'gpu_count = 1\ngpu_memory_mib = 97887\nload_seconds = 3\n' for h in HOSTS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    runs = ap.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        path, wd = Path(tmp) / "turns.toml", workdir(Path(tmp))
        path.write_text(LAB)
        pro = wd / "group_data" / "pro6000.py"
        declared = pro.read_text()
        lab = labmod.up(path)
        try:
            first, _ = converge(lab, wd)
            print(f"first converge of a class of {len(HOSTS)}: {first:.1f}s")
            one, batch = "1", '"100%"'  # rolling.max_unavailable, as group_data writes it
            walls: dict[str, list[float]] = {one: [], batch: []}
            block = 16
            for _ in range(runs):
                for at_once in walls:
                    block = 8 if block == 16 else 16
                    pro.write_text(declared + f'\nspeculative = {{**speculative, "block_size": {block}}}\n'
                                   f'rolling = {{"max_unavailable": {at_once}}}\n')
                    walls[at_once].append(converge(lab, wd)[0])
            print(f"change run of {len(HOSTS)} hosts, median of {runs}: the canary, then one at a time "
                  f"{statistics.median(walls[one]):.1f}s; the canary, then the other two at once "
                  f"{statistics.median(walls[batch]):.1f}s")
            wall, out = converge(lab, wd)
            commands = {h: len(re.findall(rf"Running command on {h}:", out)) for h in HOSTS}
            print(f"no-op converge of the class: {wall:.2f}s, SSH commands per host: "
                  + ", ".join(f"{h} {n}" for h, n in commands.items()))
        finally:
            labmod.down(lab.name)
    return 0


if __name__ == "__main__":
    with labmod.claimed("benchturn"):  # a test process using one of these labs waits, and we for it
        sys.exit(main())
