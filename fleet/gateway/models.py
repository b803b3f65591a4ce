"""The gateway's spec: what group_data/<gateway>.py declares as `gateway = {...}` (smg's release, ports,
policy, key, the rolling of the classes it routes, its mesh and floating address) and the checks between it
and the classes it routes. Apart from smg's wire (fleet/gateway/smg.py) so the spec's loaders and docs read
the model without the commands and parsers of a gateway host.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from packaging.version import VERSION_PATTERN, Version
from pydantic import AfterValidator, Field, field_validator, model_validator

from fleet.core import layout
from fleet.gateway.floating import Floating
from fleet.rollout.gate import local_address
from fleet.spec.secrets import HOST_PLACEHOLDER
from fleet.spec import AbsPath, ClassSpec, CommandPath, HostAddress, Int, Kind, Number, ServiceUnit, Source, Strict, \
    is_loopback

SMG_VERSION = "1.13.0"

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
