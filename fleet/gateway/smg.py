"""The gateway: SGLang's model gateway (smg) in front of the replicas of the GPU classes it
routes, and the decisions of a rolling rollout behind it.

group_data/<gateway>.py declares `gateway = {...}` (fleet/gateway/models.py); its one host runs smg
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

from fleet.core import layout
from fleet.turns.drains import active, workers
from fleet.gateway.floating import Interface, Vrrp, parse_interfaces, parse_vrrp
from fleet.gateway.models import Gateway
from fleet.rollout.gate import CURL, url_host
from fleet.rollout.prerequisites import parse_probe
from fleet.core.wire import Unreadable, excerpt, frames, load_json

# smg's worker states (GET /workers); only `ready` ones get traffic
READY, DRAINING = "ready", "draining"


def generation(unit_text: str, key_text: str | None, version: str) -> str:
    """One word for what a started smg runs: its unit, its key file and its version. The unit's ExecStartPre
    copies the declared one (generation_file) to running_file, so a run that wrote the files and was lost
    before the restart leaves a gateway whose running generation tells it still needs one."""
    text = "\0".join([unit_text, key_text or "", version])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
