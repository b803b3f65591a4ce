"""From a validated spec to what lands on the host: the server's argv, the unit, the env file.

Flags are spelt as SGLang 0.5.23 spells them (tests/contract parses them with its own
parser). DDTREE renders as the open upstream PR 29907 proposes; it is never rewritten
into DFLASH: preflight refuses it on an engine that lacks it.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from fleet.spec import ClassSpec, DDTree, DFlash, EagleFamily, Ngram

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
API_KEY_VAR = "SGLANG_API_KEY"
# systemd expands this from the 0600 secret file: the key itself is never in the unit.
API_KEY_REF = "${" + API_KEY_VAR + "}"
MODULE = ("-m", "sglang.launch_server")


def _num(v: int | float) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def speculative_args(spec: ClassSpec) -> list[tuple[str, ...]]:
    s = spec.speculative
    if s.algorithm == "none":
        return []
    args: list[tuple[str, ...]] = [("--speculative-algorithm", s.algorithm)]
    if isinstance(s, (EagleFamily, DFlash, DDTree)) and s.draft_model_path:
        args.append(("--speculative-draft-model-path", s.draft_model_path))
    if isinstance(s, EagleFamily) and s.num_steps is not None:
        args.append(("--speculative-num-steps", _num(s.num_steps)))
    if isinstance(s, EagleFamily) and s.topk is not None:
        args.append(("--speculative-eagle-topk", _num(s.topk)))
    if isinstance(s, Ngram) and s.max_bfs_breadth is not None:
        args.append(("--speculative-ngram-max-bfs-breadth", _num(s.max_bfs_breadth)))
    if isinstance(s, (EagleFamily, Ngram)) and s.num_draft_tokens is not None:
        args.append(("--speculative-num-draft-tokens", _num(s.num_draft_tokens)))
    if isinstance(s, (DFlash, DDTree)):
        args.append(("--speculative-dflash-block-size", _num(s.block_size)))
    if isinstance(s, DDTree):
        args.append(("--speculative-ddtree-budget", _num(s.tree_budget)))  # provisional: PR 29907
    return args


def server_arg_groups(spec: ClassSpec) -> list[tuple[str, ...]]:
    """The server's flags, each with its value(s), in the order they are written."""
    svc = spec.service
    args: list[tuple[str, ...]] = [
        ("--model-path", svc.model_path),
        ("--served-model-name", svc.served_model_name),
        ("--host", svc.host),
        ("--port", _num(svc.port)),
        ("--tp-size", _num(svc.tp_size)),
        ("--mem-fraction-static", _num(svc.mem_fraction)),
    ]
    if svc.context_length is not None:
        args.append(("--context-length", _num(svc.context_length)))
    if svc.trust_remote_code:
        args.append(("--trust-remote-code",))
    if svc.enable_metrics:
        args.append(("--enable-metrics",))
    if svc.api_key is not None:
        args.append(("--api-key", API_KEY_REF))
    args += speculative_args(spec)
    args += [(a,) for a in svc.extra_args]
    return args


def server_argv(spec: ClassSpec) -> list[str]:
    """[launcher, -m, sglang.launch_server, flags...] with the API key as ${SGLANG_API_KEY}."""
    return [spec.service.launcher, *MODULE, *(t for group in server_arg_groups(spec) for t in group)]


_PLAIN = re.compile(r"^[A-Za-z0-9_./:=@+,-]+$")


def systemd_quote(token: str) -> str:
    """One argv token as systemd's ExecStart= reads it back: no expansion, no splitting."""
    if token == API_KEY_REF:
        return token
    escaped = token.replace("%", "%%").replace("$", "$$")
    if _PLAIN.match(escaped):
        return escaped
    quoted = escaped.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{quoted}"'


def env_quote(value: str) -> str:
    """A value as systemd's EnvironmentFile= reads it back."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(TEMPLATES)),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters["systemd_quote"] = systemd_quote
_env.filters["env_quote"] = env_quote


RESTART_DELAY_S = 10  # RestartSec: a crashed server is started again after this


def _seconds(value: float) -> str:
    return f"{value:g}s"


def render_unit(spec: ClassSpec, group: str) -> str:
    attempts = spec.service.restarts_on_crash + 1
    return _env.get_template("sglang.service.j2").render(
        spec=spec,
        group=group,
        restart_delay=_seconds(RESTART_DELAY_S),
        drain_timeout=_seconds(spec.service.drain_timeout_s),
        start_limit_burst=attempts,
        # wide enough to hold every attempt, each a full load: the limit must be reachable
        start_limit_interval=_seconds(attempts * (spec.readiness.load_timeout_s + RESTART_DELAY_S)),
        command=[spec.service.launcher, *MODULE],
        env_files=[spec.env_file] + ([spec.secret_file] if spec.service.api_key is not None else []),
        arg_lines=server_arg_groups(spec),
    )


def render_env(spec: ClassSpec) -> str:
    return _env.get_template("sglang.env.j2").render(spec=spec)


def render_secret(spec: ClassSpec) -> str | None:
    """The 0600 file's content, or None when the service has no API key."""
    if spec.service.api_key is None:
        return None
    return f"{API_KEY_VAR}={env_quote(spec.service.api_key.get_secret_value())}\n"
