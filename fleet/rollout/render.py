"""From a validated spec to what lands on the host: the server's argv, the unit, the env file.

Flags are spelt as SGLang 0.5.23 spells them (tests/contract parses them with its own
parser). DDTREE renders as the open upstream PR 29907 proposes; it is never rewritten
into DFLASH: preflight refuses it on an engine that lacks it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import jinja2

from fleet.gateway import floating
from fleet.gateway.models import Gateway
from fleet.gateway.smg import KEY_VARIABLE, MeshNode, launch_args
from fleet.spec.secrets import HostSecret, Secrets, server_field
from fleet.spec import ClassSpec, DDTree, DFlash, EagleFamily, Ngram, host_name_problem

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "templates"
MODULE = ("-m", "sglang.launch_server")
# systemd >= 253 can drop log lines by pattern (LogFilterPatterns=): SGLang's `server_args=` line,
# which carries its keys in clear (sglang issue 37457), is kept out of the journal there.
JOURNAL_FILTER_SYSTEMD = 253
SERVER_ARGS_LINE = "server_args="


def _num(v: int | float) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def speculative_args(spec: ClassSpec) -> list[tuple[str, ...]]:
    s = spec.speculative
    if s.algorithm == "none":
        return []
    args: list[tuple[str, ...]] = [("--speculative-algorithm", s.algorithm)]
    if isinstance(s, (EagleFamily, DFlash, DDTree)) and spec.draft_path:
        args.append(("--speculative-draft-model-path", spec.draft_path))
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
        ("--model-path", spec.target_path),
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
    if svc.server_secrets:  # the keys are read from this 0600 file, never from the command line
        args.append(("--config", spec.config_file))
    args += speculative_args(spec)
    args += [(a,) for a in svc.extra_args]
    return args


def server_argv(spec: ClassSpec) -> list[str]:
    """[launcher, -m, sglang.launch_server, flags...]: the server's whole command line."""
    return [spec.launcher, *MODULE, *(t for group in server_arg_groups(spec) for t in group)]


# \Z, not $: $ matches before a final newline, which would end the ExecStart= line
_PLAIN = re.compile(r"^[A-Za-z0-9_./:=@+,-]+\Z")


def systemd_quote(token: str) -> str:
    """One argv token as systemd's ExecStart= reads it back: no expansion, no splitting."""
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


def render_unit(spec: ClassSpec, group: str, journal_filter: bool) -> str:
    """journal_filter: the host's systemd has LogFilterPatterns= (JOURNAL_FILTER_SYSTEMD)."""
    attempts = spec.service.restarts_on_crash + 1
    return _env.get_template("sglang.service.j2").render(
        spec=spec,
        group=group,
        restart_delay=_seconds(RESTART_DELAY_S),
        drain_timeout=_seconds(spec.service.drain_timeout_s),
        start_limit_burst=attempts,
        # wide enough to hold every attempt, each a full load: the limit must be reachable
        start_limit_interval=_seconds(attempts * (spec.readiness.load_timeout_s + RESTART_DELAY_S)),
        command=[spec.launcher, *MODULE],
        env_files=[spec.env_file] + ([spec.secret_file] if spec.service.secret_environment else []),
        arg_lines=server_arg_groups(spec),
        log_filters=[f"~{SERVER_ARGS_LINE}"] if journal_filter and spec.service.server_secrets else [],
    )


def render_gateway_unit(gw: Gateway, group: str, node: MeshNode | None = None) -> str:
    q = shlex.quote
    stopped = q(floating.stopped_file(gw.unit)) if gw.floating is not None else ""
    # what the started smg runs (fleet.gateway.smg.generation) and the key its host's requests send, and behind a
    # floating address keepalived's track file
    start_pre = f"mkdir -p {q(floating.RUN_DIR)} && cp {q(gw.generation_file)} {q(gw.running_file)}" + (
        f" && install -m 0600 {q(gw.declared_auth_header_file)} {q(gw.auth_header_file)}" if gw.api_key else "") + (
        f" && echo 0 > {stopped}" if stopped else "")
    return _env.get_template("smg.service.j2").render(
        gw=gw, group=group, command=launch_args(gw, node),
        env_files=[gw.secret_file] if gw.api_key is not None else [],
        stop_timeout=_seconds(gw.shutdown_grace_period_s + 15),
        start_pre=["/bin/sh", "-c", start_pre], stop_post=["/bin/sh", "-c", f"echo 1 > {stopped}"] if stopped else [],
    )


def render_keepalived(gw: Gateway, group: str, host: str, members: list[str], interface: str, prefix: int) -> str:
    """keepalived.conf of `host`, one of the gateway group's `members` (inventory order: its priority)."""
    # Written bare into a comment and router_id: keepalived has no quoting that would stop a line break, a $ or @
    # variable or an include. The inventory check refused such a name already; this is where it would do harm.
    if broken := host_name_problem(host):
        raise ValueError(f"keepalived.conf of gateway group {group}: host name: {broken}")
    index = members.index(host)
    return _env.get_template("keepalived.conf.j2").render(
        floating=gw.floating, group=group, host=host, index=index, count=len(members),
        instance=floating.instance(group), priority=floating.priority(index), interface=interface, prefix=prefix,
        # keepalived runs it without a shell (its own word splitting): a plain command, no quoting
        ready_command=f"{floating.TRACK_CURL} -s -o /dev/null --fail --max-time {floating.TRACK_INTERVAL_S} "
                      f"{gw.url('/readiness')}",
        track_interval=floating.TRACK_INTERVAL_S, track_fall=floating.TRACK_FALL, track_rise=floating.TRACK_RISE,
        stopped_file=floating.stopped_file(gw.unit), handoff_file=floating.handoff_file(gw.unit),
        auth_file=floating.AUTH_FILE, notify=floating.NOTIFY,
    )


AUTH_PASS = "auth_pass "  # keepalived.conf's word before VRRP's password


def render_vrrp_auth(password: str) -> str:
    """The 0600 file keepalived.conf includes in its authentication block (floating.password_problem checked it)."""
    return f"# Managed by sglang-fleet: VRRP's password (0600, root only).\n{AUTH_PASS}{password}\n"


def render_keepalived_dropin() -> str:
    return ("# Managed by sglang-fleet: the directory of keepalived's track files, there before it starts "
            "(fleet/gateway/floating.py).\n[Service]\n" + f"ExecStartPre=/bin/mkdir -p {floating.RUN_DIR}\n")


def render_gateway_sysctl() -> str:
    return "# Managed by sglang-fleet: a gateway behind a floating address (fleet/gateway/floating.py).\n" + "".join(
        f"{name} = {value}\n" for name, value in floating.SYSCTLS.items())


def render_env(spec: ClassSpec) -> str:
    return _env.get_template("sglang.env.j2").render(spec=spec)


def _declared(spec: ClassSpec, secrets: Secrets) -> None:
    # Writing a secret file without a declared secret's value would deploy a server without its key.
    missing = (set(spec.service.server_secrets) - set(secrets.server)) | \
        (set(spec.service.secret_environment) - set(secrets.environment))
    if missing:
        raise ValueError(f"secrets declared but not read: {', '.join(sorted(missing))}")


def _secret_file(spec: ClassSpec, what: str, lines: list[str]) -> str:
    return "\n".join([f"# Managed by sglang-fleet: {what} of {spec.service_unit} (0600, root only).", *lines]) + "\n"


def render_config(spec: ClassSpec, secrets: Secrets) -> str | None:
    """The 0600 YAML of the server's secret arguments (--config), or None when none is declared.
    Values are double-quoted: YAML would read an unquoted 1e10 or `true` as something else."""
    _declared(spec, secrets)
    if not spec.service.server_secrets:
        return None
    return _secret_file(spec, "the secret arguments",
                        [f'{flag}: "{secrets.server[flag]}"' for flag in spec.service.server_secrets])


def render_secret_env(spec: ClassSpec, secrets: Secrets) -> str | None:
    """The 0600 environment file of service.secret_environment, or None when none is declared."""
    _declared(spec, secrets)
    if not spec.service.secret_environment:
        return None
    return _secret_file(spec, "secret environment",
                        [f"{name}={env_quote(secrets.environment[name])}" for name in spec.service.secret_environment])


def render_auth_header(spec: ClassSpec, secrets: Secrets) -> str | None:
    """The header requests made on the host send (curl -H @file), or None without an API key."""
    _declared(spec, secrets)
    return auth_header(secrets.api_key) if spec.service.api_key is not None else None


BEARER = "Authorization: Bearer "


def auth_header(key: str) -> str:
    return f"{BEARER}{key}\n"


def gateway_secrets(gw: Gateway) -> list[HostSecret]:
    """Where the deploy leaves each secret of a gateway host (make verify looks for them in every process's
    arguments there): the key in the header file the deploy's requests send, the VRRP password in its file."""
    return [*([HostSecret("gateway.api_key", gw.auth_header_file, BEARER)] if gw.api_key is not None else []),
            *([HostSecret("gateway.floating.password", floating.AUTH_FILE, AUTH_PASS)] if gw.floating else [])]


def service_secrets(spec: ClassSpec) -> list[HostSecret]:
    """Where the deploy leaves each secret of a replica (make verify looks for them in every process's arguments
    there): the server's in its --config YAML (render_config), the environment's in its EnvironmentFile."""
    return [*(HostSecret(server_field(flag), spec.config_file, f'{flag}: "', '"')
              for flag in spec.service.server_secrets),
            *(HostSecret(f"service.secret_environment.{name}", spec.secret_file, f'{name}="', '"', escaped=True)
              for name in spec.service.secret_environment)]


def render_gateway_secret(key: str) -> str:
    """smg's 0600 EnvironmentFile: the key its launcher reads (fleet.gateway.smg.LAUNCH_WITH_KEY)."""
    return f"{KEY_VARIABLE}={env_quote(key)}\n"
