"""What the canary analysis adds to a class's rollout, timed (a benchmark that prints, never a timed test).

    .venv/bin/python bench/canary.py [--runs N]        # make bench runs it

A class of three PRO 6000 boxes with the SGLang double's speed model (lab/doubles/README.md), a change run
changing the DFlash drafter (a new directory with the same acceptance: the analysis passes, its baseline the
old spec measured on the canary before its turn), with the analysis on (group_data/all.py's load: 16 requests of
128 tokens, 4 at a time) and off, side by side; what it adds beside a turn's time (the run without it over its
three turns). The analysis's own two loads, as the canary logged them, too.
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

HOSTS = ("can-1", "can-2", "can-3")
DRAFTS = ("/root/models/Qwen3.6-27B-DFlash", "/root/models/Qwen3.6-27B-DFlash-v2")  # the second: a new drafter, alike
LAB = '[lab]\nname = "canlab"\nsubnet = "10.226.0.0/24"\n' + "".join(
    f'\n[[hosts]]\nname = "{h}"\ngroup = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
    'gpu_count = 1\ngpu_memory_mib = 97887\nload_seconds = 3\n'
    'speculation = { step_ms = 5.0, per_request = 0.2, per_draft_token = 0.05, per_draft_token_sq = 0.01, '
    'acceptance = 0.9 }\n'
    f'draft_acceptance = {{ "{DRAFTS[1]}" = {{ "*" = 0.9 }} }}\n' for h in HOSTS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2)
    runs = ap.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        path, wd = Path(tmp) / "canary.toml", workdir(Path(tmp))
        path.write_text(LAB)
        pro = wd / "group_data" / "pro6000.py"
        declared = pro.read_text()
        lab = labmod.up(path)
        try:
            converge(lab, wd)
            walls: dict[bool, list[float]] = {True: [], False: []}
            said = ""
            draft = DRAFTS[0]
            for _ in range(runs):
                for analysis in walls:
                    draft = DRAFTS[1] if draft == DRAFTS[0] else DRAFTS[0]
                    pro.write_text(declared + f'\nspeculative = {{**speculative, "draft_model_path": "{draft}"}}\n'
                                   f'canary = {{"analysis": {analysis}}}\n')  # over the defaults: all.py's
                    wall, out = converge(lab, wd)
                    walls[analysis].append(wall)
                    said = next((line for line in out.splitlines() if "canary analysis passed" in line), said)
            on, off = statistics.median(walls[True]), statistics.median(walls[False])
            print(f"change run of a class of {len(HOSTS)}, median of {runs}: with the canary analysis {on:.1f}s, "
                  f"without {off:.1f}s: the analysis adds {on - off:.1f}s beside a turn's {off / len(HOSTS):.1f}s "
                  "(the run without it over its turns)")
            figures = re.search(r"canary analysis passed: .*", said)
            print(f"the canary's: {figures.group(0) if figures else '(no analysis line found)'}")
        finally:
            labmod.down(lab.name)
    return 0


if __name__ == "__main__":
    with labmod.claimed("canlab"):  # a test process using this lab waits, and we for it
        sys.exit(main())
