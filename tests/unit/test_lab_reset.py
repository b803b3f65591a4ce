"""lab/reset.py without a lab: the disk put back as provisioned, over plain directories standing for an overlay
(base below, upper above, root the merged view a reset writes through); the boot's own state left; the host
commands checked by shellcheck. The lab test (tests/lab/test_lab.py) compares a reset host with a booted one."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from lab import reset


def tree(top: Path, files: dict[str, str | tuple]) -> None:
    """files: path -> text, or ("link", target), or ("dir",)."""
    for rel, what in files.items():
        p = top / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(what, tuple) and what[0] == "link":
            p.symlink_to(what[1])
        elif isinstance(what, tuple):
            p.mkdir(exist_ok=True)
        else:
            p.write_text(what)


def listing(top: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            body = os.readlink(p) if p.is_symlink() else p.read_text() if p.is_file() else None
            out[str(p.relative_to(top))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), body)
    return out


@pytest.fixture
def host(tmp_path):
    """A host as provisioned (upper = provisioned), booted (its boot's files), then changed by a deploy and a hand."""
    base, hdir = tmp_path / "base", tmp_path / "host"
    tree(base, {"etc/ssh/sshd_config": "base sshd\n", "etc/hosts": "base hosts\n", "usr/bin/tool": "base tool\n"})
    provisioned = {"etc/hosts": "lab hosts\n", "etc/systemd/system/sglang.service": "NEXTN\n",
                   "etc/systemd/system/multi-user.target.wants/sglang.service":
                       ("link", "/etc/systemd/system/sglang.service"),
                   "usr/local/lib/sglang-double/sglang/__init__.py": "double\n"}
    tree(hdir / "upper", provisioned)
    reset.keep_provisioned(hdir)
    shutil.copytree(base, hdir / "root", symlinks=True)
    tree(hdir / "root", provisioned)
    # the boot: its identity and Python's cache, in the upper layer and the merged root
    boot = {"etc/machine-id": "abc\n", "etc/ssh/ssh_host_ed25519_key": "key\n",
            "usr/local/lib/sglang-double/sglang/__pycache__/__init__.cpython-311.pyc": "pyc\n",
            "var/lib/systemd/random-seed": "seed\n"}
    for top in (hdir / "upper", hdir / "root"):
        tree(top, boot)
    expected_after_boot = listing(hdir / "root")
    # a deploy and a hand: a unit replaced, its enablement gone, files added, a base file edited, a mode changed
    changes = {"etc/systemd/system/sglang.service": "DFLASH\n", "etc/sglang/sglang.env": "X=1\n",
               "var/lib/sglang-fleet/sglang/backups/1/sglang.service": "NEXTN\n", "etc/ssh/sshd_config": "edited\n",
               "opt/sglang-fleet/engines/e/bin/python": "venv\n",
               "opt/sglang-fleet/engines/e/lib/m/__pycache__/m.cpython-311.pyc": "a venv's cache goes with it\n"}
    for top in (hdir / "upper", hdir / "root"):
        tree(top, changes)
        (top / "etc/systemd/system/multi-user.target.wants/sglang.service").unlink()
        os.chmod(top / "etc/hosts", 0o600)
        os.chmod(top / "usr/local/lib/sglang-double/sglang/__init__.py", 0o600)
    return hdir, base, expected_after_boot


def test_the_disk_is_put_back_as_provisioned_and_the_boots_own_files_stay(host):
    hdir, base, booted = host
    changed = reset.restore_files(hdir, base)
    assert listing(hdir / "root") == booted  # as after the boot: provisioned, with the boot's own files
    assert set(changed) >= {"etc/systemd/system/sglang.service", "etc/sglang", "var/lib/sglang-fleet",
                            "etc/ssh/sshd_config", "opt/sglang-fleet", "etc/hosts",
                            "etc/systemd/system/multi-user.target.wants/sglang.service",
                            "usr/local/lib/sglang-double/sglang/__init__.py"}
    # the boot's own files stay; a cache goes only with the code it caches (the deploy's venv)
    assert "opt/sglang-fleet/engines/e/lib/m/__pycache__/m.cpython-311.pyc" in changed
    assert not [rel for rel in changed if reset.boot_state(rel) and not rel.startswith("opt/sglang-fleet/")]
    assert (hdir / "root/etc/ssh/sshd_config").read_text() == "base sshd\n"  # the base's, not the deploy's
    assert (hdir / "root/etc/machine-id").read_text() == "abc\n"
    assert reset.restore_files(hdir, base) == []  # nothing more to put back


@pytest.mark.skipif(os.geteuid() != 0, reason="a whiteout is a device file: mknod needs root")  # allowed: CI is root
def test_a_base_file_the_lab_removed_is_removed_again(host):
    hdir, base, _ = host
    # the lab removed usr/bin/tool (overlayfs keeps a whiteout in the upper layer); a deploy put one back
    for top in (hdir / "provisioned", hdir / "upper"):
        os.mknod(top / "usr/bin/tool" if (top / "usr/bin").is_dir() else _mkdirs(top / "usr/bin") / "tool",
                 stat.S_IFCHR | 0o000, os.makedev(0, 0))
    (hdir / "root/usr/bin/tool").write_text("deployed\n")
    reset.restore_files(hdir, base)
    assert not os.path.lexists(hdir / "root/usr/bin/tool")


def _mkdirs(p: Path) -> Path:
    p.mkdir(parents=True, exist_ok=True)
    return p


def test_what_a_boot_writes_is_left_to_it():
    for rel in ("etc/machine-id", "etc/ssh/ssh_host_rsa_key", "var/lib/systemd/random-seed", "var/log/journal",
                "usr/local/lib/sglang-double/sglang/__pycache__/x.pyc", "etc/resolv.conf", "tmp/x"):
        assert reset.boot_state(rel), rel
    for rel in ("etc/ssh/sshd_config", "etc/machine-idx", "var/lib/sglang-fleet/sglang", "etc/systemd/system/x",
                "opt/sglang-fleet/engines/e/lib/x.py"):
        assert not reset.boot_state(rel), rel


@pytest.mark.parametrize("script", [reset.stop_command(["ssh.service", "sglang.service", "dflash-train.service"]),
                                    reset.START_COMMAND, reset.booted_units_command(), reset.OBSERVE_COMMAND])
def test_the_host_commands_pass_shellcheck(tmp_path, script):
    if not shutil.which("shellcheck"):
        pytest.skip("no shellcheck (make host-packages installs it)")  # allowed: make test installs it
    f = tmp_path / "s.sh"
    f.write_text("#!/bin/sh\n" + script + "\n")
    p = subprocess.run(["shellcheck", "-s", "sh", "-e", "SC2086", str(f)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout
