"""The lab itself: real hosts boot as their lab file says, and leave nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lab import lab as labmod
from lab import reset
from tests.lab.e2e import deploy, health, host_json, summary_row, wait_for, workdir

from fleet.spec.load import load_class_specs

REPO = labmod.REPO
SPECS = load_class_specs(REPO / "group_data")


def sh(lab, host, command: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return lab.ssh(host, command, timeout=timeout)


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


# --- down -----------------------------------------------------------------------------------
# What a lab leaves on this machine is named by its [lab] name: its bridge and veths (<name>0, <name>v<i>), its
# namespaces (<name>-h<i>), its cgroups (<name>/), its machines (<name>-<host>) and its state (.lab/<name>/). These
# tests look at their own lab's only: another worker's labs come and go meanwhile.

DOWN_LAB = ODD_LAB.replace('"sgltest"', '"sgldown"').replace("10.203.7.0/24", "10.203.8.0/24")


def _ours(name: str) -> dict:
    """Everything of lab `name` on this machine."""
    def out(*argv):
        return subprocess.run(argv, capture_output=True, text=True).stdout

    processes = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            comm, cg = (d / "comm").read_text().strip(), (d / "cgroup").read_text()
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"/{name}/" in cg or (comm == "systemd-nspawn" and any(a.startswith(f"{name}-".encode()) for a in argv)):
            processes.add((int(d.name), comm))
    nspawn_run = Path("/run/systemd/nspawn")
    where = labmod.Where(name)
    return {
        "netns": sorted(n for n in out("ip", "netns", "list").split() if n.startswith(f"{name}-")),
        "links": sorted(link for line in out("ip", "-o", "link").splitlines()
                        if (link := line.split(":")[1].strip().split("@")[0]).startswith(name)),
        "mounts": sorted(m for line in Path("/proc/mounts").read_text().splitlines()
                         if (m := line.split()[1]).startswith(str(where.dir.resolve()))),
        "cgroups": sorted(str(p) for root in Path("/sys/fs/cgroup").iterdir() if root.is_dir()
                          for p in [root / name] if p.exists()),
        "nspawn_run": sorted(str(p) for p in nspawn_run.rglob(f"{name}-*")) if nspawn_run.exists() else [],
        "processes": sorted(processes),
        "hosts": sorted(os.listdir(where.hosts)) if where.hosts.exists() else [],
        "state": where.state_file.exists(),
    }


NOTHING = {"netns": [], "links": [], "mounts": [], "cgroups": [], "nspawn_run": [], "processes": [], "hosts": [],
           "state": False}


def test_a_host_root_left_mounted_is_named_not_removed(lab_up, tmp_path):
    """A mount an earlier down left (a worktree's .lab is a symlink: mountinfo names the resolved
    path) is refused by name before anything is made, and left as it was."""
    lab_file = tmp_path / "left.toml"
    lab_file.write_text('[lab]\nname = "sglleft"\nsubnet = "10.203.9.0/24"\n' + ODD_LAB.split("\n\n", 1)[1])
    where = labmod.Where("sglleft")
    root = where.hosts / "nosmi" / "root"
    root.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "lab-left", str(root)], check=True)
    try:
        with pytest.raises(labmod.LabError) as e:
            labmod.up(lab_file)
        assert str(e.value) == (f"found {root} still mounted but no lab state in {where.dir} (an earlier down "
                                "could not unmount it): `umount` it by hand, then up again")
        assert labmod._is_mountpoint(root) and labmod._read_state("sglleft") is None
    finally:
        subprocess.run(["umount", str(root)], check=True)
        shutil.rmtree(where.dir)


KILL_LAB = DOWN_LAB.replace('"sgldown"', '"sglkill"').replace("10.203.8.0/24", "10.203.10.0/24")


def test_what_a_killed_lab_left_is_removed_unless_something_runs_in_it(lab_up):
    """A lab killed with its state elsewhere (another checkout; a machine restarted under a session) leaves its
    bridge, veths and namespaces in the kernel. Up removes them when no process runs there; while one does
    (a running lab of that name), up refuses by name and leaves them all."""
    sh = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    sh("ip", "link", "add", "sglkill0", "type", "bridge")
    for i in range(2):
        sh("ip", "netns", "add", f"sglkill-h{i}")
        sh("ip", "link", "add", f"sglkillv{i}", "type", "veth", "peer", "name", "host0", "netns", f"sglkill-h{i}")
        sh("ip", "link", "set", f"sglkillv{i}", "master", "sglkill0")
    left = _ours("sglkill")
    assert left["netns"] == ["sglkill-h0", "sglkill-h1"] and left["links"] == ["sglkill0", "sglkillv0", "sglkillv1"]
    runner = subprocess.Popen(["ip", "netns", "exec", "sglkill-h1", "sleep", "600"])
    try:
        wait_for("the sleep in sglkill-h1", lambda: str(runner.pid) in labmod._netns_pids("sglkill-h1"), 30)
        with pytest.raises(labmod.LabError) as e:
            lab_up(KILL_LAB)
        assert f"processes still run in sglkill-h1 (pids {runner.pid})" in str(e.value)
        assert "sglkill0, sglkillv0, sglkillv1, /run/netns/sglkill-h0, /run/netns/sglkill-h1" in str(e.value)
        assert _ours("sglkill") == left
    finally:
        runner.kill()
        runner.wait()
    lab = lab_up(KILL_LAB)
    assert [h.name for h in lab.hosts] == ["nosmi", "vocab"] and all(h.pid for h in lab.hosts)
    assert labmod.down("sglkill") is True
    assert _ours("sglkill") == NOTHING


def test_down_leaves_nothing_and_nothing_of_another_lab_is_touched(lab_up):
    """Two labs up side by side (this one and ODD_LAB's); this one's down leaves nothing of it, and the
    other's hosts run on, the same machines."""
    other = lab_up(ODD_LAB)
    pids = {h.name: h.pid for h in other.hosts}
    assert _ours("sgldown") == NOTHING
    down_lab = lab_up(DOWN_LAB)
    during = _ours("sgldown")
    assert during["processes"] and during["cgroups"] and during["netns"] and during["mounts"] and during["state"]
    assert len(during["links"]) == 3  # its bridge and two veths
    assert labmod.down("sgldown") is True
    assert _ours("sgldown") == NOTHING
    assert not down_lab.inventory.exists()
    assert labmod.down("sgldown") is False  # not up: harmless
    assert labmod.status("sgldown") == []
    assert {r["name"]: (r["state"], r["ssh"], r["pid"]) for r in labmod.status(other.name)} == {
        name: ("running", "ok", pid) for name, pid in pids.items()}


# --- a reset host is a freshly booted one ----------------------------------------------------------------------
# Two hosts of one lab entry: twin-2 as booted, twin-1 deployed to, then reset (lab/reset.py).

TWIN = ('group = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"\ngpu_count = 1\n'
        'gpu_memory_mib = 97887\nload_seconds = 1\nworkloads = ["dflash-train"]\n'
        'preinstalled = { speculative = { algorithm = "NEXTN", num_steps = 3, topk = 1, num_draft_tokens = 4 } }\n')
TWIN_LAB = '[lab]\nname = "sgltwin"\nsubnet = "10.223.0.0/24"\n' + "".join(
    f'\n[[hosts]]\nname = "{h}"\n{TWIN}' for h in ("twin-1", "twin-2"))


def observed(lab, host: str) -> list[str]:
    """The host's files under the deploy's paths, its units and unit files, its processes (reset.OBSERVE_COMMAND)."""
    p = sh(lab, host, reset.OBSERVE_COMMAND, timeout=60)
    assert p.returncode == 0, p.stderr
    return reset.observe(p.stdout, host)


def test_a_reset_host_is_the_same_as_a_freshly_booted_one(lab_up, tmp_path):
    lab = lab_up(TWIN_LAB, fresh=True)
    booted = observed(lab, "twin-2")
    assert observed(lab, "twin-1") == booted  # twins boot alike
    twin = {h: lab.ssh(h, "systemctl show -p MainPID --value sglang.service dflash-train.service").stdout
            for h in ("twin-1", "twin-2")}
    # the deploy's work on twin-1 (a new service, its files, state and backups; its training stopped), and a hand's:
    # a drop-in, a file beside the deploy's, a transient unit, a process no unit runs
    wd = workdir(tmp_path / "wd", pro6000='readiness = {"load_timeout_s": 30, "poll_interval_s": 0.25}')
    run = deploy(lab, wd, "--limit", "twin-1")
    assert run.returncode == 0 and "OK" in summary_row(run.out, "twin-1"), run.out
    sh(lab, "twin-1", "mkdir -p /etc/systemd/system/sglang.service.d && printf '[Service]\\nNice=5\\n' > "
                      "/etc/systemd/system/sglang.service.d/hand.conf && systemctl daemon-reload && "
                      "echo x > /etc/sglang/hand-made && systemd-run -q --unit lab-stray sleep 1000 && "
                      "(setsid sleep 1001 < /dev/null > /dev/null 2>&1 &)")
    deployed = observed(lab, "twin-1")
    assert deployed != booted and any("DFLASH" in line for line in deployed)
    changed = lab.reset("twin-1")["twin-1"]
    assert "etc/systemd/system/sglang.service" in changed and "etc/sglang/hand-made" in changed
    assert observed(lab, "twin-1") == booted  # files under the deploy's paths, units, processes
    # serving as booted: the old NEXTN service loads again, its training holds the GPU again; twin-2 never touched
    wait_for("twin-1's old service serving", lambda: health(lab, "twin-1") == "200", 60)
    assert "NEXTN" in sh(lab, "twin-1", "cat /etc/systemd/system/sglang.service").stdout
    assert lab.ssh("twin-2", "systemctl show -p MainPID --value sglang.service dflash-train.service").stdout == \
        twin["twin-2"]
    assert lab.reset("twin-1")["twin-1"] == []  # a reset host needs none
