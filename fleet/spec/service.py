"""The service section (Service): the SGLang server unit."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, field_validator, model_validator

from fleet.spec.flags import _extra_args
from fleet.spec.hub import HubModel, _one_of
from fleet.spec.names import ENV_NAME, ENV_RULE, SERVICE_UNIT_MAX, UNIT_RULE, HostAddress, ServiceUnit
from fleet.spec.secret import SecretSource, Source, names_a_secret
from fleet.spec.text import NAME_MAX, SEGMENT_BYTES, AbsPath, Bool, CommandPath, Int, Number, Strict, Text, text

DEFAULT_LAUNCHER = "/opt/sglang/bin/python"  # where a hand-made SGLang environment usually is


class Service(Strict):
    """The SGLang server: one systemd unit per host."""

    unit: ServiceUnit = Field("sglang", description="systemd unit name, without `.service`: " + UNIT_RULE
                              + f", no '@', at most {SERVICE_UNIT_MAX} characters (the deploy's file names made "
                              f"from it fit in {SEGMENT_BYTES} bytes).")
    launcher: CommandPath | None = Field(
        None,
        description=f"Interpreter of a hand-made SGLang environment; runs `-m sglang.launch_server`. Unset: "
        f"{DEFAULT_LAUNCHER}, or the venv of the declared `engine` (the two are exclusive).",
    )
    model_path: AbsPath | None = Field(None, description="Target model directory on the host, for weights placed "
                                       "by hand. Exactly one of model_path and model.")
    model: HubModel | None = Field(None, description="Target model by Hugging Face repository and commit, fetched "
                                   "by the deploy into its revision directory (hub.models_dir/ORG/NAME/REVISION), "
                                   "which then is model_path.")
    served_model_name: text(NAME_MAX) = Field(
        description=f"Name clients use in the OpenAI API (`model`); not starting with `-`, at most {NAME_MAX} "
        "characters.")
    host: HostAddress = Field("127.0.0.1", description="Bind address (SGLang's default is 127.0.0.1). A class "
                              "behind a gateway binds one the gateway host reaches (not loopback).")
    port: Int = Field(30000, ge=1, le=65535, description="HTTP port (SGLang's default is 30000), 1..65535.")
    tp_size: Int = Field(1, ge=1, le=16, description="Tensor parallel size, 1..16; must divide the class's GPU count.")
    mem_fraction: Number = Field(
        0.85, ge=0.1, le=0.99,
        description="--mem-fraction-static: share of GPU memory for weights and KV cache, 0.1..0.99.",
    )
    context_length: Int | None = Field(None, ge=1, le=16_777_216,
                                       description="--context-length, 1..16777216; unset = the model's own.")
    trust_remote_code: Bool = Field(False, description="--trust-remote-code.")
    enable_metrics: Bool = Field(True, description="--enable-metrics (Prometheus /metrics).")
    extra_args: Annotated[list[Text], BeforeValidator(_extra_args)] = Field(
        default_factory=list,
        description="Further SGLang flags, verbatim, appended to ExecStart. None of the flags the spec sets "
        "(--model-path, --tp-size, --speculative-algorithm, --speculative-draft-model-path ..., in any "
        "spelling SGLang's parser takes, abbreviations too: the refusal names the field; other "
        "--speculative-* tuning flags are fine), no secret flag (--api-key, --admin-api-key, "
        "--ssl-keyfile-password), no --config, no inline JSON for --watermark-config or "
        "--hicache-storage-backend-extra-config. Settings SGLang refuses with the speculative algorithm (DFLASH "
        "with --pp-size 2, NGRAM with --attn-dp-size 2 ...) are refused with its reason: see the known-bad "
        "speculative combinations at the end of this reference.",
    )
    environment: dict[str, Text] = Field(
        default_factory=dict,
        description="Environment of the unit (written to its 0644 environment file). A variable whose name "
        "marks a secret (a `_`-separated word TOKEN, KEY, SECRET, PASSWORD, PASSWD, APIKEY, CREDENTIAL(S)) "
        "belongs in secret_environment.",
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
    drain_timeout_s: Number = Field(
        120,
        ge=1,
        le=3600,
        description="How long a stop lets in-flight requests finish, 1..3600 s: SGLang drains on SIGTERM "
        "(the unit sends it to the server only, KillMode=mixed); systemd kills what is left after "
        "this (TimeoutStopSec).",
    )
    restarts_on_crash: Int = Field(
        2,
        ge=0,
        le=10,
        description="How often systemd restarts a crashed server before it gives up and leaves the "
        "unit failed, 0..10 (StartLimitBurst = this + 1, within a window of that many load timeouts), "
        "instead of reloading the model forever.",
    )

    @field_validator("served_model_name")
    @classmethod
    def _name(cls, v: str) -> str:
        # SGLang's parser would read a leading '-' as a flag, not as --served-model-name's value
        if not v or v.startswith("-"):
            raise ValueError("a non-empty name not starting with '-'")
        return v

    @field_validator("environment")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not a valid name: expected {ENV_RULE}")
            if names_a_secret(name):
                raise ValueError(f"{name} names a secret (its value is not shown): declare where it comes from "
                                 f"in service.secret_environment, e.g. {{'{name}': {{'env': '{name}'}}}}; "
                                 "environment is written to a file every local user can read")
        return env

    @field_validator("secret_environment")
    @classmethod
    def _secret_env_names(cls, env: dict[str, SecretSource]) -> dict[str, SecretSource]:
        for name in env:
            if not ENV_NAME.match(name):
                raise ValueError(f"environment variable name {name!r} is not a valid name: expected {ENV_RULE}")
        return env

    @model_validator(mode="after")
    def _one_model(self) -> Service:
        _one_of(self.model_path, self.model, "model_path", "model")
        return self

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
