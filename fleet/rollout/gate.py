"""The readiness gate, as plain functions over what the host answered.

The gate has two steps, and a host is ready only after both:
1. `/health` == 200 (the poll: fleet/programs/gate.sh). systemd's "active" does not mean serving
   (the model load can die minutes later) and neither does `/v1/models` (it answers before
   warm-up ends). A crash or a restart of the unit ends the wait at the next poll, not at the
   timeout (readiness.load_timeout_s).
2. A real generation, its last step: the smoke test's chat completion (smoke.prompt, at most
   smoke.max_tokens, within smoke.timeout_s) must return tokens; for a speculative service it must
   also prove that speculation ran: the answer's meta_info has spec_verify_ct > 0, else
   sglang:spec_verify_calls_total grew across it. `/health` alone lies: SGLang's stays 200 through
   a hung scheduler (sglang issues 6624, 35822), and a drafter that never runs serves at the
   target's bare speed without an error.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
from dataclasses import dataclass, replace
from typing import Any

from fleet.core import controller
from fleet.spec import ClassSpec
from fleet.core.wire import ascii_int, block, captured, excerpt, finite, frames, load_json


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


OBSERVATION_MARK = "@@observation"  # what fleet/programs/gate.sh prints before an observation
POLL = controller.program("gate.sh")


def _poll(spec: ClassSpec, action: str, *more: object) -> str:
    """gate.sh's ACTION for the spec's unit and /health, in a subshell of the command's shell (its
    exit ends only that), its arguments the positional parameters, each quoted."""
    args = [action, spec.service_unit, base_url(spec) + "/health", *more]
    return f"( set -- {' '.join(shlex.quote(str(a)) for a in args)}\n{POLL}\n)"


def observe_command(spec: ClassSpec) -> str:
    """One observation of the unit and /health, after OBSERVATION_MARK."""
    return _poll(spec, "observe")


def wait_command(spec: ClassSpec, previous: str, budget_s: float) -> str:
    """Poll on the host, every poll_interval_s, until the observation differs from `previous`
    (the last one the controller saw) or budget_s has passed; print the last one. The wait
    costs one SSH command per change of state, not one per poll."""
    return _poll(spec, "wait", previous, max(1, int(budget_s + 0.999)), f"{spec.readiness.poll_interval_s:g}")


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


# --- the generation: the gate's last step (the smoke test's request) ----------------

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
    verify_ct: int | None = None  # the answer's meta_info spec_verify_ct (None: it has none)
    verify_grew: float | None = None  # sglang:spec_verify_calls_total after it less before (None: not read)

    def summary(self) -> str:
        if not self.ok:
            return f"FAILED: {self.reason}"
        accept = f", accept length {self.accept_length:.2f}" if self.accept_length is not None else ""
        kind = ", reasoning only" if self.reasoning_only else ""
        return f"{self.latency_s * 1000:.0f} ms, {self.tokens_per_s:.1f} tok/s{accept}{kind}"


# /server_info answers with the server's keys in clear: they are blanked on the host, before the
# answer crosses to the controller (where --debug would print it).
REDACT_KEYS = "sed -E 's/(\"[a-z_]*(api_key|password|token)\") *: *\"[^\"]*\"/\\1:\"***\"/g'"
METRICS_TIMEOUT_S = 5  # a read of /metrics (its curl --max-time)
VERIFY_CALLS = "sglang:spec_verify_calls_total"  # SGLang's count of verify steps (absent until it counts one)
METRICS_READ = "# read"  # the line the verify count's read prints first when /metrics answered


def auth_option(spec: ClassSpec) -> str:
    """curl's option that sends the API key, read on the host from the 0600 header file: the key is
    never an argument (`ps` shows arguments to every local user), never sent from here."""
    return f"-H @{shlex.quote(spec.auth_header_file)} " if spec.service.api_key is not None else ""


def metrics_command(spec: ClassSpec, options: str = "-s") -> str:
    """SGLang's Prometheus text (/metrics skips the API key; the header does no harm)."""
    return f"{CURL} {options} --max-time {METRICS_TIMEOUT_S} {auth_option(spec)}{url(spec, '/metrics')}"


def speculative(spec: ClassSpec) -> bool:
    return spec.speculative.algorithm != "none"


def _verify_count(spec: ClassSpec) -> str:
    """The verify counter's lines of /metrics, after METRICS_READ if /metrics answered at all."""
    return (f"m=$({metrics_command(spec, '-sf')}) && {{ echo {shlex.quote(METRICS_READ)}; "
            f"printf '%s\\n' \"$m\" | grep '^{VERIFY_CALLS}' || :; }}")


def smoke_command(spec: ClassSpec) -> str:
    """The chat completion (asking for its meta_info) then /server_info (SGLang wants the key on
    both), run on the host; each answer its own record (a reply may hold any text: it must not frame
    the other). For a speculative service with /metrics, the verify counter before and after it."""
    body = json.dumps(
        {
            "model": spec.service.served_model_name,
            "messages": [{"role": "user", "content": spec.smoke.prompt}],
            "temperature": 0,
            "max_tokens": spec.smoke.max_tokens,
            # SGLang 0.5.23 (serving_chat.py) gives each choice its meta_info, spec_verify_ct among it;
            # an engine without the field ignores it (the request model ignores unknown fields)
            "return_meta_info": True,
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
    counted = speculative(spec) and spec.service.enable_metrics
    before = f"{block('verify-before', _verify_count(spec))}; " if counted else ""
    after = f"; {block('verify-after', _verify_count(spec))}" if counted else ""
    return f"{before}{captured('chat', chat)}{after}; {block('server-info', info)}"


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> each metric name's value: a counter's (`_total`) the sum of its samples, for SGLang
    counts what its tokenizer manager finished in one child per is_streaming value (the real 0.5.23 server: a
    streamed request's tokens are not in the "false" child); any other name's its first finite sample (a gauge:
    SGLang has one per model)."""
    out: dict[str, float] = {}
    for m in map(_SAMPLE.match, text.split("\n")):
        value = finite(m.group(2)) if m else None
        if value is None:
            continue
        if m.group(1).endswith("_total"):
            out[m.group(1)] = out.get(m.group(1), 0.0) + value
        else:
            out.setdefault(m.group(1), value)
    return out


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 31 else 0


def _verify_calls(text: str | None) -> float | None:
    """The verify counter as one read printed it; absent from an answering /metrics, 0 (SGLang shows
    it only once it has counted); None when /metrics did not answer."""
    if text is None or METRICS_READ not in text.split("\n"):
        return None
    return parse_metrics(text).get(VERIFY_CALLS, 0.0)


CURL_EXITS = {7: "connection refused", 28: "timed out", 52: "the connection closed without an answer",
              56: "the connection broke"}


def parse_smoke(answer: str) -> SmokeResult:
    """The `@@chat` record (curl's reply, then its `http=CODE time=SECONDS` line), `@@server-info`, and the
    verify counter's `@@verify-before` and `@@verify-after` where the command read them."""
    parts = {f.key: f.text for f in frames(answer)}
    rcs = {f.key: f.value for f in frames(answer)}
    lines = (parts.get("chat") or "").strip().split("\n")
    status = dict(kv.split("=", 1) for kv in lines[-1].split() if "=" in kv)
    body = "\n".join(lines[:-1])
    http = status.get("http", "")
    if http in ("", "000"):
        rc = ascii_int(rcs.get("chat"), 0, 255)
        said = f"curl exit {rc}: {CURL_EXITS[rc]}" if rc in CURL_EXITS else f"curl exit {rc}" if rc else "nothing"
        return SmokeResult(False, f"chat completion got no answer ({said})")
    if http != "200":
        shown = http if ascii_int(http, 0, 999) is not None else "nothing"
        return SmokeResult(False, f"chat completion answered HTTP {shown}: {excerpt(body, 200)}")
    try:
        reply = load_json(body, "chat completion")
        choice = reply["choices"][0]
        message = choice["message"]
        text, reasoning = (message["content"] or "").strip(), (message.get("reasoning_content") or "").strip()
        tokens = _count((reply.get("usage") or {}).get("completion_tokens"))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return SmokeResult(False, f"chat completion is not OpenAI-shaped JSON: {excerpt(body, 200)}")
    # a reasoning model (--reasoning-parser) may spend a short reply thinking: content null,
    # the text in reasoning_content. Tokens made and no error is a working server.
    if not (text or reasoning) or tokens <= 0:
        return SmokeResult(False, f"chat completion returned no text ({tokens} completion tokens)")
    meta = choice.get("meta_info") if isinstance(choice, dict) else None
    verify_ct = _count(meta.get("spec_verify_ct")) if isinstance(meta, dict) and "spec_verify_ct" in meta else None
    before, after = _verify_calls(parts.get("verify-before")), _verify_calls(parts.get("verify-after"))
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
        verify_ct=verify_ct,
        verify_grew=after - before if before is not None and after is not None else None,
    )


def speculation_ran(result: SmokeResult) -> tuple[bool, str]:
    """(whether the generation proves speculation ran, what it showed): meta_info's spec_verify_ct > 0,
    else the verify counter grew across it (an engine that gives no meta_info, or 0.5.23, which leaves
    spec_verify_ct out when it is 0)."""
    meta = "no spec_verify_ct in its meta_info" if result.verify_ct is None else f"spec_verify_ct {result.verify_ct}"
    if result.verify_ct:
        return True, meta
    if result.verify_grew is None:
        return False, f"{meta}, {VERIFY_CALLS} not read (/metrics off or not answering)"
    return result.verify_grew > 0, f"{meta}, {VERIFY_CALLS} +{result.verify_grew:g}"


def judge_generation(host: str, spec: ClassSpec, result: SmokeResult) -> SmokeResult:
    """The gate's last step, judged: tokens back, and for a speculative service proof that speculation
    ran; else not ready, the reason naming the host, what was expected and what was found."""
    asked = (f"a chat completion with tokens (at most smoke.max_tokens {spec.smoke.max_tokens}, "
             f"within smoke.timeout_s {spec.smoke.timeout_s:g}s)")
    if not result.ok:
        return replace(result, reason=f"{host}: not ready: /health 200, but its generation failed: expected {asked}, "
                                      f"found: {result.reason}")
    if speculative(spec):
        ran, shown = speculation_ran(result)
        if not ran:
            return replace(result, ok=False, reason=(
                f"{host}: not ready: its generation made {result.completion_tokens} tokens but "
                f"{spec.speculative.algorithm} did not run: expected spec_verify_ct > 0 in the answer's meta_info "
                f"or {VERIFY_CALLS} to grow, found {shown}"))
    return result
