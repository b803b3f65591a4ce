"""The declared service of one GPU class: the single source of truth.

group_data/<class>.py holds plain data; these models validate it. The unit file,
the dry-run diff, the preflight guards, `make verify` and the README's spec
reference all come from here. Every default is documented where it is declared.
"""

from __future__ import annotations

import ipaddress
import re
import typing
from typing import Annotated, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

# SGLang 0.5.23's built-in speculative algorithms (its --help lists them); DDTREE is
# not among them: it is upstream PR 29907, provisional, and needs an engine that has it.
SGLANG_0523_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")

def _absolute(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError("an absolute path")
    return path


AbsPath = Annotated[str, AfterValidator(_absolute)]

HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
UNIT_NAME = re.compile(r"^[A-Za-z0-9@_.:-]+$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Strict(BaseModel):
    # Typos must not pass silently: every unknown key is an error.
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuClass(Strict):
    """What a host of this class must have, as nvidia-smi reports it."""

    accepted_models: list[str] = Field(
        min_length=1,
        description="Exact nvidia-smi `name` values this class accepts. No substring match: "
        "'NVIDIA RTX 6000 Ada Generation' is not an RTX PRO 6000.",
    )
    gpu_count: int = Field(ge=1, le=16, description="GPUs the host must have (at least).")
    min_memory_mib: int = Field(ge=1, description="Memory each GPU must have, in MiB (memory.total).")
    mig: bool = Field(
        False,
        description="True if the class runs on MIG-partitioned GPUs. A host whose GPUs' MIG mode differs "
        "is refused: with MIG on, SGLang sees slices (or nothing), not whole GPUs.",
    )
    shared: bool = Field(
        False,
        description="True if other GPU processes may run beside the service; "
        "False refuses a host whose GPUs are held by anything undeclared.",
    )

    @field_validator("accepted_models")
    @classmethod
    def _no_blank_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if name != name.strip() or not name:
                raise ValueError(f"model name {name!r} must be an exact nvidia-smi name (no padding)")
        return names


class SecretSource(Strict):
    """Where a secret is read from on the operator's machine when a deploy runs: never the value
    itself (group_data is shown by `pyinfra ... debug-inventory` and kept in git). Exactly one of:"""

    env: str | None = Field(None, description="Name of an environment variable of the deploy's process.")
    file: str | None = Field(None, description="Path of a file on the operator's machine (`~` expands); "
                             "its content, without the final newline.")

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        if (self.env is None) == (self.file is None):
            raise ValueError("exactly one of env (an environment variable's name) or file (a path)")
        if self.env is not None and not ENV_NAME.match(self.env):
            raise ValueError(f"env {self.env!r} is not an environment variable name")
        if self.file is not None and not self.file.strip():
            raise ValueError("file is empty")
        return self

    def describe(self) -> str:
        return f"environment variable {self.env}" if self.env is not None else f"file {self.file}"


def _a_source_not_a_value(value):
    # A plain string here is most likely the secret itself: refuse it without echoing it.
    if isinstance(value, str):
        raise ValueError("name where the secret comes from, not its value: {'env': 'VARIABLE'} or "
                         "{'file': '~/path'} (group_data is printed by debug-inventory)")
    return value


Source = Annotated[SecretSource, BeforeValidator(_a_source_not_a_value)]

# SGLang flags whose value is a secret: the process's arguments are readable by every local
# user, so they never go on the command line (they go to the 0600 --config file).
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--ssl-keyfile-password")
# --config is ours (one per server, SGLang refuses a second); these take inline JSON that may
# carry a key (watermark) or storage credentials (hicache): a file path is fine, `{...}` is not.
INLINE_SECRET_FLAGS = ("--watermark-config", "--hicache-storage-backend-extra-config")
# SGLang 0.5.23 flags that are prefixes of a secret flag: exact names, not abbreviations of it.
NOT_ABBREVIATIONS = ("--ssl-keyfile",)


def _flag_of(token: str) -> str:
    return token.split("=", 1)[0].replace("_", "-")


def _means(token: str, flag: str) -> bool:
    """argparse reads `token` as `flag`: exactly, or as an abbreviation of it (SGLang allows them)."""
    name = _flag_of(token)
    return name == flag or (len(name) > 3 and flag.startswith(name) and name not in NOT_ABBREVIATIONS)


class Service(Strict):
    """The SGLang server: one systemd unit per host."""

    unit: str = Field("sglang", description="systemd unit name, without `.service`.")
    launcher: AbsPath = Field(
        "/opt/sglang/bin/python",
        description="Interpreter of the SGLang environment; runs `-m sglang.launch_server`.",
    )
    model_path: AbsPath = Field(description="Target model directory on the host.")
    served_model_name: str = Field(description="Name clients use in the OpenAI API (`model`).")
    host: str = Field("127.0.0.1", description="Bind address (SGLang's default is 127.0.0.1).")
    port: int = Field(30000, ge=1, le=65535, description="HTTP port (SGLang's default is 30000).")
    tp_size: int = Field(1, ge=1, description="Tensor parallel size; must divide the class's GPU count.")
    mem_fraction: float = Field(
        0.85, gt=0, lt=1, description="--mem-fraction-static: share of GPU memory for weights and KV cache."
    )
    context_length: int | None = Field(None, ge=1, description="--context-length; unset = the model's own.")
    trust_remote_code: bool = Field(False, description="--trust-remote-code.")
    enable_metrics: bool = Field(True, description="--enable-metrics (Prometheus /metrics).")
    extra_args: list[str] = Field(
        default_factory=list, description="Further SGLang flags, verbatim, appended to ExecStart."
    )
    environment: dict[str, str] = Field(
        default_factory=dict, description="Environment of the unit (written to its environment file)."
    )
    api_key: Source | None = Field(
        None,
        description="Where the API key for /v1/* comes from, e.g. `{\"env\": \"SGLANG_API_KEY_PRO6000\"}`: read when "
        "a deploy runs, for the classes it deploys. It reaches SGLang through a 0600 YAML file "
        "(`--config`), never the command line; requests made on the host read it from a 0600 header file.",
    )
    admin_api_key: Source | None = Field(
        None,
        description="Where SGLang's admin API key (--admin-api-key, for management endpoints) comes "
        "from; kept like api_key.",
    )
    secret_environment: dict[str, Source] = Field(
        default_factory=dict,
        description="Secret environment variables of the unit (e.g. HF_TOKEN), each naming where its value "
        "comes from. Written to a 0600 environment file, never to the 0644 one or a diff.",
    )
    drain_timeout_s: float = Field(
        120,
        gt=0,
        le=3600,
        description="How long a stop lets in-flight requests finish: SGLang drains on SIGTERM "
        "(the unit sends it to the server only, KillMode=mixed); systemd kills what is left after "
        "this (TimeoutStopSec).",
    )
    restarts_on_crash: int = Field(
        2,
        ge=0,
        le=10,
        description="How often systemd restarts a crashed server before it gives up and leaves the "
        "unit failed (StartLimitBurst = this + 1, within a window of that many load timeouts), "
        "instead of reloading the model forever.",
    )

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        # It lands in URLs and shell commands on the host: an address or a name, nothing else.
        try:
            ipaddress.ip_address(v)
        except ValueError:
            if not HOST_NAME.match(v):
                raise ValueError("an IP address (e.g. 0.0.0.0, 127.0.0.1, ::) or a host name") from None
        return v

    @field_validator("served_model_name")
    @classmethod
    def _one_line_name(cls, v: str) -> str:
        # It lands in the unit's Description= too: a control character there could add a line.
        if not v or any(ord(c) < 32 or ord(c) == 127 for c in v):
            raise ValueError("a non-empty name without control characters (newlines, tabs)")
        return v

    @field_validator("unit")
    @classmethod
    def _unit_name(cls, v: str) -> str:
        if v.endswith(".service") or not UNIT_NAME.match(v):
            raise ValueError("a systemd unit name without '.service', letters, digits and @_.:- only")
        return v

    @field_validator("environment")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name, value in env.items():
            if not ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not a valid name")
            if "\n" in value:
                raise ValueError(f"environment variable {name} holds a newline")
        return env

    @field_validator("secret_environment")
    @classmethod
    def _secret_env_names(cls, env: dict[str, SecretSource]) -> dict[str, SecretSource]:
        for name in env:
            if not ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not a valid name")
        return env

    @field_validator("extra_args")
    @classmethod
    def _extra_args(cls, args: list[str]) -> list[str]:
        owned = ("--speculative-algorithm", "--model-path", "--port", "--host")
        for i, a in enumerate(args):
            if _flag_of(a) in owned:
                raise ValueError(f"{_flag_of(a)} is set by its own field, not extra_args")
            secret = next((f for f in SECRET_FLAGS if _means(a, f)), None)
            if secret:
                field = {"--api-key": "service.api_key", "--admin-api-key": "service.admin_api_key"}.get(secret)
                where = f"declare it in {field}" if field else "sglang-fleet has no field for it yet"
                raise ValueError(f"{a.split('=', 1)[0]} ({secret}) would put a secret in the server's "
                                 f"arguments, readable by every local user: {where}")
            if _means(a, "--config"):
                raise ValueError(f"{a.split('=', 1)[0]}: the server's --config is sglang-fleet's 0600 file "
                                 "for its secrets (declared in service.api_key, service.admin_api_key)")
            inline = next((f for f in INLINE_SECRET_FLAGS if _means(a, f)), None)
            value = a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
            if inline and value.lstrip().startswith("{"):
                raise ValueError(f"{inline} with inline JSON may carry a secret into the server's "
                                 "arguments: give the path of a file on the host instead")
        return args

    @model_validator(mode="after")
    def _secret_env_apart(self) -> Service:
        both = sorted(set(self.environment) & set(self.secret_environment))
        if both:
            raise ValueError(f"{', '.join(both)} in both environment and secret_environment: one place only")
        return self

    @property
    def server_secrets(self) -> dict[str, SecretSource]:
        """SGLang flag (as its --config YAML key) -> where its secret comes from, for those declared."""
        named = {"api-key": self.api_key, "admin-api-key": self.admin_api_key}
        return {flag: source for flag, source in named.items() if source is not None}


class NoSpeculation(Strict):
    """Plain decoding."""

    algorithm: Literal["none"]


class EagleFamily(Strict):
    """EAGLE, EAGLE3, NEXTN (alias of EAGLE) and STANDALONE draft-model speculation."""

    algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE"]
    draft_model_path: AbsPath | None = Field(
        None,
        description="Draft model directory. Required for EAGLE3 and STANDALONE: without it SGLang "
        "loads the target as its own draft and crashes later (sglang issue 36528). EAGLE/NEXTN "
        "may omit it only if the target has built-in draft (MTP) layers; preflight checks.",
    )
    num_steps: int | None = Field(None, ge=1, le=64, description="--speculative-num-steps.")
    topk: int | None = Field(None, ge=1, le=64, description="--speculative-eagle-topk.")
    num_draft_tokens: int | None = Field(None, ge=1, le=256, description="--speculative-num-draft-tokens.")

    @model_validator(mode="after")
    def _sglang_rules(self) -> EagleFamily:
        if self.algorithm in ("EAGLE3", "STANDALONE") and not self.draft_model_path:
            raise ValueError(
                f"{self.algorithm} needs draft_model_path: without it SGLang loads the target "
                "as its own draft (sglang issue 36528)"
            )
        if self.num_steps is None and (self.topk is not None or self.num_draft_tokens is not None):
            raise ValueError("topk and num_draft_tokens need num_steps (SGLang refuses them alone)")
        if self.num_steps is not None and self.topk is None:
            raise ValueError("num_steps needs topk too (SGLang 0.5.23 crashes at start without it)")
        if self.topk == 1 and self.num_steps is not None and self.num_draft_tokens is not None:
            if self.num_draft_tokens != self.num_steps + 1:
                raise ValueError("with topk 1, num_draft_tokens must be num_steps + 1")
        return self


class Ngram(Strict):
    """N-gram lookup speculation (no draft model)."""

    algorithm: Literal["NGRAM"]
    num_draft_tokens: int | None = Field(None, ge=1, le=256, description="Draft tokens; SGLang's default is 12.")
    max_bfs_breadth: int | None = Field(
        None, ge=1, le=64, description="--speculative-ngram-max-bfs-breadth: widest level of the n-gram tree."
    )


class DFlash(Strict):
    """Linear DFlash (block diffusion draft, z-lab/dflash): SGLang 0.5.23's DFLASH."""

    algorithm: Literal["DFLASH"]
    draft_model_path: AbsPath = Field(description="DFlash draft directory (required by SGLang).")
    block_size: int = Field(16, ge=1, le=16, description="--speculative-dflash-block-size, 1..16.")


class DDTree(Strict):
    """DDTree: DFlash draft tree verified in one target pass. PROVISIONAL: rendered as
    sglang PR 29907 proposes; SGLang 0.5.23 has no DDTree and preflight refuses it there.
    It is never served as linear DFLASH."""

    algorithm: Literal["DDTREE"]
    draft_model_path: AbsPath = Field(description="DFlash draft directory the tree is built from.")
    block_size: int = Field(16, ge=1, le=16, description="--speculative-dflash-block-size, 1..16.")
    tree_budget: int = Field(ge=1, le=1024, description="--speculative-ddtree-budget: tree nodes verified per step.")


Speculative = Annotated[
    Union[NoSpeculation, EagleFamily, Ngram, DFlash, DDTree],
    Field(discriminator="algorithm"),
]


class Readiness(Strict):
    """How long and how often the rollout waits for the new service."""

    load_timeout_s: float = Field(
        1200, gt=0, description="Give up (and roll back) if /health is not 200 by then. "
        "Sized for a 27B model load from local NVMe plus CUDA graph capture."
    )
    poll_interval_s: float = Field(
        0.5, gt=0, le=2, description="Seconds between polls of the unit and /health, made on the host itself "
        "(one SSH command per change of state, not per poll); a crash is seen within one."
    )
    progress_every_s: float = Field(15, gt=0, description="Print elapsed time and state this often while waiting.")
    workload_release_timeout_s: float = Field(
        120, gt=0, description="How long stopped workloads get to release GPU memory."
    )
    command_timeout_s: float = Field(
        30, gt=0, le=600, description="How long one command reading the host (nvidia-smi, the engine's "
        "import) may run: a GPU fallen off the bus makes nvidia-smi hang for good. Past it the host is "
        "refused, naming the command; the other hosts go on.",
    )


class Smoke(Strict):
    """The OpenAI-API chat completion that must succeed after a rollout."""

    prompt: str = Field("Say hello in one short sentence.", min_length=1)
    max_tokens: int = Field(16, ge=1, le=512)
    timeout_s: float = Field(120, gt=0)


class ClassSpec(Strict):
    """Everything declared for one GPU class (one group_data file over all.py)."""

    gpu_class: GpuClass = Field(description="Which GPUs a host of this class must have (preflight refuses others).")
    service: Service = Field(description="The SGLang server unit.")
    speculative: Speculative = Field(
        default_factory=lambda: NoSpeculation(algorithm="none"),
        description="Discriminated on `algorithm`: none, EAGLE/EAGLE3/NEXTN/STANDALONE, NGRAM, DFLASH, DDTREE.",
    )
    workloads: list[str] = Field(
        default_factory=list,
        description="systemd units that hold the GPUs and must be stopped first (e.g. dflash-train.service).",
    )
    readiness: Readiness = Field(default_factory=Readiness, description="The rollout's wait for /health.")
    smoke: Smoke = Field(default_factory=Smoke, description="The chat completion a rollout must pass.")

    @field_validator("workloads")
    @classmethod
    def _workload_units(cls, units: list[str]) -> list[str]:
        for u in units:
            if not UNIT_NAME.match(u):
                raise ValueError(f"{u!r} is not a systemd unit name")
        return [u if "." in u else f"{u}.service" for u in units]

    @model_validator(mode="after")
    def _cross_checks(self) -> ClassSpec:
        if self.gpu_class.gpu_count % self.service.tp_size:
            raise ValueError(
                f"service.tp_size {self.service.tp_size} does not divide gpu_class.gpu_count "
                f"{self.gpu_class.gpu_count}"
            )
        if self.service.unit + ".service" in self.workloads:
            raise ValueError(f"workloads lists the service's own unit {self.service.unit}.service")
        return self

    @property
    def service_unit(self) -> str:
        """The systemd unit's full name, e.g. sglang.service."""
        return f"{self.service.unit}.service"

    @property
    def watched_units(self) -> list[str]:
        """The service's unit and the workloads', whose states preflight reads."""
        return [self.service_unit, *self.workloads]

    @property
    def model_paths(self) -> list[str]:
        """Target first, then the draft if the algorithm has one."""
        draft = getattr(self.speculative, "draft_model_path", None)
        return [self.service.model_path] + ([draft] if draft else [])

    @property
    def unit_file(self) -> str:
        return f"/etc/systemd/system/{self.service.unit}.service"

    @property
    def env_file(self) -> str:
        return f"/etc/sglang/{self.service.unit}.env"

    @property
    def secret_file(self) -> str:
        """The 0600 environment file of service.secret_environment."""
        return f"/etc/sglang/{self.service.unit}.secret"

    @property
    def config_file(self) -> str:
        """The 0600 YAML the server reads its secret arguments from (--config)."""
        return f"/etc/sglang/{self.service.unit}.yaml"

    @property
    def auth_header_file(self) -> str:
        """The 0600 `Authorization:` header requests made on the host send (curl -H @file)."""
        return f"/etc/sglang/{self.service.unit}.auth"


SPECULATIVE_MODELS: dict[str, type[BaseModel]] = {
    tag: model
    for model in (NoSpeculation, EagleFamily, Ngram, DFlash, DDTree)
    for tag in typing.get_args(model.model_fields["algorithm"].annotation)
}
ALGORITHM_TAGS = tuple(SPECULATIVE_MODELS)

# The top-level names a group_data file may define (pyinfra merges them per host).
SPEC_KEYS = tuple(ClassSpec.model_fields)
