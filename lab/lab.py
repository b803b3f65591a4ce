"""The lab: throwaway real hosts (systemd-nspawn, real systemd + sshd + journald), one per
network namespace on a private bridge, described by a TOML lab file.

    .venv/bin/python -m lab.lab up [--lab lab/default.toml]
    .venv/bin/python -m lab.lab status [--lab FILE]
    .venv/bin/python -m lab.lab link HOST down|up [--lab FILE]     # a link that drops silently, and its return
    .venv/bin/python -m lab.lab cut HOST off|on [--from HOST] [--lab FILE]  # cut off, its carrier kept; healed
    .venv/bin/python -m lab.lab throttle HOST KBIT|off [--lab FILE]  # a slow link out of a host (a mirror's)
    .venv/bin/python -m lab.lab down [--lab FILE | --all]

Labs of different names run side by side: each has its own state directory, .lab/<name>/ (git-ignored):
the lab file used (lab.toml + state.json), one dir a host (overlay upper/work/root, nspawn.pid,
console.log), its inventory.py for pyinfra and its lock. The SSH key (.lab/id_ed25519) is every lab's;
.lab/inventory.py links to the inventory of the lab brought up last. `up` of another lab file under a
running lab's name refuses (run `down` first); `up` of the running one just checks it and rewrites the
inventory. Traffic goes only to the labs' own addresses.

Facts this follows were measured on this kind of machine: shared/reference/lab-hosts.md.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from lab import base, hf, inotify, labfile, mirror, provision, realsglang, reset, wheels  # noqa: E402
from lab.labfile import LabFileError  # noqa: E402
from tasks.common import WheelError  # noqa: E402

STATE = REPO / ".lab"  # every lab's state directory, by its name, and the key they share
DEFAULT_LAB = REPO / "lab" / "default.toml"
GROUP_DATA = REPO / "group_data"
KEY = STATE / "id_ed25519"
INVENTORY = STATE / "inventory.py"  # a link to the inventory of the lab brought up last
NET_LOCK = STATE / ".net.lock"  # held while a lab checks its subnet and makes its bridge: two ups never both pass
CGROUP = Path("/sys/fs/cgroup")
NSPAWN_RUN = Path("/run/systemd/nspawn")
RUN_NETNS = Path("/run/netns")
BOOT_TIMEOUT_S = 90
STOP_TIMEOUT_S = 10
INDEX_TIMEOUT_S = 30  # a mirror host's index answering, once its systemd runs
HF_TIMEOUT_S = 60  # its Hugging Face mirror answering (olah imports FastAPI, pydantic and huggingface_hub first)


class LabError(RuntimeError):
    """The lab cannot do what was asked; the message says why and what to do."""


def log(msg: str) -> None:
    print(f"lab: {msg}", flush=True)


# --- small helpers ----------------------------------------------------------------------

def run(*argv: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode:
        raise LabError(f"{' '.join(argv)} failed (exit {p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
    return p


def ssh_argv(ip: str, *command: str, timeout: int = 3) -> list[str]:
    return [
        "ssh", "-i", str(KEY), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        "-o", "BatchMode=yes", "-o", "LogLevel=ERROR", "-o", f"ConnectTimeout={timeout}",
        "-o", "IdentitiesOnly=yes", "-F", "/dev/null", f"root@{ip}", *command,
    ]


def ssh(ip: str, *command: str, timeout: float = 15) -> subprocess.CompletedProcess:
    """Run a command on a lab host (only lab addresses ever reach here)."""
    _check_lab_address(ip)
    try:
        return subprocess.run(ssh_argv(ip, *command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([], 255, "", "timed out")


def _check_lab_address(ip: str) -> None:
    if not any(ipaddress.ip_address(ip) in ipaddress.ip_network(st["subnet"]) for st in _states()):
        raise LabError(f"{ip} is not a lab address")


@dataclass(frozen=True)
class Where:
    """Where lab `name` keeps its state: .lab/<name>/, its own, so that labs of other names run beside it."""
    name: str

    @property
    def dir(self) -> Path:
        return STATE / self.name

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def inventory(self) -> Path:
        return self.dir / "inventory.py"

    @property
    def hosts(self) -> Path:
        return self.dir / "hosts"

    @property
    def lock(self) -> Path:
        return self.dir / ".lock"

    @property
    def session(self) -> Path:  # held by the test process using the lab for its whole run (tests/lab/conftest.py)
        return self.dir / ".session"


def machine(lab_name: str, host: str) -> str:
    """A host's nspawn machine name: hosts of two labs may share a name, their machines may not (nspawn keeps
    /run/systemd/nspawn/propagate/<machine>)."""
    return f"{lab_name}-{host}"


def _read_state(name: str) -> dict[str, Any] | None:
    try:
        return json.loads(Where(name).state_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _states() -> list[dict[str, Any]]:
    """The state of every lab up (or half up, or half down) on this checkout, by name."""
    if not STATE.is_dir():
        return []
    return [st for d in sorted(STATE.iterdir()) if d.is_dir() and (st := _read_state(d.name))]


def _write_state(st: dict[str, Any]) -> None:
    where = Where(st["lab_name"])
    where.dir.mkdir(parents=True, exist_ok=True)
    tmp = where.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(st, indent=2) + "\n")
    tmp.rename(where.state_file)


def _pid_of(host: dict[str, Any]) -> int | None:
    try:
        return int((Path(host["dir"]) / "nspawn.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _alive_nspawn(pid: int | None, machine: str) -> bool:
    """True if pid is a live systemd-nspawn for `machine` (guards against pid reuse)."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, IndexError):  # gone, or going (ESRCH)
        return False
    return bool(argv) and argv[0].endswith(b"systemd-nspawn") and machine.encode() in argv


def _cgroup_roots() -> list[Path]:
    """The hierarchies nspawn writes into: name=systemd + unified (hybrid) or the one cgroup2."""
    if (CGROUP / "cgroup.controllers").exists():
        return [CGROUP]
    return [p for p in (CGROUP / "systemd", CGROUP / "unified") if p.is_dir()]


def _key() -> str:
    """Every lab's SSH key, made by the first `up` (two labs' ups at once make one)."""
    STATE.mkdir(exist_ok=True)
    with base.flock(STATE / ".key.lock"):
        if not KEY.exists():
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sglang-fleet-lab", "-f", str(KEY))
    return KEY.with_suffix(".pub").read_text()


def _groups() -> tuple[dict, dict, list[str]]:
    """GPU class specs, their group data, and the gateway and monitoring groups (such a host's group)."""
    from fleet.spec.load import gateway_files, load_class_specs, load_group_data, monitoring_files

    return load_class_specs(GROUP_DATA), load_group_data(GROUP_DATA), sorted(
        [*gateway_files(GROUP_DATA), *monitoring_files(GROUP_DATA)])


def load_lab(path: Path) -> labfile.LabFile:
    """Parse and validate a lab file against group_data/ (also the preinstalled overrides)."""
    from pydantic import ValidationError

    from fleet.spec.load import explain

    specs, data, gateways = _groups()
    lab = labfile.parse(Path(path), sorted(specs), gateways)
    problems = []
    for h in lab.hosts:
        if h.entry.get("preinstalled") is not None:
            try:
                provision.preinstalled_spec(data[h.group], h.entry["preinstalled"])
            except ValidationError as e:
                problems += [p.replace("(top level)", "preinstalled") for p in
                             explain(f"{lab.path}: host {h.name!r}: preinstalled", e)]
    if problems:
        raise LabFileError(problems)
    return lab


# --- network ------------------------------------------------------------------------------

def _bridge(lab_name: str) -> str:
    return f"{lab_name}0"


def _netns(lab_name: str, i: int) -> str:
    return f"{lab_name}-h{i}"


def _veth(lab_name: str, i: int) -> str:
    return f"{lab_name}v{i}"


def check_subnet(subnet: ipaddress.IPv4Network, own_dev: str | None = None) -> None:
    """Refuse a subnet that overlaps any route or address already on this machine."""
    clashes = []
    routes = json.loads(run("ip", "-j", "-4", "route", "show", "table", "all").stdout or "[]")
    for r in routes:
        dst = r.get("dst", "")
        if dst in ("default", "") or r.get("dev") == own_dev:
            continue
        try:
            net = ipaddress.ip_network(dst, strict=False)
        except ValueError:
            continue
        if net.overlaps(subnet):
            clashes.append(f"route {dst} dev {r.get('dev', '?')}")
    addrs = json.loads(run("ip", "-j", "-4", "addr").stdout or "[]")
    for link in addrs:
        if link.get("ifname") == own_dev:
            continue
        for a in link.get("addr_info", []):
            net = ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False)
            if net.overlaps(subnet):
                clashes.append(f"address {a['local']}/{a['prefixlen']} on {link['ifname']}")
    if clashes:
        raise LabError(
            f"lab subnet {subnet} overlaps what this machine already uses: {'; '.join(sorted(set(clashes)))}. "
            "Set another private subnet in the lab file: [lab] subnet = \"10.x.y.0/24\""
        )


def _link_exists(name: str) -> bool:
    return run("ip", "link", "show", "dev", name, check=False).returncode == 0


def _remove_link(name: str) -> None:
    """Delete a link and see it gone (a netns deleted takes its veth end with it a moment later); a warning
    naming it where it stays: the next up would refuse its subnet."""
    why = ""
    for _ in range(50):
        if not _link_exists(name):
            return
        why = run("ip", "link", "del", name, check=False).stderr.strip()
        time.sleep(0.1)
    log(f"warning: {name} still there after `ip link del`: {why}")


def _netns_pids(name: str) -> list[str]:
    return run("ip", "netns", "pids", name, check=False).stdout.split()


def _clear_killed(lab: labfile.LabFile, leftovers: list[str]) -> None:
    """A lab's links and namespaces with no state here: a lab of this name killed with its state elsewhere
    (another checkout, a machine restarted under a session) leaves them and the kernel keeps them, so a later
    up of the name would be refused for good. With no process left in any of them nothing runs there: they are
    removed. One where a process lives is a running lab: refused."""
    names = [_netns(lab.name, i) for i in range(len(lab.hosts))]
    live = {n: pids for n in names if (RUN_NETNS / n).exists() and (pids := _netns_pids(n))}
    if live:
        raise LabError(
            f"found {', '.join(leftovers)} but no lab state in {Where(lab.name).dir}, and processes still run in "
            f"{', '.join(n + ' (pids ' + ' '.join(p[:5]) + ')' for n, p in live.items())}: a lab of the same [lab] name "
            "from another checkout? Bring it down there, or give this lab file another [lab] name")
    log(f"removing what a killed lab {lab.name!r} left (no process runs in it): {', '.join(leftovers)}")
    for n in names:
        if (RUN_NETNS / n).exists():
            run("ip", "netns", "del", n, check=False)
    for name in [_veth(lab.name, i) for i in range(len(lab.hosts))] + [_bridge(lab.name)]:
        _remove_link(name)


def _disable_ipv6(dev: str) -> None:
    p = Path(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6")
    if p.exists():
        p.write_text("1\n")


# --- up -----------------------------------------------------------------------------------

@dataclass
class LabHost:
    name: str
    ip: str
    group: str | None  # None: a mirror host
    entry: dict[str, Any]
    pid: int | None = None
    lab: str = ""  # the name of its lab

    @property
    def rec(self) -> dict[str, Any]:
        """What _pid_of and _alive_nspawn read of it, as the lab's state records a host."""
        return {"name": self.name, "machine": machine(self.lab, self.name), "dir": str(Where(self.lab).hosts / self.name)}


@dataclass
class Lab:
    name: str
    lab_file: Path
    subnet: str
    hosts: list[LabHost] = field(default_factory=list)
    key: Path = KEY

    @property
    def inventory(self) -> Path:
        return Where(self.name).inventory

    def host(self, name: str) -> LabHost:
        return next(h for h in self.hosts if h.name == name)

    def link(self, name: str, up: bool) -> float:
        """Drop host `name`'s link silently (up=False) or bring it back: see link()."""
        return link(name, up, self.name)

    def cut(self, name: str, off: bool, peer: str | None = None) -> float:
        """Cut host `name` off (from `peer` only, where named) with its carrier kept (off=True) or heal it: see
        cut()."""
        return cut(name, off, self.name, peer)

    def power(self, name: str, on: bool) -> float:
        """Cut host `name`'s power (on=False) or boot it again: see power()."""
        return power(name, on, self.name)

    def reset(self, *names: str) -> dict[str, list[str]]:
        """These GPU hosts (none named: every one) back as they booted, without a boot: reset_hosts()."""
        return reset_hosts(self.name, list(names) or None)

    def ssh(self, name: str, *command: str, timeout: float = 15) -> subprocess.CompletedProcess:
        return ssh(self.host(name).ip, *command, timeout=timeout)

    def mirror(self, name: str = "mirror-1", what: str = "package index") -> LabHost:
        h = next((h for h in self.hosts if h.name == name), None)
        if h is None or h.entry["role"] != "mirror":
            mirrors = [m.name for m in self.hosts if m.entry["role"] == "mirror"]
            raise LabError(f"{name} is {'a ' + h.entry['role'] + ' host' if h else 'no host'} of lab {self.name!r}, "
                           f"not a mirror host: it serves no {what} (mirror hosts: {', '.join(mirrors) or 'none'})")
        return h

    def index_url(self, name: str = "mirror-1") -> str:
        """The package index a mirror host serves (pip's --index-url), e.g. http://10.203.0.13:8080/simple/."""
        return _index_url(self.mirror(name).ip)

    def hf_endpoint(self, name: str = "mirror-1") -> str:
        """The Hugging Face mirror a mirror host serves (HF_ENDPOINT), e.g. http://10.203.0.13:8090."""
        return _hf_endpoint(self.mirror(name, "Hugging Face mirror").ip)

    def hf_revisions(self, repo: str) -> list[str]:
        """The commit shas of `repo` (lab/hf.py: hf.TARGET "lab/Qwen3-8B", hf.DRAFT "lab/Qwen3-8B-DFlash") that
        every mirror host serves, oldest first."""
        revisions = hf.revisions()
        if repo not in revisions:
            raise LabError(f"the lab's Hugging Face mirror has no repository {repo!r}; it has {', '.join(revisions)}")
        return revisions[repo]

    def throttle(self, name: str = "mirror-1", kbit: int | None = None) -> None:
        """Slow what leaves host `name` to `kbit` kbit/s (None: full speed again): see throttle()."""
        throttle(name, kbit, self.name)


def _index_url(ip: str) -> str:
    return f"http://{ip}:{mirror.INDEX_PORT}/simple/"


def _hf_endpoint(ip: str) -> str:
    return f"http://{ip}:{mirror.HF_PORT}"


def _lab_from_state(st: dict[str, Any]) -> Lab:
    return Lab(
        name=st["lab_name"], lab_file=Path(st["lab_file"]), subnet=st["subnet"],
        hosts=[_with_pid(LabHost(h["name"], h["ip"], h["group"], h["entry"], lab=st["lab_name"])) for h in st["hosts"]],
    )


def _with_pid(host: LabHost) -> LabHost:
    host.pid = _pid_of(host.rec)
    return host


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_inventory(st: dict[str, Any]) -> Path:
    """The lab's GPU and gateway hosts, one group per `group`; never a mirror host (no deploy touches it)."""
    groups: dict[str, list[dict]] = {}
    for h in st["hosts"]:
        if h["entry"]["role"] != "mirror":
            groups.setdefault(h["group"], []).append(h)
    lines = [
        '"""pyinfra inventory of the running lab (written by `python -m lab.lab up`; do not edit)."""',
        "",
        f"_lab_file = {st['lab_file']!r}",
        f"_lab_name = {st['lab_name']!r}",
        "",
    ]
    for group, hosts in groups.items():
        lines.append(f"{group} = [")
        for h in hosts:
            user = h["entry"].get("ssh_user", "root")
            data = {
                "ssh_hostname": h["ip"], "ssh_user": user, "ssh_key": str(KEY),
                "ssh_strict_host_key_checking": "no", "ssh_known_hosts_file": "/dev/null",
                **({"_sudo": True} if user != "root" else {}),
            }
            lines.append(f"    ({h['name']!r}, {data!r}),")
        lines.append("]")
        lines.append("")
    lines += [
        "# Validate group_data and this file before pyinfra connects to anything (as inventory.py does).",
        "from tasks.inventory import checked  # noqa: E402",
        "",
        "checked(globals())",
        "",
    ]
    where = Where(st["lab_name"])
    where.dir.mkdir(parents=True, exist_ok=True)
    tmp = where.inventory.with_suffix(".tmp")
    tmp.write_text("\n".join(lines))
    tmp.rename(where.inventory)
    return where.inventory


def _point_last_inventory(where: Where) -> None:
    """.lab/inventory.py: the inventory of the lab brought up last (the README's `make deploy INVENTORY=...`)."""
    tmp = INVENTORY.with_name(f".inventory-{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(where.inventory.relative_to(STATE))
    tmp.rename(INVENTORY)


def _lock(name: str):
    Where(name).dir.mkdir(parents=True, exist_ok=True)
    return base.flock(Where(name).lock)


class Session:
    """An exclusive claim on lab `name` for a whole test run (or a bench): another test process wanting that
    lab waits for it, and the CLI's up/down of that lab refuse while it is held. Labs of other names are
    not held: they run beside it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.fh = None

    def acquire(self, wait_s: float = 1800) -> None:
        import fcntl

        where = Where(self.name)
        where.dir.mkdir(parents=True, exist_ok=True)
        self.fh = open(where.session, "a+")
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told:
                    log(f"waiting for the session of pid {_session_holder(self.name) or '?'} on lab "
                        f"{self.name!r} to end")
                    told = True
                if time.monotonic() > deadline:
                    raise LabError(f"another test session holds lab {self.name!r}") from None
                time.sleep(1)
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(f"{os.getpid()}\n")
        self.fh.flush()

    def release(self) -> None:
        if self.fh:
            self.fh.close()
            self.fh = None

    def __enter__(self) -> Session:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@contextmanager
def claimed(*names: str):
    """Sessions on labs `names` for the whole block (a bench's run): a test process wanting one waits."""
    sessions = [Session(name) for name in names]
    try:
        for session in sessions:
            session.acquire()
        yield
    finally:
        for session in sessions:
            session.release()


def _session_holder(name: str) -> int | None:
    """PID of the test session holding lab `name`, if one does."""
    import fcntl

    if not Where(name).session.exists():
        return None
    with open(Where(name).session, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            text = fh.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


def up(lab_file: Path | str = DEFAULT_LAB) -> Lab:
    """Bring the lab in `lab_file` up (or find it up already). Returns the running Lab. A lab of another name
    may run meanwhile: each keeps its own state (.lab/<name>/), network and machines."""
    lab_file = Path(lab_file).resolve()
    lab = load_lab(lab_file)
    where = Where(lab.name)
    with _lock(lab.name):
        st = _read_state(lab.name)
        if st:
            if st["lab_file"] != str(lab_file) or st["lab_sha256"] != _sha(lab_file):
                what = "another lab file" if st["lab_file"] != str(lab_file) else "an older version of this file"
                raise LabError(
                    f"lab {st['lab_name']!r} is up from {st['lab_file']} ({what}); run "
                    f"`python -m lab.lab down --lab {st['lab_file']}` first"
                )
            dead = [h["name"] for h in st["hosts"] if not _alive_nspawn(_pid_of(h), h["machine"])]
            if not dead:
                running = _lab_from_state(st)
                _wait_ready(running, quiet_ok=True)
                _wait_index(running, quiet_ok=True)
                write_inventory(st)
                _point_last_inventory(where)
                log(f"lab {st['lab_name']!r} already up ({len(st['hosts'])} hosts); inventory rewritten: "
                    f"{where.inventory.relative_to(REPO)}")
                return running
            log(f"hosts {', '.join(dead)} are not running: tearing the lab down and starting again")
            _down_locked(st)
        return _up_locked(lab)


def _up_locked(lab: labfile.LabFile) -> Lab:
    t0 = time.monotonic()
    where = Where(lab.name)
    bridge = _bridge(lab.name)
    leftovers = [n for n in [bridge] + [_veth(lab.name, i) for i in range(len(lab.hosts))] if _link_exists(n)]
    leftovers += [str(RUN_NETNS / _netns(lab.name, i)) for i in range(len(lab.hosts))
                  if (RUN_NETNS / _netns(lab.name, i)).exists()]
    if leftovers:
        _clear_killed(lab, leftovers)
    mounted = [str(where.hosts / h.name / "root") for h in lab.hosts if _is_mountpoint(where.hosts / h.name / "root")]
    if mounted:
        raise LabError(f"found {', '.join(mounted)} still mounted but no lab state in {where.dir} (an earlier down "
                       "could not unmount it): `umount` it by hand, then up again")
    inotify.ensure(len(lab.hosts) + sum(len(st["hosts"]) for st in _states() if st["lab_name"] != lab.name), log)
    specs, group_data, _ = _groups()
    # only the releases this lab's hosts name are built (a first trixie host costs about a minute)
    bases = {suite: base.ensure_base(suite) for suite in sorted({h.entry["debian"] for h in lab.hosts})}
    if any(h.entry["role"] == "mirror" for h in lab.hosts):
        mirror.download()  # the first time: before anything of the lab is made
        hf.cached()  # the Hugging Face repositories, built the first time (a few seconds)
    # the real SGLang server's venvs and tiny model, built the first time (minutes)
    real_model = realsglang.ensure() if any(h.entry.get("real_sglang") for h in lab.hosts) else None
    pubkey = _key()
    st: dict[str, Any] = {
        "lab_name": lab.name,
        "lab_file": str(lab.path),
        "lab_sha256": _sha(lab.path),
        "subnet": str(lab.subnet),
        "bridge": bridge,
        "created": {
            "run_netns": not RUN_NETNS.exists(),
            "run_netns_mount": not _is_mountpoint(RUN_NETNS),
            "nspawn_run": not NSPAWN_RUN.exists(),
        },
        "hosts": [],
    }
    shutil.copyfile(lab.path, where.dir / "lab.toml")
    _write_state(st)
    try:
        with base.flock(NET_LOCK):  # another lab's up checks its subnet against this bridge, not before it
            check_subnet(lab.subnet)
            run("ip", "link", "add", bridge, "type", "bridge")
            _disable_ipv6(bridge)
            run("ip", "addr", "add", f"{lab.gateway}/{lab.subnet.prefixlen}", "dev", bridge)
            run("ip", "link", "set", bridge, "up")
        for i, h in enumerate(lab.hosts):
            rec = {"name": h.name, "ip": h.ip, "group": h.group, "entry": h.entry, "machine": machine(lab.name, h.name),
                   "dir": str(where.hosts / h.name), "netns": _netns(lab.name, i), "veth": _veth(lab.name, i),
                   "base": str(bases[h.entry["debian"]])}
            st["hosts"].append(rec)
            _write_state(st)
            # a gateway host's group is no GPU class, a mirror host has none: no spec, no class data
            _make_host(lab, rec, specs.get(h.group), group_data.get(h.group), pubkey, real_model)
        for rec in st["hosts"]:
            _boot(lab.name, rec)
        running = _lab_from_state(st)
        recs = {rec["name"]: rec for rec in st["hosts"]}
        _wait_ready(running, boot_again=lambda name: _boot(lab.name, recs[name]))
        _wait_index(running)
        _record_booted(running)
    except BaseException:
        log("up failed: tearing down what was made")
        _down_locked(_read_state(lab.name) or st)
        raise
    write_inventory(st)
    _point_last_inventory(where)
    log(f"lab {lab.name!r} up: {len(lab.hosts)} hosts in {time.monotonic() - t0:.1f} s; "
        f"inventory: {where.inventory.relative_to(REPO)}")
    return _lab_from_state(st)


def _is_mountpoint(p: Path) -> bool:
    # mountinfo names the resolved path: a worktree's .lab is a symlink to the shared one
    target = os.path.realpath(p)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def _make_host(lab: labfile.LabFile, rec: dict, spec, group_data: dict | None, pubkey: str,
               real_model: Path | None = None) -> None:
    """The host's overlay (its release's base below, its own upper dir), files and network."""
    hdir = Path(rec["dir"])
    if hdir.exists():
        shutil.rmtree(hdir)
    for d in ("upper", "work", "root"):
        (hdir / d).mkdir(parents=True)
    run("mount", "-t", "overlay", f"lab-{rec['machine']}", "-o",
        f"lowerdir={rec['base']},upperdir={hdir / 'upper'},workdir={hdir / 'work'}", str(hdir / "root"))
    for w in provision.provision(hdir / "root", rec["entry"], spec, group_data, pubkey, rec["ip"], lab.name,
                                 real_model):
        log(f"warning: {w}")
    if rec["entry"]["role"] == "gpu":  # a reset puts the host back as provisioned (lab/reset.py)
        reset.keep_provisioned(hdir)
    _network(lab.name, rec, lab.subnet.prefixlen)


def _network(lab_name: str, rec: dict, prefixlen: int) -> None:
    """The host's network namespace, its veth into the bridge, its address: made afresh, as a box boots."""
    ns, veth = rec["netns"], rec["veth"]
    run("ip", "netns", "add", ns)
    # the box's NIC keeps its address across power cycles, as a real one: a new one each boot left every neighbour
    # sending to the old one until its ARP entry failed (SSH back after ~30 s instead of ~1 s)
    mac = "02:00:" + ":".join(f"{int(o):02x}" for o in rec["ip"].split("."))
    run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "address", mac, "netns", ns)
    _disable_ipv6(veth)
    run("ip", "link", "set", veth, "master", lab_name + "0", "up")
    run("ip", "-n", ns, "addr", "add", f"{rec['ip']}/{prefixlen}", "dev", "eth0")
    run("ip", "-n", ns, "link", "set", "lo", "up")
    run("ip", "-n", ns, "link", "set", "eth0", "up")


BOOT_SCRIPT = r"""
pidfile=$1; shift
echo $$ > "$pidfile"
for cg in $CGROUP_PROCS; do echo $$ > "$cg"; done
exec "$@"
"""


def _boot(lab_name: str, rec: dict) -> None:
    """Start one host's nspawn, detached (setsid), stdin /dev/null, in its own cgroups."""
    name = rec["name"]
    hdir = Path(rec["dir"])
    procs = []
    for r in _cgroup_roots():
        d = r / lab_name / name
        d.mkdir(parents=True, exist_ok=True)
        procs.append(str(d / "cgroup.procs"))
    pidfile = hdir / "nspawn.pid"
    pidfile.unlink(missing_ok=True)
    argv = [
        "systemd-nspawn", "-q", "-D", str(hdir / "root"), "-M", rec["machine"], f"--hostname={name}", "-b",
        "--console=passive",
        "--register=no", "--keep-unit", f"--network-namespace-path={RUN_NETNS / rec['netns']}",
        # a monitoring or gateway host's apt installs Debian's packages from here (tools/debs.sh), read-only
        *([f"--bind-ro={provision.debs_dir()}:{provision.LAB_DEBS}"] if rec["entry"]["role"] in provision.APT_ROLES
          else []),
        # a gateway host's keepalived moves the floating address in its own network namespace (and a handoff
        # routes there): CAP_NET_ADMIN there, as on a real host
        *(["--capability=CAP_NET_ADMIN"] if rec["entry"]["role"] == "gateway" else []),
        # the real SGLang server's venvs (2.2 GB), read-only, not copied (lab/realsglang.py)
        *(realsglang.binds() if rec["entry"].get("real_sglang") else []),
    ]
    with open(hdir / "console.log", "ab") as out:
        subprocess.run(
            ["setsid", "-f", "sh", "-c", BOOT_SCRIPT, "lab-boot", str(pidfile), *argv],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, check=True,
            env={**os.environ, "CGROUP_PROCS": " ".join(procs),
                 # its /proc/sys/net writable (its own namespace's): the handoff's sysctls, as on a real host
                 **({"SYSTEMD_NSPAWN_API_VFS_WRITABLE": "network"} if rec["entry"]["role"] == "gateway" else {})},
        )
    # until the launcher has exec'd nspawn: before, its pid is a shell, which boot checks and
    # teardown would take for a host already gone
    for _ in range(250):
        text = pidfile.read_text().strip() if pidfile.exists() else ""
        if text and _alive_nspawn(int(text), rec["machine"]):
            return
        time.sleep(0.02)
    raise LabError(f"{name}: nspawn did not start within 5 s (see {hdir / 'console.log'})")


def _wait_ready(lab: Lab, quiet_ok: bool = False, boot_again=None) -> None:
    """Wait until every host answers SSH and systemd says running/degraded. boot_again(name): a
    host whose nspawn exits during boot is booted once more (with the reason printed) before the
    lab gives up: under load nspawn now and then exits early, and one host should not cost the run."""
    t0 = time.monotonic()

    def one(h: LabHost) -> str:
        deadline, again = t0 + BOOT_TIMEOUT_S, boot_again
        while True:
            if not _alive_nspawn(_pid_of(h.rec), h.rec["machine"]):
                tail = (Path(h.rec["dir"]) / "console.log").read_text(errors="replace")[-2000:]
                if again is None:
                    raise LabError(f"{h.name}: systemd-nspawn exited during boot; console:\n{tail}")
                last = [line for line in tail.splitlines() if line.strip()][-3:]
                log(f"{h.name}: systemd-nspawn exited during boot ({' | '.join(last) or 'nothing on its console'}); "
                    "booting it once more")
                again(h.name)
                again, deadline = None, time.monotonic() + BOOT_TIMEOUT_S
                continue
            p = ssh(h.ip, "true", timeout=5)
            if p.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise LabError(f"{h.name} ({h.ip}): no SSH after {BOOT_TIMEOUT_S} s: {p.stderr.strip()}")
            time.sleep(0.2)
        t_ssh = time.monotonic() - t0
        if not quiet_ok:
            log(f"{h.name} ({h.ip}): ssh up after {t_ssh:.1f} s")
        left = max(5, deadline - time.monotonic())
        p = ssh(h.ip, "systemctl", "is-system-running", "--wait", timeout=left)
        state = p.stdout.strip()
        if state not in ("running", "degraded"):
            raise LabError(f"{h.name}: systemd is {state or p.stderr.strip()!r}, not running")
        msg = f"{h.name} ({h.ip}): systemd {state} after {time.monotonic() - t0:.1f} s"
        if state == "degraded":
            failed = ssh(h.ip, "systemctl", "--failed", "--no-legend", "--plain").stdout.strip()
            msg += f"; failed units: {' '.join(l.split()[0] for l in failed.splitlines() if l)}"
        if not quiet_ok or state != "running":
            log(msg)
        return state

    with ThreadPoolExecutor(max_workers=max(1, len(lab.hosts))) as pool:
        list(pool.map(one, lab.hosts))


def _wait_index(lab: Lab, quiet_ok: bool = False) -> None:
    """Wait until every mirror host's index lists the SGLang double's wheels, and its olah serves each
    repository's newest revision (a HEAD of its config.json answered with that commit), asked from
    here (a lab address, never through a proxy)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    want = [b.filename for b in wheels.BUILDS]

    def index(url: str) -> str | None:  # None once it lists them all, else why not
        with opener.open(url, timeout=3) as answer:
            page = answer.read().decode()
        missing = [w for w in want if w not in page]
        return f"it lists no {', '.join(missing)}" if missing else None

    def newest(sha: str):
        def serves(url: str) -> str | None:
            with opener.open(urllib.request.Request(url, method="HEAD"), timeout=3) as answer:
                commit = answer.headers.get("x-repo-commit")
            return None if commit == sha else f"it answered commit {commit!r}"
        return serves

    for h in lab.hosts:
        if h.entry["role"] != "mirror":
            continue
        _check_lab_address(h.ip)
        t0 = time.monotonic()
        _until(h, "package index", _index_url(h.ip) + "sglang/", index, mirror.UNIT, INDEX_TIMEOUT_S)
        if not quiet_ok:
            log(f"{h.name} ({h.ip}): package index {_index_url(h.ip)} lists {len(want)} wheels after "
                f"{time.monotonic() - t0:.1f} s")
        t0, endpoint = time.monotonic(), _hf_endpoint(h.ip)
        for repo, shas in hf.revisions().items():
            _until(h, "Hugging Face mirror", f"{endpoint}/{repo}/resolve/{shas[-1]}/config.json", newest(shas[-1]),
                   mirror.HF_UNIT, HF_TIMEOUT_S)
        if not quiet_ok:
            log(f"{h.name} ({h.ip}): Hugging Face mirror {endpoint} serves {', '.join(hf.REPOS)} after "
                f"{time.monotonic() - t0:.1f} s")


def _until(h: LabHost, what: str, url: str, ask, unit: str, timeout_s: float) -> None:
    """Ask `url` every 0.2 s until `ask(url)` says nothing is wrong (None); LabError with why and the
    unit's journal after timeout_s."""
    t0 = time.monotonic()
    while True:
        try:
            why = ask(url)
        except OSError as e:  # refused while it starts; URLError and HTTPError are OSErrors
            why = str(e)
        if why is None:
            return
        if time.monotonic() - t0 > timeout_s:
            journal = ssh(h.ip, "journalctl", "-u", unit, "-n", "20", "--no-pager", "-o", "cat").stdout
            raise LabError(f"{h.name}: no {what} at {url} after {timeout_s} s: {why}; {unit}'s journal:\n{journal}")
        time.sleep(0.2)


# --- reset ----------------------------------------------------------------------------------

def _record_booted(lab: Lab) -> None:
    """Each GPU host's units active once it has booted (what a reset starts from)."""
    def one(h: LabHost) -> None:
        p = ssh(h.ip, reset.booted_units_command(), timeout=30)
        if p.returncode:
            raise LabError(f"{h.name}: its units could not be listed: {p.stderr.strip()}")
        (Path(h.rec["dir"]) / reset.BOOTED_UNITS).write_text(p.stdout)

    hosts = [h for h in lab.hosts if h.entry["role"] == "gpu"]
    with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
        list(pool.map(one, hosts))


def reset_hosts(name: str, hosts: list[str] | None = None) -> dict[str, list[str]]:
    """Put the GPU hosts of lab `name` (all, or those named) back as they booted, without booting them again
    (lab/reset.py): what a deploy or a test started stopped, the disk as provisioned, the lab's own units started
    again. Returns, per host, the files it put back."""
    st = _read_state(name)
    if not st:
        raise LabError(f"lab {name!r} is not up")
    recs = [h for h in st["hosts"] if h["entry"]["role"] == "gpu" and (hosts is None or h["name"] in hosts)]
    unknown = sorted(set(hosts or []) - {h["name"] for h in recs})
    if unknown:
        raise LabError(f"lab {name!r} has no GPU host {', '.join(unknown)} to reset (a gateway, monitoring or mirror "
                       "host is not reset: bring its lab down and up)")

    def one(h: dict) -> list[str]:
        hdir = Path(h["dir"])
        booted = (hdir / reset.BOOTED_UNITS).read_text().split()
        p = ssh(h["ip"], reset.stop_command(booted), timeout=120)
        if p.returncode:
            raise LabError(f"{h['name']}: reset: stopping what runs failed (exit {p.returncode}): "
                           f"{(p.stderr or p.stdout).strip()[-2000:]}")
        changed = reset.restore_files(hdir, Path(h["base"]))
        p = ssh(h["ip"], reset.START_COMMAND, timeout=180)
        if p.returncode or p.stdout.split()[-1:] not in (["running"], ["degraded"]):
            raise LabError(f"{h['name']}: reset: starting its units again failed (exit {p.returncode}): "
                           f"{(p.stderr or p.stdout).strip()[-2000:]}")
        return changed

    t0 = time.monotonic()
    with _lock(name), ThreadPoolExecutor(max_workers=min(16, max(1, len(recs)))) as pool:
        done = dict(zip([h["name"] for h in recs], pool.map(one, recs)))
    log(f"lab {name!r}: {len(done)} hosts reset in {time.monotonic() - t0:.1f} s")
    return done


# --- down ---------------------------------------------------------------------------------

def down(name: str | None = None) -> bool:
    """Tear lab `name` down (None: the one lab up), leaving nothing behind. Harmless when it is not up; labs
    of other names go on."""
    if name is None:
        up_now = [st["lab_name"] for st in _states()]
        if not up_now:
            log("no lab is up")
            return False
        if len(up_now) > 1:
            raise LabError(f"labs {', '.join(up_now)} are up: name the one to take down (--lab FILE, or --all)")
        name = up_now[0]
    with _lock(name):
        st = _read_state(name)
        if not st:
            log(f"lab {name!r} is not up")
            return False
        _down_locked(st)
        return True


def lab_name(lab_file: Path | str) -> str:
    """The [lab] name a lab file declares (the name of its state directory)."""
    return labfile.parse_name(Path(lab_file))


def _cgroup_pids(lab_name: str, name: str) -> list[int]:
    """Every process in a host's cgroup directories (both hierarchies)."""
    pids: set[int] = set()
    for r in _cgroup_roots():
        d = r / lab_name / name
        if not d.is_dir():
            continue
        for dirpath, _, files in os.walk(d):
            try:
                pids |= {int(x) for x in Path(dirpath, "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
    return sorted(pids)


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


def _stop(lab_name: str, host: dict) -> None:
    """SIGTERM the host's nspawn (it halts the container), SIGKILL after STOP_TIMEOUT_S."""
    name, pid = host["name"], _pid_of(host)
    if _alive_nspawn(pid, host["machine"]):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        if not _alive_nspawn(pid, host["machine"]) and not _cgroup_pids(lab_name, name):
            break
        time.sleep(0.05)
    else:
        log(f"{name}: no halt after {STOP_TIMEOUT_S} s; SIGKILL")
        _kill(lab_name, host)
    # The nspawn is a zombie until PID 1 reaps it (setsid -f orphaned it): give it a moment
    # so that "down" really leaves no process behind.
    if pid:
        for _ in range(100):
            if _gone(pid) or not _is_zombie(pid):
                break
            time.sleep(0.05)


def _kill(lab_name: str, host: dict) -> float:
    """SIGKILL the host's nspawn and every process in its cgroups (only the lab's own processes live there),
    all stopped first (SIGSTOP, until no new one appears): killed one by one, a process still running would
    see the others die and act on it as no power cut lets it (the host's systemd running smg's ExecStopPost,
    keepalived then giving its address away at once)."""
    name, pid = host["name"], _pid_of(host)

    def signal_all(sig: int) -> bool:
        procs = _cgroup_pids(lab_name, name) + ([pid] if pid and _alive_nspawn(pid, host["machine"]) else [])
        for p in procs:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        return bool(procs)

    seen: set[int] = set()
    for _ in range(20):  # a process forked while the others were being stopped: stop it too
        signal_all(signal.SIGSTOP)
        now = set(_cgroup_pids(lab_name, name))
        if now <= seen:
            break
        seen |= now
    stopped = time.time()  # from here nothing of the box acts: the power went
    for _ in range(100):
        if not signal_all(signal.SIGKILL):
            break
        time.sleep(0.05)
    return stopped


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):  # ESRCH while it disappears
        return False


def _rmdir_tree(d: Path) -> None:
    """Remove a cgroup directory and its children, deepest first."""
    if not d.is_dir():
        return
    for dirpath, dirnames, _ in sorted(os.walk(d), key=lambda t: -t[0].count("/")):
        for attempt in range(50):
            try:
                os.rmdir(dirpath)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)  # processes still leaving
        else:
            log(f"warning: could not remove cgroup {dirpath}")


def _down_locked(st: dict[str, Any]) -> None:
    t0 = time.monotonic()
    lab_name = st["lab_name"]
    where = Where(lab_name)
    hosts = st.get("hosts", [])
    # stop all hosts together: each halts in ~2 s
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        list(pool.map(lambda h: _stop(lab_name, h), hosts))
    for h in hosts:
        root = Path(h["dir"]) / "root"
        for _ in range(50):
            if not _is_mountpoint(root):
                break
            if run("umount", str(root), check=False).returncode:
                time.sleep(0.1)
        else:
            log(f"warning: {root} still mounted")
        if (RUN_NETNS / h["netns"]).exists():
            run("ip", "netns", "del", h["netns"], check=False)
        _remove_link(h["veth"])
        for r in _cgroup_roots():
            _rmdir_tree(r / lab_name / h["name"])
        shutil.rmtree(NSPAWN_RUN / "propagate" / h["machine"], ignore_errors=True)
        if not _is_mountpoint(root):
            shutil.rmtree(h["dir"], ignore_errors=True)
    for r in _cgroup_roots():
        _rmdir_tree(r / lab_name)
    _remove_link(st["bridge"])
    created = st.get("created", {})
    if created.get("nspawn_run"):
        for d in (NSPAWN_RUN / "propagate", NSPAWN_RUN / "incoming", NSPAWN_RUN / "locks", NSPAWN_RUN):
            try:
                d.rmdir()
            except OSError:
                pass
    if RUN_NETNS.is_dir() and not any(RUN_NETNS.iterdir()):
        if created.get("run_netns_mount") and _is_mountpoint(RUN_NETNS):
            while _is_mountpoint(RUN_NETNS):
                if run("umount", str(RUN_NETNS), check=False).returncode:
                    break
        if created.get("run_netns") and not _is_mountpoint(RUN_NETNS):
            try:
                RUN_NETNS.rmdir()
            except OSError:
                pass
    try:
        where.hosts.rmdir()
    except OSError:
        pass
    if INVENTORY.is_symlink() and INVENTORY.resolve() == where.inventory.resolve():
        INVENTORY.unlink()
    for p in (where.state_file, where.inventory, where.dir / "lab.toml"):
        p.unlink(missing_ok=True)
    log(f"lab {lab_name!r} down ({len(hosts)} hosts) in {time.monotonic() - t0:.1f} s")


# --- a host's link -------------------------------------------------------------------------

def _running_host(name: str, lab: str | None = None) -> tuple[dict, dict]:
    """(its lab's state, host `name` as that state records it) of a lab that is up: lab `lab`, or the one lab
    up that has such a host (LabError if none, or if two labs have one: then the lab must be named)."""
    states = [st for st in _states() if lab is None or st["lab_name"] == lab]
    if not states:
        raise LabError(f"lab {lab!r} is not up" if lab else "no lab is up")
    found = [(st, h) for st in states for h in st["hosts"] if h["name"] == name]
    if len(found) > 1:
        raise LabError(f"host {name!r} is in labs {', '.join(st['lab_name'] for st, _ in found)}: name its lab "
                       "(--lab FILE)")
    if not found:
        where = "; ".join(f"lab {st['lab_name']!r}: {', '.join(h['name'] for h in st['hosts'])}" for st in states)
        raise LabError(f"no host {name!r} in {'lab ' + repr(lab) if lab else 'any lab up'} (hosts: {where})")
    return found[0]


def link(name: str, up: bool, lab: str | None = None) -> float:
    """Drop a host's link (or bring it back) inside its own network namespace: its eth0 down. Nothing
    answers, and nothing refuses either (no reset, no ICMP): a link that drops silently, a switch or
    a VPN. Its sshd and whatever it runs go on; the connections come back with the link if their
    ends have not given up. `lab`: its lab's name, where hosts of two labs up share its name. Returns when
    the link went (or came): time.time() once the kernel did it."""
    _, host = _running_host(name, lab)
    run("ip", "-n", host["netns"], "link", "set", "eth0", "up" if up else "down")
    return time.time()


# The bridge port's states (the kernel's BR_STATE_*): settable by hand on a bridge without STP, as the lab's are
PORT_DISABLED, PORT_FORWARDING = 0, 3


def cut_commands(veth: str, off: bool, peer_veth: str | None = None) -> list[list[str]]:
    """The bridge port of a host's veth stopping forwarding (off) or forwarding again; with a peer's, the two ports
    isolated from each other instead (the kernel's port isolation: isolated ports forward to no isolated port)."""
    if peer_veth is None:
        return [["bridge", "link", "set", "dev", veth, "state", str(PORT_DISABLED if off else PORT_FORWARDING)]]
    return [["bridge", "link", "set", "dev", v, "isolated", "on" if off else "off"] for v in (veth, peer_veth)]


def cut(name: str, off: bool, lab: str | None = None, peer: str | None = None) -> float:
    """Cut a host off the lab's network with its carrier kept (off), or heal it: its port on the bridge stops
    forwarding, as a switch port or an uplink that fails while the NIC's link stays up. Unlike link(), its eth0
    stays up, so nothing on the host sees the cut (keepalived goes on holding what it holds); frames it sends are
    dropped and none reach it. With `peer`, it is cut off from that host only, each still reaching every other
    host and this machine (their clients): the link between two switches. Isolated ports reach no isolated port,
    so one such cut at a time. The lab's down and a power cycle (a new veth) heal either; link() down and up heals
    a whole cut (the port follows its carrier). Returns when the ports changed: time.time() once the kernel did."""
    st, host = _running_host(name, lab)
    other = _running_host(peer, st["lab_name"])[1]["veth"] if peer is not None else None
    for argv in cut_commands(host["veth"], off, other):
        run(*argv)
    return time.time()


def power(name: str, on: bool, lab: str | None = None) -> float:
    """Cut a host's power (off) or boot it again (on). Off: its nspawn and every process of it killed at once
    (SIGKILL: nothing shuts down, nothing is given away), and its network namespace gone with whatever its
    kernel held there (addresses keepalived added, routes, nftables): it answers nothing. On: a fresh
    namespace and link, booted from its disk as it was; returns once it answers SSH. Returns when the power
    went (time.time() once every process of the box was stopped), or when the box answered again."""
    st, host = _running_host(name, lab)
    if not on:
        went = _kill(st["lab_name"], host)
        if (RUN_NETNS / host["netns"]).exists():
            run("ip", "netns", "del", host["netns"])  # its veth with it, a moment later:
        _remove_link(host["veth"])  # gone before it returns, so that a power on at once can make it again
        shutil.rmtree(NSPAWN_RUN / "propagate" / host["machine"], ignore_errors=True)
        return went
    if _alive_nspawn(_pid_of(host), host["machine"]):
        raise LabError(f"{name} runs already: power it off first")
    if not (RUN_NETNS / host["netns"]).exists():
        _network(st["lab_name"], host, ipaddress.ip_network(st["subnet"]).prefixlen)
    _boot(st["lab_name"], host)
    _wait_ready(Lab(st["lab_name"], Path(st["lab_file"]), st["subnet"],
                    [LabHost(host["name"], host["ip"], host["group"], host["entry"], lab=st["lab_name"])]),
                quiet_ok=True)
    return time.time()


def throttle(name: str, kbit: int | None, lab: str | None = None) -> None:
    """Slow what leaves a host to `kbit` kbit/s, or (None) take the limit away: a token bucket (tc tbf) on
    the eth0 inside the host's own network namespace, so its answers (a mirror's downloads) go out at
    that rate while what it is sent is not slowed. Packets wait in the queue; none is refused."""
    _, host = _running_host(name, lab)
    if kbit is None:
        p = run("tc", "-n", host["netns"], "qdisc", "del", "dev", "eth0", "root", check=False)
        if p.returncode and "No such file" not in p.stderr and "Cannot delete qdisc with handle of zero" not in p.stderr:
            raise LabError(f"tc qdisc del on {name}'s eth0 failed: {p.stderr.strip()}")
        return
    if isinstance(kbit, bool) or not isinstance(kbit, int) or kbit < 8:
        raise LabError(f"throttle {name}: kbit = {kbit!r}: allowed: an integer >= 8 (kbit/s), or None to remove it")
    burst = max(kbit * 1000 // 8 // 50, 16384)  # 20 ms of the rate, and at least a few packets
    run("tc", "-n", host["netns"], "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", f"{kbit}kbit",
        "burst", str(burst), "latency", "200ms")


# --- status -------------------------------------------------------------------------------

def status(name: str | None = None, check_ssh: bool = True) -> list[dict[str, Any]]:
    """One row a host of lab `name` (None: of every lab up): lab, name, ip, group, state (running/stopped),
    ssh (ok/no/-)."""
    hosts = [(st["lab_name"], h) for st in _states() if name is None or st["lab_name"] == name for h in st["hosts"]]

    def one(lab_and_host):
        lab, h = lab_and_host
        alive = _alive_nspawn(_pid_of(h), h["machine"])
        ok = "-"
        if alive and check_ssh:
            ok = "ok" if ssh(h["ip"], "true", timeout=8).returncode == 0 else "no"
        return {"lab": lab, "name": h["name"], "ip": h["ip"], "group": h["group"],
                "state": "running" if alive else "stopped", "ssh": ok, "pid": _pid_of(h)}

    with ThreadPoolExecutor(max_workers=min(32, max(1, len(hosts)))) as pool:
        return list(pool.map(one, hosts))


def _print_status(name: str | None = None) -> int:
    states = [st for st in _states() if name is None or st["lab_name"] == name]
    if not states:
        print("no lab is up" if name is None else f"lab {name!r} is not up")
        return 1
    ok = True
    for st in states:
        rows = status(st["lab_name"])
        print(f"lab {st['lab_name']!r} from {st['lab_file']} (subnet {st['subnet']}, bridge {st['bridge']}, "
              f"inventory {Where(st['lab_name']).inventory.relative_to(REPO)})")
        cols = ("name", "ip", "group", "state", "ssh")
        rows = [{**r, "group": r["group"] or "-"} for r in rows]  # a mirror host has none
        widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
        print("  ".join(c.upper().ljust(w) for c, w in zip(cols, widths)))
        for r in rows:
            print("  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths)))
        ok &= all(r["state"] == "running" and r["ssh"] == "ok" for r in rows)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lab.lab", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def which(p, default=None, about="the lab of that file (its [lab] name)"):
        p.add_argument("--lab", type=Path, default=default, help=about)
        return p

    which(sub.add_parser("up", help="boot the lab's hosts (or check the running lab)"), DEFAULT_LAB,
          "lab file (default: lab/default.toml)")
    p_down = which(sub.add_parser("down", help="stop every host of a lab and remove everything it made"),
                   about="the lab of that file (default: the one lab up)")
    p_down.add_argument("--all", action="store_true", help="every lab up")
    which(sub.add_parser("status", help="hosts, addresses, groups, running, ssh"),
          about="the lab of that file (default: every lab up)")
    which(sub.add_parser("inventory", help="the path of a lab's pyinfra inventory"), DEFAULT_LAB)
    which(sub.add_parser("check", help="validate a lab file only"), DEFAULT_LAB)
    p_link = which(sub.add_parser("link", help="drop a host's link silently (down), or bring it back (up)"))
    p_link.add_argument("host")
    p_link.add_argument("state", choices=("down", "up"))
    p_cut = which(sub.add_parser("cut", help="cut a host off with its carrier kept (off: its bridge port stops "
                                             "forwarding, its eth0 stays up), or heal it (on)"))
    p_cut.add_argument("host")
    p_cut.add_argument("state", choices=("off", "on"))
    p_cut.add_argument("--from", dest="peer", metavar="HOST", help="from that host only (both ports isolated), each "
                       "still reaching the others")
    p_power = which(sub.add_parser("power", help="cut a host's power (off: killed at once, its network gone) or "
                                                 "boot it again (on)"))
    p_power.add_argument("host")
    p_power.add_argument("state", choices=("off", "on"))
    p_throttle = which(sub.add_parser("throttle", help="slow what leaves a host to KBIT kbit/s (off: full speed "
                                                       "again)"))
    p_throttle.add_argument("host")
    p_throttle.add_argument("kbit", help="kbit/s, or off")
    p_reset = which(sub.add_parser("reset", help="put GPU hosts back as they booted, without booting them again "
                                                 "(what a deploy wrote and started gone, the lab's own units started)"),
                    DEFAULT_LAB)
    p_reset.add_argument("hosts", nargs="*", help="these GPU hosts (default: all its GPU hosts)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0 and args.cmd in ("up", "down", "link", "cut", "power", "throttle", "reset"):
        print("lab: must run as root (network namespaces, overlay mounts, systemd-nspawn)", file=sys.stderr)
        return 2
    try:
        name = lab_name(args.lab) if args.lab is not None and args.cmd != "check" else None
        if args.cmd in ("up", "down"):
            names = [name] if name else [st["lab_name"] for st in _states()] if args.cmd == "down" else []
            held = [(n, pid) for n in names if (pid := _session_holder(n))]
            if held:
                print("lab: " + "; ".join(f"a test session (pid {pid}) is using lab {n!r}" for n, pid in held)
                      + ": wait for it to end", file=sys.stderr)
                return 1
        if args.cmd == "up":
            up(args.lab)
            return _print_status(name)
        if args.cmd == "down":
            for n in [st["lab_name"] for st in _states()] if args.all else [name]:
                down(n)
            return 0
        if args.cmd == "inventory":
            print(Where(name).inventory)
            return 0
        if args.cmd == "check":
            lab = load_lab(args.lab)
            print(f"{args.lab}: ok ({len(lab.hosts)} hosts)")
            return 0
        if args.cmd == "link":
            link(args.host, args.state == "up", name)
            print(f"{args.host}: link {args.state}")
            return 0
        if args.cmd == "cut":
            cut(args.host, args.state == "off", name, args.peer)
            apart = f" from {args.peer}" if args.peer else ""
            print(f"{args.host}: " + (f"cut off{apart}, its carrier kept" if args.state == "off" else "healed"))
            return 0
        if args.cmd == "power":
            power(args.host, args.state == "on", name)
            print(f"{args.host}: power {args.state}")
            return 0
        if args.cmd == "reset":
            for host, changed in reset_hosts(name, args.hosts or None).items():
                print(f"{host}: reset ({len(changed)} files put back)")
            return 0
        if args.cmd == "throttle":
            kbit = None if args.kbit == "off" else int(args.kbit) if args.kbit.isdigit() else args.kbit
            throttle(args.host, kbit, name)
            print(f"{args.host}: {'full speed' if kbit is None else f'{kbit} kbit/s out'}")
            return 0
        return _print_status(name)
    except LabFileError as e:
        print("lab: the lab file is not valid:", file=sys.stderr)
        for p in e.problems:
            print(f"  {p}", file=sys.stderr)
        return 2
    except (LabError, mirror.MirrorError, hf.HfRepoError, WheelError) as e:
        print(f"lab: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
