"""Read and validate a lab file (TOML): every problem names the host, the key, the value
and what is allowed. Unknown keys are errors."""

from __future__ import annotations

import ipaddress
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.spec import SGLANG_0523_ALGORITHMS, UNIT_NAME
from lab.base import DEFAULT_SUITE, IMAGES
from lab.wheels import DOUBLE_LAB

DEFAULT_LAB_NAME = "sgllab"
DEFAULT_SUBNET = "10.203.0.0/24"
FIRST_HOST = 11  # host addresses are .11, .12, ... in file order

HOST_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
JOB_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}\Z")  # a scope's and a unit's name, the job's --name
LAB_NAME = re.compile(r"^[a-z][a-z0-9]{0,9}$")
ALGO_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
# A gateway host has no GPU and runs no SGLang (smg comes with the deploy): only these keys mean anything on it.
GATEWAY_KEYS = ("name", "group", "role", "ssh_user", "debian")
# A mirror host is the lab's package index (lab/mirror.py): no GPU, no SGLang, and no group, for it is
# no part of the fleet: the lab's inventory leaves it out, so that no deploy touches it.
MIRROR_KEYS = ("name", "role", "ssh_user", "debian")
# A monitoring host is a gateway-like host of the fleet (its group a monitoring group): Prometheus and
# Alertmanager come with the deploy, from the lab's Debian repository (lab/provision.py).
ROLE_KEYS = {"gateway": GATEWAY_KEYS, "monitoring": GATEWAY_KEYS, "mirror": MIRROR_KEYS}
ROLE_ABOUT = {"gateway": "", "monitoring": "", "mirror": " (the lab's package index)"}
# The SGLang double's speed model (lab/doubles/README.md): its keys, each a number, with its bounds.
SPECULATION_KEYS = ("step_ms", "per_request", "per_draft_token", "per_draft_token_sq", "acceptance")
SPECULATION_ALLOWED = ("a table of exactly step_ms (> 0), per_request, per_draft_token, per_draft_token_sq (>= 0) "
                       "and acceptance (> 0, <= 1), numbers, e.g. { step_ms = 5.0, per_request = 0.2, "
                       "per_draft_token = 0.05, per_draft_token_sq = 0.01, acceptance = 0.9 }")
DRAFT_ACCEPTANCE_ALLOWED = (
    "a table of draft directories (absolute paths), each a table of target -> acceptance (> 0, <= 1), a target "
    "being '*' (any other), a target's path or a repository id ORG/NAME, e.g. { \"/root/models/Qwen3.6-27B-DFlash-v2\" "
    "= { \"/root/models/Qwen3.6-27B\" = 0.2, \"*\" = 0.7 } }")
MIRROR_NO_GROUP = ("a mirror host has no group: it is the lab's package index, no part of the fleet (the inventory "
                   "leaves it out, so that no deploy touches it); remove the key")


class LabFileError(ValueError):
    """A lab file problem (one or more lines, each naming where and what)."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass
class Host:
    name: str
    ip: str
    group: str | None  # None: a mirror host
    entry: dict[str, Any]  # resolved keys, defaults filled in (what /etc/lab/host.json is built from)


@dataclass
class LabFile:
    path: Path
    name: str
    subnet: ipaddress.IPv4Network
    hosts: list[Host] = field(default_factory=list)

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float))) and not isinstance(v, bool)


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _one_of(names: list[str]) -> str:
    return " | ".join(repr(n) for n in names) or "none in group_data/"


# key -> (required, default, check(value) -> error text or None, allowed text)
def _host_keys(groups: list[str], gateway_groups: list[str]) -> dict[str, tuple[bool, Any, Any, str]]:
    def enum(*vals):
        return lambda v: None if v in vals else "not allowed", " | ".join(repr(x) for x in vals)

    def boolean():
        return lambda v: None if isinstance(v, bool) else "not true or false", "true or false"

    def text(pattern=None, allowed="a non-empty string"):
        def check(v):
            if not isinstance(v, str) or not v or v != v.strip():
                return "not a non-empty string without padding"
            if pattern and not pattern.match(v):
                return "bad format"
            return None

        return check, allowed

    def integer(lo, hi=None):
        def check(v):
            if not _is_int(v):
                return "not an integer"
            if v < lo or (hi is not None and v > hi):
                return "out of range"
            return None

        return check, f"an integer {lo}..{hi}" if hi is not None else f"an integer >= {lo}"

    def algos(v):
        if not _str_list(v) or not v:
            return "not a non-empty list of strings"
        bad = [a for a in v if not ALGO_NAME.match(a)]
        return f"bad name(s) {bad}" if bad else None

    def units(v):
        if not _str_list(v):
            return "not a list of strings"
        bad = [u for u in v if not UNIT_NAME.match(u) or (u.endswith(".service") is False and "." in u)]
        return f"bad unit name(s) {bad}" if bad else None

    def job_names(v):
        if not _str_list(v):
            return "not a list of strings"
        bad = [n for n in v if not JOB_NAME.match(n)]
        return f"bad name(s) {bad}" if bad else None

    def paths(v):
        if not _str_list(v):
            return "not a list of strings"
        bad = [p for p in v if not p.startswith("/")]
        return f"not absolute: {bad}" if bad else None

    def seconds(v):
        if not _is_num(v):
            return "not a number"
        return "out of range" if not 0 <= v <= 3600 else None

    def rate(v):
        if not _is_num(v):
            return "not a number"
        return "out of range" if not (v > 0 and math.isfinite(v)) else None

    def table(v):
        return None if isinstance(v, dict) else "not a table"

    def speculation(v):
        if not isinstance(v, dict):
            return "not a table"
        missing = [k for k in SPECULATION_KEYS if k not in v]
        unknown = [k for k in v if k not in SPECULATION_KEYS]
        if missing or unknown:
            return "; ".join(([f"missing key(s) {missing}"] if missing else [])
                             + ([f"unknown key(s) {unknown}"] if unknown else []))
        bad = [k for k in SPECULATION_KEYS if not _is_num(v[k]) or not math.isfinite(v[k])]
        if bad:
            return f"not a number: {', '.join(bad)}"
        out = ([] if v["step_ms"] > 0 else ["step_ms must be > 0"]) + [
            f"{k} must be >= 0" for k in SPECULATION_KEYS[1:4] if v[k] < 0]
        if not 0 < v["acceptance"] <= 1:
            out.append("acceptance must be > 0 and <= 1")
        return "; ".join(out) or None

    def draft_acceptance(v):
        if not isinstance(v, dict) or not v:
            return "not a non-empty table"
        bad = [p for p in v if not p.startswith("/")]
        if bad:
            return f"draft directory not absolute: {bad}"
        return "; ".join(f"{p}: {err}" for p, targets in v.items()
                         if (err := DOUBLE_LAB.check_draft_acceptance(targets))) or None

    return {
        "name": (True, None, *text(HOST_NAME, "lowercase letters, digits and '-', at most 32")),
        "group": (True, None, lambda v: None if v in groups + gateway_groups else "not a GPU class or gateway group",
                  f"a GPU class group: {_one_of(groups)}; with role = 'gateway', a gateway group: "
                  f"{_one_of(gateway_groups)}"),
        "role": (False, "gpu", *enum("gpu", "gateway", "monitoring", "mirror")),
        "gpu_model": (True, None, *text(None, "the exact nvidia-smi name, e.g. 'NVIDIA RTX A6000'")),
        "gpu_count": (True, None, *integer(1, 16)),
        "gpu_memory_mib": (True, None, *integer(1, 1 << 22)),
        "driver_version": (False, "580.95.05", *text(re.compile(r"^[0-9]+(\.[0-9]+)*$"), "a version like '580.95.05'")),
        "nvidia_smi": (False, "ok", *enum("ok", "missing", "driver-error", "warning", "hang")),
        "mig": (False, False, *boolean()),
        "sglang_version": (False, "0.5.23", *text(re.compile(r"^[0-9A-Za-z.+-]+$"), "a version like '0.5.23'")),
        "sglang_algorithms": (False, list(SGLANG_0523_ALGORITHMS), algos,
                              "a list of algorithm names, e.g. " + repr(list(SGLANG_0523_ALGORITHMS) + ["DDTREE"])),
        "workloads": (False, [], units, "a list of systemd unit names, e.g. ['dflash-train']"),
        "scope_workloads": (False, [], job_names, "a list of names, e.g. ['trainer']: each a training job in the "
                            "scope NAME.scope, as a container runs, started by lab-scope-NAME.service"),
        "process_workloads": (False, [], job_names, "a list of names, e.g. ['torch']: each a training job left "
                              "running by lab-proc-NAME.service, a bare process"),
        "preinstalled": (False, None, table, "a table of spec overrides over the group's spec"),
        "load": (False, "ok", *enum("ok", "crash", "hang")),
        "load_seconds": (False, 3.0, seconds, "a number of seconds 0..3600"),
        "decode_tokens_per_s": (False, 100.0, rate, "a number of tokens per second > 0, e.g. 100.0"),
        "engine_import_seconds": (False, 0.0, seconds, "a number of seconds 0..3600"),
        "speculation": (False, None, speculation, SPECULATION_ALLOWED),
        "engines_disk_kib": (False, None, *integer(64)),
        "models_disk_kib": (False, None, *integer(64)),
        "missing_models": (False, [], paths, "a list of absolute paths"),
        "missing_programs": (False, [], job_names, "a list of program names, e.g. ['curl']: none of them on the "
                             "host's PATH, as on a minimal install"),
        "draft_vocab_size": (False, None, *integer(1, 1 << 24)),
        "draft_acceptance": (False, None, draft_acceptance, DRAFT_ACCEPTANCE_ALLOWED),
        "reasoning_model": (False, False, *boolean()),
        "real_sglang": (False, False, lambda v: None if isinstance(v, bool) else "not true or false",
                        "true (the real SGLang 0.5.23 server on this machine's CPU, lab/realsglang.py) or false"),
        "ssh_user": (False, "root", *text(re.compile(r"^[a-z_][a-z0-9_-]{0,30}$"), "a user name, e.g. 'ubuntu'")),
        "debian": (False, DEFAULT_SUITE, lambda v: None if v in IMAGES else "not a Debian release the lab builds",
                   " | ".join(f"{suite!r} ({image.about})" for suite, image in IMAGES.items())),
    }


LAB_KEYS = {"name", "subnet"}


def parse_name(path: Path) -> str:
    """The [lab] name a lab file declares (the default where it names none), read without validating the rest:
    a file edited since its lab went up still names the lab to take down."""
    try:
        lab = tomllib.loads(Path(path).read_text()).get("lab", {})
    except FileNotFoundError:
        raise LabFileError([f"{path}: no such lab file"]) from None
    except tomllib.TOMLDecodeError as e:
        raise LabFileError([f"{path}: not valid TOML: {e}"]) from None
    name = lab.get("name", DEFAULT_LAB_NAME) if isinstance(lab, dict) else None
    if not isinstance(name, str) or not LAB_NAME.match(name):
        raise LabFileError([f"{path}: [lab] name = {name!r}: allowed: a lowercase letter, then letters/digits, at "
                            "most 10"])
    return name


def parse(path: Path, groups: list[str], gateway_groups: list[str]) -> LabFile:
    """Parse `path`; `groups` are the GPU class groups group_data/ declares, `gateway_groups` its
    gateway groups (a gateway host's group)."""
    path = Path(path)
    where = str(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise LabFileError([f"{where}: no such lab file"]) from None
    except tomllib.TOMLDecodeError as e:
        raise LabFileError([f"{where}: not valid TOML: {e}"]) from None
    problems: list[str] = []
    for k in data:
        if k not in ("lab", "hosts"):
            problems.append(f"{where}: unknown top-level key {k!r}; allowed: [lab], [[hosts]]")

    lab = data.get("lab", {})
    name, subnet = DEFAULT_LAB_NAME, ipaddress.ip_network(DEFAULT_SUBNET)
    if not isinstance(lab, dict):
        problems.append(f"{where}: [lab] must be a table")
        lab = {}
    for k in lab:
        if k not in LAB_KEYS:
            problems.append(f"{where}: [lab]: unknown key {k!r}; allowed: {', '.join(sorted(LAB_KEYS))}")
    if "name" in lab:
        if isinstance(lab["name"], str) and LAB_NAME.match(lab["name"]):
            name = lab["name"]
        else:
            problems.append(f"{where}: [lab] name = {lab['name']!r}: allowed: a lowercase letter, then "
                            "letters/digits, at most 10 (it names the bridge, namespaces and cgroups)")
    if "subnet" in lab:
        try:
            subnet = ipaddress.IPv4Network(lab["subnet"], strict=False) if isinstance(lab["subnet"], str) else None
        except ValueError:
            subnet = None
        if subnet is None or not subnet.is_private or subnet.prefixlen > 28 or subnet.prefixlen < 16:
            problems.append(f"{where}: [lab] subnet = {lab['subnet']!r}: allowed: a private IPv4 network "
                            "/16../28 such as '10.203.0.0/24'")
            subnet = ipaddress.ip_network(DEFAULT_SUBNET)

    hosts_raw = data.get("hosts", [])
    if not isinstance(hosts_raw, list) or not all(isinstance(h, dict) for h in hosts_raw):
        problems.append(f"{where}: hosts must be an array of tables ([[hosts]])")
        hosts_raw = []
    if not hosts_raw:
        problems.append(f"{where}: no [[hosts]]: a lab needs at least one host")
    keys = _host_keys(groups, gateway_groups)
    hosts: list[Host] = []
    seen: set[str] = set()
    addresses = list(subnet.hosts())
    for i, raw in enumerate(hosts_raw):
        hname = raw.get("name")
        label = f"host {hname!r}" if isinstance(hname, str) else f"host #{i + 1}"
        entry: dict[str, Any] = {}
        role = raw.get("role")
        role_keys = ROLE_KEYS.get(role) if isinstance(role, str) else None
        host_keys = {k: v for k, v in keys.items() if k in role_keys} if role_keys else keys
        for k in raw:
            if k not in keys:
                problems.append(f"{where}: {label}: unknown key {k!r}; allowed keys: {', '.join(keys)}")
            elif k not in host_keys:
                why = (MIRROR_NO_GROUP if k == "group" else
                       f"a GPU host's key; role = {role!r}{ROLE_ABOUT[role]} has no GPU and runs no SGLang")
                problems.append(f"{where}: {label}: {k} = {raw[k]!r}: {why}; allowed keys for a {role} host: "
                                f"{', '.join(ROLE_KEYS[role])}")
        for k, (required, default, check, allowed) in host_keys.items():
            if k not in raw:
                if required:
                    problems.append(f"{where}: {label}: key {k!r} is required; allowed: {allowed}")
                else:
                    entry[k] = list(default) if isinstance(default, list) else default
                continue
            v = raw[k]
            err = check(v)
            if err:
                problems.append(f"{where}: {label}: {k} = {v!r}: {err}; allowed: {allowed}")
                continue
            if k == "speculation":
                v = {key: float(v[key]) for key in SPECULATION_KEYS}
            entry[k] = float(v) if k in ("load_seconds", "decode_tokens_per_s", "engine_import_seconds") else v
        group, role = entry.get("group"), entry.get("role")
        if role == "gpu" and group in gateway_groups:
            problems.append(f"{where}: {label}: group = {group!r} is a gateway group but role = 'gpu' (a GPU host); "
                            f"allowed: role = 'gateway' with it, or a GPU class group: {_one_of(groups)}")
        if role in ("gateway", "monitoring") and group in groups:
            problems.append(f"{where}: {label}: role = {role!r} but group = {group!r} is a GPU class group; "
                            f"allowed for a gateway host: a gateway group: {_one_of(gateway_groups)}")
        if isinstance(hname, str):
            if hname in seen:
                problems.append(f"{where}: {label}: name {hname!r} used twice; host names must be unique")
            seen.add(hname)
        idx = FIRST_HOST + i - 1
        if idx >= len(addresses) - 1:
            problems.append(f"{where}: {label}: subnet {subnet} has no address left for it (hosts start at .{FIRST_HOST})")
            continue
        if "workloads" in entry:
            entry["workloads"] = [w.removesuffix(".service") for w in entry["workloads"]]
        if all(k in entry for k, spec in host_keys.items() if spec[0]):
            hosts.append(Host(name=entry["name"], ip=str(addresses[idx]), group=entry.get("group"), entry=entry))
    if problems:
        raise LabFileError(problems)
    return LabFile(path=path.resolve(), name=name, subnet=subnet, hosts=hosts)
