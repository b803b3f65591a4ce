"""The gateway: SGLang's model gateway (smg) in front of the replicas of the GPU classes it
routes, and the decisions of a rolling rollout behind it.

group_data/<gateway>.py declares `gateway = {...}` (the model below); its one host runs smg
as a systemd unit and learns the replicas from a discovery file the deploy writes. A class
it routes is rolled one replica at a time (canary first): out of the file, drained, rolled
through the gate, back in the file, `ready` in smg; only then the next. Plain data in,
verdicts out: tasks/gateway.py installs smg, tasks/rolling.py does the talking.
Facts about smg 1.13.0: ../shared/reference/smg-1.13.md.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from packaging.version import VERSION_PATTERN, Version
from pydantic import AfterValidator, Field, field_validator, model_validator

from fleet.core import layout
from fleet.turns.drains import active, workers
from fleet.gateway.floating import Floating, Interface, Vrrp, parse_interfaces, parse_vrrp
from fleet.rollout.gate import CURL, local_address, url_host
from fleet.rollout.prerequisites import parse_probe
from fleet.spec.secrets import HOST_PLACEHOLDER
from fleet.spec import AbsPath, ClassSpec, CommandPath, HostAddress, Int, Kind, Number, ServiceUnit, Source, Strict, \
    is_loopback
from fleet.core.wire import Unreadable, excerpt, frames, load_json

SMG_VERSION = "1.13.0"
# smg's worker states (GET /workers); only `ready` ones get traffic
READY, DRAINING = "ready", "draining"

_PEP440 = re.compile(rf"^{VERSION_PATTERN}\Z", re.VERBOSE | re.IGNORECASE)


def _release(v: str) -> str:
    # It is pip's `smg==VERSION`, a path (wheels/VERSION) and what `smg --version` is compared to:
    # one spelling only, the normalized one (1.13.0rc1, not 1.13.0-RC1).
    if not _PEP440.match(v):
        raise ValueError("a PEP 440 version as pip takes it, e.g. 1.13.0")
    if str(Version(v)) != v:
        raise ValueError(f"a PEP 440 version in its normalized form: {Version(v)}")
    return v


Release = Annotated[str, AfterValidator(_release), Kind("PEP 440 version")]

GROUP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def _group(v: str) -> str:
    # A route is an inventory group, a Python name in a pyinfra inventory; it ends the smg unit's
    # Description=, where a trailing backslash would join the next line to it.
    if not GROUP_NAME.match(v):
        raise ValueError("a GPU class's group name: letters, digits and _, not starting with a digit")
    return v


GroupName = Annotated[str, AfterValidator(_group), Kind("group name")]


class GatewayRolling(Strict):
    """How a replica of a class behind the gateway leaves it and comes back around its restart (how
    many restart at once is the class's own `rolling.max_unavailable`)."""

    drain_timeout_s: Number = Field(
        600, ge=0, le=3600, description="How long a replica taken out of the gateway gets to finish its requests, "
        "0..3600 s, 0 for no wait, else at least 1 (smg no longer routes to it and SGLang's /metrics shows no "
        "running or queued request) before it is stopped anyway; SGLang then drains what is left on SIGTERM "
        "(service.drain_timeout_s).")
    ready_timeout_s: Number = Field(
        300, ge=1, le=3600, description="How long smg gets to call a replica `ready` after it is back in the "
        "discovery file, and to find a peer ready before one goes out, 1..3600 s.")
    poll_interval_s: Number = Field(0.5, ge=0.05, le=10,
                                    description="Seconds between reads of /workers and /metrics, 0.05..10.")

    @field_validator("drain_timeout_s")
    @classmethod
    def _no_wait_or_a_real_one(cls, v: float) -> float:
        if 0 < v < 1:
            raise ValueError("0 (no drain wait) or at least 1 s")
        return v

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data):
        if isinstance(data, dict) and "max_unavailable" in data:
            raise ValueError("max_unavailable is each class's now, with or without a gateway: "
                             "rolling = {'max_unavailable': N} in its group_data file")
        return data


PEM = re.compile(r"(-----BEGIN [A-Z0-9 ]{1,40}-----\n[A-Za-z0-9+/=\n]{16,65536}-----END [A-Z0-9 ]{1,40}-----\n){1,16}",
                 re.ASCII)  # a CA's file may hold its chain


def pem_problem(value: str) -> str | None:
    """Why a certificate or key read from its source is not PEM (never showing it), or None."""
    if PEM.fullmatch(value.strip() + "\n"):
        return None
    if "\ufffd" in value or "\0" in value:  # read_pem_file's stand-in for bytes that are not text
        return ("expected PEM blocks (-----BEGIN ...-----), found binary data (DER? openssl x509 -inform der "
                "converts it)")
    return "expected PEM blocks (-----BEGIN ...-----), found something else"


def read_pem_file(path: Path) -> str:
    """A certificate or key file as text, a binary one (DER) too: pem_problem names it, where decoding it as
    UTF-8 would fail as no error of the file's."""
    return path.read_bytes().decode("utf-8", errors="replace")


class MeshTls(Strict):
    """mTLS between the gateways' mesh listeners (smg's --mesh-tls-*): each listener requires a certificate
    chaining to the CA, each dial presents its own gateway's."""

    ca_cert: Source = Field(description="Where the CA certificate (PEM) the gateways' certificates chain to comes from.")
    cert: Source = Field(description="Each gateway's certificate (PEM), its address as a SAN: a file whose path "
                         "names `{host}`, the gateway's inventory name (~/pki/smg/{host}.crt). The file, links "
                         "followed, must be in the directory before `{host}` (~/pki/smg).")
    key: Source = Field(description="Each gateway's private key (PKCS#8 PEM): a file whose path names `{host}`, as "
                        "cert.")

    @model_validator(mode="after")
    def _per_gateway(self) -> MeshTls:
        for name, source in (("cert", self.cert), ("key", self.key)):
            if source.file is None or HOST_PLACEHOLDER not in source.file:
                raise ValueError(f"{name}: each gateway has its own: a file source whose path names {HOST_PLACEHOLDER} "
                                 "(e.g. {'file': '~/pki/smg/{host}." + ("crt" if name == "cert" else "key") + "'})")
        return self


class Mesh(Strict):
    """smg's mesh between the gateways of a group (smg 1.13.0's --enable-mesh): their routing state (the
    cache-aware policy's trees, rate limits) shared by gossip, each gateway's peers the group's other hosts.
    Each gateway's replicas still come from its own discovery file, which the deploy writes on every gateway."""

    port: Int = Field(39527, ge=1, le=65535, description="The mesh listener's port on each gateway, 1..65535 (smg's "
                      "default); not port or prometheus_port.")
    tls: MeshTls | None = Field(None, description="mTLS between the gateways (its own section below). Unset: the "
                                "mesh's gossip is plain TCP, for a network only the gateways share.")


class Gateway(Strict):
    """SGLang's model gateway (smg), on the one host of its inventory group."""

    routes: list[GroupName] = Field(min_length=1, description="The GPU classes (group_data files, by group name: "
                                    "letters, digits and _) whose replicas it routes; each class behind at most one "
                                    "gateway, and bound to an address the gateway host reaches (service.host not "
                                    "loopback).")
    unit: ServiceUnit = Field("smg", description="systemd unit name, without `.service` (the rule of service.unit).")
    version: Release = Field(SMG_VERSION, description="The smg release installed, a normalized PEP 440 version "
                             "(pip, from wheels the controller downloads once into its cache and uploads: the "
                             "host needs no package index).")
    install_dir: CommandPath = Field("/opt/smg", description="Its virtual environment (venv/, whose bin/smg the "
                                     "unit runs; with api_key its bin/python, which calls smg with the key from "
                                     "the environment) and wheels (wheels/).")
    python: AbsPath = Field("/usr/bin/python3", description="The host's Python (>= 3.9) the venv is made from.")
    host: HostAddress = Field("0.0.0.0", description="Bind address of the client API.")
    port: Int = Field(8000, ge=1, le=65535, description="Port of the client API (OpenAI) and admin API (/workers), "
                      "1..65535.")
    prometheus_port: Int = Field(29000, ge=1, le=65535, description="smg's own /metrics, 1..65535; not `port`.")
    policy: Literal["cache_aware", "round_robin", "least_load", "power_of_two", "random"] = Field(
        "cache_aware", description="Load-balancing policy (smg's default).")
    api_key: Source | None = Field(
        None, description="Where the clients' API key comes from (a secret source, like service.api_key). smg "
        "also sends it to the replicas, so a routed class with service.api_key must name the same source.")
    health_check_interval_s: Int = Field(
        2, ge=1, le=600, description="smg's probe interval, 1..600 s, and how often it retries a replica that did "
        "not answer yet: a replica back in the file is `ready` after 2 good probes (smg's own defaults, 60 and 30, "
        "make that minutes per replica).")
    shutdown_grace_period_s: Int = Field(180, ge=0, le=3600, description="How long a stopping smg waits "
                                         "for in-flight requests, 0..3600 s (smg's default).")
    rolling: GatewayRolling = Field(default_factory=GatewayRolling,
                                    description="How a replica of a class it routes leaves it and comes back.")
    mesh: Mesh | None = Field(None, description="smg's mesh between the gateways of the group (its own section "
                              "below). Unset: each gateway keeps its routing state to itself.")
    floating: Floating | None = Field(None, description="A floating address in front of two or more gateway hosts "
                                      "(keepalived, VRRP; its own section below): required for a gateway group of "
                                      "more than one host. Unset: one host, clients use its address.")

    @model_validator(mode="after")
    def _ports_apart(self) -> Gateway:
        ports = [("port", self.port), ("prometheus_port", self.prometheus_port)] + (
            [("mesh.port", self.mesh.port)] if self.mesh is not None else [])
        for i, (a, p) in enumerate(ports):
            for b, q in ports[i + 1:]:
                if p == q:
                    raise ValueError(f"{a} and {b} both {p}: smg binds each, expected different ports")
        return self

    @property
    def service_unit(self) -> str:
        return f"{self.unit}.service"

    @property
    def unit_file(self) -> str:
        return layout.unit_file(self.unit)

    @property
    def discovery_file(self) -> str:
        """The workers smg routes to (`--discovery-provider file`), rewritten atomically by the deploy."""
        return layout.gateway_discovery_file(self.unit)

    @property
    def secret_file(self) -> str:
        """0600 EnvironmentFile with the API key (SMG_API_KEY), for LAUNCH_WITH_KEY."""
        return layout.gateway_secret_file(self.unit)

    @property
    def auth_header_file(self) -> str:
        """0600 `Authorization:` header for the deploy's own requests on the host (curl -H @file): the key of the
        smg running there, installed from declared_auth_header_file as it starts."""
        return layout.gateway_auth_header_file(self.unit)

    @property
    def declared_auth_header_file(self) -> str:
        """The header of the declared key, written by the deploy: while the gateways of a group restart in turns
        after a new key, each peer is asked with the key it runs."""
        return layout.gateway_declared_auth_header_file(self.unit)

    @property
    def generation_file(self) -> str:
        """What the unit, key and smg version add up to (generation()): a started smg copies it to running_file."""
        return layout.gateway_generation_file(self.unit)

    @property
    def running_file(self) -> str:
        return layout.gateway_running_file(self.unit)

    @property
    def venv(self) -> str:
        return f"{self.install_dir}/venv"

    @property
    def wheels_dir(self) -> str:
        return f"{self.install_dir}/wheels/{self.version}"

    def url(self, path: str) -> str:
        """The gateway's own URL, as a command on its host reaches it."""
        return f"http://{local_address(self.host)}:{self.port}{path}"


def generation(unit_text: str, key_text: str | None, version: str) -> str:
    """One word for what a started smg runs: its unit, its key file and its version. The unit's ExecStartPre
    copies the declared one (generation_file) to running_file, so a run that wrote the files and was lost
    before the restart leaves a gateway whose running generation tells it still needs one."""
    text = "\0".join([unit_text, key_text or "", version])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_routes(gateways: dict[str, Gateway], classes: dict[str, ClassSpec]) -> list[str]:
    """Problems between the gateways and the classes they route, each naming the field."""
    problems, routed_by = [], {}
    for group, gw in gateways.items():
        where = f"group_data/{group}.py: gateway.routes"
        for cls in dict.fromkeys(gw.routes):
            if gw.routes.count(cls) > 1:
                problems.append(f"{where}: {cls!r} listed {gw.routes.count(cls)} times; expected once")
            if cls not in classes:
                problems.append(f"{where}: {cls!r} is not a GPU class; expected one of {', '.join(classes)}")
                continue
            if cls in routed_by:
                problems.append(f"{where}: {cls!r} is already routed by {routed_by[cls]}; a class is behind one gateway")
            routed_by[cls] = group
            host = classes[cls].service.host
            if is_loopback(host):
                problems.append(f"{where}: {cls!r} binds service.host {host!r} (group_data/{cls}.py), which smg on "
                                "the gateway host cannot reach; expected an address of the replica's network, "
                                "or 0.0.0.0 / ::")
    return problems


def key_problems(group: str, gw: Gateway, classes: dict[str, ClassSpec]) -> list[str]:
    """smg sends its own key to the replicas: a routed class's key must be the gateway's. Checked for
    a gateway the inventory runs (a fleet without one may key its classes as it likes)."""
    problems = []
    for cls in gw.routes:
        key = classes[cls].service.api_key if cls in classes else None
        if key is not None and key != gw.api_key:
            problems.append(
                f"group_data/{group}.py: gateway.api_key: expected the source of {cls}'s service.api_key "
                f"({key.describe()}), found {gw.api_key.describe() if gw.api_key else 'none'}: smg sends its "
                "own key to the replicas")
    return problems


@dataclass(frozen=True)
class Replica:
    """One host of a routed class, as the gateway reaches it."""

    host: str  # inventory name
    gpu_class: str
    served_model: str
    url: str  # http://address:port, the address pyinfra connects to


def discovery_file(replicas: list[Replica], out: set[str]) -> str:
    """smg's discovery file: every replica but those taken `out` (host names). Only keys smg
    1.13.0 knows: one unknown key and it rejects the whole file."""
    listed = [w for w in workers(replicas) if w["id"] not in out]
    return json.dumps({"version": 1, "workers": listed}, indent=1) + "\n"


def parse_workers(text: str | None) -> dict[str, str]:
    """GET /workers -> {url: status}; Unreadable: not an answer of smg 1.13.0's /workers."""
    answer = load_json(text, "/workers")
    workers = answer.get("workers") if isinstance(answer, dict) else None
    if not isinstance(workers, list) or not all(
            isinstance(w, dict) and isinstance(w.get("url"), str) and isinstance(w.get("status"), str)
            and len(w["url"]) <= 2048 and len(w["status"]) <= 64 for w in workers):
        raise Unreadable(f"/workers: expected {{\"workers\": [{{\"url\", \"status\"}}, ...]}}, found {excerpt(text or '')}")
    return {w["url"].rstrip("/"): w["status"] for w in workers}


def workers_command(gw: Gateway) -> str:
    """GET /workers on the gateway host, with its key from the 0600 header file."""
    auth = f"-H @{shlex.quote(gw.auth_header_file)} " if gw.api_key is not None else ""
    return f"{CURL} -sS --fail-with-body --max-time 10 {auth}{shlex.quote(gw.url('/workers'))}"


def health_command(gw: Gateway) -> str:
    """/health's HTTP status on the gateway host."""
    return f"{CURL} -s -o /dev/null -w '%{{http_code}}' {shlex.quote(gw.url('/health'))}"


def ready_peers(me: Replica, replicas: list[Replica], statuses: dict[str, str]) -> tuple[str, ...]:
    """The replicas of `me`'s served model, of any class, smg routes to now (its peers while it is out); none for a
    replica smg does not route to (it carries no traffic: it needs none)."""
    if statuses.get(me.url) != READY:
        return ()
    return tuple(r.host for r in replicas if r.served_model == me.served_model and r.url != me.url
                 and statuses.get(r.url) == READY)


def peer_problem(me: Replica, replicas: list[Replica], statuses: dict[str, str]) -> str | None:
    """Why `me` may not go out of the gateway now (None: it may). Only a replica smg routes to
    needs a peer: one that is not ready carries no traffic."""
    if statuses.get(me.url) != READY:
        return None
    if ready_peers(me, replicas, statuses):
        return None
    return (f"no other replica of {me.served_model} is ready in the gateway (workers: "
            + (", ".join(f"{u} {s}" for u, s in sorted(statuses.items())) or "none") + "): taking "
            f"{me.host} out would leave {me.served_model} with nothing to route to")


def merged(views: dict[str, dict[str, str]]) -> dict[str, str]:
    """One view of the replicas from each gateway's of a group ({gateway: {url: status}}), for the drain: a
    replica is `ready` where every gateway says so; routed (a status that is not `draining`: what each says)
    while any gateway still routes to it; `draining` where none does but one still lists it. One gateway:
    its own view."""
    if len(views) == 1:
        return dict(next(iter(views.values())))
    out = {}
    for url in dict.fromkeys(u for view in views.values() for u in view):
        said = {gw: view.get(url) for gw, view in views.items()}
        if all(s == READY for s in said.values()):
            out[url] = READY
        elif any(s is not None and s != DRAINING for s in said.values()):
            out[url] = ", ".join(f"{s or 'not registered'} in {gw}" for gw, s in said.items())
        else:
            out[url] = DRAINING
    return out


def routed(statuses: dict[str, str], url: str) -> bool:
    """smg may still send it new requests: it is registered and not draining."""
    return url in statuses and statuses[url] != DRAINING


KEY_VARIABLE = "SMG_API_KEY"  # in the 0600 EnvironmentFile (gateway.secret_file), read by LAUNCH_WITH_KEY
# smg 1.13.0 takes its key from --api-key only (no environment variable, no file), and every local user reads a
# process's arguments (ps, /proc/PID/cmdline): what `smg launch` runs, called from Python with the key set from
# the environment, which only root reads (/proc/PID/environ)
LAUNCH_WITH_KEY = ("import os, sys; from smg.launch_router import launch_router, parse_router_args; "
                   f"args = parse_router_args(sys.argv[1:]); args.api_key = os.environ.pop({KEY_VARIABLE!r}); "
                   "launch_router(args)")


@dataclass(frozen=True)
class MeshNode:
    """One gateway of a group in smg's mesh: the address it advertises, its peers' (inventory addresses)."""

    me: str
    peers: tuple[str, ...]


def mesh_file(gw: Gateway, which: str) -> str:
    """The 0600 copies of the mesh's CA certificate ("ca.pem"), this gateway's certificate ("crt") and key ("key")."""
    return layout.gateway_mesh_file(gw.unit, which)


def launch_args(gw: Gateway, node: MeshNode | None = None) -> list[str]:
    """smg's command line: `smg launch`, or with gateway.api_key LAUNCH_WITH_KEY (the same arguments, the key from
    the environment); with gateway.mesh, this gateway's place in it."""
    mesh = []
    if gw.mesh is not None and node is not None:
        mesh = ["--enable-mesh", "--mesh-port", str(gw.mesh.port), "--mesh-advertise-host", node.me]
        mesh += ["--mesh-peer-urls", *(f"{url_host(p)}:{gw.mesh.port}" for p in node.peers)] if node.peers else []
        if gw.mesh.tls is not None:
            mesh += ["--mesh-tls-ca-cert", mesh_file(gw, "ca.pem"), "--mesh-tls-cert", mesh_file(gw, "crt"),
                     "--mesh-tls-key", mesh_file(gw, "key")]
    launch = [f"{gw.venv}/bin/smg", "launch"] if gw.api_key is None else \
        [f"{gw.venv}/bin/python", "-c", LAUNCH_WITH_KEY]
    return [
        *launch,
        "--host", gw.host, "--port", str(gw.port),
        "--policy", gw.policy,
        "--discovery-provider", "file", "--discovery-file", gw.discovery_file,
        "--health-check-interval-secs", str(gw.health_check_interval_s),
        # a replica listed before it serves is retried this often (smg's default: every 30 s)
        "--worker-startup-check-interval", str(gw.health_check_interval_s),
        "--prometheus-port", str(gw.prometheus_port),
        "--shutdown-grace-period-secs", str(gw.shutdown_grace_period_s),
        *mesh,
    ]


@dataclass(frozen=True)
class GatewayHost:
    """What the gateway host has: its Python (for which wheels), its machine, smg installed; smg's unit and
    what its running smg started with; behind a floating address, its keepalived and interfaces."""

    python: str  # "3.11", '' if none
    machine: str  # uname -m
    smg: str  # installed smg version in the venv, '' if none
    problem: str = ""  # what the host answered that is not a Python version or a machine name
    active: str = ""  # the smg unit's ActiveState
    ready: bool = False  # smg's /readiness answered 200
    running: str = ""  # the generation the running smg started with (its ExecStartPre's copy), '' if none
    generation: str = ""  # the generation its files say (gateway.generation_file), '' if none
    vrrp: Vrrp | None = None  # read where gateway.floating is declared
    interfaces: tuple[Interface, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # sha1 of the floating address's files there (path -> sha1)
    programs: dict[str, bool] = field(default_factory=dict)  # each program it answered for -> on its PATH
    drained: frozenset[str] = frozenset()  # the replicas its drains keep out of smg now (fleet/turns/drains.py)

    @property
    def python_tag(self) -> str:
        return "cp" + self.python.replace(".", "")


SMG_RELEASE = re.compile(r"[0-9][0-9A-Za-z.+!-]{0,63}", re.ASCII)  # smg's version as the gateway host says it
# They name the controller's wheel cache directory: nothing else may pass (no `/`, no `..`).
HOST_FIELDS = (
    ("python", re.compile(r"3\.[0-9]{1,2}", re.ASCII), "a Python version such as 3.11"),
    ("machine", re.compile(r"[a-z0-9_]{1,16}", re.ASCII), "a machine name such as x86_64"),
    ("smg", SMG_RELEASE, "a version such as 1.13.0"),
)
GENERATION = re.compile(r"[0-9a-f]{16}")
SHA1_LINE = re.compile(r"^([0-9a-f]{40})  (/[^\n]{1,4096})$", re.M)


def parse_gateway_host(answer: str | list[str]) -> GatewayHost:
    """The records of facts/gateway.py's command: `@@python`, `@@machine`, `@@smg`, the unit's `@@active`,
    `@@running` and `@@generation`, `@@ready`; where gateway.floating is declared `@@interfaces`, `@@files` and the
    `@@vrrp-*` ones (fleet.gateway.floating.parse_vrrp); `@@program` ones (fleet.rollout.prerequisites)."""
    said = {f.key: (f.text or "").strip() for f in frames(answer)}
    values, problems = {}, []
    for key, pattern, what in HOST_FIELDS:
        text = said.get(key, "")
        values[key] = text if pattern.fullmatch(text) else ""
        if text and not values[key]:
            problems.append(f"{key} {excerpt(text)} is not {what}")
    vrrp = parse_vrrp(said) if "vrrp-active" in said else None
    if vrrp is not None and vrrp.problem:
        problems.append(vrrp.problem)
    return GatewayHost(**values, problem="; ".join(problems), active=said.get("active", "")[:32],
                       ready=said.get("ready") == "200",
                       running=_generation(said.get("running", "")), generation=_generation(said.get("generation", "")),
                       vrrp=vrrp, interfaces=tuple(parse_interfaces(said.get("interfaces", ""))),
                       files={path: sha for sha, path in SHA1_LINE.findall(said.get("files", ""))[:64]},
                       programs=parse_probe(answer), drained=frozenset(active(said.get("drains"), said.get("clock"))))


def _generation(text: str) -> str:
    return text if GENERATION.fullmatch(text) else ""
