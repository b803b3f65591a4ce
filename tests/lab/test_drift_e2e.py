"""Drift on converged hosts: the next run repairs it (or refuses it, naming it), the run after
changes nothing. And the unit's stop: an in-flight stream survives `systemctl stop` because
the unit says KillMode=mixed; with control-group (systemd's default) it is cut.
"""

from __future__ import annotations

import threading
import time

import pytest
from e2e import deploy, health, main_pid, sh, summary_row, workdir

KEY = "sk-lab-Dr1ftK3y0123"
BOX = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\ngpu_count = 1\n'
       'gpu_memory_mib = 97887\nload_seconds = 2\n')
ENV = {"LAB_DRIFT_API_KEY": KEY}
OVERRIDE = 'service = {**service, "api_key": {"env": "LAB_DRIFT_API_KEY"}}\n' + \
           'readiness = {"load_timeout_s": 30, "poll_interval_s": 0.25, "progress_every_s": 2}\n' + \
           'rolling = {"max_unavailable": "100%"}'  # eleven hosts: the canary, then the rest at once
DROPIN = "/etc/systemd/system/sglang.service.d/override.conf"
UNIT = "/etc/systemd/system/sglang.service"

# host -> the hand change made on it after the first deploy
DRIFT = {
    "secret-mode": "chmod 644 /etc/sglang/sglang.yaml",
    "env-owner": "chown nobody:nogroup /etc/sglang/sglang.env",
    "dir-mode": "chmod 755 /etc/sglang",
    "stopped": "systemctl stop sglang",
    "disabled": "systemctl disable --quiet sglang",
    "reload-pending": f"touch -d '+1 minute' {UNIT}",
    # the unit edited by hand and the server restarted with it, then the file put back without a restart
    "other-args": f"cp {UNIT} /root/unit && sed -i 's/--speculative-dflash-block-size 16/"
                  f"--speculative-dflash-block-size 8/' {UNIT} && systemctl daemon-reload && systemctl restart sglang "
                  f"&& cp /root/unit {UNIT} && systemctl daemon-reload",
    # still loading when the next run looks (active, /health not 200): a load of its own, 25 s from the restart (the
    # manager's environment, no drop-in: that would be a drift of its own), done last before that run
    "loading": "systemctl set-environment LAB_SGLANG_LOAD_SECONDS=25 && systemctl restart sglang",
    "dropin-exec": f"mkdir -p {DROPIN[:-13]} && printf '[Service]\\nExecStart=\\nExecStart=/bin/sleep 1d\\n' > {DROPIN} "
                   "&& systemctl daemon-reload",
    "dropin-env": f"mkdir -p {DROPIN[:-13]} && printf '[Service]\\nEnvironment=CUDA_VISIBLE_DEVICES=1\\n' > {DROPIN} "
                  "&& systemctl daemon-reload",
}


LAB = '[lab]\nname = "drlab"\nsubnet = "10.211.0.0/24"\n' + "".join(f'\n[[hosts]]\nname = "{h}"\n{BOX}' for h in DRIFT) + \
    f'\n[[hosts]]\nname = "stopper"\n{BOX}decode_tokens_per_s = 20\n'
REFUSED = {"dropin-exec": "ExecStart", "dropin-env": "Environment"}


@pytest.fixture(scope="module")
def drifted(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB)
    wd = workdir(tmp_path_factory.mktemp("wd") / "w", pro6000=OVERRIDE)
    first = deploy(lab, wd, env=ENV)
    assert first.returncode == 0, first.out
    pids = {h: main_pid(lab, h) for h in DRIFT}
    for host, change in sorted(DRIFT.items(), key=lambda kv: kv[0] == "loading"):  # the load last, its window whole
        sh(lab, host, change)
    second = deploy(lab, wd, env=ENV)
    after_second = {h: main_pid(lab, h) for h in DRIFT}
    third = deploy(lab, wd, env=ENV)
    return lab, wd, pids, second, after_second, third


def row(run, host) -> str:
    return summary_row(run.out, host)


@pytest.mark.parametrize("host, path, mode_owner, words", [
    ("secret-mode", "/etc/sglang/sglang.yaml", "600 root:root", "mode/owner 644 root:root, want 600 root:root"),
    ("env-owner", "/etc/sglang/sglang.env", "644 root:root", "mode/owner 644 nobody:nogroup, want 644 root:root"),
    ("dir-mode", "/etc/sglang", "700 root:root", "mode/owner 755 root:root, want 700 root:root"),
])
def test_modes_and_owners_are_repaired_without_a_restart(drifted, host, path, mode_owner, words):
    lab, _, pids, second, after, _ = drifted
    assert f"drift: {path}: {words}" in second.out
    assert "fix mode/owner of" in row(second, host) and " OK " in row(second, host), second.out
    assert sh(lab, host, f"stat -c '%a %U:%G' {path}") == mode_owner
    assert after[host] == pids[host]  # the server kept running


def test_a_stopped_service_is_started_through_the_gate(drifted):
    lab, _, pids, second, after, _ = drifted
    assert "drift: sglang.service is inactive (dead)" in second.out
    assert "start" in row(second, "stopped") and "accept length" in row(second, "stopped")
    assert health(lab, "stopped") == "200" and after["stopped"] not in (0, pids["stopped"])


def test_a_disabled_service_is_enabled_without_a_restart(drifted):
    lab, _, pids, second, after, _ = drifted
    assert "drift: sglang.service is disabled, want enabled" in second.out
    assert "enable" in row(second, "disabled")
    assert sh(lab, "disabled", "systemctl is-enabled sglang") == "enabled" and after["disabled"] == pids["disabled"]


def test_a_pending_daemon_reload_is_done_without_a_restart(drifted):
    lab, _, pids, second, after, _ = drifted
    assert "daemon-reload pending" in second.out and "daemon-reload" in row(second, "reload-pending")
    assert sh(lab, "reload-pending", "systemctl show -p NeedDaemonReload --value sglang") == "no"
    assert after["reload-pending"] == pids["reload-pending"]


def test_a_server_running_other_arguments_than_its_unit_is_restarted(drifted):
    lab, _, _, second, after, _ = drifted
    assert "drift: the running server's arguments differ from sglang.service's ExecStart" in second.out
    assert "restart" in row(second, "other-args") and "accept length" in row(second, "other-args")
    argv = sh(lab, "other-args", f"tr '\\0' ' ' < /proc/{after['other-args']}/cmdline")
    assert "--speculative-dflash-block-size 16" in argv


def test_a_loading_service_is_waited_for_never_reported_as_declared(drifted):
    _, _, _, second, _, _ = drifted
    assert "drift: sglang.service is active but not serving" in second.out
    assert "wait for /health" in row(second, "loading") and "accept length" in row(second, "loading"), second.out


@pytest.mark.parametrize("host", list(REFUSED))
def test_a_drop_in_that_overrides_the_service_is_refused_naming_the_file(drifted, host):
    lab, _, pids, second, after, third = drifted
    for run in (second, third):
        assert "REFUSED" in row(run, host)
        assert f"{host}: drop-in: expected no local override of sglang.service's ExecStart or Environment, " \
               f"found {DROPIN} sets {REFUSED[host]}" in run.out
    assert after[host] == pids[host]  # the deploy touched nothing
    assert sh(lab, host, f"test -e {DROPIN} && echo kept") == "kept"


@pytest.mark.parametrize("host", [h for h in DRIFT if h not in REFUSED])
def test_the_run_after_the_repair_changes_nothing(drifted, host):
    lab, _, _, _, after, third = drifted
    assert "none (already as declared)" in row(third, host), third.out
    assert main_pid(lab, host) == after[host]


# --- the unit's stop: SGLang drains only with KillMode=mixed ----------------------------

STREAM = ("curl -sN --max-time 30 -H 'Content-Type: application/json' -H @/etc/sglang/sglang.auth -d '{\"model\": \"qwen3.6-27b\", \"stream\": true, "
          "\"max_tokens\": 60, \"messages\": [{\"role\": \"user\", \"content\": \"count\"}]}' "
          "http://127.0.0.1:30000/v1/chat/completions")


def stream_through_a_stop(lab) -> tuple[str, float]:
    """A 60-token stream at 20 tok/s (3 s); `systemctl stop` one second into it. (its output, the stop's time)"""
    out: dict[str, str] = {}
    reader = threading.Thread(target=lambda: out.update(text=lab.ssh("stopper", STREAM, timeout=60).stdout))
    reader.start()
    time.sleep(1.0)
    t = time.monotonic()
    sh(lab, "stopper", "systemctl stop sglang")
    took = time.monotonic() - t
    reader.join(timeout=60)
    return out.get("text", ""), took


def tokens(text: str) -> int:
    return sum(1 for line in text.splitlines() if '"content":"' in line and '"role":"assistant","content":""' not in line)


def test_an_in_flight_stream_survives_a_stop(drifted):
    lab, _, _, _, _, _ = drifted
    assert sh(lab, "stopper", "systemctl show -p KillMode --value sglang") == "mixed"
    text, took = stream_through_a_stop(lab)
    assert "data: [DONE]" in text and tokens(text) == 60, text[-500:]
    assert took >= 1.0  # the stop waited for the drain
    assert "Gracefully exiting... Remaining number of requests" in sh(lab, "stopper", "journalctl -u sglang --no-pager")
    sh(lab, "stopper", "systemctl start sglang")


def test_with_control_group_the_same_stream_is_cut(drifted):
    lab, wd, _, _, _, _ = drifted
    dropin = "/etc/systemd/system/sglang.service.d/killmode.conf"
    sh(lab, "stopper", f"mkdir -p {dropin[:-13]} && printf '[Service]\\nKillMode=control-group\\n' > {dropin} "
                       "&& systemctl daemon-reload && systemctl restart sglang")
    try:
        deadline = time.monotonic() + 30
        while health(lab, "stopper") != "200" and time.monotonic() < deadline:
            time.sleep(0.5)
        text, _ = stream_through_a_stop(lab)
        assert "data: [DONE]" not in text and 0 < tokens(text) < 60, text[-500:]
    finally:
        sh(lab, "stopper", f"rm -f {dropin} && systemctl daemon-reload")
    assert deploy(lab, wd, "--limit", "stopper", env=ENV).returncode == 0  # converged again: started through the gate
    assert health(lab, "stopper") == "200"
