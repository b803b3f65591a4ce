"""The API key: in a 0600 file the unit reads, enforced by the server, never printed."""

from __future__ import annotations

import subprocess

import pytest
from e2e import BIN, REPO, deploy, sh, summary_row, workdir

KEY = "sk-lab-Zq8TQ3v0pXk2"
PRO = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
       'gpu_count = 1\ngpu_memory_mib = 97887\ndriver_version = "580.95.05"\n')
LAB = f"""
[lab]
name = "keylab"

[[hosts]]
name = "keyed"
{PRO}
[[hosts]]
name = "keyed-crash"
{PRO}load = "crash"
load_seconds = 1
"""
OVERRIDE = (
    f'service = {{**service, "api_key": "{KEY}"}}\n'
    'readiness = {"load_timeout_s": 8, "poll_interval_s": 0.5, "progress_every_s": 3}'
)


@pytest.fixture(scope="module")
def keyed(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB)
    wd = workdir(tmp_path_factory.mktemp("wd") / "w", pro6000=OVERRIDE)
    return lab, wd, deploy(lab, wd, "--diff")


def test_key_is_never_printed_not_even_in_the_diff_or_the_journal_excerpt(keyed):
    lab, _, run = keyed
    assert "OK" in summary_row(run.out, "keyed"), run.out
    assert "last journal lines" in run.out and "server_args" in run.out  # the crash's excerpt was shown
    assert KEY not in run.out
    assert KEY not in sh(lab, "keyed", "cat /etc/systemd/system/sglang.service /etc/sglang/sglang.env "
                                       "/var/lib/sglang-fleet/sglang/spec.json /var/lib/sglang-fleet/sglang/deploys.jsonl")


def test_key_lives_in_a_0600_file_the_unit_reads_and_the_server_enforces(keyed):
    lab, _, _ = keyed
    assert sh(lab, "keyed", "stat -c '%a %U' /etc/sglang/sglang.secret") == "600 root"
    assert "EnvironmentFile=/etc/sglang/sglang.secret" in sh(lab, "keyed", "cat /etc/systemd/system/sglang.service")
    url = "http://127.0.0.1:30000/v1/models"
    assert sh(lab, "keyed", f"curl -s -o /dev/null -w '%{{http_code}}' {url}") == "401"
    assert sh(lab, "keyed", f"curl -s -o /dev/null -w '%{{http_code}}' -H 'Authorization: Bearer {KEY}' {url}") == "200"


def test_verify_passes_with_the_key(keyed):
    lab, wd, _ = keyed
    p = subprocess.run(
        [str(BIN / "pytest"), "-q", "-p", "no:cacheprovider", "-k", "not crash", str(REPO / "tests" / "verify"),
         "--rootdir", str(REPO), "-c", str(REPO / "pyproject.toml"), "--inventory", str(lab.inventory)],
        cwd=wd, capture_output=True, text=True, timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "9 passed" in p.stdout
