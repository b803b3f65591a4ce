"""The lab itself: real hosts boot as their lab file says, and leave nothing behind."""

from __future__ import annotations

import ast
import ipaddress
import json
import os
import runpy
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from lab import lab as labmod
from lab import base, labfile, provision

from fleet.groupdata import load_class_specs
from fleet.spec import SGLANG_0523_ALGORITHMS

REPO = labmod.REPO
SPECS = load_class_specs(REPO / "group_data")


def sh(lab, host, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return lab.ssh(host, command, timeout=timeout)


def host_json(lab, host) -> dict:
    p = sh(lab, host, "cat /etc/lab/host.json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def toml_hosts(path: Path) -> list[dict]:
    return tomllib.loads(path.read_text())["hosts"]


# --- the default lab ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def lab(lab, lab_manager):
    """These tests check the default lab as booted, and other suites deploy to it: start
    this module from a freshly booted one."""
    return lab_manager.ensure(labmod.DEFAULT_LAB, fresh=True)


def test_hosts_answer_ssh_and_systemd_runs(lab):
    assert [h.name for h in lab.hosts] == [h["name"] for h in toml_hosts(labmod.DEFAULT_LAB)]
    for i, h in enumerate(lab.hosts):
        assert h.ip == f"10.203.0.{11 + i}"
        p = sh(lab, h.name, "hostname; systemctl is-system-running")
        name, state = p.stdout.split()
        assert name == h.name
        failed = sh(lab, h.name, "systemctl --failed --no-legend --plain").stdout
        assert state == "running", failed


def test_host_json_matches_lab_file(lab):
    for raw in toml_hosts(labmod.DEFAULT_LAB):
        got = host_json(lab, raw["name"])
        want = {
            "nvidia_smi": "ok", "sglang_version": "0.5.23", "sglang_algorithms": list(SGLANG_0523_ALGORITHMS),
            "load": "ok", "load_seconds": 3.0, "workloads": [], "missing_models": [], "draft_vocab_size": None,
            **raw,
        }
        want.pop("preinstalled", None)
        for k, v in want.items():
            assert got[k] == v, k
        for k in ("name", "group", "gpu_model", "gpu_count", "gpu_memory_mib", "driver_version", "nvidia_smi",
                  "sglang_version", "sglang_algorithms", "load", "load_seconds", "preinstalled_argv"):
            assert k in got, k


def test_network_is_the_lab_subnet_only(lab):
    p = sh(lab, "a6000-1", "ip -4 -o addr show dev eth0; ip -4 route")
    assert "10.203.0.12/24" in p.stdout
    assert "default" not in p.stdout  # no way out of the lab
    # hosts reach each other over the bridge
    p = sh(lab, "a6000-1", "timeout 3 bash -c '</dev/tcp/10.203.0.11/22' && echo open")
    assert p.stdout.strip() == "open", p.stderr


def test_models_present_with_realistic_configs(lab):
    for h in lab.hosts:
        spec = SPECS[h.group]
        target = json.loads(sh(lab, h.name, f"cat {spec.service.model_path}/config.json").stdout)
        assert target["num_nextn_predict_layers"] == 1  # NEXTN without a draft is legitimate
        assert target["vocab_size"] > 100000 and target["architectures"]
        draft = json.loads(sh(lab, h.name, f"cat {spec.speculative.draft_model_path}/config.json").stdout)
        assert draft["architectures"] == ["DFlashDraftModel"]
        assert draft["block_size"] == 16
        assert draft["model_type"] == target["model_type"]
        assert draft["vocab_size"] == target["vocab_size"]
        assert set(draft["dflash_config"]) == {"mask_token_id", "target_layer_ids"}
        assert draft["num_target_layers"] == target["num_hidden_layers"]


def test_workloads_run_at_boot(lab):
    unit = sh(lab, "pro6000-1", "cat /etc/systemd/system/dflash-train.service").stdout
    assert "ExecStart=/usr/local/bin/lab-gpu-job --name dflash-train --memory-mib 88098 --gpus all" in unit
    assert sh(lab, "pro6000-1", "systemctl is-enabled dflash-train").stdout.strip() == "enabled"
    assert sh(lab, "pro6000-1", "systemctl is-active dflash-train").stdout.strip() == "active"
    assert sh(lab, "a6000-1", "systemctl cat dflash-train").returncode != 0


def test_preinstalled_service_serves_the_old_config(lab):
    from fleet.render import server_argv

    got = host_json(lab, "pro6000-1")
    argv = got["preinstalled_argv"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "NEXTN"
    assert "--speculative-draft-model-path" not in argv
    spec = SPECS["pro6000"]
    assert sh(lab, "pro6000-1", f"systemctl is-enabled {spec.service.unit}").stdout.strip() == "enabled"
    show = sh(lab, "pro6000-1", f"systemctl show -p ExecStart --value {spec.service.unit}").stdout
    assert " ".join(argv) in show
    assert sh(lab, "pro6000-1", f"test -f {spec.env_file}").returncode == 0
    assert host_json(lab, "a6000-1")["preinstalled_argv"] is None
    assert sh(lab, "a6000-1", f"test -e {spec.unit_file}").returncode != 0
    # the launcher is the group's path, a wrapper around the SGLang double
    launcher = server_argv(spec)[0]
    assert sh(lab, "pro6000-1", f"test -x {launcher}").returncode == 0
    assert sh(lab, "pro6000-1", f"systemctl is-active {spec.service.unit}").stdout.strip() == "active"


def test_nvidia_smi_double_installed(lab):
    p = sh(lab, "a6000-1", "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits")
    assert p.stdout.splitlines() == ["NVIDIA RTX A6000, 49140"] * 2


def test_inventory_for_pyinfra(lab):
    inv = runpy.run_path(str(lab.inventory))
    assert inv["_lab_file"] == str(labmod.DEFAULT_LAB)
    assert inv["_lab_name"] == "sgllab"
    assert [n for n, _ in inv["pro6000"]] == ["pro6000-1"]
    assert [n for n, _ in inv["a6000"]] == ["a6000-1"]
    name, data = inv["a6000"][0]
    assert data == {"ssh_hostname": "10.203.0.12", "ssh_user": "root", "ssh_key": str(labmod.KEY),
                    "ssh_strict_host_key_checking": "no", "ssh_known_hosts_file": "/dev/null"}
    p = subprocess.run([str(REPO / ".venv/bin/pyinfra"), "-y", str(lab.inventory), "exec", "--", "hostname"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout + p.stderr  # pyinfra prints its progress on stderr
    for h in lab.hosts:
        assert f"[{h.name}] " in out and f"] {h.name}" in out.replace("]   ", "] ")


def test_up_twice_is_harmless(lab):
    pids = {h.name: h.pid for h in lab.hosts}
    t0 = time.monotonic()
    again = labmod.up(labmod.DEFAULT_LAB)
    assert time.monotonic() - t0 < 15
    assert {h.name: h.pid for h in again.hosts} == pids
    assert lab.inventory.exists()
    assert all(r["state"] == "running" and r["ssh"] == "ok" for r in labmod.status())


def test_up_of_another_lab_file_is_refused(lab, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text(labmod.DEFAULT_LAB.read_text())
    with pytest.raises(labmod.LabError, match="run `python -m lab.lab down` first"):
        labmod.up(other)


def test_cli_status(lab):
    p = subprocess.run([sys.executable, "-m", "lab.lab", "status"], cwd=REPO, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "pro6000-1  10.203.0.11  pro6000  running  ok" in p.stdout


def lab_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.lab", *args], cwd=REPO, capture_output=True, text=True)


def test_a_hosts_link_drops_silently_and_comes_back(lab):
    """`link HOST down`: nothing answers, nothing refuses; a connection open across the drop goes on
    once the link is back."""
    host = lab.hosts[-1]
    across = subprocess.Popen(labmod.ssh_argv(host.ip, "sleep 8; echo still-there"), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1)
        down = lab_cli("link", host.name, "down")
        assert (down.returncode, down.stdout) == (0, f"{host.name}: link down\n"), down.stderr
        unanswered = lab.ssh(host.name, "true")
        assert unanswered.returncode == 255 and "timed out" in unanswered.stderr.lower(), unanswered.stderr
        assert across.poll() is None  # no reset: the open connection just waits
    finally:
        up = lab_cli("link", host.name, "up")
    assert (up.returncode, up.stdout) == (0, f"{host.name}: link up\n"), up.stderr
    assert across.communicate(timeout=30)[0] == "still-there\n"
    assert lab.ssh(host.name, "true").returncode == 0
    unknown = lab_cli("link", "no-such-host", "down")
    assert unknown.returncode == 1 and f"no host 'no-such-host' in lab" in unknown.stderr


# --- lab files: refused with host, key, value ----------------------------------------------

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


# --- other labs -----------------------------------------------------------------------------

def test_seed_incident_mislabelled_host(lab_up):
    lab = lab_up(REPO / "lab" / "seed-incident.toml")
    box = host_json(lab, "a6000-box")
    assert (box["group"], box["gpu_model"], box["gpu_count"], box["gpu_memory_mib"]) == (
        "pro6000", "NVIDIA RTX A6000", 2, 49140)
    inv = runpy.run_path(str(lab.inventory))
    assert [n for n, _ in inv["pro6000"]] == ["pro6000-1", "a6000-box"]
    assert "a6000" not in inv
    # it holds the pro6000 class's models, as a box filed there would
    assert sh(lab, "a6000-box", f"test -f {SPECS['pro6000'].service.model_path}/config.json").returncode == 0
    p = sh(lab, "a6000-box", "nvidia-smi --query-gpu=name --format=csv,noheader")
    assert p.stdout.splitlines() == ["NVIDIA RTX A6000"] * 2


ODD_LAB = """
[lab]
name = "sgltest"
subnet = "10.203.7.0/24"

[[hosts]]
name = "nosmi"
group = "pro6000"
gpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
gpu_count = 1
gpu_memory_mib = 97887
nvidia_smi = "missing"
missing_models = ["/root/models/Qwen3.6-27B-DFlash"]
load = "crash"
load_seconds = 0.5
sglang_algorithms = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "DDTREE"]

[[hosts]]
name = "vocab"
group = "a6000"
gpu_model = "NVIDIA RTX A6000"
gpu_count = 2
gpu_memory_mib = 49140
nvidia_smi = "driver-error"
draft_vocab_size = 32000
"""


def test_keys_shape_the_hosts(lab_up):
    lab = lab_up(ODD_LAB)
    assert [h.ip for h in lab.hosts] == ["10.203.7.11", "10.203.7.12"]
    assert sh(lab, "nosmi", "test -e /usr/bin/nvidia-smi").returncode != 0
    assert sh(lab, "nosmi", "test -f /root/models/Qwen3.6-27B/config.json").returncode == 0
    assert sh(lab, "nosmi", "test -e /root/models/Qwen3.6-27B-DFlash").returncode != 0
    got = host_json(lab, "nosmi")
    assert got["load"] == "crash" and got["load_seconds"] == 0.5 and "DDTREE" in got["sglang_algorithms"]
    draft = json.loads(sh(lab, "vocab", "cat /root/models/Qwen3-8B-DFlash/config.json").stdout)
    target = json.loads(sh(lab, "vocab", "cat /root/models/Qwen3-8B/config.json").stdout)
    assert draft["vocab_size"] == 32000 != target["vocab_size"]
    assert host_json(lab, "vocab")["nvidia_smi"] == "driver-error"
    smi = sh(lab, "vocab", "nvidia-smi -L")
    assert smi.returncode == 9 and "couldn't communicate with the NVIDIA driver" in smi.stdout


def inventory_lists(path: Path) -> dict[str, list]:
    """The lab inventory's group lists, read without running it (its last line checks group_data)."""
    tree = ast.parse(path.read_text())
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.List)}


def test_gateway_lab(lab_up):
    lab = lab_up(REPO / "lab" / "gateway.toml")
    assert [(h.name, h.ip) for h in lab.hosts] == [
        ("pro6000-1", "10.204.0.11"), ("pro6000-2", "10.204.0.12"), ("pro6000-3", "10.204.0.13"),
        ("gw-1", "10.204.0.14"), ("gw-2", "10.204.0.15"),
    ]
    for h in lab.hosts:
        assert sh(lab, h.name, "hostname").stdout.strip() == h.name
    spec = SPECS["pro6000"]
    # no GPU, no SGLang: only what every host needs; smg is the deploy's to install
    for path in ("/usr/bin/nvidia-smi", provision.SGLANG_DOUBLE_DIR, spec.service.launcher, spec.service.model_path):
        assert sh(lab, "gw-1", f"test -e {path}").returncode != 0, path
    assert sh(lab, "gw-1", "python3 -c 'print(1)'").stdout.strip() == "1"
    assert host_json(lab, "gw-1")["role"] == "gateway"
    assert host_json(lab, "pro6000-1")["role"] == "gpu"
    assert sh(lab, "pro6000-1", "test -x /usr/bin/nvidia-smi").returncode == 0
    inv = inventory_lists(lab.inventory)  # not run: the repo's group_data has no floating address for the pair
    assert [n for n, _ in inv["gateway"]] == ["gw-1", "gw-2"]
    assert [n for n, _ in inv["pro6000"]] == ["pro6000-1", "pro6000-2", "pro6000-3"]
    # what keepalived and a handoff need, as on a real host: Debian's packages from the lab's repository, the
    # network's administration in its own namespace (an address added, a sysctl of its own)
    # (a freshly booted host has no package lists yet: the deploy's apt-get update reads them from there)
    assert sh(lab, "gw-2", "apt-get update -qq && apt-cache policy keepalived nftables | grep -c 'file:/srv/lab-debs'"
              ).stdout.strip() == "2"
    assert sh(lab, "gw-2", "ip addr add 10.204.0.99/32 dev lo && sysctl -qw net.ipv4.conf.eth0.forwarding=1 && "
                           "ip addr del 10.204.0.99/32 dev lo && sysctl -qw net.ipv4.conf.eth0.forwarding=0"
              ).returncode == 0
    assert sh(lab, "pro6000-1", "ip addr add 10.204.0.99/32 dev lo").returncode != 0  # a GPU host: no such right
    # a box's power cut: nothing answers, its kernel's state gone; back: booted from its disk as it was
    # its NIC keeps its MAC address: the neighbours' ARP entries stay good and it answers at once when back
    sh(lab, "gw-2", "echo kept > /root/disk && ip addr add 10.204.0.98/32 dev lo")
    nic = sh(lab, "gw-2", "cat /sys/class/net/eth0/address").stdout
    labmod.power("gw-2", False)
    assert lab.ssh("gw-2", "true", timeout=3).returncode != 0
    labmod.power("gw-2", True)
    assert sh(lab, "gw-2", "cat /root/disk; ip -o -4 addr show dev lo to 10.204.0.98/32").stdout.strip() == "kept"
    assert sh(lab, "gw-2", "cat /sys/class/net/eth0/address").stdout == nic
    assert sh(lab, "gw-1", "timeout 2 bash -c '</dev/tcp/10.204.0.15/22'").returncode == 0  # its peer reaches it
    assert {r["name"]: r["state"] for r in labmod.status(check_ssh=False)}["gw-2"] == "running"


# --- down -----------------------------------------------------------------------------------

def _cgroup_dirs() -> set[str]:
    out = set()
    for root in Path("/sys/fs/cgroup").iterdir():
        if root.is_dir():
            out |= {str(p) for p in root.iterdir() if p.is_dir() and p.name.startswith("sgl")}
    return out


def _lab_processes() -> set[tuple[int, str]]:
    procs = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            comm = (d / "comm").read_text().strip()
            cg = (d / "cgroup").read_text()
        except OSError:
            continue
        if comm == "systemd-nspawn" or "/sgl" in cg:
            procs.add((int(d.name), comm))
    return procs


def _snapshot() -> dict:
    def out(*argv):
        return subprocess.run(argv, capture_output=True, text=True).stdout

    nspawn_run = Path("/run/systemd/nspawn")
    return {
        "netns": out("ip", "netns", "list"),
        "links": sorted(line.split(":")[1].strip().split("@")[0] for line in out("ip", "-o", "link").splitlines()),
        "mounts": sorted(line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()),
        "cgroups": sorted(_cgroup_dirs()),
        "nspawn_run": sorted(str(p) for p in nspawn_run.rglob("*")) if nspawn_run.exists() else None,
        "run_netns": Path("/run/netns").exists(),
        "processes": sorted(_lab_processes()),
        "lab_hosts": sorted(os.listdir(labmod.HOSTS_DIR)) if labmod.HOSTS_DIR.exists() else [],
    }


def test_a_host_root_left_mounted_is_named_not_removed(lab_up, tmp_path):
    """A mount an earlier down left (a worktree's .lab is a symlink: mountinfo names the resolved
    path) is refused by name before anything is made, and left as it was."""
    labmod.down()
    lab_file = tmp_path / "left.toml"
    lab_file.write_text(GOOD_HOST)
    root = labmod.HOSTS_DIR / "x-1" / "root"
    root.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "lab-left", str(root)], check=True)
    try:
        with pytest.raises(labmod.LabError) as e:
            labmod.up(lab_file)
        assert str(e.value) == (f"found {root} still mounted but no lab state in {labmod.STATE} (an earlier down "
                                "could not unmount it): `umount` it by hand, then up again")
        assert labmod._is_mountpoint(root) and labmod._read_state() is None
    finally:
        subprocess.run(["umount", str(root)], check=True)
        shutil.rmtree(root.parent)


def test_down_leaves_nothing(lab_up):
    labmod.down()
    before = _snapshot()
    lab = lab_up(ODD_LAB.replace('"sgltest"', '"sgldown"'))
    during = _snapshot()
    assert during["processes"] and during["cgroups"] and during["netns"] and during != before
    assert labmod.down() is True
    after = _snapshot()
    assert after == before
    assert not labmod.INVENTORY.exists() and not labmod.STATE_FILE.exists()
    assert labmod.down() is False  # nothing up: harmless
    assert labmod.status() == []
    del lab
