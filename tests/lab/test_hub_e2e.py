"""Weights as declared state: target and draft by Hugging Face repository and commit, fetched by the
deploy on each host with huggingface_hub from a real olah (the lab's mirror host, serving the git
repositories lab/hf.py generates), before anything stops.

Five A6000 hosts serve the hand-placed Qwen3-8B + DFlash draft beside their training job. The first
run declares both by revision with hub.max_parallel 2: four fetch, never more than two at once
(olah's access log), and serve from the revision directories; the fifth has too small a disk and is
refused before anything stops. Then: a second run fetches nothing; a new draft revision is fetched
while the training still runs; a truncated file is fetched again; the mirror down refuses, naming
it; a controller killed mid-fetch (the mirror throttled) changes nothing live, and the next run
resumes the fetch. And a drafter trained for another target (the hub's lab/Qwen3-8B-Base-DFlash, declaring
it accepts little with lab/Qwen3-8B) loads and serves, at the accept length it declares.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess

import pytest
from e2e import BIN, deploy, health, host_json, interrupted, main_pid, records, sh, summary_row, workdir

from lab import hf
from lab.wheels import DOUBLE_LAB

MODELS = "/opt/sglang-fleet/models"
N = 5  # a6000-5: the small disk
SPEED_HOST = 3  # a6000-3: the SGLang double's speed model, so that its accept length is what its steps made
SPEED = ("speculation = { step_ms = 1.0, per_request = 0.2, per_draft_token = 0.05, per_draft_token_sq = 0.01, "
         "acceptance = 0.9 }\n")
HOST = ('[[hosts]]\nname = "a6000-{i}"\ngroup = "a6000"\ngpu_model = "NVIDIA RTX A6000"\ngpu_count = 2\n'
        'gpu_memory_mib = 49140\nload_seconds = 0.5\nworkloads = ["dflash-train"]\npreinstalled = {{}}\n{more}')
LAB = '[lab]\nname = "hublab"\nsubnet = "10.207.0.0/24"\n\n[[hosts]]\nname = "mirror-1"\nrole = "mirror"\n\n' + \
    "\n".join(HOST.format(i=i, more={N: "models_disk_kib = 1024\n", SPEED_HOST: SPEED}.get(i, "")) for i in range(1, N + 1))
FAST = ('readiness = {"load_timeout_s": 30, "poll_interval_s": 0.25, "progress_every_s": 5}\n'
        'rolling = {"max_unavailable": 4}\nworkloads = ["dflash-train.service"]')
ALL = [f"a6000-{i}" for i in range(1, N)]


def by_revision(endpoint: str, target: str, draft: str, draft_repo: str = hf.DRAFT, **hub) -> str:
    """a6000's group_data lines: target and draft by repository and commit (the draft by branch: 'main'),
    from the lab's mirror."""
    key = "branch" if draft == "main" else "revision"
    fields = ", ".join(f'"{k}": {v!r}' for k, v in {"endpoint": endpoint, "max_parallel": 2, "disk_margin_mib": 0,
                                                     **hub}.items())
    return (f'service = {{k: v for k, v in service.items() if k != "model_path"}}\n'
            f'service["model"] = {{"repo": "{hf.TARGET}", "revision": "{target}"}}\n'
            f'speculative = {{"algorithm": "DFLASH", "draft_model": {{"repo": "{draft_repo}", "{key}": "{draft}"}}, '
            f'"block_size": 16}}\nhub = {{{fields}}}\n{FAST}')


def argv(lab, host: str) -> str:
    return sh(lab, host, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline")


def state(lab, host: str) -> dict:
    return {"unit": sh(lab, host, "cat /etc/systemd/system/sglang.service"), "pid": main_pid(lab, host),
            "train": main_pid(lab, host, "dflash-train.service")}


def as_before(lab, host: str, before: dict) -> None:
    """The host as it was: the same unit file, server and training processes, serving, no lock left."""
    assert state(lab, host) == before and health(lab, host) == "200"
    assert sh(lab, host, "ls /run/sglang-fleet/*.lock /var/lib/sglang-fleet/sglang/pending.json 2>/dev/null") == ""


def access_log(lab) -> list[str]:
    """olah's access lines (uvicorn's: CLIENT:PORT - "METHOD PATH HTTP/1.1" STATUS), oldest first."""
    return [ln for ln in sh(lab, "mirror-1", "journalctl -u lab-olah.service -o cat --no-pager").splitlines()
            if '" 200' in ln or '" 30' in ln or '" 4' in ln or '" 5' in ln]


def most_at_once(lines: list[str], ips: dict[str, str]) -> int:
    """The most hosts whose requests interleave: each host's span from its first access line to its last."""
    spans: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        for ip, host in ips.items():
            if re.search(rf"\b{re.escape(ip)}:\d+ - ", line):
                spans.setdefault(host, [i, i])[1] = i
    return max((sum(a <= i <= b for a, b in spans.values()) for i in range(len(lines))), default=0)


@pytest.fixture(scope="module")
def hublab(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB, fresh=True)
    return lab, tmp_path_factory.mktemp("wd"), lab.hf_endpoint(), lab.hf_revisions(hf.TARGET)[0], \
        lab.hf_revisions(hf.DRAFT)


def test_four_hosts_fetch_two_at_once_and_serve_the_revisions(hublab):
    lab, tmp, endpoint, target, drafts = hublab
    small = state(lab, f"a6000-{N}")
    seen = len(access_log(lab))
    run = deploy(lab, workdir(tmp / "first", a6000=by_revision(endpoint, target, drafts[0])))
    assert run.returncode != 0  # a6000-5 refused
    target_dir, draft_dir = f"{MODELS}/{hf.TARGET}/{target}", f"{MODELS}/{hf.DRAFT}/{drafts[0]}"
    for h in ALL:
        row = summary_row(run.out, h)
        assert "OK" in row and f"fetch {hf.TARGET}@{target[:12]}" in row, row
        assert health(lab, h) == "200"
        running = argv(lab, h)
        assert f"--model-path {target_dir} " in running and f"--speculative-draft-model-path {draft_dir} " in running
        assert sh(lab, h, f"ls -a {MODELS}/{hf.DRAFT}") == f".\n..\n.{drafts[0]}.lock\n.{drafts[0]}.log\n{drafts[0]}"
        assert records(lab, h)[-1]["weights"] == f"{hf.TARGET}@{target} + {hf.DRAFT}@{drafts[0]}"
    # fetched before any host stopped its training
    assert run.out.rindex("fetched lab/Qwen3-8B-DFlash@") < run.out.index("stopping dflash-train")
    ips = {lab.host(h).ip: h for h in ALL + [f"a6000-{N}"]}
    at_once = most_at_once(access_log(lab)[seen:], ips)
    assert at_once == 2, at_once  # the bound held, and was used
    # the small disk: refused by name before anything stopped, and nothing of the revision left
    row = summary_row(run.out, f"a6000-{N}")
    assert "REFUSED" in row, row
    assert re.search(rf"a6000-{N}: {re.escape(hf.TARGET)}@{target[:12]}: expected it fetched from "
                     rf"{re.escape(endpoint)} into {re.escape(target_dir)}, found [\d.]+ MiB free at {MODELS}, "
                     r"[\d.]+ MiB needed .*; nothing was stopped", run.out), run.out
    as_before(lab, f"a6000-{N}", small)
    assert sh(lab, f"a6000-{N}", f"ls {MODELS}/{hf.TARGET}/{target} 2>&1 | head -1").endswith("No such file or directory")


def test_a_second_run_fetches_nothing_in_one_command(hublab):
    lab, tmp, endpoint, target, drafts = hublab
    seen = len(access_log(lab))
    limits = [a for h in ALL for a in ("--limit", h)]
    run = deploy(lab, workdir(tmp / "again", a6000=by_revision(endpoint, target, drafts[0])), "--debug", *limits)
    assert run.returncode == 0, run.out[-3000:]
    for h in ALL:
        assert "none (already as declared)" in summary_row(run.out, h)
        assert len(re.findall(rf"Running command on {h}:", run.out)) == 1, h
    assert access_log(lab)[seen:] == []  # not one request, so not one byte, from the mirror
    # make status and make history name the revisions served
    wd = tmp / "again"
    status = subprocess.run([str(BIN / "python"), "-m", "ops", "status", str(lab.inventory), "--json", "--limit", "a6000-1"],
                            cwd=wd, capture_output=True, text=True, timeout=120)
    (row,) = json.loads(status.stdout)
    assert row["verdict"] == "OK" and row["weights"] == f"{hf.TARGET}@{target[:12]} + {hf.DRAFT}@{drafts[0][:12]}", row
    history = subprocess.run([str(BIN / "python"), "-m", "ops", "history", str(lab.inventory), "a6000-1"], cwd=wd,
                             capture_output=True, text=True, timeout=120)
    assert f"weights {hf.TARGET}@{target} + {hf.DRAFT}@{drafts[0]}" in history.stdout, history.stdout


def test_a_new_draft_is_fetched_while_the_training_runs(hublab):
    lab, tmp, endpoint, target, drafts = hublab
    h = "a6000-1"
    sh(lab, h, "systemctl enable --now dflash-train.service")  # the training back on the box meanwhile
    run = deploy(lab, workdir(tmp / "draft", a6000=by_revision(endpoint, target, drafts[1], keep=0)), "--limit", h)
    assert run.returncode == 0, run.out
    assert run.out.index(f"fetched {hf.DRAFT}@{drafts[1][:12]}") < run.out.index("stopping dflash-train"), run.out
    assert f"--speculative-draft-model-path {MODELS}/{hf.DRAFT}/{drafts[1]} " in argv(lab, h)
    assert health(lab, h) == "200"
    # keep 0, but the backup's unit names the old revision: kept for a rollback
    assert sh(lab, h, f"ls {MODELS}/{hf.DRAFT}") == "\n".join(sorted(drafts[:2]))


def test_a_truncated_file_is_fetched_again(hublab):
    lab, tmp, endpoint, target, drafts = hublab
    h = "a6000-2"
    shard = f"{MODELS}/{hf.TARGET}/{target}/model-00001-of-00002.safetensors"
    good = sh(lab, h, f"sha256sum {shard}")
    pid = main_pid(lab, h)
    sh(lab, h, f"truncate -s 4096 {shard}")
    run = deploy(lab, workdir(tmp / "trunc", a6000=by_revision(endpoint, target, drafts[0])), "--limit", h)
    assert run.returncode == 0, run.out
    assert f"fetch {hf.TARGET}@{target[:12]}" in summary_row(run.out, h)
    assert sh(lab, h, f"sha256sum {shard}") == good
    assert main_pid(lab, h) == pid and health(lab, h) == "200"  # the unit is as declared: no restart
    assert sh(lab, h, f"ls -a {MODELS}/{hf.TARGET}") == f".\n..\n.{target}.lock\n.{target}.log\n{target}"


def test_the_mirror_down_or_a_missing_commit_refuses_naming_it(hublab):
    lab, tmp, endpoint, target, drafts = hublab
    h = "a6000-3"
    before = state(lab, h)
    sh(lab, "mirror-1", "systemctl stop lab-olah.service")
    try:
        run = deploy(lab, workdir(tmp / "down", a6000=by_revision(endpoint, target, drafts[1])), "--limit", h)
    finally:
        sh(lab, "mirror-1", "systemctl start lab-olah.service")
    assert run.returncode != 0 and "REFUSED" in summary_row(run.out, h)
    assert (f"{h}: {hf.DRAFT}@{drafts[1][:12]}: expected it fetched from {endpoint} into "
            f"{MODELS}/{hf.DRAFT}/{drafts[1]}, found the client's metadata request failed: ") in run.out, run.out
    assert "nothing was stopped" in run.out
    as_before(lab, h, before)
    # the mirror back, a commit it does not have: refused with olah's own answer
    missing = "0" * 40
    run = deploy(lab, workdir(tmp / "missing", a6000=by_revision(endpoint, target, missing)), "--limit", h)
    assert run.returncode != 0 and "REFUSED" in summary_row(run.out, h)
    assert (f"{h}: {hf.DRAFT}@{missing[:12]}: expected it fetched from {endpoint} into {MODELS}/{hf.DRAFT}/{missing}, "
            "found the client's metadata request failed: ") in run.out, run.out
    assert "HfHubHTTPError: Server error '500 Internal Server Error'" in run.out
    as_before(lab, h, before)


def accept_length(lab, host: str, tokens: int = 64) -> float:
    """meta_info's spec_accept_length of one generation on the host: its tokens per verify step."""
    body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": tokens}})
    meta = json.loads(sh(lab, host, f"curl -s --max-time 20 -d '{body}' http://127.0.0.1:30000/generate"))["meta_info"]
    assert meta["completion_tokens"] == tokens, meta
    return meta["spec_accept_length"]


def test_a_draft_trained_for_another_target_serves_and_accepts_what_it_declares(hublab):
    """lab/Qwen3-8B-Base-DFlash declares 0.2 with lab/Qwen3-8B (lab/hf.py): deployed, it loads and serves, and
    the served accept length falls from the host's (0.9: a(16) = 8.1) to the draft's (a(16) = 1.25)."""
    lab, tmp, endpoint, target, drafts = hublab
    h = f"a6000-{SPEED_HOST}"
    assert host_json(lab, h)["speculation"]["acceptance"] == 0.9
    assert accept_length(lab, h) == pytest.approx(DOUBLE_LAB.accept_length(0.9, 16), rel=0.05)
    [other] = lab.hf_revisions(hf.OTHER_TARGETS_DRAFT)
    run = deploy(lab, workdir(tmp / "other", a6000=by_revision(endpoint, target, other, hf.OTHER_TARGETS_DRAFT)),
                 "--limit", h)
    assert run.returncode == 0, run.out
    assert f"--speculative-draft-model-path {MODELS}/{hf.OTHER_TARGETS_DRAFT}/{other} " in argv(lab, h)
    assert health(lab, h) == "200"
    assert records(lab, h)[-1]["weights"] == f"{hf.TARGET}@{target} + {hf.OTHER_TARGETS_DRAFT}@{other}"
    declared = hf.OTHER_TARGETS_ACCEPTANCE[hf.TARGET]
    assert declared == 0.2 and accept_length(lab, h) == pytest.approx(DOUBLE_LAB.accept_length(declared, 16), rel=0.05)


def test_a_fetch_killed_with_the_controller_is_resumed(hublab):
    lab, tmp, endpoint, target, drafts = hublab
    h = "a6000-4"
    wd = workdir(tmp / "kill", a6000=by_revision(endpoint, target, drafts[2]))
    before = state(lab, h)
    partial = f"{MODELS}/{hf.DRAFT}/.{drafts[2]}.partial"
    lab.throttle("mirror-1", 4000)  # the 24 MB revision: seconds
    try:
        run = interrupted(lab, wd, h, signal.SIGKILL, on_line=f"fetching {hf.DRAFT}@{drafts[2][:12]}", after=1.5)
        assert run.fired, run.out
        # nothing live changed: the unit names the old revision, never the partial one
        as_before(lab, h, before)
        assert f"{MODELS}/{hf.DRAFT}/{drafts[0]} " in argv(lab, h)
        assert sh(lab, h, f"test -d {partial} && echo partial") == "partial"
    finally:
        lab.throttle("mirror-1", None)
    # the next run waits for a fetch the lost controller left running (its lock), or resumes the partial;
    # it declares the draft by branch: main is that commit (the newest), named in the run
    run = deploy(lab, workdir(tmp / "main", a6000=by_revision(endpoint, target, "main")), "--limit", h)
    assert run.returncode == 0, run.out
    assert f"{hf.DRAFT}: branch main is commit {drafts[2]}" in run.out
    assert records(lab, h)[-1]["weights"] == f"{hf.TARGET}@{target} + {hf.DRAFT}@{drafts[2]}"
    assert f"--speculative-draft-model-path {MODELS}/{hf.DRAFT}/{drafts[2]} " in argv(lab, h)
    assert sh(lab, h, f"test -e {partial} || echo gone") == "gone" and health(lab, h) == "200"
