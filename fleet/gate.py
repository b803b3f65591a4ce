"""The readiness gate and the smoke test, as plain functions over what the host answered.

Only `/health` == 200 means serving: systemd's "active" does not (the model load can
die minutes later) and neither does `/v1/models` (it answers before warm-up ends).
A crash or a restart of the unit ends the wait at the next poll, not at the timeout.
"""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass
from typing import Any

from fleet.spec import ClassSpec
from fleet.wire import ascii_int, block, captured, excerpt, finite, frames, load_json


@dataclass(frozen=True)
class Observation:
    """One poll: the unit as systemd sees it, and the HTTP status of /health (0 = no answer)."""

    active_state: str
    sub_state: str
    main_pid: int
    n_restarts: int
    result: str
    health: int
    probe: int = 0  # curl's exit status: 126/127, it could not run (the host lacks it), never "not ready"

    def describe(self) -> str:
        port = "port closed" if self.health == 0 else f"/health {self.health}"
        return f"unit {self.active_state} ({self.sub_state}), pid {self.main_pid or '-'}, {port}"


@dataclass(frozen=True)
class Verdict:
    done: bool
    ready: bool
    reason: str
    elapsed_s: float = 0.0


WAITING = Verdict(False, False, "")


def url_host(address: str) -> str:
    """An address as a URL's host: an IPv6 one in brackets."""
    return f"[{address}]" if ":" in address else address


def local_address(host: str) -> str:
    """Where a command on the host reaches a server bound to `host` (it may bind 127.0.0.1 only)."""
    if host == "0.0.0.0":
        return "127.0.0.1"
    return url_host("::1" if host == "::" else host)


def base_url(spec: ClassSpec) -> str:
    return f"http://{local_address(spec.service.host)}:{spec.service.port}"


def url(spec: ClassSpec, path: str) -> str:
    """A local URL of the service, quoted for the host's shell."""
    return shlex.quote(base_url(spec) + path)


# Requests to the local server: never through a proxy the host's environment names (http_proxy
# in /etc/environment reaches SSH sessions; curl would send even 127.0.0.1 there), and an IPv6
# address in brackets is an address, not one of curl's URL globs.
CURL = "curl --noproxy '*' --globoff"


OBSERVATION_MARK = "@@observation"


def _observe(spec: ClassSpec) -> str:
    unit = shlex.quote(spec.service_unit)
    return (
        f"systemctl show -p ActiveState,SubState,MainPID,NRestarts,Result -- {unit}; "
        # `&& ||`: a failed curl ends no command run under `set -e` (the restart's)
        f"h=$({CURL} -s -o /dev/null -w '%{{http_code}}' --max-time 2 {url(spec, '/health')}) && c=0 || c=$?; "
        "printf 'health=%s\\nprobe=%s\\n' \"$h\" \"$c\""
    )


def observe_command(spec: ClassSpec) -> str:
    """One observation of the unit and /health, after OBSERVATION_MARK."""
    return f"echo {OBSERVATION_MARK}; {_observe(spec)}"


def wait_command(spec: ClassSpec, previous: str, budget_s: float) -> str:
    """Poll on the host, every poll_interval_s, until the observation differs from `previous`
    (the last one the controller saw) or budget_s has passed; print the last one. The wait
    costs one SSH command per change of state, not one per poll."""
    return (
        f"prev={shlex.quote(previous)}; end=$(( $(date +%s) + {max(1, int(budget_s + 0.999))} )); "
        f"while :; do obs=$({_observe(spec)}); [ \"$obs\" != \"$prev\" ] && break; "
        f"[ \"$(date +%s)\" -ge \"$end\" ] && break; sleep {spec.readiness.poll_interval_s:g}; done; "
        f"echo {OBSERVATION_MARK}; printf '%s\\n' \"$obs\""
    )


def observation_text(stdout: str) -> str:
    """The observation part of a command's output (what wait_command compares with)."""
    return stdout.rpartition(OBSERVATION_MARK)[2].strip()


def parse_observation(stdout: str) -> Observation:
    kv = dict(line.split("=", 1) for line in observation_text(stdout).split("\n") if "=" in line)
    return Observation(
        active_state=kv.get("ActiveState", "unknown")[:64],
        sub_state=kv.get("SubState", "unknown")[:64],
        main_pid=ascii_int(kv.get("MainPID"), 0, 1 << 32) or 0,
        n_restarts=ascii_int(kv.get("NRestarts"), 0, 1 << 32) or 0,
        result=kv.get("Result", "")[:64],
        health=ascii_int(kv.get("health"), 0, 999) or 0,
        probe=ascii_int(kv.get("probe"), 0, 255) or 0,
    )


NOT_RUN = (126, 127)  # the shell's: found but not executable, not found


def judge(start: Observation, now: Observation, elapsed: float, timeout: float) -> Verdict:
    """start: the first poll after (re)starting the unit; now: the latest one."""
    if now.probe in NOT_RUN:
        return Verdict(True, False, f"/health could not be read: curl did not run on the host (exit {now.probe}: "
                       f"{'not found' if now.probe == 127 else 'not executable'})", elapsed)
    if now.active_state in ("failed", "inactive") or now.sub_state in ("auto-restart", "dead"):
        return Verdict(
            True, False, f"the unit stopped: {now.active_state} ({now.sub_state}, result {now.result})", elapsed
        )
    if now.n_restarts > start.n_restarts or (start.main_pid and now.main_pid != start.main_pid):
        return Verdict(
            True, False, f"the unit restarted (pid {start.main_pid} -> {now.main_pid}): the server died", elapsed
        )
    if now.health == 200 and now.active_state == "active":
        return Verdict(True, True, f"/health 200 after {elapsed:.1f}s", elapsed)
    if elapsed >= timeout:
        return Verdict(True, False, f"not ready after {timeout:g}s (load_timeout_s): {now.describe()}", elapsed)
    return WAITING


# --- smoke test -------------------------------------------------------------

@dataclass(frozen=True)
class SmokeResult:
    ok: bool
    reason: str
    latency_s: float = 0.0
    completion_tokens: int = 0
    tokens_per_s: float = 0.0
    accept_length: float | None = None
    text: str = ""
    reasoning_only: bool = False  # a thinking model still reasoning when max_tokens ran out (content null)

    def summary(self) -> str:
        if not self.ok:
            return f"FAILED: {self.reason}"
        accept = f", accept length {self.accept_length:.2f}" if self.accept_length is not None else ""
        kind = ", reasoning only" if self.reasoning_only else ""
        return f"{self.latency_s * 1000:.0f} ms, {self.tokens_per_s:.1f} tok/s{accept}{kind}"


# /server_info answers with the server's keys in clear: they are blanked on the host, before the
# answer crosses to the controller (where --debug would print it).
REDACT_KEYS = "sed -E 's/(\"[a-z_]*(api_key|password|token)\") *: *\"[^\"]*\"/\\1:\"***\"/g'"


def auth_option(spec: ClassSpec) -> str:
    """curl's option that sends the API key, read on the host from the 0600 header file: the key is
    never an argument (`ps` shows arguments to every local user), never sent from here."""
    return f"-H @{shlex.quote(spec.auth_header_file)} " if spec.service.api_key is not None else ""


def metrics_command(spec: ClassSpec) -> str:
    """SGLang's Prometheus text (/metrics skips the API key; the header does no harm)."""
    return f"{CURL} -s --max-time 5 {auth_option(spec)}{url(spec, '/metrics')}"


def smoke_command(spec: ClassSpec) -> str:
    """Chat completion then /server_info (SGLang wants the key on both), run on the host; each
    answer its own record (a reply may hold any text: it must not frame the other)."""
    body = json.dumps(
        {
            "model": spec.service.served_model_name,
            "messages": [{"role": "user", "content": spec.smoke.prompt}],
            "temperature": 0,
            "max_tokens": spec.smoke.max_tokens,
        },
        ensure_ascii=False,
    )
    # The body as base64 into curl's stdin: quoted for the shell, each quote of the prompt grew fivefold at each
    # wrapping (sudo's sh -c, the login shell's), past one argument's 128 KiB; base64 has nothing to quote.
    sent = base64.b64encode(body.encode()).decode()
    auth_header = auth_option(spec)
    chat = (f"printf %s {sent} | base64 -d | {CURL} -sS --max-time {spec.smoke.timeout_s:g} "
            f"-H 'Content-Type: application/json' {auth_header}"
            f"-w '\\nhttp=%{{http_code}} time=%{{time_total}}\\n' --data-binary @- "
            f"{url(spec, '/v1/chat/completions')}")
    info = f"{CURL} -sS --max-time 10 {auth_header}{url(spec, '/server_info')} | {REDACT_KEYS}"
    return f"{captured('chat', chat)}; {block('server-info', info)}"


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31 else 0


def parse_smoke(answer: str) -> SmokeResult:
    """The `@@chat` record (curl's reply, then its `http=CODE time=SECONDS` line) and `@@server-info`."""
    parts = {f.key: f.text for f in frames(answer)}
    lines = (parts.get("chat") or "").strip().split("\n")
    status = dict(kv.split("=", 1) for kv in lines[-1].split() if "=" in kv)
    body = "\n".join(lines[:-1])
    http = status.get("http", "")
    if http != "200":
        shown = http if ascii_int(http, 0, 999) is not None else "nothing"
        return SmokeResult(False, f"chat completion answered HTTP {shown}: {excerpt(body, 200)}")
    try:
        reply = load_json(body, "chat completion")
        message = reply["choices"][0]["message"]
        text, reasoning = (message["content"] or "").strip(), (message.get("reasoning_content") or "").strip()
        tokens = _count((reply.get("usage") or {}).get("completion_tokens"))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return SmokeResult(False, f"chat completion is not OpenAI-shaped JSON: {excerpt(body, 200)}")
    # a reasoning model (--reasoning-parser) may spend a short reply thinking: content null,
    # the text in reasoning_content. Tokens made and no error is a working server.
    if not (text or reasoning) or tokens <= 0:
        return SmokeResult(False, f"chat completion returned no text ({tokens} completion tokens)")
    latency = finite(status.get("time")) or 0.0
    accept = None
    try:
        states = load_json(parts.get("server-info"), "/server_info").get("internal_states") or []
        values = [s["avg_spec_accept_length"] for s in states if s.get("avg_spec_accept_length") is not None]
        accept = finite(values[0]) if values else None
    except (ValueError, AttributeError, TypeError, KeyError):
        pass
    return SmokeResult(
        True,
        "ok",
        latency_s=latency,
        completion_tokens=tokens,
        tokens_per_s=tokens / latency if latency > 0 else 0.0,
        accept_length=accept,
        text=(text or reasoning)[:1000],
        reasoning_only=not text,
    )
