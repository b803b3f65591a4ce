"""The lab's base root filesystems: debootstrap once per Debian release, cache as a zstd
tarball, unpack once.

Everything lives outside the checkout, in ${SGLANG_FLEET_CACHE:-~/.cache/sglang-fleet}, one
image per release a lab file names (a host's `debian` key):
  <image>.tar.zst    the prepared base (kept; rebuilt only when missing)
  <image>/           the unpacked tree, the overlay lowerdir of every host of that release
  lab-base.lock      flock held while building/unpacking
<image> is IMAGES[suite].name: lab-base-4 (bookworm), lab-base-trixie-2 (trixie). Bump a
release's number whenever the recipe below changes for it.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Image:
    name: str  # cache file stem
    systemd: int  # the release's systemd major version (a stable release keeps it)
    python: str  # its python3's X.Y: what the controller's pip installs for (a mirror host's pypiserver)
    about: str


# bookworm's image goes on with the numbering it had before trixie joined (lab-base-N).
IMAGES = {
    "bookworm": Image("lab-base-4", 252, "3.11", "Debian 12, systemd 252, python 3.11"),
    "trixie": Image("lab-base-trixie-2", 257, "3.13", "Debian 13, systemd 257, python 3.13"),
}
DEFAULT_SUITE = "bookworm"
# python3-yaml: the SGLang double reads --config files with PyYAML, as SGLang does; sudo: hosts
# whose lab entry has an ssh_user log that user in, who becomes root with sudo (the cloud setup);
# git: a mirror host's Hugging Face mirror (olah) reads its model repositories with GitPython, which runs it.
PACKAGES = ("systemd,systemd-sysv,dbus,openssh-server,python3,python3-yaml,sudo,iproute2,curl,procps,ca-certificates,"
            "git")


def cache_dir() -> Path:
    env = os.environ.get("SGLANG_FLEET_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "sglang-fleet"


def base_tarball(suite: str) -> Path:
    return cache_dir() / f"{IMAGES[suite].name}.tar.zst"


def base_root(suite: str) -> Path:
    return cache_dir() / IMAGES[suite].name


@contextmanager
def flock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _sources_files() -> list[Path]:
    files = [Path("/etc/apt/sources.list")]
    d = Path("/etc/apt/sources.list.d")
    if d.is_dir():
        files += sorted(d.glob("*.sources")) + sorted(d.glob("*.list"))
    return [f for f in files if f.is_file()]


def _deb_sources() -> list[tuple[str, list[str]]]:
    """(URI, suites) of every enabled `deb` source in /etc/apt/sources.list*, in file order."""
    found: list[tuple[str, list[str]]] = []
    for f in _sources_files():
        text = f.read_text(errors="replace")
        if f.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.strip()
                if "deb" not in fields.get("types", "").split():
                    continue
                if "enabled" in fields and fields["enabled"].lower() == "no":
                    continue
                uris = fields.get("uris", "").split()
                if uris:
                    found.append((uris[0], fields.get("suites", "").split()))
        else:
            for line in text.splitlines():
                parts = line.split("#", 1)[0].split()
                if not parts or parts[0] != "deb":
                    continue
                parts = [p for p in parts[1:] if not p.startswith("[")]
                if len(parts) >= 2:
                    found.append((parts[0], [parts[1]]))
    return found


def debian_mirror(suite: str) -> str:
    """The machine's own Debian mirror for `suite` (main archive, not security/updates). A
    machine's sources name its own release only: for another release the lab builds, the
    main archive of one it does name serves (a Debian mirror carries every release)."""
    sources = _deb_sources()
    for wanted in [suite] + [s for s in IMAGES if s != suite]:
        for uri, suites in sources:
            if wanted in suites:
                return uri
    named = sorted({s for _, suites in sources for s in suites})
    raise SystemExit(
        f"lab: {', '.join(str(f) for f in _sources_files()) or '/etc/apt/sources.list*'}: no Debian main archive "
        f"to build the '{suite}' base image from; "
        f"expected a `deb` source of suite {' or '.join(repr(s) for s in IMAGES)}, found "
        f"{', '.join(repr(s) for s in named) or 'no deb source'}"
    )


def _log(msg: str) -> None:
    print(f"lab: {msg}", flush=True)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def prepare(root: Path, suite: str) -> None:
    """Make a freshly debootstrapped tree a reusable image (reference: lab-hosts.md)."""
    # Identity comes at first boot: empty machine-id, no hostname, no host keys.
    (root / "etc/machine-id").write_text("")
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
        dbus_id.symlink_to("/etc/machine-id")
    for p in [root / "etc/hostname", *(root / "etc/ssh").glob("ssh_host_*")]:
        p.unlink(missing_ok=True)
    _write(
        root / "etc/systemd/system/ssh.service.d/lab-hostkeys.conf",
        "[Service]\n# per host, at first boot\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\n"
        "ExecStartPre=/usr/sbin/sshd -t\n",
    )
    _write(
        root / "etc/ssh/sshd_config.d/lab.conf",
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUseDNS no\n",
    )
    # No timers (apt-daily, dpkg-db-backup, ...): a throwaway host must stay quiet.
    for wants in root.glob("etc/systemd/system/*.wants"):
        for link in wants.glob("*.timer"):
            link.unlink()
    for name in ("timers.target.wants",):
        d = root / "etc/systemd/system" / name
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    # Nothing in a lab host needs these in a container; masking keeps it "running".
    for unit in ("systemd-networkd-wait-online.service", "getty@tty1.service", "apt-daily.timer",
                 "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
                 "fstrim.timer", "systemd-tmpfiles-clean.timer"):
        link = root / "etc/systemd/system" / unit
        if not link.exists() and not link.is_symlink():
            link.symlink_to("/dev/null")
    _write(root / "etc/systemd/journald.conf.d/lab.conf", "[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n")
    # apt caches: no registry is reachable from a lab host anyway.
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    for p in (root / "var/lib/apt/lists").glob("*"):
        if p.is_file():
            p.unlink()
    for p in (root / "var/cache/apt").glob("*.bin"):
        p.unlink()
    _write(root / "etc/lab-base-version", f"{IMAGES[suite].name}\n")


def build_tarball(suite: str) -> None:
    cache, image = cache_dir(), IMAGES[suite]
    tmp = cache / f"{image.name}.build"
    if tmp.exists():
        shutil.rmtree(tmp)
    mirror = debian_mirror(suite)
    _log(f"building base image {image.name} ({image.about}) with debootstrap from {mirror} (about a minute)")
    t0 = time.monotonic()
    proc = subprocess.run(
        ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", suite, str(tmp), mirror],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    if proc.returncode:
        sys.stderr.write(proc.stdout[-4000:])
        shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit(f"lab: debootstrap of {suite} from {mirror} failed (exit {proc.returncode})")
    prepare(tmp, suite)
    part = base_tarball(suite).with_suffix(".zst.part")
    subprocess.run(
        ["tar", "--numeric-owner", "--xattrs", "-C", str(tmp), "-I", "zstd -T0 -10", "-cf", str(part), "."],
        check=True,
    )
    part.rename(base_tarball(suite))
    shutil.rmtree(tmp)
    _log(f"base image built in {time.monotonic() - t0:.0f} s: {base_tarball(suite)}")


def ensure_base(suite: str) -> Path:
    """Return the unpacked base root of `suite`, building/unpacking it once (under a lock)."""
    root = base_root(suite)
    if (root / "etc/lab-base-version").is_file():
        return root
    cache = cache_dir()
    with flock(cache / "lab-base.lock"):
        if (root / "etc/lab-base-version").is_file():
            return root
        if not base_tarball(suite).is_file():
            build_tarball(suite)
        tmp = cache / f"{IMAGES[suite].name}.unpack"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(tmp), "-I", "zstd", "-xf", str(base_tarball(suite))],
            check=True,
        )
        if root.exists():
            shutil.rmtree(root)
        tmp.rename(root)
    return root


if __name__ == "__main__":
    t = time.monotonic()
    print(ensure_base(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_SUITE), f"{time.monotonic() - t:.1f} s")
