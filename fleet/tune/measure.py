"""One measured load on one replica, shared by make tune and the canary analysis: the command, its answer.

A short streamed load (requests, concurrency, max_tokens) is sent by a program on the host itself
(fleet/programs/measure.py) to its own SGLang server: straight to the replica, never through smg, and
whatever address the server binds. The controller runs it as one command within its bound (a deploy's
pyinfra process is never blocked: the wait is the SSH command's), and reads one record back: the
requests' figures and SGLang's /metrics counters before and after, made into a fleet.tune.search.Level (output
tokens/s as the client saw them; the accept length from the counters' difference: generation tokens
per verify step over the load alone).
"""

from __future__ import annotations

import base64
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from fleet.core.bounds import MARGIN_S, Bound
from fleet.rollout.gate import base_url
from fleet.spec import ClassSpec
from fleet.tune.search import Level, level
from fleet.core.wire import Unreadable, ascii_int, clipped, excerpt, finite, frames, load_json

PROGRAM = (Path(__file__).parent.parent / "programs" / "measure.py").read_text()
KILL_AFTER_S = 5  # past its own deadline the program is killed (timeout -k)
ERROR_CHARS = 200  # programs/measure.py ERROR_CHARS
COUNTERS = ("sglang:generation_tokens_total", "sglang:spec_verify_calls_total", "sglang:spec_accept_length",
            "sglang:gen_throughput")  # programs/measure.py COUNTERS


@dataclass(frozen=True)
class Load:
    """What is sent: `requests` chat completions, `concurrency` at once, each to max_tokens, within timeout_s."""

    requests: int
    concurrency: int
    max_tokens: int
    prompts: tuple[str, ...]
    timeout_s: float


def command(spec: ClassSpec, load: Load) -> str:
    """The load, run on the host by the server's own Python (it has the standard library, all it needs)."""
    config = {"url": base_url(spec), "model": spec.service.served_model_name,
              "auth_file": spec.auth_header_file if spec.service.api_key is not None else "",
              "prompts": list(load.prompts), "requests": load.requests, "concurrency": load.concurrency,
              "max_tokens": load.max_tokens, "timeout_s": load.timeout_s}
    argv = [spec.launcher, "-c", PROGRAM, base64.b64encode(json.dumps(config).encode()).decode()]
    return f"timeout -k {KILL_AFTER_S} {max(1, int(load.timeout_s + 0.999)) + KILL_AFTER_S} " + " ".join(
        shlex.quote(a) for a in argv)


def bound(load: Load, what: str) -> Bound:
    return Bound(what, load.timeout_s + 2 * KILL_AFTER_S + MARGIN_S,
                 f"the load's timeout_s {load.timeout_s:g} + {2 * KILL_AFTER_S} + {MARGIN_S}")


def _counters(value: object) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    return {k: f for k in COUNTERS if (f := finite(str(value.get(k)))) is not None}


def _request(item: object) -> tuple[float, bool, int, float | None, str]:
    if not isinstance(item, list) or len(item) != 5:
        raise Unreadable(f"measure: a request: expected [latency, ok, tokens, ttft, error], found "
                         f"{excerpt(json.dumps(item), 80)}")
    latency, ok, tokens, ttft, error = item
    latency_s = finite(str(latency))
    count = ascii_int(str(tokens), 0, 1 << 31)
    if latency_s is None or latency_s < 0 or type(ok) is not bool or count is None:
        raise Unreadable(f"measure: a request: expected a latency, ok and a token count, found "
                         f"{excerpt(json.dumps(item), 80)}")
    first = finite(str(ttft)) if ttft is not None else None
    return latency_s, ok, count, first, clipped(str(error), ERROR_CHARS)


def parse(answer: str, load: Load) -> Level:
    """The `@@measure` record as the load's figures; Unreadable when the host said no such record (its words
    in the message: a missing interpreter, a kill past the bound)."""
    record = next((f for f in frames(answer) if f.key == "measure"), None)
    if record is None or record.text is None:
        raise Unreadable(f"measure: expected the load's record, found {excerpt(answer, 300) or 'nothing'}")
    data = load_json(record.text, "measure")
    if not isinstance(data, dict) or not isinstance(data.get("requests"), list) \
            or len(data["requests"]) > load.requests:
        raise Unreadable(f"measure: expected at most {load.requests} requests' figures, found "
                         f"{excerpt(record.text, 120)}")
    wall = finite(str(data.get("wall_s")))
    if wall is None or wall < 0:
        raise Unreadable(f"measure: wall_s: expected seconds, found {excerpt(str(data.get('wall_s')), 40)}")
    return level(load.concurrency, [_request(r) for r in data["requests"]], wall, _counters(data.get("before")),
                 _counters(data.get("after")), planned=load.requests)
