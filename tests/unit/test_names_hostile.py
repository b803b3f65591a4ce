"""Hostile inventory host names (issue 38, items 1 and 2): a name reaches keepalived.conf (its comment line and
router_id), the mesh TLS files' {host}, lock and record paths and commands. Each is refused where the inventory is
loaded (make check too, before any host is touched), naming the inventory, the host, what was expected and what
was found, printable and bounded; or accepted, and then rendered harmlessly: keepalived.conf has exactly the
template's lines, and `keepalived -t` (Debian's, taken out of its package) reads it with no script but the
project's own; {host} names a file inside the declared directory.

Reproducible: a fixed derandomized profile, no example database.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.gateway import floating
from fleet.gateway.floating import parse_interfaces
from fleet.gateway.models import Gateway
from fleet.spec.inventory import check_inventory, check_or_exit
from fleet.spec.load import SpecError
from fleet.rollout.render import render_keepalived
from fleet.spec.secrets import SecretError, for_host
from fleet.spec import HOST_RULE, SecretSource, host_name_problem, shown_name
from test_check import GOOD, ROOT, class_file, make_group_dir

PROFILE = settings(derandomize=True, deadline=None, database=None, max_examples=150)
GW = Gateway.model_validate({"routes": ["good"], "floating": {"address": "192.0.2.100", "router_id": 51,
                                                              "password": {"env": "VRRP_PASSWORD"}}})
INVENTORY = "inventories/prod.py"
FIELD = "gateway.mesh.tls.key"

# The issue's: keepalived's variable syntax and a line break register a startup_script run as root
STARTUP = "gw-1\n$S=startup_script \"/bin/sh -c id\"\n    ${S}\n@gw-1 include /etc/passwd"
NASTY = [STARTUP, "gw-1\nstartup_script /tmp/x", "gw-1\r", "gw-1\r\n", "gw\u2028x", "gw\x85x", "gw\x00", "gw\x1b[2J",
         "$X", "${X}", "@gw-1", "@^gw-1", "@local\n", "@docker/debian", "@ssh/gw-1", "gw-1 include /etc/passwd",
         "gw 1", "gw\t1", "../../other-env/gw-1", "gw/1", "..", ".", "gw-1.", ".gw-1", "gw..1", "{host}", "gw-{",
         "gw-}", '"gw-1"', "'gw-1'", "gw-1#", "gw-1!", "gw;id", "$(id)", "`id`", "gw_1", "-gw", "gw-", "gw-é",
         "xn--gw-é", "gw-😀", "ｇｗ１", "gw\u202e1", "a" * 300, "a" * 64, ".".join(["a" * 63] * 4), "", "fe80::1%eth0",
         "fe80::1%../x", "1.2.3.4/24", "~gw", "gw:1", "\\gw", "gw*"]
# The nastiest names accepted: as long as DNS allows, keepalived's keywords as labels, all digits, addresses
ACCEPTED = [".".join(["include", "a" * 63, "b" * 63, "c" * 63, "startup-script-" + "x" * 38]),
            ".".join(["a" * 63] * 3 + ["b" * 61]), "startup-script", "global-defs", "include", "vrrp-script",
            "0.0.0.0", "255.255.255.255", "::", "::ffff:127.0.0.1", "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255",
            "1-2-3", "0x7f", "GW-1.EXAMPLE", "xn--bcher-kva.example", "9" * 63, "a", "@local"]


def test_the_accepted_names_are_as_nasty_as_the_rule_allows():
    assert max(len(n) for n in ACCEPTED) == 253
    assert all(host_name_problem(n) is None for n in ACCEPTED), [(n, host_name_problem(n)) for n in ACCEPTED]


# --- 1. refused where the inventory is loaded --------------------------------------------------------------

def bounded_and_printable(problem: str) -> bool:
    return problem.isprintable() and len(problem) < 600


@pytest.mark.parametrize("name", NASTY + [7, None, ("gw",)])
def test_a_nasty_host_name_is_refused_naming_inventory_host_rule_and_what_was_found(name):
    problem = host_name_problem(name)
    assert problem is not None and problem.startswith(f"expected {HOST_RULE}, found "), (name, problem)
    assert bounded_and_printable(problem), problem


@pytest.mark.parametrize("name", NASTY)
def test_the_inventory_check_refuses_a_nasty_name_before_any_other_check_shows_it(tmp_path, name):
    g = make_group_dir(tmp_path, {"good": GOOD})
    with pytest.raises(SpecError) as e:
        # filed under no class and under a class twice: those checks would quote it raw; it is refused first
        check_inventory({"good": ["ok-1", name], "other": [name]}, {"ok-1": {}, name: {"ssh_user": "root"}}, g,
                        source=INVENTORY)
    [problem] = e.value.problems
    assert problem.startswith(f"{INVENTORY}: host {shown_name(name)}: its name: expected {HOST_RULE}, found "), problem
    assert bounded_and_printable(problem), problem


@pytest.mark.parametrize("address", [STARTUP, "../../x", "gw 1", "a" * 300, 10, "fe80::1%eth0"])
def test_the_inventory_check_refuses_a_nasty_ssh_hostname_naming_its_host(tmp_path, address):
    g = make_group_dir(tmp_path, {"good": GOOD})
    with pytest.raises(SpecError) as e:
        check_inventory({"good": ["gpu-1"]}, {"gpu-1": {"ssh_hostname": address}}, g, source=INVENTORY)
    [problem] = e.value.problems
    assert problem.startswith(f"{INVENTORY}: host gpu-1: ssh_hostname: expected {HOST_RULE}, found ")
    assert bounded_and_printable(problem), problem


def test_an_inventory_names_itself_in_the_refusal(tmp_path, capsys):
    g = make_group_dir(tmp_path, {"good": GOOD})
    with pytest.raises(SystemExit) as e:
        check_or_exit({"__file__": INVENTORY, "good": [(STARTUP, {"ssh_hostname": "10.0.0.1"})]}, g)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "no host was contacted" in err
    assert f"  - {INVENTORY}: host {STARTUP!r}: its name: expected {HOST_RULE}" in err, err


def test_make_check_refuses_the_issues_gateway_name(tmp_path):
    make_group_dir(tmp_path, {"good": class_file(service='"host": "0.0.0.0"')})
    (tmp_path / "group_data" / "gateway.py").write_text(
        'gateway = {"routes": ["good"], "floating": {"address": "10.0.0.100", "router_id": 51, '
        '"password": {"env": "VRRP_PASSWORD"}}}\n')
    (tmp_path / "inv.py").write_text("from tasks.inventory import checked\n"
                                     f"good = ['gpu-1']\ngateway = [({STARTUP!r}, {{'ssh_hostname': '10.0.0.2'}}), "
                                     "('gw-2', {'ssh_hostname': '10.0.0.3'})]\nchecked(globals())\n")
    r = subprocess.run([sys.executable, "-m", "fleet.spec.check", "inv.py"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert f"  - inv.py: host {STARTUP!r}: its name: expected {HOST_RULE}, found {STARTUP!r}\n" in r.stderr, r.stderr
    assert r.stderr.count("\n  - ") == 1 and "Traceback" not in r.stderr  # the one problem


# --- 2. keepalived.conf: only the template's lines ------------------------------------------------------------

SENTINEL = "sentinel-host-name"  # a plain name, nowhere else in the file


def template_lines(config: str, name: str, members: list[str]) -> bool:
    """Every line of `config` is the template's, the name in place of the plain one: no line the name made."""
    plain = render_keepalived(GW, "gateway", SENTINEL, [SENTINEL if m == name else m for m in members], "eth0", 24)
    return config.splitlines() == [line.replace(SENTINEL, name) for line in plain.splitlines()]


def test_keepalived_conf_of_an_accepted_name_has_only_the_templates_lines():
    for name in ACCEPTED:
        members = [name, "gw-2"]
        config = render_keepalived(GW, "gateway", name, members, "eth0", 24)
        assert template_lines(config, name, members), name
        assert f"    router_id {name}\n" in config


def test_the_lines_check_sees_a_line_a_name_makes():
    """The check's own proof: the template rendered without render_keepalived's guard, from the issue's name."""
    config = raw_keepalived(STARTUP)
    assert not template_lines(config, STARTUP, [STARTUP])


@pytest.mark.parametrize("name", NASTY)
def test_render_keepalived_refuses_a_name_the_inventory_check_would(name):
    with pytest.raises(ValueError) as e:
        render_keepalived(GW, "gateway", name, [name], "eth0", 24)
    assert str(e.value).startswith("keepalived.conf of gateway group gateway: host name: expected ")
    assert bounded_and_printable(str(e.value))


def raw_keepalived(name: str) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "templates"), keep_trailing_newline=True)
    good = render_keepalived(GW, "gateway", "gw-1", ["gw-1"], "eth0", 24)
    return env.get_template("keepalived.conf.j2").render(floating=GW.floating, group="gateway", host=name, index=0,
                                                         count=1, **_values_of(good))


def _values_of(config: str) -> dict:
    # what render_keepalived put in, read back from its file for a render of the bare template
    field = {k: re.search(p, config).group(1) for k, p in (
        ("instance", r"vrrp_instance (\S+) \{"), ("priority", r"priority (\d+)"), ("interface", r"interface (\S+)"),
        ("prefix", r"/(\d+) dev"), ("ready_command", r'script "([^"]+)"'), ("stopped_file", r'file "(\S+stopped)"'),
        ("handoff_file", r'file "(\S+handoff)"'), ("auth_file", r"include (\S+)"), ("notify", r'notify "(\S+)"'),
        ("track_interval", r"interval (\d+)"), ("track_fall", r"fall (\d+)"), ("track_rise", r"rise (\d+)"))}
    return {k: int(v) if v.isdigit() else v for k, v in field.items()}


# --- keepalived -t: Debian's keepalived reads the nastiest accepted names' files --------------------------

SCRIPT_WORDS = ("script", "notify", "startup_script", "shutdown_script", "notify_master", "notify_backup",
                "notify_fault", "notify_stop", "notify_deleted", "notify_master_rx_lower_pri", "vrrp_notify_fifo",
                "notify_fifo", "notify_fifo_script", "vrrp_notify_fifo_script", "include", "script_user")


def scripts(config: str) -> list[str]:
    """The lines that register something keepalived runs or reads (or runs them as), as keepalived splits them."""
    return [line.strip() for line in config.splitlines()
            if line.split() and line.split()[0] in SCRIPT_WORDS]


def test_keepalived_t_reads_the_nastiest_accepted_names_with_the_projects_scripts_only(keepalived, tmp_path,
                                                                                      monkeypatch):
    interface = next((i for i in parse_interfaces(subprocess.run(["ip", "-o", "-4", "addr", "show"],
                                                                 capture_output=True, text=True).stdout)
                      if i.name != "lo"), None)
    # keepalived -t checks the vrrp_instance's interface exists: any of this machine's but lo (CI's has eth0)
    assert interface is not None, "keepalived -t needs an interface other than lo on this machine"
    auth = tmp_path / "auth.conf"
    auth.write_text("auth_pass vrrp1234\n")
    monkeypatch.setattr(floating, "AUTH_FILE", str(auth))  # keepalived -t reads the include: this test's copy
    own = scripts(render_keepalived(GW, "gateway", "gw-1", ["gw-1"], interface.name, 24))
    assert len(own) == 4  # script_user, the readiness script, the password's include, notify
    for i in range(0, len(ACCEPTED), 2):
        members = ACCEPTED[i:i + 2]
        for name in members:
            config = render_keepalived(GW, "gateway", name, members, interface.name, 24)
            assert scripts(config) == own and template_lines(config, name, members)
            path = tmp_path / "keepalived.conf"
            path.write_text(config)
            r = subprocess.run([*keepalived, "-t", "-l", "-D", "-f", str(path)], capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 0 and r.stdout + r.stderr == "", (name, r.returncode, r.stdout, r.stderr)


# --- 3. {host}: a validated name, a file inside the declared directory -------------------------------------------

def key_source(template: str) -> SecretSource:
    return SecretSource(file=template)


def test_host_fills_in_an_accepted_name_inside_the_directory(tmp_path):
    (tmp_path / "pki").mkdir()
    for name in ACCEPTED:
        filled = for_host(key_source(f"{tmp_path}/pki/{{host}}.key"), name, "group_data/gw.py", FIELD)
        assert filled.file == f"{tmp_path}/pki/{name}.key"
    assert for_host(key_source(f"{tmp_path}/pki/ca.pem"), "gw-1", "x", FIELD).file == f"{tmp_path}/pki/ca.pem"
    assert for_host(SecretSource(env="MESH_KEY"), "gw-1", "x", FIELD).env == "MESH_KEY"


@pytest.mark.parametrize("name", NASTY)
def test_host_refuses_a_nasty_name_naming_the_field(tmp_path, name):
    with pytest.raises(SecretError) as e:
        for_host(key_source("~/pki/smg/{host}.key"), name, "group_data/gw.py", FIELD)
    [problem] = e.value.problems
    assert problem.startswith(f"group_data/gw.py: {FIELD}: {{host}} in ~/pki/smg/{{host}}.key: the host name: "
                              f"expected {HOST_RULE}"), problem
    assert bounded_and_printable(problem)


@pytest.mark.parametrize("template, link", [("pki/{host}.key", "pki/gw-1.key"),  # the file a link out
                                            ("pki/{host}/key.pem", "pki/gw-1"),  # its directory a link out
                                            ("pki/x-{host}/key.pem", "pki/x-gw-1")])
def test_host_refuses_a_link_out_of_the_declared_directory(tmp_path, template, link):
    (tmp_path / "pki").mkdir()
    (tmp_path / "other-env").mkdir()
    (tmp_path / "other-env" / "key.pem").write_text("another environment's key")
    (tmp_path / link).symlink_to(tmp_path / "other-env" / ("key.pem" if link.endswith(".key") else ""))
    with pytest.raises(SecretError) as e:
        for_host(key_source(f"{tmp_path}/{template}"), "gw-1", "group_data/gw.py", FIELD)
    [problem] = e.value.problems
    assert problem.startswith(f"group_data/gw.py: {FIELD}: {tmp_path}/{template.replace('{host}', 'gw-1')} is "
                              f"'{tmp_path}/other-env") and f"expected a file in {tmp_path}/pki," in problem, problem


def test_host_follows_links_that_stay_inside(tmp_path):
    (tmp_path / "pki" / "2026").mkdir(parents=True)
    (tmp_path / "pki" / "gw-1.key").symlink_to(tmp_path / "pki" / "2026" / "gw-1.key")
    assert for_host(key_source(f"{tmp_path}/pki/{{host}}.key"), "gw-1", "x", FIELD).file == f"{tmp_path}/pki/gw-1.key"


def test_the_declared_directory_itself_may_be_a_link(tmp_path):
    (tmp_path / "vault").mkdir()
    (tmp_path / "pki").symlink_to(tmp_path / "vault")
    assert for_host(key_source(f"{tmp_path}/pki/{{host}}.key"), "gw-1", "x", FIELD).file == f"{tmp_path}/pki/gw-1.key"


# --- generated: any name is refused, or accepted and harmless everywhere it goes ----------------------------

PIECES = ("\r", "\n", "\x00", "\t", "\x1b", "\x85", "\u2028", "$", "${", "}", "{", "@", "@^", "include", " ", "/",
          "../", "..", ".", "-", "'", '"', "#", "!", "%", ":", "é", "😀", "\u202e", "a", "0", "gw", "1")
names = st.one_of(
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=12).map("".join),
    st.tuples(st.sampled_from(PIECES), st.integers(60, 300)).map(lambda t: t[0] * t[1]),
    st.from_regex(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]{1,63}){0,3}", fullmatch=True),
)


@PROFILE
@given(name=names)
def test_any_name_is_refused_or_harmless_wherever_it_goes(tmp_path_factory, name):
    problem = host_name_problem(name)
    if problem is not None:
        assert bounded_and_printable(problem)
        with pytest.raises(ValueError):
            render_keepalived(GW, "gateway", name, [name], "eth0", 24)
        with pytest.raises(SecretError):
            for_host(key_source("~/pki/{host}.key"), name, "x", FIELD)
        return
    assert re.fullmatch(r"[A-Za-z0-9.:-]{1,253}|@local", name) and ".." not in name.replace("::", ""), name
    assert template_lines(render_keepalived(GW, "gateway", name, [name], "eth0", 24), name, [name])
    pki = tmp_path_factory.mktemp("pki")
    assert Path(for_host(key_source(f"{pki}/{{host}}.key"), name, "x", FIELD).file).parent == pki
