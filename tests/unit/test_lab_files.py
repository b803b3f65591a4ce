"""The lab's files and choices without a lab (moved from tests/lab/test_lab.py: none of them boots a host): a lab
file refused with host, key and value; a preinstalled unit rendered for its release's systemd; the base image's
mirror; a subnet that overlaps a route; a lab file's name read alone; the state of two labs kept apart; the
inotify limits a lab raises."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time

import pytest

from fleet.spec.load import load_class_specs
from lab import base, inotify, labfile, provision
from lab import lab as labmod

REPO = labmod.REPO
SPECS = load_class_specs(REPO / "group_data")


GOOD_HOST = """
[[hosts]]
name = "x-1"
group = "a6000"
gpu_model = "NVIDIA RTX A6000"
gpu_count = 2
gpu_memory_mib = 49140
"""


def _problems(tmp_path, text) -> str:
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(labfile.LabFileError) as e:
        labmod.load_lab(p)
    return str(e.value)


def test_good_host_is_accepted(tmp_path):
    p = tmp_path / "ok.toml"
    p.write_text(GOOD_HOST)
    lab = labmod.load_lab(p)
    assert lab.hosts[0].ip == "10.203.0.11"
    assert lab.hosts[0].entry["nvidia_smi"] == "ok"


def test_unknown_key_is_refused(tmp_path):
    msg = _problems(tmp_path, GOOD_HOST + 'gpu_modle = "x"\n')
    assert "host 'x-1'" in msg and "'gpu_modle'" in msg and "unknown key" in msg


@pytest.mark.parametrize("line, key, allowed", [
    ('nvidia_smi = "broken"', "nvidia_smi", "'driver-error'"),
    ('load = "slow"', "load", "'hang'"),
    ("gpu_count = 0", "gpu_count", "1..16"),
    ('gpu_count = "2"', "gpu_count", "integer"),
    ('load_seconds = "3"', "load_seconds", "number"),
    ('missing_models = ["models/x"]', "missing_models", "absolute"),
    ('workloads = "dflash-train"', "workloads", "list"),
    ('debian = "sid"', "debian", "'trixie' (Debian 13"),
])
def test_bad_value_is_refused(tmp_path, line, key, allowed):
    text = "\n".join(l for l in GOOD_HOST.splitlines() if not l.startswith(key + " "))
    msg = _problems(tmp_path, text + "\n" + line + "\n")
    assert "host 'x-1'" in msg and f"{key} = " in msg and allowed in msg


def test_bad_group_names_the_groups(tmp_path):
    msg = _problems(tmp_path, GOOD_HOST.replace('"a6000"', '"a100"'))
    assert "host 'x-1'" in msg and "group = 'a100'" in msg and "'pro6000'" in msg


def test_missing_key_and_duplicate_names(tmp_path):
    msg = _problems(tmp_path, GOOD_HOST.replace("gpu_count = 2\n", "") + GOOD_HOST)
    assert "key 'gpu_count' is required" in msg and "used twice" in msg


def test_bad_preinstalled_override_is_refused(tmp_path):
    msg = _problems(tmp_path, GOOD_HOST + 'preinstalled = { speculative = { algorithm = "EAGLE3" } }\n')
    assert "host 'x-1'" in msg and "preinstalled" in msg and "draft_model_path" in msg


def test_bad_lab_table(tmp_path):
    msg = _problems(tmp_path, '[lab]\nsubnet = "8.8.8.0/24"\nbridge = "x"\n' + GOOD_HOST)
    assert "subnet = '8.8.8.0/24'" in msg and "private" in msg and "'bridge'" in msg


def test_cli_check_names_host_and_key(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text(GOOD_HOST + "colour = 1\n")
    r = subprocess.run([sys.executable, "-m", "lab.lab", "check", "--lab", str(p)], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "host 'x-1'" in r.stderr and "'colour'" in r.stderr


GATEWAY_HOST = """
[[hosts]]
name = "gw-1"
group = "gateway"
role = "gateway"
"""


def test_gateway_host_is_accepted_without_gpu_keys(tmp_path):
    p = tmp_path / "ok.toml"
    p.write_text(GOOD_HOST + GATEWAY_HOST)
    gw = labmod.load_lab(p).hosts[1]
    assert (gw.name, gw.ip, gw.group) == ("gw-1", "10.203.0.12", "gateway")
    assert gw.entry == {"name": "gw-1", "group": "gateway", "role": "gateway", "ssh_user": "root", "debian": "bookworm"}


@pytest.mark.parametrize("line", ['gpu_model = "NVIDIA RTX A6000"', 'workloads = ["dflash-train"]', "load_seconds = 3"])
def test_gpu_key_on_a_gateway_host_is_refused(tmp_path, line):
    msg = _problems(tmp_path, GATEWAY_HOST + line + "\n")
    key = line.split()[0]
    assert "host 'gw-1'" in msg and f"{key} = " in msg and "role = 'gateway'" in msg
    assert "allowed keys for a gateway host: name, group, role, ssh_user, debian" in msg


def test_role_and_group_must_match(tmp_path):
    msg = _problems(tmp_path, GOOD_HOST.replace('"a6000"', '"gateway"'))
    assert "host 'x-1'" in msg and "group = 'gateway' is a gateway group" in msg and "role = 'gpu'" in msg
    msg = _problems(tmp_path, GATEWAY_HOST.replace('group = "gateway"', 'group = "pro6000"'))
    assert "host 'gw-1'" in msg and "role = 'gateway'" in msg and "group = 'pro6000' is a GPU class group" in msg
    assert "'gateway'" in msg.split("allowed")[1]


@pytest.mark.parametrize("debian, filtered", [("bookworm", False), ("trixie", True)])
def test_a_preinstalled_keyed_unit_is_rendered_for_its_release_systemd(tmp_path, monkeypatch, debian, filtered):
    """As a deploy renders it there: LogFilterPatterns= only where systemd has it (253+), so a lab
    host's old service is no drift the deploy would have to repair."""
    monkeypatch.setenv("LAB_PRE_KEY", "sk-preinstalled")
    lab_file = tmp_path / "pre.toml"
    lab_file.write_text(GOOD_HOST.replace('"a6000"', '"pro6000"') + f'debian = "{debian}"\n'
                        'preinstalled = { service = { api_key = { env = "LAB_PRE_KEY" } } }\n')
    host = labmod.load_lab(lab_file).hosts[0]
    root = tmp_path / "root"
    provision.provision(root, host.entry, SPECS["pro6000"], labmod._groups()[1]["pro6000"], "ssh-ed25519 AAAA lab",
                        host.ip, "sgllab")
    unit = (root / SPECS["pro6000"].unit_file.lstrip("/")).read_text()
    assert "--config /etc/sglang/sglang.yaml" in unit
    assert ("LogFilterPatterns=~server_args=" in unit.splitlines()) is filtered


BOOKWORM_SOURCES = """Types: deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_each_release_is_built_from_the_machines_own_mirror(tmp_path, monkeypatch):
    sources = tmp_path / "debian.sources"
    monkeypatch.setattr(base, "_sources_files", lambda: [sources])
    sources.write_text(BOOKWORM_SOURCES)
    # a machine lists its own release only: its main archive carries trixie too
    assert base.debian_mirror("bookworm") == base.debian_mirror("trixie") == "http://mirror.example/debian"
    sources.write_text(BOOKWORM_SOURCES + "\nTypes: deb\nURIs: http://other.example/debian\nSuites: trixie\n")
    assert base.debian_mirror("trixie") == "http://other.example/debian"
    sources.write_text(BOOKWORM_SOURCES.split("\n\n")[1])
    with pytest.raises(SystemExit) as e:
        base.debian_mirror("trixie")
    assert str(e.value) == (f"lab: {sources}: no Debian main archive to build the 'trixie' base image from; "
                            "expected a `deb` source of suite 'bookworm' or 'trixie', found 'bookworm-security'")
    # the bookworm image keeps its pre-trixie name (bumped for git: olah reads its repositories with it)
    assert (base.base_tarball("bookworm").name, base.base_root("bookworm").name) == ("lab-base-4.tar.zst", "lab-base-4")
    assert base.base_root("trixie") != base.base_root("bookworm")


def test_subnet_overlapping_a_route_is_refused():
    routes = json.loads(subprocess.run(["ip", "-j", "-4", "route"], capture_output=True, text=True).stdout)
    dst = next(r["dst"] for r in routes if r.get("dst") not in (None, "default"))
    with pytest.raises(labmod.LabError, match="overlaps"):
        labmod.check_subnet(ipaddress.ip_network(dst, strict=False))




# tests/lab/test_workloads_e2e.py's lab: a training job in a scope and one as a bare process
_HELD = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\n'
         'gpu_count = 1\ngpu_memory_mib = 97887\nload_seconds = 1\n')
HELD_LAB = (f'[lab]\nname = "heldlab"\n\n[[hosts]]\nname = "held-1"\n{_HELD}scope_workloads = ["trainer"]\n'
            f'process_workloads = ["torch"]\n\n[[hosts]]\nname = "held-2"\n{_HELD}scope_workloads = ["batch-job"]\n')


def test_the_lab_file_names_its_scope_and_process_jobs(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text(HELD_LAB)
    hosts = labfile.parse(path, ["pro6000"], []).hosts
    assert [(h.entry["scope_workloads"], h.entry["process_workloads"]) for h in hosts] == [
        (["trainer"], ["torch"]), (["batch-job"], [])]
    path.write_text(HELD_LAB.replace('["torch"]', '["To rch"]').replace('["batch-job"]', '"batch-job"'))
    with pytest.raises(labfile.LabFileError) as e:
        labfile.parse(path, ["pro6000"], [])
    assert e.value.problems == [
        f"{path}: host 'held-1': process_workloads = ['To rch']: bad name(s) ['To rch']; allowed: a list of names, "
        "e.g. ['torch']: each a training job left running by lab-proc-NAME.service, a bare process",
        f"{path}: host 'held-2': scope_workloads = 'batch-job': not a list of strings; allowed: a list of names, "
        "e.g. ['trainer']: each a training job in the scope NAME.scope, as a container runs, started by "
        "lab-scope-NAME.service"]


# --- labs side by side ------------------------------------------------------------------------

def test_a_lab_files_name_is_read_without_validating_the_rest(tmp_path):
    p = tmp_path / "l.toml"
    p.write_text('[lab]\nname = "sglone"\n\n[[hosts]]\nname = "x"\ncolour = 1\n')
    assert labmod.lab_name(p) == "sglone"
    p.write_text(GOOD_HOST)
    assert labmod.lab_name(p) == labfile.DEFAULT_LAB_NAME
    p.write_text('[lab]\nname = "../etc"\n')
    with pytest.raises(labfile.LabFileError, match=r"\[lab\] name = '../etc': allowed"):
        labmod.lab_name(p)


def _two_labs(tmp_path, monkeypatch) -> list[dict]:
    monkeypatch.setattr(labmod, "STATE", tmp_path / ".lab")
    states = []
    for name, subnet in (("sglone", "10.230.0.0/24"), ("sgltwo", "10.231.0.0/24")):
        hosts = [{"name": h, "ip": str(ipaddress.ip_network(subnet)[11 + i]), "group": "pro6000", "entry": {"role": "gpu"},
                  "machine": labmod.machine(name, h), "dir": str(labmod.Where(name).hosts / h), "netns": f"{name}-h{i}",
                  "veth": f"{name}v{i}"} for i, h in enumerate(("pro6000-1", f"only-{name}"))]
        st = {"lab_name": name, "lab_file": f"/x/{name}.toml", "subnet": subnet, "bridge": f"{name}0", "hosts": hosts}
        labmod._write_state(st)
        states.append(st)
    return states


def test_each_lab_keeps_its_state_in_a_directory_of_its_name(tmp_path, monkeypatch):
    one, two = _two_labs(tmp_path, monkeypatch)
    assert labmod._read_state("sglone") == one and labmod._read_state("sgltwo") == two
    assert (tmp_path / ".lab/sglone/state.json").is_file() and (tmp_path / ".lab/sgltwo/state.json").is_file()
    assert [st["lab_name"] for st in labmod._states()] == ["sglone", "sgltwo"]
    # the two labs' hosts of one name are two machines, in two directories
    assert labmod.machine("sglone", "pro6000-1") != labmod.machine("sgltwo", "pro6000-1")
    assert one["hosts"][0]["dir"] != two["hosts"][0]["dir"]
    # both labs' addresses are lab addresses, nothing else is
    labmod._check_lab_address("10.230.0.11")
    labmod._check_lab_address("10.231.0.12")
    with pytest.raises(labmod.LabError, match="10.232.0.11 is not a lab address"):
        labmod._check_lab_address("10.232.0.11")


def test_a_host_is_found_in_the_one_lab_that_has_it_or_its_lab_must_be_named(tmp_path, monkeypatch):
    _two_labs(tmp_path, monkeypatch)
    st, host = labmod._running_host("only-sgltwo")
    assert (st["lab_name"], host["netns"]) == ("sgltwo", "sgltwo-h1")
    with pytest.raises(labmod.LabError, match=r"host 'pro6000-1' is in labs sglone, sgltwo: name its lab \(--lab FILE\)"):
        labmod._running_host("pro6000-1")
    assert labmod._running_host("pro6000-1", "sgltwo")[1]["netns"] == "sgltwo-h0"
    with pytest.raises(labmod.LabError, match="no host 'only-sgltwo' in lab 'sglone' .hosts: lab 'sglone': pro6000-1, "
                                              "only-sglone"):
        labmod._running_host("only-sgltwo", "sglone")
    with pytest.raises(labmod.LabError, match="lab 'sglnone' is not up"):
        labmod._running_host("pro6000-1", "sglnone")


def test_a_cut_stops_the_hosts_bridge_port_forwarding_and_leaves_its_eth0_alone(tmp_path, monkeypatch):
    _two_labs(tmp_path, monkeypatch)
    ran = []
    monkeypatch.setattr(labmod, "run", lambda *argv, **kw: ran.append(list(argv)))
    before = time.time()
    assert labmod.cut("pro6000-1", True, "sgltwo") >= before
    labmod.cut("pro6000-1", False, "sgltwo")
    # the bridge's end of its veth (on this machine), not the host's eth0 (in its namespace): its carrier stays
    assert ran == [["bridge", "link", "set", "dev", "sgltwov0", "state", "0"],
                   ["bridge", "link", "set", "dev", "sgltwov0", "state", "3"]]
    ran.clear()
    labmod.cut("pro6000-1", True, "sgltwo", peer="only-sgltwo")  # from one host only: both ports isolated
    labmod.cut("pro6000-1", False, "sgltwo", peer="only-sgltwo")
    assert ran == [["bridge", "link", "set", "dev", v, "isolated", state] for state in ("on", "off")
                   for v in ("sgltwov0", "sgltwov1")]
    with pytest.raises(labmod.LabError, match="no host 'only-sglone' in lab 'sgltwo'"):
        labmod.cut("pro6000-1", True, "sgltwo", peer="only-sglone")


def test_down_without_a_name_takes_the_one_lab_up_and_refuses_to_guess_between_two(tmp_path, monkeypatch):
    _two_labs(tmp_path, monkeypatch)
    with pytest.raises(labmod.LabError, match=r"labs sglone, sgltwo are up: name the one to take down \(--lab FILE, "
                                              r"or --all\)"):
        labmod.down()


def test_the_last_inventory_link_follows_the_lab_brought_up_last(tmp_path, monkeypatch):
    one, two = _two_labs(tmp_path, monkeypatch)
    monkeypatch.setattr(labmod, "INVENTORY", tmp_path / ".lab/inventory.py")
    for st in (one, two):
        labmod.write_inventory(st)
        labmod._point_last_inventory(labmod.Where(st["lab_name"]))
        assert labmod.INVENTORY.resolve() == (tmp_path / ".lab" / st["lab_name"] / "inventory.py").resolve()
    assert "'only-sgltwo'" in labmod.INVENTORY.read_text()


# --- the kernel's inotify limits ------------------------------------------------------------

def test_inotify_limits_are_raised_to_what_the_hosts_need_never_lowered(tmp_path):
    for key in inotify.PER_HOST:
        (tmp_path / key).write_text("128\n")
    said = []
    raised = inotify.ensure(48, said.append, sysctl=tmp_path)
    need = inotify.need(48)
    assert raised == {key: (128, need[key]) for key in inotify.PER_HOST}
    assert all(int((tmp_path / key).read_text()) == need[key] > 128 for key in inotify.PER_HOST)
    assert len(said) == 2 and "raised fs.inotify.max_user_instances from 128 to" in said[0] and "48 lab hosts" in said[0]
    # already enough (or more, set by the operator): left as it is, nothing said
    (tmp_path / "max_user_instances").write_text("100000\n")
    said.clear()
    assert inotify.ensure(48, said.append, sysctl=tmp_path) == {} and said == []
    assert (tmp_path / "max_user_instances").read_text() == "100000\n"
