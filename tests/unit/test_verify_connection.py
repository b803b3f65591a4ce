"""make verify's connection (ops/verify_backend.py): pyinfra's own, never an ssh_config of ours.

An inventory's values are never written into a config file (a newline in one was a new
directive: `ProxyCommand` ran on the operator's machine); a host that cannot be reached fails its
checks with pyinfra's reason, naming it; commands cross exactly (output, exit status), as root
through pyinfra's sudo only. Hosts here: @local and nothing listening on 127.0.0.1 port 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, State

from fleet.rollout.render import BEARER, auth_header
from fleet.spec.secrets import HostSecret
from ops.verify_backend import CommandDidNotRun, as_node, secrets_shown

REPO = Path(__file__).resolve().parents[2]
INJECTED = "ProxyCommand touch {}"
# A host name with a label over 63 characters is refused by Python before any resolver is asked: were the
# inventory's check ever to let one through, no DNS query would leave the machine for the injected names.
LONG = " #" + "x" * 64


def _verify(tmp_path: Path, hosts: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`make verify` on an a6000 inventory of these hosts, with its own HOME, TMPDIR and basetemp."""
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    inventory = tmp_path / "inventory.py"
    inventory.write_text(f"from tasks.inventory import checked\n\na6000 = {hosts}\n\nchecked(globals())\n")
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/verify", "--inventory", str(inventory),
         "--basetemp", str(tmp_path / "basetemp"), "-k", "test_health_is_200"],
        cwd=REPO, env={**os.environ, "HOME": str(home), "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=120,
    )
    return p, inventory


def _files_naming(tmp_path: Path, word: str, besides: Path) -> list[Path]:
    return [f for f in tmp_path.rglob("*") if f.is_file() and f != besides and word in f.read_text(errors="replace")]


def test_an_inventory_value_holding_an_ssh_directive_runs_nothing_and_fails_its_host(tmp_path):
    made = {k: tmp_path / f"pwned-{k}" for k in ("user", "key", "known_hosts")}
    hosts = repr([
        ("by-user", {"ssh_hostname": "127.0.0.1", "ssh_port": 1, "ssh_user": "root\n" + INJECTED.format(made["user"])}),
        ("by-key", {"ssh_hostname": "127.0.0.1", "ssh_port": 1, "ssh_key": "/no/key\n" + INJECTED.format(made["key"])}),
        ("by-known-hosts", {"ssh_hostname": "127.0.0.1", "ssh_port": 1,
                            "ssh_known_hosts_file": "/dev/null\n" + INJECTED.format(made["known_hosts"])}),
    ])
    p, inventory = _verify(tmp_path, hosts)
    assert [k for k, f in made.items() if f.exists()] == []
    assert p.returncode == 1 and "3 errors" in p.stdout, p.stdout + p.stderr
    assert "by-user: cannot connect: Could not connect ([Errno None] Unable to connect to port 1 on 127.0.0.1)" \
        in p.stdout, p.stdout
    assert "by-key: cannot connect: No such private key file: /no/key\nProxyCommand" in p.stdout, p.stdout
    assert "by-known-hosts: cannot connect: Could not connect" in p.stdout, p.stdout
    # no config file anywhere: nothing under HOME, TMPDIR or pytest's basetemp holds a directive
    assert _files_naming(tmp_path, "ProxyCommand", besides=inventory) == []
    assert not (tmp_path / "home" / ".ssh").exists()


def test_a_host_name_or_ssh_hostname_holding_an_ssh_directive_is_refused_before_any_connection(tmp_path):
    """A name (or ssh_hostname) is a DNS name or an address (fleet.spec.host_name_problem): the inventory's own
    check refuses it, naming each, and make verify stops there, its exit status the check's."""
    made = {k: tmp_path / f"pwned-{k}" for k in ("hostname", "name")}
    hosts = repr([
        ("by-hostname", {"ssh_hostname": "127.0.0.1\n" + INJECTED.format(made["hostname"]) + LONG, "ssh_port": 1}),
        ("127.0.0.1\n" + INJECTED.format(made["name"]) + LONG, {"ssh_port": 1}),
    ])
    p, inventory = _verify(tmp_path, hosts)
    assert [k for k, f in made.items() if f.exists()] == []
    assert p.returncode == 2 and "INTERNALERROR" not in p.stdout + p.stderr, p.stdout + p.stderr
    assert f"{inventory}: host by-hostname: ssh_hostname: expected a DNS name" in p.stderr, p.stderr
    assert f"{inventory}: host '127.0.0.1\\nProxyCommand touch " in p.stderr, p.stderr
    assert f"{inventory}: refused by its check (above); no host was contacted" in p.stdout + p.stderr
    assert _files_naming(tmp_path, "ProxyCommand", besides=inventory) == []
    assert not (tmp_path / "home" / ".ssh").exists()


def test_a_port_holding_an_ssh_directive_is_refused_by_pyinfra_before_any_connection(tmp_path):
    made = tmp_path / "pwned-port"
    p, inventory = _verify(tmp_path, repr([("by-port", {"ssh_hostname": "127.0.0.1",
                                                         "ssh_port": "1\n" + INJECTED.format(made)})]))
    assert p.returncode != 0 and "Invalid connector data `ssh_port`" in p.stdout, p.stdout + p.stderr
    assert not made.exists()
    assert _files_naming(tmp_path, "ProxyCommand", besides=inventory) == []


def _local(data: dict | None = None):
    """A connected pyinfra @local host (pyinfra's local connector: the same output handling as ssh)."""
    inventory = Inventory((["@local"], data or {}))
    State(inventory, Config())
    host = inventory.get_host("@local")
    host.connect(raise_exceptions=True)
    return as_node(host)


@pytest.mark.parametrize("command, stdout, stderr, rc", [
    ("printf a", "a", "", 0),
    ("printf 'a\\n'", "a\n", "", 0),
    ("printf 'a\\n\\n\\nb'", "a\n\n\nb", "", 0),
    ("true", "", "", 0),
    ("printf 'out\\n'; printf 'err\\n' >&2; exit 3", "out\n", "err\n", 3),
    ("printf '%s' \"$(printf 'x\\ny')\"; exit 1", "x\ny", "", 1),
])
def test_a_command_crosses_with_its_exact_output_and_exit_status(command, stdout, stderr, rc):
    r = _local().run(command)
    assert (r.stdout, r.stderr, r.rc) == (stdout, stderr, rc)


def test_testinfra_modules_read_a_file_as_it_is(tmp_path):
    f = tmp_path / "unit"
    f.write_text("[Unit]\n\nDescription=x\n")
    f.chmod(0o640)
    node = _local()
    got = node.file(str(f))
    assert (got.exists, got.content_string, f"{got.mode:o}") == (True, "[Unit]\n\nDescription=x\n", "640")
    assert not node.file(str(tmp_path / "absent")).exists
    assert node.check_output("printf 'a\\0b\\0'").split("\0") == ["a", "b", ""]  # as /proc/PID/cmdline


def test_a_secret_in_a_process_arguments_is_found_from_the_file_the_deploy_left(tmp_path):
    """The value read from the host's own file (verify has no secret of the operator's); a file that does not hold
    its secret is said, never passed over."""
    key = f"sk-Verify{os.getpid()}0123456789"
    (tmp_path / "auth").write_text(auth_header(key))
    secrets = [HostSecret("gateway.api_key", str(tmp_path / "auth"), BEARER),
               HostSecret("gateway.floating.password", str(tmp_path / "absent"), "auth_pass ")]
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--api-key={key}"])
    try:
        shown = secrets_shown(_local(), secrets)
    finally:
        p.kill()
        p.wait()
    assert shown == [f"gateway.floating.password: expected a line 'auth_pass ...' in {tmp_path}/absent, found none: "
                     "not looked for",
                     f"process {p.pid} ({Path(sys.executable).name}): its arguments hold gateway.api_key (the value is "
                     "not shown)"]
    assert secrets_shown(_local(), secrets[:1]) == []  # that process gone


def test_a_command_cut_short_fails_naming_the_host_and_the_command():
    with pytest.raises(CommandDidNotRun, match=r"^@local: expected `kill -9 \$\$` to run to its end, found: "):
        _local().run("kill -9 $$")  # the shell pyinfra started dies before the command ends


def test_sudo_from_the_hosts_data_wraps_each_command_once(tmp_path, monkeypatch):
    """pyinfra's _sudo escalates, as in the deploy; testinfra's own sudo is not added on top."""
    log = tmp_path / "sudo.log"
    fake = tmp_path / "bin" / "sudo"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$1 $2" >> {log}\nwhile [ "${{1#-}}" != "$1" ]; do shift; done\nexec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    assert _local({"_sudo": True}).run("printf ok").stdout == "ok"
    assert log.read_text().splitlines() == ["-H -n"]
