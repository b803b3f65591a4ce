"""SGLang's `server_args=` line (its keys in clear, sglang issue 37457) on a current systemd and
on an old one, side by side.

One lab, two pro6000 boxes with an API key and an admin key: `trixie-1` on Debian 13 (systemd
257, which has LogFilterPatterns=), `bookworm-1` on Debian 12 (systemd 252, which has not).
trixie-1 goes through a first start, a restart (a spec change) and a rollback (a spec whose
load crashes): the keys never reach its journal, which holds the server's other lines of
every start, and the deploy warns of nothing there. bookworm-1 gets the warning, and its
journal does hold the keys: the exposure the warning names is real.
"""

from __future__ import annotations

import secrets

import pytest
from e2e import deploy, gpu_apps, health, main_pid, sh, summary_row, workdir

from lab.base import IMAGES

KEY, ADMIN = f"sk-jrn-{secrets.token_hex(12)}", f"adm-jrn-{secrets.token_hex(12)}"
PRO = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
       'gpu_count = 1\ngpu_memory_mib = 97887\nload_seconds = 1\n')
LAB = f"""
[lab]
name = "jrnlab"
subnet = "10.213.0.0/24"

[[hosts]]
name = "trixie-1"
debian = "trixie"
workloads = ["dflash-train"]
{PRO}
[[hosts]]
name = "bookworm-1"
{PRO}"""
KEYS = ('service = {**service, "api_key": {"env": "LAB_JOURNAL_API_KEY"}, '
        '"admin_api_key": {"env": "LAB_JOURNAL_ADMIN_KEY"}}\n'
        'readiness = {"load_timeout_s": 8, "poll_interval_s": 0.5, "progress_every_s": 3}')
BLOCK_8 = KEYS + '\nspeculative = {**speculative, "block_size": 8}'
CRASH = BLOCK_8 + '\nservice = {**service, "environment": {"LAB_SGLANG_LOAD": "crash"}}'
ENV = {"LAB_JOURNAL_API_KEY": KEY, "LAB_JOURNAL_ADMIN_KEY": ADMIN}
UNIT = "/etc/systemd/system/sglang.service"
WARNING = ("systemd 252 has no LogFilterPatterns= (253+): SGLang will write its keys to the journal at every "
           "start (its `server_args=` line; sglang issue 37457)")
START, READY = "Load weight begin.", "The server is fired up and ready to roll!"  # one each per start of the double


def serving(lab, host: str) -> dict:
    """What the host serves now: /health, the server's arguments, its pid."""
    pid = main_pid(lab, host)
    return {"health": health(lab, host), "pid": pid,
            "argv": sh(lab, host, f"tr '\\0' ' ' < /proc/{pid}/cmdline") if pid else ""}


def notes(output: str, host: str) -> list[str]:
    """The indented lines under the host's row of the closing table (`! warning: ...`, `- ...`)."""
    lines = output.rsplit("SGLang fleet rollout summary", 1)[-1].splitlines()
    start = lines.index(summary_row(output, host)) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return [line.strip() for line in lines[start:end]]


def journal(lab, host: str, *args: str) -> str:
    """The host's journal, read here: the search for a key never names it in a command on the host."""
    return sh(lab, host, " ".join(("journalctl", "--no-pager", "-o", "cat", *args)))


@pytest.fixture(scope="module")
def rolled(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB)
    tmp = tmp_path_factory.mktemp("journal")
    booted = gpu_apps(lab, "trixie-1")  # the training job, as trixie's python runs the doubles
    first = deploy(lab, workdir(tmp / "keys", pro6000=KEYS), env=ENV)
    after_first = {h: serving(lab, h) for h in ("trixie-1", "bookworm-1")}
    restart = deploy(lab, workdir(tmp / "block8", pro6000=BLOCK_8), "--limit", "trixie-1", env=ENV)
    after_restart = serving(lab, "trixie-1")
    crash = deploy(lab, workdir(tmp / "crash", pro6000=CRASH), "--limit", "trixie-1", env=ENV)
    return lab, (first, restart, crash), booted, after_first, after_restart, serving(lab, "trixie-1")


def test_each_host_runs_its_own_release_and_boots_clean(rolled):
    lab = rolled[0]
    for host, suite, debian in (("trixie-1", "trixie", "13"), ("bookworm-1", "bookworm", "12")):
        assert sh(lab, host, "cut -d. -f1 /etc/debian_version") == debian
        # the version the lab's table says (lab/base.py), which the preinstalled units are rendered for
        assert sh(lab, host, "systemctl --version | head -1").startswith(f"systemd {IMAGES[suite].systemd} ")
        assert sh(lab, host, "systemctl is-system-running") == "running", sh(lab, host, "systemctl --failed")
    assert sh(lab, "trixie-1", "python3 -c 'import sys; print(sys.version_info[:2])'") == "(3, 13)"
    # lab-gpu-job held the GPU at boot (nvidia-smi's double lists it), until the deploy stopped it for SGLang
    booted = rolled[2]
    assert [app.split(", ")[1:] for app in booted] == [["dflash-train", "88098"]], booted  # 90% of 97887 MiB
    assert sh(lab, "trixie-1", "systemctl is-active dflash-train") != "active"
    assert all("sglang::scheduler_TP0" in a for a in gpu_apps(lab, "trixie-1")), gpu_apps(lab, "trixie-1")


def test_trixie_filters_the_line_across_a_start_a_restart_and_a_rollback(rolled):
    lab, (first, restart, crash), _, after_first, after_restart, after_rollback = rolled
    assert " OK " in summary_row(first.out, "trixie-1"), first.out
    assert after_first["trixie-1"]["health"] == "200"
    assert "--speculative-dflash-block-size 16" in after_first["trixie-1"]["argv"]
    assert " OK " in summary_row(restart.out, "trixie-1"), restart.out
    assert after_restart["health"] == "200" and after_restart["pid"] != after_first["trixie-1"]["pid"]
    assert "--speculative-dflash-block-size 8" in after_restart["argv"]
    # the crashing spec was started, failed, and the previous one serves again: started anew
    assert crash.returncode != 0 and "FAILED (rolled back)" in summary_row(crash.out, "trixie-1"), crash.out
    assert after_rollback["health"] == "200" and after_rollback["pid"] not in (0, after_restart["pid"])
    assert "--speculative-dflash-block-size 8" in after_rollback["argv"]
    assert "LAB_SGLANG_LOAD" not in sh(lab, "trixie-1", "cat /etc/sglang/sglang.env")
    # the unit asks for the filter and this systemd read it
    assert "LogFilterPatterns=~server_args=" in sh(lab, "trixie-1", f"cat {UNIT}").splitlines()
    assert sh(lab, "trixie-1", "systemctl show -p LogFilterPatterns --value sglang") == "~server_args="
    # four starts (first, restart, the crash, the rollback), each logged but for its server_args line
    unit_lines = journal(lab, "trixie-1", "-u", "sglang.service")
    assert unit_lines.count(START) >= 4 and unit_lines.count(READY) >= 3, unit_lines
    assert "server_args=" not in unit_lines
    assert not [v for v in (KEY, ADMIN) if v in journal(lab, "trixie-1")]  # nowhere in the journal
    assert notes(first.out, "trixie-1") == notes(restart.out, "trixie-1") == [], first.out + restart.out
    assert not [n for n in notes(crash.out, "trixie-1") if "warning" in n], crash.out
    for run in (first, restart, crash):  # no warning for trixie-1 (bookworm-1's names LogFilterPatterns)
        assert not [line for line in run.out.splitlines() if "warning: trixie-1:" in line], run.out
        assert not [line for line in run.out.splitlines() if "trixie-1" in line and "LogFilterPatterns" in line]
        assert not [v for v in (KEY, ADMIN) if v in run.out]


def test_bookworm_is_warned_and_its_journal_does_hold_the_keys(rolled):
    lab, (first, _, _), _, after_first, _, _ = rolled
    assert " OK " in summary_row(first.out, "bookworm-1"), first.out
    assert after_first["bookworm-1"]["health"] == "200"
    assert "--config /etc/sglang/sglang.yaml" in after_first["bookworm-1"]["argv"]
    assert not [v for v in (KEY, ADMIN) if v in after_first["bookworm-1"]["argv"]]
    assert notes(first.out, "bookworm-1") == [f"! warning: bookworm-1: {WARNING}"], first.out
    assert "LogFilterPatterns" not in sh(lab, "bookworm-1", f"cat {UNIT}")
    logged = [line for line in journal(lab, "bookworm-1", "-u", "sglang.service").splitlines() if "server_args=" in line]
    assert logged and all(KEY in line and ADMIN in line for line in logged)
