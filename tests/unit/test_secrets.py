"""fleet.spec.secrets: read where the deploy runs, for the class deployed; never shown, not when refused."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builders import make_spec

from fleet.gateway.models import Gateway
from fleet.rollout.render import auth_header, gateway_secrets, render_config, render_secret_env, render_vrrp_auth, \
    service_secrets
from fleet.spec.secrets import ARGUMENTS, SecretError, Secrets, parse_arguments, resolve, secrets_in_arguments, unread

KEY, ADMIN = "sk-Fleet0123456789abcdef", "adm-Fleet0123456789"
WHERE = "group_data/pro6000.py"
SPEC = make_spec(service={"api_key": {"env": "SGLANG_API_KEY_PRO6000"}, "admin_api_key": {"file": "~/admin.key"},
                          "secret_environment": {"HF_TOKEN": {"env": "HF_TOKEN"}}})


def no_files(path):
    raise FileNotFoundError(2, "No such file or directory")


def problems(spec, environ) -> list[str]:
    with pytest.raises(SecretError) as e:
        resolve(spec, WHERE, environ, read_file=no_files)
    return e.value.problems


def test_every_declared_secret_is_read_from_its_source(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "admin.key").write_text(ADMIN + "\n")  # the final newline an editor adds is not the key's
    got = resolve(SPEC, WHERE, {"SGLANG_API_KEY_PRO6000": KEY, "HF_TOKEN": "hf_x y"})
    assert got == Secrets({"api-key": KEY, "admin-api-key": ADMIN}, {"HF_TOKEN": "hf_x y"})
    assert got.api_key == KEY


def test_a_class_without_secrets_reads_nothing():
    assert resolve(make_spec(), WHERE, {}, read_file=lambda p: pytest.fail("read a file")) == Secrets()


def test_each_missing_secret_is_named_with_its_field_and_source():
    assert problems(SPEC, {}) == [
        f"{WHERE}: service.api_key: environment variable SGLANG_API_KEY_PRO6000 is not set where the deploy runs; "
        "expected the secret there",
        f"{WHERE}: service.admin_api_key: file {Path('~/admin.key').expanduser()} cannot be read "
        "(No such file or directory); expected the secret there",
        f"{WHERE}: service.secret_environment.HF_TOKEN: environment variable HF_TOKEN is not set where the deploy "
        "runs; expected the secret there",
    ]


def test_an_unreadable_file_says_why(tmp_path):
    spec = make_spec(service={"api_key": {"file": str(tmp_path / "nope.key")}})
    with pytest.raises(SecretError) as e:
        resolve(spec, WHERE, {})
    assert e.value.problems == [f"{WHERE}: service.api_key: file {tmp_path}/nope.key cannot be read "
                                "(No such file or directory); expected the secret there"]


@pytest.mark.parametrize("bad_key", ["short7!", "has space in it", "quote'd-key-123", 'dq"key-12345', "dollar$key-12345",
                                     "new\nline-12345", "sk-" + "é" * 10, "-starts-with-a-dash", ""])
def test_a_key_that_cannot_travel_safely_is_refused_without_showing_it(bad_key):
    spec = make_spec(service={"api_key": {"env": "K"}})
    (p,) = problems(spec, {"K": bad_key})
    assert p == (f"{WHERE}: service.api_key: the value of environment variable K is not a usable key: expected "
                 "8 or more of A-Z a-z 0-9 . _ ~ + / = - (not starting with -) (the value is not shown)")


@pytest.mark.parametrize("bad", ["", "two\nlines"])
def test_a_secret_environment_value_is_one_line(bad):
    spec = make_spec(service={"secret_environment": {"HF_TOKEN": {"env": "HF_TOKEN"}}})
    (p,) = problems(spec, {"HF_TOKEN": bad})
    assert "service.secret_environment.HF_TOKEN: the value of environment variable HF_TOKEN is empty or spans lines" in p


def test_unread_stands_in_for_each_declared_secret_only():
    assert unread(SPEC) == Secrets({"api-key": "unread", "admin-api-key": "unread"}, {"HF_TOKEN": "unread"})
    assert unread(make_spec()) == Secrets()


def test_a_server_args_line_is_redacted_even_with_a_key_nobody_read():
    """A rollback reads no secrets: the backed-up service may run with an old key, logged in clear."""
    line = ("[2026-11-30 12:00:00] server_args=ServerArgs(model_path='/m', api_key='sk-old-0123456789', "
            "admin_api_key=None, ssl_keyfile_password=\"pw-1\", port=30000)")
    assert Secrets().redact(line) == ("[2026-11-30 12:00:00] server_args=ServerArgs(model_path='/m', api_key='***', "
                                      "admin_api_key=None, ssl_keyfile_password='***', port=30000)")


# --- make verify: no secret in any process's arguments ---------------------------------------------------------

def listed(*processes: tuple[int, list[str]]) -> str:
    """ARGUMENTS' answer for these processes."""
    return "".join(f"{pid} {base64.b64encode(''.join(a + chr(0) for a in argv).encode()).decode()}\n"
                   for pid, argv in processes)


def test_a_secret_in_any_argument_names_the_process_and_the_secret_never_the_value():
    processes, unreadable = parse_arguments(listed(
        (1, ["/sbin/init"]), (40, ["/opt/smg/venv/bin/smg", "launch", "--api-key", KEY]),
        (41, ["curl", "-H", f"Authorization: Bearer {KEY}", "http://x"]), (42, [f"/usr/bin/x{KEY}"]),
        (43, ["keepalived", "--auth=vrrp1"]), (44, ["sshd: root@pts/0 vrrp1x"])) + "45 \n2 \n")
    assert not unreadable and processes[45] == [] and processes[2] == []  # ended meanwhile; a kernel thread
    shown = secrets_in_arguments(processes, {"gateway.api_key": KEY, "gateway.floating.password": "vrrp1"})
    assert shown == ["process 40 (smg): its arguments hold gateway.api_key (the value is not shown)",
                     "process 41 (curl): its arguments hold gateway.api_key (the value is not shown)",
                     "process 42 (its name not shown): its arguments hold gateway.api_key (the value is not shown)",
                     "process 43 (keepalived): its arguments hold gateway.floating.password (the value is not shown)"]
    assert not any(KEY in p or "vrrp1" in p.replace("floating.password", "") for p in shown)
    assert secrets_in_arguments(processes, {}) == []


@pytest.mark.parametrize("argument, shown", [("vrrp1", True), ("--password=vrrp1", True), ("admin:vrrp1", True),
                                             ("Bearer vrrp1", True), ("vrrp12", False), ("-vvrrp1x", False)])
def test_a_short_secret_counts_only_where_it_was_put_as_a_value(argument, shown):
    """A VRRP password may be 1 character: in another word it is chance, and saying so would tell part of it."""
    assert bool(secrets_in_arguments({7: ["p", argument]}, {"gateway.floating.password": "vrrp1"})) == shown


@pytest.mark.parametrize("answer", ["x YQ==\n", "12 not base64!\n", "１２ YQ==\n", "garbage\n"])
def test_a_process_list_line_that_is_not_a_pid_and_base64_is_said(answer):
    processes, unreadable = parse_arguments("1 L3NiaW4vaW5pdAA=\n" + answer)
    assert processes == {1: ["/sbin/init"]} and unreadable == ["line 2 of the process list is not a pid and its "
                                                               "arguments in base64"]


def test_the_process_list_of_this_machine_finds_a_secret_given_as_an_argument():
    key = f"sk-Listed{time.monotonic_ns()}"
    program = [sys.executable, "-c", "import time; time.sleep(60)"]
    p = subprocess.Popen([*program, key])  # it has exec'd when Popen returns
    try:
        processes, unreadable = parse_arguments(subprocess.run(["bash", "-c", ARGUMENTS], capture_output=True,
                                                               text=True, check=True).stdout)
    finally:
        p.kill()
        p.wait()
    assert not unreadable and processes[p.pid] == [*program, key]
    assert secrets_in_arguments(processes, {"k": key}) == [
        f"process {p.pid} ({Path(sys.executable).name}): its arguments hold k (the value is not shown)"]


def test_a_host_without_base64_fails_the_process_list_instead_of_answering_no_arguments():
    done = subprocess.run(["/bin/bash", "-c", ARGUMENTS], capture_output=True, text=True, env={"PATH": "/nonexistent"})
    assert (done.returncode, done.stdout) == (127, "")


def test_the_gateways_secrets_are_read_back_from_the_files_the_deploy_writes():
    gw = Gateway.model_validate({"routes": ["pro6000"], "api_key": {"env": "K"},
                                 "floating": {"address": "10.0.0.100", "router_id": 7, "password": {"env": "P"}}})
    key, password = gateway_secrets(gw)
    assert (key.name, key.path, password.name) == ("gateway.api_key", gw.auth_header_file, "gateway.floating.password")
    assert key.value(auth_header(KEY)) == KEY and password.value(render_vrrp_auth("vrrp1")) == "vrrp1"
    assert key.value("") is None
    assert gateway_secrets(Gateway.model_validate({"routes": ["pro6000"]})) == []


def test_a_replicas_secrets_are_read_back_from_the_files_the_deploy_writes():
    env = 'hf_a$1 "x" \\n\\'  # what an EnvironmentFile escapes
    secrets = Secrets({"api-key": KEY, "admin-api-key": ADMIN}, {"HF_TOKEN": env})
    files = {SPEC.config_file: render_config(SPEC, secrets), SPEC.secret_file: render_secret_env(SPEC, secrets)}
    found = {s.name: s.value(files[s.path]) for s in service_secrets(SPEC)}
    assert found == {"service.api_key": KEY, "service.admin_api_key": ADMIN, "service.secret_environment.HF_TOKEN": env}
    assert service_secrets(make_spec()) == []
