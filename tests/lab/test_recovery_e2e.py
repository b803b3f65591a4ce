"""A host is never left worse than it was: the controller interrupted (SIGINT, SIGKILL) at each
stage, a failing backup, a failing upload, a rollback that fails too. Each test asserts the
host's END STATE: the new service serving with its smoke test passed, or the previous one
serving, the training job running as it was, and no lock, pending record or staged file left.

Every host starts as the seed case: a PRO 6000 box serving the old NEXTN config beside its
DFlash training job. Hosts whose loads crash can only end on the previous service. A run cut as
a host's activation starts may leave its record only begun (its turn not recorded yet): the next
run sends that host through its class's turns, which the failed takeovers stop, and it stays as it was.
"""

from __future__ import annotations

import json
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
from e2e import deploy, gpu_apps, health, interrupted, records, sh, summary_row, workdir

BOX = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\ngpu_count = 1\n'
       'gpu_memory_mib = 97887\nworkloads = ["dflash-train"]\n'
       'preinstalled = { speculative = { algorithm = "NEXTN", num_steps = 3, topk = 1, num_draft_tokens = 4 } }\n')
GOOD = 'load_seconds = 4\n'
CRASH = 'load = "crash"\nload_seconds = 6\n'  # crashes halfway through a 6 s load

# host -> (its load, the signal, the stage it is interrupted at)
SCENARIOS = {
    "ok-workloads-int": (GOOD, signal.SIGINT, "workloads"),
    "ok-files-int": (GOOD, signal.SIGINT, "files"),
    "ok-ready-int": (GOOD, signal.SIGINT, "readiness"),
    "ok-ready-kill": (GOOD, signal.SIGKILL, "readiness"),
    "cr-workloads-kill": (CRASH, signal.SIGKILL, "workloads"),
    "cr-files-kill": (CRASH, signal.SIGKILL, "files"),
    "cr-ready-int": (CRASH, signal.SIGINT, "readiness"),
    "cr-rollback-int": (CRASH, signal.SIGINT, "rollback"),
    "cr-rollback-kill": (CRASH, signal.SIGKILL, "rollback"),
}
OTHERS = {"backup-fails": GOOD, "upload-fails": GOOD, "rollback-fails": CRASH}
LAB = '[lab]\nname = "rclab"\nsubnet = "10.218.0.0/24"\n' + "".join(
    f'\n[[hosts]]\nname = "{h}"\n{BOX}{load}' for h, load in
    [*((h, s[0]) for h, s in SCENARIOS.items()), *OTHERS.items()]
)
READINESS = ('readiness = {"load_timeout_s": 30, "poll_interval_s": 0.25, "progress_every_s": 2}\n'
             'rolling = {"max_unavailable": "100%"}')  # the hosts not taken over: the canary, then the rest at once
NEW_UNIT = "grep -q -- '--speculative-algorithm DFLASH' /etc/systemd/system/sglang.service"
LEFTOVERS = ("ls /run/sglang-fleet/ /var/lib/sglang-fleet/sglang/pending.json "
             "/etc/systemd/system/.sglang.service.sglang-fleet-new /etc/sglang/.*sglang-fleet-new 2>/dev/null; true")


def trigger(lab, host: str, stage: str) -> dict:
    """How to catch the run at `stage` (interrupted()'s keywords)."""
    if stage == "workloads":  # the new files are staged, the host's turn begins: its training stops next
        return {"on_line": "Starting operation: Activate"}
    if stage == "files":  # the new unit is live
        return {"when": lambda: lab.ssh(host, NEW_UNIT, timeout=10).returncode == 0}
    if stage == "readiness":  # the new server is loading
        return {"on_line": "waiting for /health", "after": 1.5}
    return {"on_line": "rolling back", "after": 1.0}  # the previous server is loading again


def running_argv(lab, host: str) -> str:
    return sh(lab, host, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline")


@pytest.fixture(scope="module")
def recovered(lab_manager, tmp_path_factory):
    """Every scenario host interrupted at its stage (all at once), then ONE run that recovers them all."""
    lab = lab_manager.ensure(LAB)
    wd = workdir(tmp_path_factory.mktemp("wd") / "w", pro6000=READINESS)

    def interrupt(host):
        _, sig, stage = SCENARIOS[host]
        run = interrupted(lab, wd, host, sig, **trigger(lab, host, stage))
        left = sh(lab, host, "cat /var/lib/sglang-fleet/sglang/pending.json 2>/dev/null; echo; "
                             "cat /run/sglang-fleet/sglang.lock 2>/dev/null")
        return run, left

    with ThreadPoolExecutor(len(SCENARIOS)) as pool:
        first = dict(zip(SCENARIOS, pool.map(interrupt, SCENARIOS)))
    limits = [arg for host in SCENARIOS for arg in ("--limit", host)]
    return lab, first, deploy(lab, wd, *limits)


def phase_left(first: dict, host: str) -> str:
    """The phase the interrupted run's pending record says (fleet.rollout.pending): begun, rolling-out or rolling-back."""
    return json.loads(first[host][1].split("\n", 1)[0])["phase"]


@pytest.mark.parametrize("host", list(SCENARIOS))
def test_an_interrupted_run_leaves_a_record_and_a_dead_session_lock(recovered, host):
    _, first, _ = recovered
    run, left = first[host]
    sig = SCENARIOS[host][1]
    assert run.fired, run.out
    if sig == signal.SIGINT:
        assert run.returncode == 130, run.out
        assert "Interrupted (SIGINT): no further command runs on any host." in run.out
        assert "INTERRUPTED" in summary_row(run.out, host) and "the next run (make deploy) finishes" in run.out
    else:
        assert run.returncode == -signal.SIGKILL
    assert '"holder"' in left  # pending record and lock, both left
    # cut as its activation starts, it may not have recorded yet that its turn came; any later, it has
    assert phase_left(first, host) in (("begun", "rolling-out") if SCENARIOS[host][2] == "workloads" else
                                       ("rolling-out", "rolling-back")), left


def assert_as_before(lab, host: str) -> None:
    """The previous service serving, the training running and enabled as before, nothing left behind."""
    assert health(lab, host) == "200" and "--speculative-algorithm NEXTN" in running_argv(lab, host)
    assert "NEXTN" in sh(lab, host, "cat /etc/systemd/system/sglang.service")
    assert sh(lab, host, "systemctl is-active dflash-train; systemctl is-enabled dflash-train") == "active\nenabled"
    assert any("dflash-train" in app for app in gpu_apps(lab, host))  # it holds its GPU (again)
    assert sh(lab, host, LEFTOVERS) == "/run/sglang-fleet/:"


def only_begun(recovered, host: str) -> bool:
    """Its turn had not come: the next run sends it through its class's turns, which the failed
    takeovers (the crashing loads, taken over first as the canary) stop; it is left as it was."""
    lab, first, run = recovered
    if phase_left(first, host) != "begun":
        return False
    row = summary_row(run.out, host)
    assert "its turn had not come" in row and "NOT ROLLED (serving as before)" in row, run.out
    assert_as_before(lab, host)
    return True


@pytest.mark.parametrize("host", [h for h, s in SCENARIOS.items() if s[0] == GOOD])
def test_the_next_run_finishes_the_rollout(recovered, host):
    lab, _, run = recovered
    if only_begun(recovered, host):
        return
    row = summary_row(run.out, host)
    assert "take over an interrupted rollout" in row and " OK " in row, run.out
    assert "accept length" in row  # the smoke test passed
    assert health(lab, host) == "200" and "--speculative-algorithm DFLASH" in running_argv(lab, host)
    assert sh(lab, host, "systemctl is-active dflash-train; systemctl is-enabled dflash-train") == "inactive\ndisabled"
    assert sh(lab, host, LEFTOVERS) == "/run/sglang-fleet/:"
    assert records(lab, host)[-1]["result"] == "ok"


@pytest.mark.parametrize("host", [h for h, s in SCENARIOS.items() if s[0] == CRASH])
def test_the_next_run_returns_the_host_to_the_state_before_the_interrupted_run(recovered, host):
    lab, _, run = recovered
    if only_begun(recovered, host):
        return
    row = summary_row(run.out, host)
    assert "FAILED (rolled back)" in row, run.out
    if SCENARIOS[host][2] == "rollback":  # the interrupted run had failed already: no second try
        assert "finish the rollback of an interrupted rollout" in row
    else:
        assert "take over an interrupted rollout" in row
    assert_as_before(lab, host)
    assert records(lab, host)[-1]["result"] == "rolled-back"


# --- a step that fails -------------------------------------------------------------------

def training_pid(lab, host: str) -> str:
    return sh(lab, host, "systemctl show -p MainPID --value dflash-train.service")


def assert_untouched(lab, host: str, training: str) -> None:
    """The old service serves, the training job was never stopped (same process), nothing left behind."""
    assert health(lab, host) == "200" and "--speculative-algorithm NEXTN" in running_argv(lab, host)
    assert training_pid(lab, host) == training != "0"
    assert sh(lab, host, LEFTOVERS) == "/run/sglang-fleet/:"


@pytest.fixture(scope="module")
def failing(recovered, tmp_path_factory):
    lab, _, _ = recovered
    wd = workdir(tmp_path_factory.mktemp("wd") / "w", pro6000=READINESS)
    # /var full where the backup goes (a tmpfs of 64 KiB, filled), and a host whose sshd has no SFTP
    sh(lab, "backup-fails", "d=/var/lib/sglang-fleet/sglang/backups; mkdir -p $d && mount -t tmpfs -o size=64k tmpfs $d "
                            "&& dd if=/dev/zero of=$d/fill bs=4k 2>/dev/null; df -k $d | tail -1")
    sh(lab, "upload-fails", "sed -i 's/^Subsystem/#Subsystem/' /etc/ssh/sshd_config && systemctl reload ssh")
    # the old config crashes too once it is restarted (the lab's preinstalled config always loads)
    sh(lab, "rollback-fails", "sed -i 's/\"preinstalled_argv\": \\[/\"was_preinstalled_argv\": [/' /etc/lab/host.json")
    training = {h: training_pid(lab, h) for h in OTHERS}
    # one run each: in one run the class's first failure (backup-fails, its canary) stops the others' turns
    return lab, training, {h: deploy(lab, wd, "--limit", h) for h in OTHERS}


def test_a_backup_that_fails_on_a_full_disk_changes_nothing(failing):
    lab, training, runs = failing
    run = runs["backup-fails"]
    row = summary_row(run.out, "backup-fails")
    assert "FAILED" in row, run.out
    assert "could not begin the rollout, nothing was changed" in run.out and "No space left on device" in run.out
    assert_untouched(lab, "backup-fails", training["backup-fails"])
    assert "NEXTN" in sh(lab, "backup-fails", "cat /etc/systemd/system/sglang.service")


def test_an_upload_that_fails_rolls_back_before_anything_went_live(failing):
    lab, training, runs = failing
    run = runs["upload-fails"]
    row = summary_row(run.out, "upload-fails")
    assert "FAILED (service untouched)" in row, run.out
    assert "'Upload the new files beside the live ones' failed" in run.out
    assert_untouched(lab, "upload-fails", training["upload-fails"])
    assert records(lab, "upload-fails")[-1]["rollback"] == "FAILED (service untouched)"


def test_a_rollback_that_fails_too_stops_disables_keeps_the_files_and_gives_the_training_back(failing):
    lab, _, runs = failing
    run = runs["rollback-fails"]
    host = "rollback-fails"
    row = summary_row(run.out, host)
    assert "FAILED (rollback failed)" in row, run.out
    assert "the previous service did not come back" in run.out
    assert "left: sglang.service stopped and disabled with the previous files (backups/" in run.out
    assert "kept for inspection" in run.out and "next: read `journalctl -u sglang.service`" in run.out
    # no crash loop, not at boot either; the previous files are there to inspect; the GPU is the training's again
    assert sh(lab, host, "systemctl is-active sglang; systemctl is-enabled sglang") == "inactive\ndisabled"
    assert "NEXTN" in sh(lab, host, "cat /etc/systemd/system/sglang.service")
    assert sh(lab, host, "ls /var/lib/sglang-fleet/sglang/backups/*/sglang.service | wc -l") == "1"
    assert sh(lab, host, "systemctl is-active dflash-train; systemctl is-enabled dflash-train") == "active\nenabled"
    assert sh(lab, host, LEFTOVERS) == "/run/sglang-fleet/:"
    assert records(lab, host)[-1]["rollback"] == "FAILED (rollback failed)"
