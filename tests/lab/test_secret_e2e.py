"""Secrets never leave their files: not in argv, not in what any command prints, not in group_data.

A random API key, admin key and HF_TOKEN, named in group_data by where they come from (the
deploy's environment, a file on the operator's machine). After the deploy: each is in no
process's arguments and in no file on the host but the 0600 ones (the journal aside: the
lab's systemd is 252, the exposure preflight warns about); nothing the deploy, the dry run,
verify or debug-inventory printed holds one; the server refuses a request without the key.
A class whose secret cannot be read is refused, its hosts untouched, and the others deploy.
Rotating the key is a change like any other: after it the old key gets 401.
"""

from __future__ import annotations

import os
import secrets
import subprocess

import pytest
from e2e import BIN, REPO, deploy, health, sh, summary_row, verify_checks, workdir

KEY, ADMIN, TOKEN, NEW_KEY = (f"sk-lab-{secrets.token_hex(12)}", f"adm-lab-{secrets.token_hex(12)}",
                              f"hf_{secrets.token_hex(12)}", f"sk-new-{secrets.token_hex(12)}")
VALUES = (KEY, ADMIN, TOKEN)
PRO = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
       'gpu_count = 1\ngpu_memory_mib = 97887\ndriver_version = "580.95.05"\n')
LAB = f"""
[lab]
name = "keylab"
subnet = "10.220.0.0/24"

[[hosts]]
name = "keyed"
{PRO}
[[hosts]]
name = "keyed-crash"
{PRO}load = "crash"
load_seconds = 1

[[hosts]]
name = "a6000-no-secret"
group = "a6000"
gpu_model = "NVIDIA RTX A6000"
gpu_count = 2
gpu_memory_mib = 49140
"""
READINESS = 'readiness = {"load_timeout_s": 8, "poll_interval_s": 0.5, "progress_every_s": 3}'
SERVER = "/etc/sglang/sglang.yaml"
AUTH = "/etc/sglang/sglang.auth"
URL = "http://127.0.0.1:30000/v1/models"


def env(key: str = KEY) -> dict[str, str]:
    return {"LAB_SGLANG_API_KEY": key, "LAB_HF_TOKEN": TOKEN}


@pytest.fixture(scope="module")
def keyed(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB)
    admin = tmp_path_factory.mktemp("operator") / "admin.key"
    admin.write_text(ADMIN + "\n")
    admin.chmod(0o600)
    wd = workdir(
        tmp_path_factory.mktemp("wd") / "w",
        pro6000='service = {**service, "api_key": {"env": "LAB_SGLANG_API_KEY"}, '
                f'"admin_api_key": {{"file": "{admin}"}}, "secret_environment": {{"HF_TOKEN": {{"env": "LAB_HF_TOKEN"}}}}}}\n'
                + READINESS,
        a6000='service = {**service, "api_key": {"env": "LAB_A6000_API_KEY_NOT_SET"}}',
    )
    return lab, wd, deploy(lab, wd, "--diff", env=env())


def printed(run) -> str:
    return run.stdout + run.stderr


def test_keys_are_in_no_process_arguments_and_in_no_file_but_the_0600_ones(keyed):
    lab, _, run = keyed
    assert "OK" in summary_row(run.out, "keyed"), run.out
    # every process's arguments, read without naming a value in the command (it would find itself)
    arguments = sh(lab, "keyed", "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done")
    assert "--config /etc/sglang/sglang.yaml" in arguments
    assert not [value for value in VALUES if value in arguments]
    where = {value: sorted(sh(lab, "keyed", f"grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev "
                                          f"--exclude-dir=journal -- {value} /").split()) for value in VALUES}
    assert where == {KEY: [AUTH, SERVER], ADMIN: [SERVER], TOKEN: ["/etc/sglang/sglang.secret"]}
    assert sh(lab, "keyed", f"stat -c '%n %a %U' {SERVER} {AUTH} /etc/sglang/sglang.secret /etc/sglang").splitlines() \
        == [f"{SERVER} 600 root", f"{AUTH} 600 root", "/etc/sglang/sglang.secret 600 root", "/etc/sglang 700 root"]
    # the server was given them: its arguments name the file, its environment has the token
    assert sh(lab, "keyed", "tr '\\0' '\\n' < /proc/$(systemctl show -p MainPID --value sglang)/environ | "
                            "grep -c ^HF_TOKEN=") == "1"


def test_the_server_enforces_the_key(keyed):
    lab, _, _ = keyed
    assert sh(lab, "keyed", f"curl -s -o /dev/null -w '%{{http_code}}' {URL}") == "401"
    assert sh(lab, "keyed", f"curl -s -o /dev/null -w '%{{http_code}}' -H @{AUTH} {URL}") == "200"


def test_nothing_printed_holds_a_secret_not_the_diff_nor_the_crash_journal(keyed):
    lab, _, run = keyed
    out = printed(run)
    assert "Will write /etc/sglang/sglang.yaml (content not shown)" in out  # --diff
    assert "last journal lines" in out and "server_args" in out  # the crash's excerpt was shown, redacted
    assert not [v for v in VALUES if v in out]


def test_systemd_252_gets_a_warning_that_sglang_logs_its_keys_and_it_is_true(keyed):
    lab, _, run = keyed
    warning = ("systemd 252 has no LogFilterPatterns= (253+): SGLang will write its keys to the journal at every "
               "start (its `server_args=` line; sglang issue 37457)")
    assert f"warning: keyed: {warning}" in run.out
    table = run.out.rsplit("SGLang fleet rollout summary", 1)[-1]
    assert f"    ! warning: keyed: {warning}" in table
    assert "LogFilterPatterns" not in sh(lab, "keyed", "cat /etc/systemd/system/sglang.service")
    assert int(sh(lab, "keyed", f"journalctl -u sglang --no-pager | grep -cF -- {KEY}")) >= 1  # the exposure is real


def test_a_class_whose_secret_cannot_be_read_is_refused_untouched_while_the_others_deploy(keyed):
    lab, _, run = keyed
    row = summary_row(run.out, "a6000-no-secret")
    assert "REFUSED" in row, run.out
    assert ("group_data/a6000.py: service.api_key: environment variable LAB_A6000_API_KEY_NOT_SET is not set where "
            "the deploy runs; expected the secret there") in run.out
    assert sh(lab, "a6000-no-secret", "ls -d /etc/sglang /var/lib/sglang-fleet /run/sglang-fleet "
                                      "/etc/systemd/system/sglang.service 2>/dev/null") == ""
    assert run.returncode != 0


def test_verify_and_debug_inventory_pass_without_printing_a_secret(keyed):
    lab, wd, _ = keyed
    v = subprocess.run(
        [str(BIN / "pytest"), "-q", "-p", "no:cacheprovider", "-k", "keyed and not crash", str(REPO / "tests" / "verify"),
         "--rootdir", str(REPO), "-c", str(REPO / "pyproject.toml"), "--inventory", str(lab.inventory)],
        cwd=wd, capture_output=True, text=True, timeout=300,
    )
    assert v.returncode == 0, v.stdout + v.stderr
    assert f"{verify_checks()} passed" in v.stdout  # the key enforced (401 without it), and no secret flag in the arguments
    d = subprocess.run([str(BIN / "pyinfra"), str(lab.inventory), "debug-inventory"], cwd=wd, capture_output=True,
                       text=True, timeout=120, env={**os.environ, **env()})
    assert d.returncode == 0 and "LAB_SGLANG_API_KEY" in printed(d), printed(d)  # the source, shown
    assert not [value for value in VALUES if value in printed(v) + printed(d)]


def test_a_rotated_key_is_a_change_through_the_gate_and_the_old_key_stops_working(keyed):
    lab, wd, _ = keyed
    dry = deploy(lab, wd, "--dry", "--diff", "--limit", "keyed", env=env(NEW_KEY))
    assert "update sglang.yaml, sglang.auth, restart" in summary_row(dry.out, "keyed"), dry.out
    rotated = deploy(lab, wd, "--limit", "keyed", env=env(NEW_KEY))
    assert " OK " in summary_row(rotated.out, "keyed"), rotated.out
    assert health(lab, "keyed") == "200"
    assert sh(lab, "keyed", f"curl -s -o /dev/null -w '%{{http_code}}' -H 'Authorization: Bearer {KEY}' {URL}") == "401"
    assert sh(lab, "keyed", f"curl -s -o /dev/null -w '%{{http_code}}' -H @{AUTH} {URL}") == "200"
    assert sh(lab, "keyed", f"grep -c -- {NEW_KEY} {AUTH}") == "1"
    assert not [v for v in (KEY, NEW_KEY, ADMIN, TOKEN) if v in printed(dry) + printed(rotated)]
    # the old key survives only in the 0600 backup the rollback would restore, in a 0700 directory
    backups = sh(lab, "keyed", f"grep -rlF -- {KEY} /var/lib/sglang-fleet").split()
    assert backups and all(sh(lab, "keyed", f"stat -c %a {b}") == "600" for b in backups)
    assert sh(lab, "keyed", "stat -c %a /var/lib/sglang-fleet/sglang/backups") == "700"
