"""Put lab hosts back as they booted, without booting them again.

A lab host's disk is an overlay: its release's base image below, and above it its own upper directory, which holds
what the lab provisioned (lab/provision.py) before the first boot, what that boot wrote, and everything a deploy or
a test did since. `up` keeps two records of each host: a copy of its upper directory as provisioned (`provisioned/`,
before the boot) and the units active once it had booted (`booted.units`). A reset, with the host running:

1. stops every unit that was not active at boot, and every one of the lab's own that was (its workloads, its
   preinstalled service, a scope a oneshot started, a disk of its own): what the deploy started and what the lab
   starts, alike; the processes units left behind are killed, and what the deploy held in /run (its lock) goes;
2. puts every file of its disk back as provisioned (through the host's root, never its upper directory: the
   kernel's overlay is mounted) but those its boot made its own (BOOT_STATE: machine-id, host keys, systemd's
   state, Python's caches): a file the deploy added is removed, one it changed or removed is put back, from the
   upper copy or the base image;
3. reloads systemd and starts what the .wants directories name, as a boot does: the lab's units start again.

The base image's own units (journald, sshd, dbus, logind) run on untouched. A reset host is checked against a
freshly booted one (tests/lab/test_lab.py): its files under the deploy's paths, its units, its processes.
Only GPU hosts are reset: a gateway's keepalived and handoff leave state in the kernel (addresses, routing rules,
nftables) that no file holds, and a mirror host is no deploy's; a lab of those is booted again instead.
"""

from __future__ import annotations

import filecmp
import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

PROVISIONED = "provisioned"  # beside a host's upper directory: that directory as provisioned, before the first boot
BOOTED_UNITS = "booted.units"  # beside it: the units active once the host had booted, one a line

# What a host's first boot writes into its upper directory: its identity and systemd's own state, as a
# booted host keeps them. A reset leaves them as they are (relative to the root).
BOOT_STATE = ("etc/machine-id", "etc/ssh/ssh_host_", "etc/.pwd.lock", "etc/resolv.conf", "var/lib/systemd/",
              "var/lib/dbus/", "var/log/", "var/tmp/", "var/cache/ldconfig/", "root/.ssh/known_hosts",
              "root/.bash_history", "tmp/")
PYCACHE = "__pycache__"  # what Python writes as it imports (the SGLang double, at its first start): a cache

# The units a reset never stops: the base image's own, which run the same on a booted and a reset host, and a login
# session's (the reset runs in one).
NEVER_STOPPED = ("session-*.scope", "user@*.service", "user-runtime-dir@*.service", "init.scope", "*.slice",
                 "*.target", "*.device", "*.swap", "-.mount", "ssh.service", "systemd-*", "dbus.service",
                 "dbus.socket", "console-getty.service", "sys-*.mount", "proc-*.mount", "dev-*.mount", "run-*.mount",
                 "tmp.mount")

LIST_UNITS = "systemctl list-units --all --plain --no-legend --no-pager --state=active,activating,reloading"
RUNTIME = ("/run/sglang-fleet",)  # what the deploy keeps in /run (fleet/core/layout.py's LOCK_ROOT): empty at boot


def booted_units_command() -> str:
    """What `up` asks a host once it has booted: the units active then."""
    return f"{LIST_UNITS} | awk '{{print $1}}'"


def stop_command(booted: list[str]) -> str:
    """Step 1, run on the host: every unit active now that was not at boot or is the lab's own, stopped; the
    processes stopped units left behind, killed; the deploy's runtime state, gone."""
    base = " ".join(shlex.quote(u) for u in booted)
    never = "|".join(NEVER_STOPPED)
    return f"""set -u
booted=" {base} "
ours() {{  # a unit of the lab's own: a unit file it wrote (/etc/systemd/system) or a transient one (a scope)
    path=$(systemctl show -p FragmentPath --value -- "$1")
    case $path in /etc/systemd/system/*|/run/systemd/transient/*|"") return 0;; esac
    return 1
}}
stop=""
for unit in $({LIST_UNITS} | awk '{{print $1}}'); do
    case $unit in {never}) continue;; esac
    case $booted in *" $unit "*) ours "$unit" || continue;; esac
    stop="$stop $unit"
done
[ -z "$stop" ] || systemctl stop -- $stop
# what outlived its unit (a oneshot's KillMode=process child: a bare training job), and what a login left running
# (SSH sessions stay in ssh.service here: no pam_systemd), but for sshd itself and this session
session() {{ sed 's/.*) //' "$1/stat" 2>/dev/null | cut -d' ' -f4; }}
me=$(session /proc/$$)
for p in /proc/[0-9]*; do
    cg=$(sed -n 's|^0::||p' "$p/cgroup" 2>/dev/null) || continue
    case $cg in
        /system.slice/ssh.service)
            [ "$(session "$p")" = "$me" ] && continue
            case $(cat "$p/comm" 2>/dev/null) in sshd|sshd-session) continue;; esac;;
        /system.slice/*.service*)
            unit=${{cg#/system.slice/}}
            systemctl is-active --quiet -- "${{unit%%/*}}" && continue;;
        *) continue;;
    esac
    kill -9 "${{p#/proc/}}" 2>/dev/null
done
rm -rf {' '.join(RUNTIME)}
echo stopped:$stop"""


# Step 3: a boot starts what /etc/systemd/system's .wants directories name (the base's own, running already, and the
# lab's); `systemctl start default.target` would not, the target being active.
START_COMMAND = ("systemctl daemon-reload && systemctl reset-failed && systemctl reload-or-restart ssh.service && "
                 "for w in /etc/systemd/system/*.wants/*; do u=${w##*/}; "
                 "[ \"$(systemctl is-enabled -- \"$u\" 2>/dev/null)\" = masked ] || echo \"$u\"; done | sort -u | "
                 "xargs -r systemctl start -- && systemctl is-system-running --wait")


def boot_state(rel: str) -> bool:
    """A path (relative to the root) a boot or a run writes whatever the deploy does: a reset leaves it."""
    return PYCACHE in rel.split("/") or any(
        rel == p.rstrip("/") or rel.startswith(p if p.endswith(("/", "_")) else p + "/") for p in BOOT_STATE)


def _entries(top: Path) -> dict[str, os.stat_result]:
    """Every path below `top` (relative, '/'-separated) with its lstat."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            out[str(p.relative_to(top))] = os.lstat(p)
    return out


def _whiteout(st: os.stat_result) -> bool:
    """overlayfs' mark of a file removed from the layer below: a character device 0/0."""
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _same(a: Path, sa: os.stat_result, b: Path, sb: os.stat_result) -> bool:
    if (stat.S_IFMT(sa.st_mode), stat.S_IMODE(sa.st_mode), sa.st_uid, sa.st_gid) != \
            (stat.S_IFMT(sb.st_mode), stat.S_IMODE(sb.st_mode), sb.st_uid, sb.st_gid):
        return False
    if stat.S_ISLNK(sa.st_mode):
        return os.readlink(a) == os.readlink(b)
    if stat.S_ISREG(sa.st_mode):
        return sa.st_size == sb.st_size and filecmp.cmp(a, b, shallow=False)
    return True


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif p.exists() or p.is_symlink():
        p.unlink()


def _put(src: Path, dest: Path) -> None:
    """dest (in the host's root) made what src is: a file, a link or a directory (its entries come on their own)."""
    st = os.lstat(src)
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or not stat.S_ISDIR(st.st_mode))):
        _remove(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dest)
    elif stat.S_ISDIR(st.st_mode):
        dest.mkdir(exist_ok=True)
    else:
        shutil.copyfile(src, dest, follow_symlinks=False)
    os.lchown(dest, st.st_uid, st.st_gid)
    if not stat.S_ISLNK(st.st_mode):
        os.chmod(dest, stat.S_IMODE(st.st_mode))


def restore_files(hdir: Path, base: Path) -> list[str]:
    """Step 2: the host's root (hdir/root, its overlay mounted) made again what it was as provisioned, but for
    BOOT_STATE. Reads its upper directory (never writes it) and the provisioned copy. Returns what it changed."""
    root, upper, provisioned = hdir / "root", hdir / "upper", hdir / PROVISIONED
    now, then = _entries(upper), _entries(provisioned)

    def left(rel: str) -> bool:  # the boot's (or a run's) own: a cache only beside code that stays
        if not any(boot_state(p) for p in (*_parents(rel), rel)):
            return False
        if PYCACHE in rel.split("/"):
            package = rel.split("/" + PYCACHE)[0]
            return package in then or os.path.lexists(base / package)
        return True

    changed = []
    # what the upper layer has that it had not as provisioned, or has otherwise: the base's (or nothing) again
    for rel in sorted(set(now) - set(then), key=lambda r: -r.count("/")):  # deepest first
        if left(rel):
            continue
        below = base / rel
        dest = root / rel
        if os.path.lexists(below):
            if not (os.path.lexists(dest) and _same(below, os.lstat(below), dest, os.lstat(dest))):
                _put(below, dest)
                changed.append(rel)
        elif dest.is_dir() and not dest.is_symlink():
            try:  # its entries went before it; one that stays (the boot's) keeps it
                dest.rmdir()
                changed.append(rel)
            except OSError:
                pass
        elif os.path.lexists(dest):
            dest.unlink()
            changed.append(rel)
    # what was provisioned: as provisioned (a whiteout: the base's file removed again)
    for rel in sorted(then, key=lambda r: r.count("/")):  # parents first
        if left(rel):
            continue
        src, dest, st = provisioned / rel, root / rel, then[rel]
        if _whiteout(st):
            if os.path.lexists(dest):
                _remove(dest)
                changed.append(rel)
            continue
        if os.path.lexists(dest) and _same(src, st, dest, os.lstat(dest)):
            continue
        _put(src, dest)
        changed.append(rel)
    return changed


def _parents(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def keep_provisioned(hdir: Path) -> None:
    """At `up`, before the host's first boot: its upper directory as provisioned, copied beside it."""
    dest = hdir / PROVISIONED
    if dest.exists():
        shutil.rmtree(dest)
    # cp -a: overlayfs' whiteouts are device files, which copytree would try to read
    subprocess.run(["cp", "-a", str(hdir / "upper"), str(dest)], check=True, capture_output=True)


# What a test compares of a reset host and a freshly booted one (tests/lab/test_lab.py): the deploy's paths
# (fleet/core/layout.py), each file's kind, mode, owner and content; every unit's state and every unit file's; every
# process's command line (but the session asking).
DEPLOY_PATHS = ("/etc/systemd/system", "/etc/sglang", "/etc/smg", "/etc/keepalived", "/var/lib/sglang-fleet",
                "/var/cache/sglang-fleet", "/opt/sglang-fleet", "/opt/smg", "/run/sglang-fleet")
OBSERVE_COMMAND = f"""for p in {' '.join(DEPLOY_PATHS)}; do
    [ -e "$p" ] || continue
    find "$p" -printf 'file %p %y %m %u:%g ' \\( -type f -exec sh -c 'sha256sum < "$1" | cut -c1-16' _ {{}} \\; \\
        -o -printf '%l\\n' \\)
done
{LIST_UNITS.replace('--state=active,activating,reloading', '')} | awk '{{print "unit", $1, $3, $4}}'
systemctl list-unit-files --no-legend --no-pager | awk '{{print "unit-file", $1, $2}}'
ps -eo args= | sed -e '/^sshd: /d' -e '/^-bash/d' -e '/^bash -c/d' -e '/^ps -eo/d' -e '/^sort$/d' -e '/^sed -e/d' \
    -e 's/^/process /' | sort
"""


def observe(text: str, name: str) -> list[str]:
    """The lines of OBSERVE_COMMAND's answer, the host's own name taken out (two hosts compared by what they run)."""
    return sorted(line.replace(name, "HOST") for line in text.splitlines() if line.strip())
