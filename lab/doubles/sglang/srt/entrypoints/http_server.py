"""LAB DOUBLE of sglang.srt.entrypoints.http_server (not SGLang): start-up, HTTP, stop.

Processes, as SGLang 0.5.23: this (main) process serves HTTP; at the start of loading it
starts one scheduler process per GPU (sglang/srt/managers/scheduler.py), which hold the
GPU memory and make the tokens. A scheduler that dies makes this process kill its tree.
Start-up (see docs/ARCHITECTURE.md and the reference sheet):
1. GPU memory: each scheduler's pid gets /run/lab-gpu/<pid>.json (the lab's stand-in for
   CUDA memory) for its GPU, at mem_fraction_static of it.
2. Loading: the HTTP port stays CLOSED for host.json's load_seconds (the spec's LAB_SGLANG_LOAD_SECONDS where
   its environment has one). load "crash" dies partway (TP0 prints the traceback and SIGQUITs this process, whose handler kills the
   tree with SIGKILL, itself last, as the real kill_process_tree does), "hang" never opens
   the port, "ok" serves. A launch whose argv equals host.json's preinstalled_argv
   always loads fine, unless the package's build (sglang/_build.json) sets load. GPUs
   already held by other live processes beyond what is free: CUDA OOM crash (except for
   the preinstalled argv, which the lab boots beside its workloads).
3. Port open: /v1/models answers 200 at once; /health, /health_generate and /ready
   answer 503 while the warm-up runs (~1 s), then 200.
Serving: every generated token comes from TP0 at host.json's decode_tokens_per_s
($LAB_SGLANG_DECODE_TOKENS_PER_S overrides); SSE chat streams send one chunk per token.
With host.json's "speculation" (the speed model, a documented stand-in for a real GPU: see
scheduler.py and lab/doubles/README.md) TP0's steps take s(b, n) and make a(b) tokens per request
on average instead, and /metrics, /server_info, meta_info and /v1/loads report what TP0 did:
counters of its tokens and verify steps, gauges over its last 40 decode steps. Without it, the
fixed per-algorithm ACCEPT_LENGTH as before. /server_info always has "lab_double": true (real
SGLang has no such key): a tool's mark that its figures come from this double.
The lab's control file (sglang/_lab.py control(), re-read when it changes) changes a running
server: its "acceptance" overrides the speed model's for TP0's steps from then on; "metrics":
false hangs /metrics (no answer until it is true again, or for METRICS_HANG_SECONDS, then the
connection closes unanswered), as a stuck metrics endpoint does, while every other route serves;
"generation": "hang" hangs the generate routes alike (GENERATION_HANG_SECONDS) while /health
stays 200: a hung scheduler behind a /health that answers (sglang issues 6624, 35822).
Stop: SIGTERM (or SIGINT) drains as tokenizer_manager.py's sigterm_watchdog: health 503 at
once, new requests still served; on each tick of that watchdog (every 5 s from the first
request, so even an idle server takes up to 5 s) "Gracefully exiting... Remaining number
of requests N" until N is 0, then the schedulers are stopped and the process exits 0; no
drain timeout. SGL_FORCE_SHUTDOWN=1: exit on the first tick, cutting what still runs.
Before the port opens SIGTERM exits at once.
HTTP: a ThreadingHTTPServer that answers like the real FastAPI app for what a deploy
uses: /health*, /ready, /v1/models, /v1/chat/completions (plain and SSE), /v1/completions,
/generate, /model_info, /server_info, /metrics (--enable-metrics), /v1/loads (what the
smg gateway polls; live running count, as /metrics). /metrics also has the tokenizer manager's
latency histograms (time to first token, end-to-end; LatencyHistogram). The API key guards every path
except /health*, /ready* and /metrics* (as the real middleware does), /v1/loads included.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import select
import signal
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import sglang
from sglang import _lab
from sglang.srt.server_args import get_config
from sglang.srt.managers.scheduler import Progress, SchedulerGone, SchedulerProcess, start_schedulers, tp_log

logger = logging.getLogger(__name__)

WARMUP_SECONDS = float(os.environ.get("LAB_SGLANG_WARMUP_SECONDS", "1.0"))
# tokenizer_manager.py's sigterm_watchdog polls this often, from when its loop started
DRAIN_POLL_SECONDS = 5.0
# tokenizer_manager.py's _SCHEDULER_EXIT_TIMEOUT_SECS: how long stopped schedulers get
SCHEDULER_EXIT_TIMEOUT_SECONDS = 15
# SubprocessWatchdog's interval: how soon a dead scheduler is noticed
WATCHDOG_SECONDS = 1.0
# a /metrics the control file hangs gives up this late (closing, no answer): no hang outlives it
METRICS_HANG_SECONDS = float(os.environ.get("LAB_SGLANG_METRICS_HANG_SECONDS", "120"))
# a generate request the control file hangs: the same bound
GENERATION_HANG_SECONDS = float(os.environ.get("LAB_SGLANG_GENERATION_HANG_SECONDS", "120"))
GENERATE_ROUTES = ("/generate", "/v1/chat/completions", "/v1/completions")

# Mean accepted length per verify step, by algorithm (what /metrics, /server_info and
# meta_info report without the speed model): plausible, fixed, so lab runs are reproducible.
ACCEPT_LENGTH = {
    "EAGLE": 2.9,
    "EAGLE3": 3.4,
    "STANDALONE": 2.3,
    "NGRAM": 1.6,
    "DFLASH": 4.7,
    "DDTREE": 5.6,
    "DSPARK": 4.1,
    "UNO": 3.0,
}

REPLY_WORDS = (
    "Hello! This is a lab stand-in for an SGLang server: it runs no model and returns a "
    "fixed short answer so that deploys can be tested end to end."
).split()


# The default buckets of the two latency histograms, copied from real SGLang 0.5.23's
# srt/observability/metrics_collector.py (TokenizerMetricsCollector.__init__, used when
# --bucket-time-to-first-token / --bucket-e2e-request-latency are not given; the double
# honours those flags as the real server does).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400)


class LatencyHistogram:
    """One Prometheus histogram of seconds, one child per is_streaming value ("false", "true"),
    as TokenizerMetricsCollector's sglang:time_to_first_token_seconds and
    sglang:e2e_request_latency_seconds (labels: the tokenizer's engine_type and model_name,
    plus is_streaming). Not thread-safe by itself: ServerState's lock guards it."""

    def __init__(self, bounds):
        # prometheus_client refuses unsorted buckets (a start-up ValueError); the double sorts them
        self.bounds = sorted(float(b) for b in bounds)
        if not self.bounds or self.bounds[-1] != math.inf:
            self.bounds.append(math.inf)
        # the non-streaming child exists from the start (in real SGLang the warm-up request,
        # not streamed, makes it); the streaming one from the first streamed request on
        self.children: dict[str, list] = {"false": self._child()}

    def _child(self) -> list:
        return [[0] * len(self.bounds), 0.0]  # per-bucket counts (not cumulative), sum

    def observe(self, value: float, streaming: bool) -> None:
        child = self.children.setdefault("true" if streaming else "false", self._child())
        child[0][next(i for i, b in enumerate(self.bounds) if value <= b)] += 1
        child[1] += value

    def snapshot(self) -> dict[str, tuple[list[int], float]]:
        return {k: (list(counts), total) for k, (counts, total) in sorted(self.children.items())}


def _go_float(value: float) -> str:
    """prometheus_client's floatToGoString for a bucket's le: 0.1, 1.0, +Inf."""
    return "+Inf" if value == math.inf else repr(float(value))


def _histogram_lines(name: str, doc: str, labels, snapshot: dict[str, tuple[list[int], float]],
                     bounds: list[float]) -> list[str]:
    """The text exposition of a histogram: per child (labels(is_streaming) gives its labels),
    cumulative _bucket lines up to le="+Inf", then _sum and _count."""
    out = [f"# HELP {name} {doc}", f"# TYPE {name} histogram"]
    for streaming, (counts, total) in snapshot.items():
        lab = labels(streaming)
        acc = 0
        for bound, n in zip(bounds, counts):
            acc += n
            out.append(f'{name}_bucket{{{lab},le="{_go_float(bound)}"}} {float(acc)}')
        out += [f"{name}_sum{{{lab}}} {float(total)}", f"{name}_count{{{lab}}} {float(acc)}"]
    return out


class Timing:
    """One request's times (monotonic), as the tokenizer manager's ReqTimeStats: when it arrived,
    when its first output (token) came, when it ended. No token at all: the first output is its end."""

    def __init__(self):
        self.arrived = time.monotonic()
        self.first: float | None = None
        self.finished: float | None = None

    def token(self) -> None:
        if self.first is None:
            self.first = time.monotonic()

    def finish(self) -> None:
        self.finished = time.monotonic()
        if self.first is None:
            self.first = self.finished

    @property
    def ttft(self) -> float:
        return self.first - self.arrived

    @property
    def e2e(self) -> float:
        return self.finished - self.arrived


def http_log(msg: str) -> None:
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def decode_tokens_per_s() -> float:
    return float(os.environ.get("LAB_SGLANG_DECODE_TOKENS_PER_S") or _lab.host_config()["decode_tokens_per_s"])


def reply(max_tokens) -> tuple[list[str], str]:
    """The deterministic answer: REPLY_WORDS ("stop") unless max_tokens is given, then that
    many words, REPLY_WORDS over and over ("length")."""
    if max_tokens is None:
        return list(REPLY_WORDS), "stop"
    n = max(0, int(max_tokens))
    return [REPLY_WORDS[i % len(REPLY_WORDS)] for i in range(n)], "length"


THINKING_WORDS = 40  # a thinking model (host.json "reasoning_model") reasons this long before it answers


def split_reasoning(words: list[str], parser: str | None) -> tuple[list[str], list[str]]:
    """(reasoning, answer) words of a reply. A thinking model (Qwen3) starts with its reasoning:
    with --reasoning-parser that part goes to `reasoning_content`, so a short reply still
    thinking has `content: null`; without a parser it stays in `content`, inside <think>."""
    if not _lab.host_config().get("reasoning_model") or not words:
        return [], words
    thinking, answer = words[:THINKING_WORDS], words[THINKING_WORDS:]
    if parser:
        return thinking, answer
    tagged = ["<think>" + words[0], *words[1:]]  # as many tokens: the tags ride on the words
    if answer:
        tagged[len(thinking) - 1] += "</think>"
    return [], tagged


def draft_acceptance(server_args) -> float | None:
    """The acceptance the draft served declares for the target served (its config.json's
    `lab_acceptance`, sglang/_lab.py declared_acceptance), else None: the host's."""
    a = server_args
    path = a.speculative_draft_model_path
    if not a.speculative_algorithm or not path or not os.path.isdir(path):
        return None
    return _lab.declared_acceptance(get_config(path), path, a.model_path)


def speed_plan(server_args) -> dict | None:
    """The speed model TP0 runs with (host.json "speculation", at the served draft's declared
    acceptance where it declares one, on the server's resolved speculative arguments), else None."""
    model = _lab.speculation()
    if model is None:
        return None
    declared = draft_acceptance(server_args)
    if declared is not None:
        model = {**model, "acceptance": declared}
    a = server_args
    return _lab.speed_plan(model, a.speculative_algorithm, a.speculative_dflash_block_size,
                           a.speculative_num_draft_tokens, getattr(a, "speculative_ddtree_budget", None))


def fixed_accept_length(server_args) -> float | None:
    """Without the speed model: the per-algorithm ACCEPT_LENGTH, but a(b) at the served draft's
    declared acceptance where it declares one (so a drafter's acceptance shows on any lab host);
    None without an algorithm."""
    algo = server_args.speculative_algorithm
    if not algo:
        return None
    declared = draft_acceptance(server_args)
    if declared is None:
        return ACCEPT_LENGTH.get(algo, 2.5)
    a = server_args
    b, c = _lab.speculation_knobs(algo, a.speculative_dflash_block_size, a.speculative_num_draft_tokens,
                                  getattr(a, "speculative_ddtree_budget", None))
    return round(_lab.acceptance_at(algo, declared, b, c)["accept_length"], 4)


class ServerState:
    def __init__(self, server_args, speed: dict | None = None):
        self.args = server_args
        self.speed = speed  # the speed model's plan (speed_plan), or None
        self.status = "Starting"  # Starting -> Up
        self.draining = False  # SIGTERM seen: the tokenizer manager's gracefully_exit
        self.loop_started: float | None = None  # when the tokenizer manager's loop began (monotonic)
        self.tp0: SchedulerProcess | None = None  # set by launch_server
        self.created = int(time.time())
        self.started = time.monotonic()
        self.startup_seconds = 0.0  # from the server's start to serving (status Up): /server_info's startup_time
        self.lock = threading.Lock()
        self.running: dict[str, None] = {}  # rids of requests being generated (rid_to_state)
        # the tokenizer manager's counters, one child per is_streaming value as in 0.5.23: "false" from the start
        # (the real server's warm-up makes it), "true" from the first streamed request on
        self.prompt_tokens_total = {"false": 0}
        self.generation_tokens_total = {"false": 0}  # without the speed model (with it: TP0's counts)
        self.requests_total = {"false": 0}
        self.verify_calls_total = 0
        self.last_gen_throughput = 0.0
        self.ttft = LatencyHistogram(getattr(server_args, "bucket_time_to_first_token", None) or TTFT_BUCKETS)
        self.e2e = LatencyHistogram(getattr(server_args, "bucket_e2e_request_latency", None) or E2E_BUCKETS)
        self.accept_length = fixed_accept_length(server_args)
        self.gpu_memory_mib = int(_lab.host_config().get("gpu_memory_mib", 81920))

    def start_loop(self) -> None:
        """The first request to reach the tokenizer manager starts its loop (the warm-up's,
        normally); from then on its SIGTERM handler and 5 s watchdog are in place."""
        with self.lock:
            if self.loop_started is None:
                self.loop_started = time.monotonic()

    def running_rids(self) -> list[str]:
        with self.lock:
            return list(self.running)

    def account(self, prompt_tokens: int, completion_tokens: int, timing: Timing | None = None,
                streaming: bool = False) -> None:
        """A finished request: the counters, and (given its timing) the latency histograms."""
        child = "true" if streaming else "false"
        with self.lock:
            for counter in (self.requests_total, self.prompt_tokens_total, self.generation_tokens_total):
                counter.setdefault(child, 0)
            self.requests_total[child] += 1
            self.prompt_tokens_total[child] += prompt_tokens
            if timing is not None:
                self.ttft.observe(timing.ttft, streaming)
                self.e2e.observe(timing.e2e, streaming)
            if self.speed:
                return  # tokens and verify steps: TP0's counts (decode_counts)
            self.generation_tokens_total[child] += completion_tokens
            if self.accept_length:
                self.verify_calls_total += max(1, round(completion_tokens / self.accept_length))
            self.last_gen_throughput = 42.0 * (self.accept_length or 1.0)

    def latency_snapshot(self) -> tuple[dict, dict]:
        """(TTFT, e2e) histograms' children, taken together under the lock: a scrape never sees
        a request in one and not the other, or a _count that is not its +Inf bucket."""
        with self.lock:
            return self.ttft.snapshot(), self.e2e.snapshot()

    def _accept_rate(self, accept_length: float) -> float:
        """accepted drafts / proposed drafts: (accept length - 1) / (b - 1)."""
        draft = self.speed["b"] if self.speed else (self.args.speculative_num_draft_tokens or 1)
        return round(min(1.0, max(0.0, (accept_length - 1) / max(1, draft - 1))), 4)

    def spec_meta(self, completion_tokens: int, progress: Progress | None = None) -> dict:
        """meta_info's speculative keys; with the speed model, from the request's own steps."""
        if self.speed:
            if not self.args.speculative_algorithm:
                return {}
            steps = progress.steps if progress else 0
            length = round(progress.tokens / steps, 4) if steps else 0.0
            return {"spec_accept_length": length, "spec_accept_rate": self._accept_rate(length) if steps else 0.0,
                    "spec_verify_ct": steps}
        if not self.accept_length:
            return {}
        steps = max(1, round(completion_tokens / self.accept_length)) if completion_tokens else 0
        return {
            "spec_accept_length": self.accept_length,
            "spec_accept_rate": self._accept_rate(self.accept_length),
            "spec_verify_ct": steps,
        }

    def decode_counts(self) -> dict:
        """What /metrics, /server_info and /v1/loads report of decoding: {"generation_tokens" (per
        is_streaming child),
        "verify_calls", "gen_throughput", "accept_length" (None: no speculation, or with the
        speed model no verify step yet), "accept_rate"}. With the speed model: TP0's counters,
        and over its last 40 decode steps (scheduler.DECODE_LOG_INTERVAL) the gauges: accept
        length = their tokens / their verify steps, throughput = their tokens / the seconds
        they took (idle time between steps not counted)."""
        if not self.speed:
            return {
                "generation_tokens": dict(self.generation_tokens_total),
                "verify_calls": self.verify_calls_total,
                "gen_throughput": self.last_gen_throughput,
                "accept_length": self.accept_length,
                "accept_rate": self._accept_rate(self.accept_length) if self.accept_length else 0.0,
            }
        st = self.tp0.stats.snapshot()
        spec = bool(self.args.speculative_algorithm)
        length = round(st["tokens"] / st["verify"], 4) if spec and st["verify"] else None
        return {
            "generation_tokens": {"false": st["tokens_total"] - st["tokens_streamed"],
                                  **({"true": st["tokens_streamed"]} if "true" in self.requests_total else {})},
            "verify_calls": st["verify_total"] if spec else 0,
            "gen_throughput": round(st["tokens"] / st["seconds"], 2) if st["seconds"] > 0 else 0.0,
            "accept_length": length,
            "accept_rate": self._accept_rate(length) if length else 0.0,
        }


def _count_tokens(text: str) -> int:
    return max(1, len(text.split())) if text else 0


def _messages_tokens(messages) -> int:
    n = 0
    for m in messages or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        n += _count_tokens(str(content or "")) + 4  # chat template overhead per message
    return n + 3


# CUDA graph memory (GB) per kind of forward, as 0.5.23's internal_states break it down (/v1/loads' graph_gb:
# their sum)
GRAPH_GB = {"prefill": 0.0, "decode": 1.12, "target_verify": 0.0, "draft_prefill": 0.0, "draft_decode": 0.0,
            "draft_extend": 0.0}


def _memory_usage(state: ServerState) -> dict:
    """TP0's memory breakdown (GB), as /server_info's internal_states report it."""
    return {
        "weight": round(state.gpu_memory_mib * 0.45 / 1024, 2),
        "kvcache": round(state.gpu_memory_mib * (state.args.mem_fraction_static - 0.45) / 1024, 2),
        "startup_available": round(state.gpu_memory_mib / 1024, 2),
        "token_capacity": int(state.gpu_memory_mib * 4),
        "token_capacity_swa": None,
        "graph": dict(GRAPH_GB),
    }


def _startup_time(state: ServerState) -> dict:
    """/server_info's startup_time: 0.5.23's seconds per phase of the start-up (the double's load is all weights)."""
    took = state.startup_seconds
    return {"load_weight": took, "kv_cache_allocation": 0.0, "scheduler_e2e": took,
            "cuda_graph": {kind: 0.0 for kind in GRAPH_GB}, "tokenizer_e2e": took}


def _server_info(state: ServerState) -> dict:
    a = state.args
    info = dict(a.resolved_dict())
    info["launch_command"] = a.launch_command
    counts = state.decode_counts()
    internal = {
        "last_gen_throughput": counts["gen_throughput"],
        "memory_usage": _memory_usage(state),
        "effective_max_running_requests_per_dp": a.max_running_requests or 2048,
    }
    if counts["accept_length"]:
        internal["avg_spec_accept_length"] = counts["accept_length"]
    info.update(
        {
            "max_total_num_tokens": int(state.gpu_memory_mib * 4),
            "max_req_input_len": max(1, (a._context_len or 4096) - 5),
            "startup_time": _startup_time(state),
            "internal_states": [internal],
            "version": sglang.__version__,
            "frontend": "python",
            "lab_double": True,  # not SGLang's: the mark that these figures come from the lab's double
        }
    )
    return info


def _model_info(state: ServerState) -> dict:
    a = state.args
    cfg = a._hf_config
    return {
        "model_path": a.model_path,
        "served_model_name": a.served_model_name,
        "tokenizer_path": a.tokenizer_path,
        "is_generation": not a.is_embedding,
        "preferred_sampling_params": a.preferred_sampling_params,
        "weight_version": a.weight_version,
        "load_format": a.load_format,
        "reasoning_parser": a.reasoning_parser,
        "tool_call_parser": a.tool_call_parser,
        "disaggregation_mode": a.disaggregation_mode,
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": cfg.get("model_type"),
        "architectures": cfg.get("architectures"),
    }


def _metrics(state: ServerState) -> str:
    a = state.args
    labels = (
        f'engine_type="unified",model_name="{a.served_model_name}",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
    )
    counts = state.decode_counts()
    gauges = [
        ("sglang:num_running_reqs", "The number of running requests.", len(state.running)),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", 0),
        ("sglang:num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0),
        ("sglang:gen_throughput", "The generation throughput (token/s).", counts["gen_throughput"]),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0),
        ("sglang:token_usage", "The token usage.", 0.0),
        (
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            counts["accept_length"] or 0.0,
        ),
        (
            "sglang:spec_accept_rate",
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            counts["accept_rate"],
        ),
    ]
    out = []
    for name, doc, value in gauges:
        out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(value)}"]
    with state.lock:
        requests, prompt = dict(state.requests_total), dict(state.prompt_tokens_total)

    def streaming(children: dict) -> dict:
        # labels sorted, as the multiprocess collector writes them
        return {f'engine_type="unified",is_streaming="{child}",model_name="{a.served_model_name}"': value
                for child, value in sorted(children.items())}

    counters = [
        ("sglang:spec_verify_calls", "Number of speculative decoding verification calls.",
         {labels: counts["verify_calls"]}),
        ("sglang:prompt_tokens", "Number of prefill tokens processed.", streaming(prompt)),
        ("sglang:generation_tokens", "Number of generation tokens processed.",
         streaming(counts["generation_tokens"])),
        ("sglang:num_requests", "Number of requests processed.", streaming(requests)),
    ]
    for name, doc, children in counters:
        out += [f"# HELP {name}_total {doc}", f"# TYPE {name}_total counter"]
        out += [f"{name}_total{{{lab}}} {float(value)}" for lab, value in children.items()]
    # the tokenizer manager's histograms (TokenizerMetricsCollector): per request, arrival to its
    # first output token, and arrival to its end; observed when it finishes, as the counters
    # (labels in the multiprocess collector's order: sorted, le last)
    def hist_labels(streaming: str) -> str:
        return f'engine_type="unified",is_streaming="{streaming}",model_name="{a.served_model_name}"'

    ttft, e2e = state.latency_snapshot()
    out += _histogram_lines("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                            hist_labels, ttft, state.ttft.bounds)
    out += _histogram_lines("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                            hist_labels, e2e, state.e2e.bounds)
    return "\n".join(out) + "\n"


OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores"


def _openmetrics(text: str) -> str:
    """The same series as 0.5.23's prometheus_client (0.26) writes them for a client asking for OpenMetrics (as
    Prometheus does): each sample's name escaped, `:` as `_` (`sglang_generation_tokens_total`), while its HELP and
    TYPE lines keep `sglang:` and name a counter without `_total`; `# EOF` last (measured on the real server)."""
    counters = {line.split()[2] for line in text.splitlines()
                if line.startswith("# TYPE ") and line.endswith(" counter")}
    out = []
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")):
            _, kind, name, rest = line.split(" ", 3)
            out.append(f"# {kind} {name.removesuffix('_total') if name in counters else name} {rest}")
        elif line:
            name, brace, rest = line.partition("{") if "{" in line else line.partition(" ")
            out.append(name.replace(":", "_") + brace + rest)
    return "\n".join(out + ["# EOF"]) + "\n"


# load_snapshot.py's LoadSnapshot.VALID_SECTIONS: what /v1/loads?include= may name
LOAD_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})


def _load_snapshot(state: ServerState, include: set[str] | None) -> dict:
    """TP0's LoadSnapshot (load_inquirer.py's get_loads) as LoadSnapshot.to_dict(include)
    gives it: every core scalar, then the sections asked for that apply. ValueError for
    an unknown section, as to_dict. The double has no queue, KV cache or prefill cost,
    so those counts stay 0 (as /metrics says), and no decode step timings: no
    decode_moments."""
    a = state.args
    mem = _memory_usage(state)
    counts = state.decode_counts()
    with state.lock:
        running = len(state.running)
    load = {
        "timestamp": time.time(),
        "dp_rank": 0,
        "num_running_reqs": running,
        "num_waiting_reqs": 0,
        "num_waiting_uncached_tokens": 0,
        "num_used_tokens": 0,
        "num_total_tokens": 0,
        "num_active_tokens": 0,
        "num_prealloc_ready_tokens": 0,
        "max_total_num_tokens": mem["token_capacity"],
        "max_running_requests": a.max_running_requests or 2048,
        "token_usage": 0.0,
        "gen_throughput": round(counts["gen_throughput"], 2),
        "cache_hit_rate": 0.0,
        "utilization": 0.0,
        "total_prefill_uncached_tokens": 0,
        "total_prefill_busy_us": 0,
        "decode_moments": None,
    }
    if include is not None and "all" not in include:
        if not include <= LOAD_SECTIONS:
            raise ValueError(
                f"Invalid include sections: {include - LOAD_SECTIONS}. Valid options: {sorted(LOAD_SECTIONS)}"
            )
        if include == {"core"}:
            return load
    spec = None
    if counts["accept_length"] and counts["verify_calls"]:  # only once a verify step ran
        spec = {"accept_length": counts["accept_length"], "accept_rate": counts["accept_rate"]}
    sections = [
        ("memory", "memory", {"weight_gb": mem["weight"], "kv_cache_gb": mem["kvcache"],
                              "graph_gb": round(sum(mem["graph"].values()), 2),
                              "token_capacity": mem["token_capacity"]}),
        ("speculative", "spec", spec),
        # the pool's stats as the first batch (the warm-up's) leaves them
        ("lora", "lora", {"slots_used": 0, "slots_total": a.max_loras_per_batch, "utilization": 0.0}
         if a.enable_lora or a.lora_paths else None),
        ("disaggregation", "disagg", {
            "mode": a.disaggregation_mode or "null",
            "prefill_bootstrap_queue_reqs": 0,
            "prefill_inflight_queue_reqs": 0,
            "decode_prealloc_queue_reqs": 0,
            "decode_transfer_queue_reqs": 0,
            "decode_retracted_queue_reqs": 0,
            "kv_transfer_speed_gb_s": 0.0,
            "kv_transfer_latency_ms": 0.0,
        }),
        ("queues", "queues", {"waiting": 0, "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0}),
    ]
    for field, name, section in sections:
        if section is not None and (include is None or "all" in include or name in include):
            load[field] = section
    return load


def _loads(state: ServerState, include: set[str] | None) -> dict:
    """v1_loads.py's answer: one load per DP rank (the double has one)."""
    a = state.args
    accelerators = int(a.tp_size) * int(a.pp_size)
    if a.enable_dp_attention:
        accelerators //= int(a.dp_size)
    return {
        "timestamp": datetime.now(timezone.utc).isoformat(),
        "version": sglang.__version__,
        "accelerator": _lab.host_config()["gpu_model"],
        "num_accelerators": accelerators,
        "loads": [_load_snapshot(state, include)],
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    state: ServerState = None  # set by launch_server

    # ---- plumbing ----

    def setup(self):
        super().setup()
        # as uvicorn: each SSE chunk leaves at once instead of waiting for the next one's ACK
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's name
        pass

    @contextlib.contextmanager
    def _generation(self, rid: str, n: int, progress: Progress | None = None, streaming: bool = False):
        """One generate request: running (metrics, drain count) until it ends; gives the
        iterator that waits for each of its n tokens from TP0 (SchedulerGone: TP0 died);
        `progress` counts its tokens and verify steps; `streaming`: an SSE stream's."""
        state = self.state
        state.start_loop()
        with state.lock:
            state.running[rid] = None
        tokens = state.tp0.generate(rid, n, progress, streaming)
        try:
            yield tokens
        finally:
            tokens.close()
            with state.lock:
                del state.running[rid]

    def _generate_all(self, rid: str, n: int, timing: Timing) -> Progress | None:
        """Wait for all n tokens: how TP0 made them; None (the connection is then closed, no
        answer) if TP0 died. `timing` notes the first token and the end."""
        progress = Progress()
        try:
            with self._generation(rid, n, progress) as tokens:
                for _ in tokens:
                    timing.token()
            timing.finish()
        except SchedulerGone:
            self.close_connection = True
            return None
        return progress

    def _access_log(self, code: int) -> None:
        try:
            from http import HTTPStatus

            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = ""
        host, port = self.client_address[:2]
        http_log(f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {code} {phrase}')

    def _send(self, code: int, body: bytes = b"", content_type: str | None = None) -> None:
        self.send_response_only(code)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-length", str(len(body)))
        if content_type:
            self.send_header("content-type", content_type)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._access_log(code)

    def _json(self, code: int, obj) -> None:
        self._send(code, json.dumps(obj, separators=(",", ":")).encode(), "application/json")

    def _body(self):
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        return raw

    def _authorized(self, path: str) -> bool:
        key = self.state.args.api_key
        if not key or self.command == "OPTIONS":
            return True
        if path.startswith(("/health", "/ready", "/metrics")):
            return True
        authz = self.headers.get("Authorization") or ""
        parts = authz.split(" ", 1)
        return len(parts) == 2 and parts[0].lower() == "bearer" and parts[1] == key

    # ---- routing ----

    ROUTES = {
        "/health": ("GET",),
        "/health_generate": ("GET",),
        "/ready": ("GET",),
        "/v1/models": ("GET",),
        "/model_info": ("GET",),
        "/get_model_info": ("GET",),
        "/server_info": ("GET",),
        "/get_server_info": ("GET",),
        "/metrics": ("GET",),
        "/v1/loads": ("GET",),
        "/generate": ("POST", "PUT"),
        "/v1/chat/completions": ("POST",),
        "/v1/completions": ("POST",),
        "/flush_cache": ("GET", "POST"),
    }

    def _dispatch(self) -> None:
        path = self.path.split("?", 1)[0]
        body = self._body()  # read it whatever the method: the connection is kept alive
        if int(self.state.args.node_rank or 0) >= 1:
            # multi-node: ranks >= 1 serve a stand-in whose /health is always 200
            if path.startswith("/health"):
                self._send(200)
            else:
                self._json(404, {"detail": "Not Found"})
            return
        if not self._authorized(path):
            self._json(401, {"error": "Unauthorized"})
            return
        if path.startswith("/v1/models/"):
            return self._retrieve_model(path[len("/v1/models/"):])
        if path == "/metrics" and not self.state.args.enable_metrics:
            path = "/__none__"
        methods = self.ROUTES.get(path)
        if methods is None:
            self._json(404, {"detail": "Not Found"})
            return
        if self.command not in methods:
            self._json(405, {"detail": "Method Not Allowed"})
            return
        if path in GENERATE_ROUTES and self._hung(lambda c: c["generation"] == "hang", GENERATION_HANG_SECONDS,
                                                  f"{self.command} {path}"):
            return
        handler = getattr(self, "_r_" + path.strip("/").replace("/", "_"))
        handler(body)

    def _hung(self, held, seconds: float, what: str) -> bool:
        """While the control file holds the route (held(control())): the request was read, no answer
        comes (as from a stuck endpoint). True once `seconds` pass: the connection closes unanswered;
        False when the control lets it go: it is answered."""
        end = time.monotonic() + seconds
        said = False
        while held(_lab.control()):
            if not said:
                print(f"lab: {what} held by {_lab.control_path()}", file=sys.stderr, flush=True)
                said = True
            if time.monotonic() >= end:
                self.close_connection = True
                return True
            time.sleep(0.2)
        return False

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = lambda self: self._dispatch()  # noqa: E731

    # ---- endpoints ----

    def _health(self) -> None:
        if self.state.draining:
            logger.info("Health check request received during shutdown. Returning 503.")
            self._send(503)
        elif self.state.status != "Up":
            self._send(503)
        else:
            self.state.start_loop()  # its 1-token generation goes through the tokenizer manager
            self._send(200)

    def _r_health(self, _body):
        self._health()

    def _r_health_generate(self, _body):
        self._health()

    def _r_ready(self, _body):
        self._send(200 if self.state.status == "Up" and not self.state.draining else 503)

    def _model_card(self, name: str) -> dict:
        return {
            "id": name,
            "object": "model",
            "created": self.state.created,
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": self.state.args._context_len,
        }

    def _r_v1_models(self, _body):
        self._json(200, {"object": "list", "data": [self._model_card(self.state.args.served_model_name)]})

    def _retrieve_model(self, model: str) -> None:
        if model != self.state.args.served_model_name:
            self._json(
                404,
                {
                    "error": {
                        "message": f"The model '{model}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
            )
            return
        self._json(200, self._model_card(model))

    def _r_model_info(self, _body):
        self._json(200, _model_info(self.state))

    def _r_get_model_info(self, _body):
        logger.warning(
            "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
            "Please use '/model_info' instead."
        )
        self._r_model_info(_body)

    def _r_server_info(self, _body):
        self._json(200, _server_info(self.state))

    def _r_get_server_info(self, _body):
        logger.warning(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead."
        )
        self._r_server_info(_body)

    def _r_metrics(self, _body):
        if self._hung(lambda c: not c["metrics"], METRICS_HANG_SECONDS, "GET /metrics"):
            return
        if "application/openmetrics-text" in (self.headers.get("Accept") or ""):  # Prometheus asks for it first
            self._send(200, _openmetrics(_metrics(self.state)).encode(), OPENMETRICS)
            return
        self._send(200, _metrics(self.state).encode(), "text/plain; version=0.0.4; charset=utf-8")

    def _r_v1_loads(self, _body):
        """?include= as v1_loads.py reads it; ?dp_rank= and ?format=prometheus are not
        modelled (one DP rank; smg asks for JSON)."""
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        include = query.get("include", [""])[-1]
        try:
            body = _loads(self.state, {s.strip() for s in include.split(",")} if include else None)
        except ValueError as e:
            # to_dict raises outside the route's try: uncaught, Starlette answers 500
            http_log("ERROR:    Exception in ASGI application")
            http_log(f"ValueError: {e}")
            self._send(500, b"Internal Server Error", "text/plain; charset=utf-8")
            return
        self._json(200, body)

    def _r_flush_cache(self, _body):
        self._send(200, b"Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n", "text/plain; charset=utf-8")

    def _parse_json(self, body: bytes):
        try:
            obj = json.loads(body or b"null")
        except json.JSONDecodeError as e:
            self._json(400, {"object": "error", "message": f"JSON decode error: {e}", "type": "BadRequestError", "param": None, "code": 400})
            return None
        if not isinstance(obj, dict):
            self._json(400, {"object": "error", "message": "Request body must be a JSON object.", "type": "BadRequestError", "param": None, "code": 400})
            return None
        return obj

    def _r_generate(self, body):
        timing = Timing()
        req = self._parse_json(body)
        if req is None:
            return
        text = req.get("text") or ""
        prompt_tokens = len(req["input_ids"]) if isinstance(req.get("input_ids"), list) else _count_tokens(str(text))
        params = req.get("sampling_params") or {}
        words, finish = reply(params.get("max_new_tokens", 128))
        rid = uuid.uuid4().hex
        progress = self._generate_all(rid, len(words), timing)
        if progress is None:
            return
        self.state.account(prompt_tokens, len(words), timing)
        meta = self._meta_info(rid, finish, prompt_tokens, len(words), progress, timing)
        self._json(200, {"text": " ".join(words), "output_ids": list(range(1000, 1000 + len(words))), "meta_info": meta})

    def _meta_info(self, rid: str, finish: str, prompt_tokens: int, tokens: int, progress: Progress,
                   timing: Timing) -> dict:
        """A request's meta_info, as /generate gives it and a chat completion with return_meta_info."""
        return {
            "id": rid,
            "finish_reason": {"type": "length", "length": tokens} if finish == "length" else {"type": "stop", "matched": 151645},
            "prompt_tokens": prompt_tokens,
            "weight_version": self.state.args.weight_version,
            "completion_tokens": tokens,
            "cached_tokens": 0,
            **self.state.spec_meta(tokens, progress),
            "e2e_latency": round(timing.e2e, 6),
        }

    def _r_v1_completions(self, body):
        timing = Timing()
        req = self._parse_json(body)
        if req is None:
            return
        prompt = req.get("prompt") or ""
        prompt_tokens = _count_tokens(prompt if isinstance(prompt, str) else " ".join(map(str, prompt)))
        words, finish = reply(req.get("max_tokens", 16))
        rid = uuid.uuid4().hex
        if self._generate_all(rid, len(words), timing) is None:
            return
        self.state.account(prompt_tokens, len(words), timing)
        self._json(
            200,
            {
                "id": rid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": req.get("model") or self.state.args.served_model_name,
                "choices": [{"index": 0, "text": " ".join(words), "logprobs": None, "finish_reason": finish, "matched_stop": None}],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "total_tokens": prompt_tokens + len(words),
                    "completion_tokens": len(words),
                    "prompt_tokens_details": None,
                    "reasoning_tokens": 0,
                },
                "metadata": {"weight_version": self.state.args.weight_version},
            },
        )

    def _r_v1_chat_completions(self, body):
        timing = Timing()
        req = self._parse_json(body)
        if req is None:
            return
        messages = req.get("messages")
        if not isinstance(messages, list) or not messages:
            self._json(
                400,
                {"object": "error", "message": "Messages cannot be empty.", "type": "BadRequestError", "param": None, "code": 400},
            )
            return
        prompt_tokens = _messages_tokens(messages)
        words, finish = reply(req.get("max_completion_tokens", req.get("max_tokens")))
        thinking, answer = split_reasoning(words, self.state.args.reasoning_parser)
        rid = uuid.uuid4().hex
        created = int(time.time())
        model = req.get("model") or self.state.args.served_model_name
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + len(words),
            "completion_tokens": len(words),
            "prompt_tokens_details": None,
            "reasoning_tokens": len(thinking),
        }
        if req.get("stream") and req.get("return_meta_info"):
            self._json(400, {"object": "error", "message": "return_meta_info is not supported with streaming. Please "
                             "set stream=false when using return_meta_info=true.", "type": "BadRequestError",
                             "param": None, "code": 400})
            return
        if not req.get("stream"):
            progress = self._generate_all(rid, len(words), timing)
            if progress is None:
                return
            self.state.account(prompt_tokens, len(words), timing)
            # serving_chat.py: choices[].meta_info only when asked (return_meta_info, not streamed)
            meta = {"meta_info": self._meta_info(rid, finish, prompt_tokens, len(words), progress, timing)} \
                if req.get("return_meta_info") else {}
            self._json(
                200,
                {
                    "id": rid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": " ".join(answer) if answer else None,
                                        "reasoning_content": " ".join(thinking) if thinking else None},
                            "logprobs": None,
                            "finish_reason": finish,
                            "matched_stop": 151645 if finish == "stop" else None,
                            **meta,
                        }
                    ],
                    "usage": usage,
                    "metadata": {"weight_version": self.state.args.weight_version},
                },
            )
            return

        def event(delta, finish_reason=None):
            # 0.5.23's chunks as serving_chat.py writes them: the delta's fields it set (reasoning_content always),
            # no usage key but in the usage chunk
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason, "matched_stop": None}
            self._write_event({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                               "choices": [choice]})

        # Server-sent events, chunked, as the real StreamingResponse: one chunk per token as TP0 makes it.
        try:
            with self._generation(rid, len(words), streaming=True) as tokens:
                self.send_response_only(200)
                self.send_header("date", self.date_time_string())
                self.send_header("server", "uvicorn")
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                self._access_log(200)  # uvicorn logs a response when it starts
                event({"reasoning_content": None, "role": "assistant", "content": ""})
                for i in tokens:
                    timing.token()
                    word = (" " if i else "") + (thinking + answer)[i]
                    if i < len(thinking):
                        event({"reasoning_content": word})
                    else:
                        event({"reasoning_content": None, "content": word})
            timing.finish()  # the last token came: the request ended (what follows is its answer's tail)
            event({"reasoning_content": None}, finish)
            if (req.get("stream_options") or {}).get("include_usage"):
                self._write_event({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                                   "choices": [], "usage": usage})
            self._write_chunk(b"data: [DONE]\n\n")
            self._write_chunk(b"")
        except (SchedulerGone, OSError):
            # TP0 died (the process is about to kill itself) or the client left: no [DONE]
            self.close_connection = True
            return
        self.state.account(prompt_tokens, len(words), timing, streaming=True)

    def _write_event(self, obj) -> None:
        self._write_chunk(f"data: {json.dumps(obj, separators=(',', ':'))}\n\n".encode())

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # uvicorn's --backlog default; socketserver's 5 drops the SYNs of a burst of clients (32 at
    # once wait 1 s and more for the kernel's retry), which no real server makes them do
    request_queue_size = 2048


def _gpu_ids(a) -> list[int]:
    n = max(1, int(a.tp_size) * int(a.pp_size))
    base = int(a.base_gpu_id or 0)
    step = int(a.gpu_id_step or 1)
    return [base + i * step for i in range(n)]


class _Process:
    """This (main) process's life: its signals, its schedulers, and the ways it ends.

    Signal handlers only count; the main thread acts in pause(), woken through a pipe the
    interpreter writes each signal to. Nothing prints or takes a lock inside a handler: it
    runs in the main thread, which may be inside a print or holding that lock already.
    """

    def __init__(self, state: ServerState, schedulers: list[SchedulerProcess]):
        self.pid = os.getpid()
        self.state = state
        self.schedulers = schedulers
        self.httpd: ThreadingHTTPServer | None = None
        self.watchdog_stop = threading.Event()
        self._terms = 0  # SIGTERM/SIGINT received
        self._terms_seen = 0
        self._quit = False  # SIGQUIT received: a child failed
        self._wake, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGQUIT, self._on_quit)

    def _on_term(self, signum, frame):
        self._terms += 1

    def _on_quit(self, signum, frame):
        self._quit = True

    def pause(self, seconds: float | None, on_term) -> None:
        """Sleep in the main thread (None: for ever). SIGQUIT ends the process here; each
        SIGTERM/SIGINT calls on_term()."""
        end = None if seconds is None else time.monotonic() + seconds
        while True:
            if self._quit:
                self.sigquit()
            if self._terms > self._terms_seen:
                self._terms_seen = self._terms
                on_term()
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                return
            if select.select([self._wake], [], [], left)[0]:
                os.read(self._wake, 512)

    # ---- GPU memory: the schedulers hold it ----

    def hold(self, gpus: list[int], mib: int) -> None:
        for s in self.schedulers:
            _lab.register(s.pid, f"sglang::scheduler_TP{s.rank}", [gpus[s.rank]], mib)

    def release(self) -> None:
        # the registry stands in for CUDA, which frees a process's memory when it ends
        for s in self.schedulers:
            _lab.unregister(s.pid)

    # ---- ends ----

    def exit_loading(self) -> None:
        """SIGTERM/SIGINT before the port opens: exit 0 now; the schedulers die with this
        process (PR_SET_PDEATHSIG)."""
        self.release()
        sys.exit(0)

    def fail(self, text: str) -> None:
        """A scheduler hits an exception while loading: TP0 logs it and SIGQUITs this
        process, whose handler kills the tree."""
        self.schedulers[0].send(op="raise", text=text)
        self.pause(None, on_term=self.exit_loading)

    def sigquit(self) -> None:
        """SGLang's SIGQUIT handlers: the launch-phase one (engine.py) until the tokenizer
        manager's loop starts, then its running-phase one; both kill_process_tree(own pid)."""
        if self.state.loop_started is None:
            logger.error("Received sigquit from a child process. It usually means the child failed.")
        else:
            logger.error("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        self.kill_tree(include_parent=True)

    def kill_tree(self, include_parent: bool) -> None:
        """kill_process_tree: SIGKILL the children, wait for them, then this process too if asked."""
        logger.info(f"kill_process_tree called: parent_pid={self.pid}, include_parent={include_parent}, pid={self.pid}")
        self.release()
        for s in self.schedulers:
            s.kill()
        if include_parent:
            sys.stderr.flush()
            os.kill(self.pid, signal.SIGKILL)
        while any(s.exitcode() is None for s in self.schedulers):
            time.sleep(0.01)

    def watchdog(self) -> None:
        """SGLang's SubprocessWatchdog: a scheduler that ended with a non-zero code makes
        this process SIGQUIT itself."""
        while not self.watchdog_stop.wait(WATCHDOG_SECONDS):
            for s in self.schedulers:
                code = s.exitcode()
                if code:
                    logger.error(
                        f"Subprocess scheduler_{s.rank} (pid={s.pid}) crashed with exit code {code}. "
                        "Triggering SIGQUIT for cleanup..."
                    )
                    os.kill(self.pid, signal.SIGQUIT)
                    return

    def on_term(self) -> None:
        """The tokenizer manager's SIGTERM handler: health 503 from now on; the drain starts."""
        logger.warning("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        if not self.state.draining:
            self.state.draining = True
            self.drain()

    def drain(self) -> None:
        """tokenizer_manager.py's sigterm_watchdog: it looks every 5 s (counted from when its
        loop started) and, once SIGTERM was seen, logs what remains until nothing does.
        Requests keep being accepted and served meanwhile."""
        t0 = self.state.loop_started
        if t0 is None:  # no request reached the tokenizer manager: uvicorn's own handler stops at once
            self.stop()
        since = time.monotonic() - t0
        self.pause(DRAIN_POLL_SECONDS * (math.floor(since / DRAIN_POLL_SECONDS) + 1) - since, on_term=self.on_term)
        while True:
            rids = self.state.running_rids()
            if os.environ.get("SGL_FORCE_SHUTDOWN", "").lower() in ("1", "true"):
                logger.error("Signal SIGTERM received while force shutdown flag set. Force exiting.")
                break
            logger.info(f"Gracefully exiting... Remaining number of requests {len(rids)}. Remaining requests remaining_rids={rids}.")
            if not rids:
                break
            self.pause(DRAIN_POLL_SECONDS, on_term=self.on_term)
        self.stop()

    def stop(self) -> None:
        """The end of the drain: schedulers asked to exit (ShutdownReq), given 15 s, the rest
        killed, then uvicorn stops; exit 0."""
        self.watchdog_stop.set()  # their exits are expected now, not crashes
        for s in self.schedulers:
            s.shutdown()
        deadline = time.monotonic() + SCHEDULER_EXIT_TIMEOUT_SECONDS
        while time.monotonic() < deadline and any(s.exitcode() is None for s in self.schedulers):
            time.sleep(0.05)
        stragglers = [s.pid for s in self.schedulers if s.exitcode() is None]
        if stragglers:
            logger.warning(
                f"Schedulers still alive {SCHEDULER_EXIT_TIMEOUT_SECONDS}s after ShutdownReq, "
                f"killing them before they released: {stragglers}"
            )
        self.kill_tree(include_parent=False)
        http_log("INFO:     Shutting down")
        self.httpd.shutdown()
        self.httpd.server_close()
        http_log("INFO:     Waiting for application shutdown.")
        http_log("INFO:     Application shutdown complete.")
        http_log(f"INFO:     Finished server process [{self.pid}]")
        sys.exit(0)


def _crash_traceback(kind: str, pid: int, gpu: int, total_mib: int, free_mib: int) -> str:
    ask_gib = 2.0 if kind == "oom" else 0.0
    if kind == "oom":
        err = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {ask_gib:.2f} GiB. GPU {gpu} has a total "
            f"capacity of {total_mib / 1024:.2f} GiB of which {max(0, free_mib) / 1024:.2f} GiB is free. "
            f"Process {pid} has {max(0, total_mib - free_mib) / 1024:.2f} GiB memory in use. Of the allocated "
            "memory 0 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved "
            "but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
            "fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )
        tail = [
            '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/model_executor/model_runner.py", line 1511, in init_memory_pool',
            "    self.kv_cache_configurator.configure(...)",
            '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/mem_cache/memory_pool.py", line 712, in _create_buffers',
            "    torch.zeros(",
        ]
    else:
        err = (
            "RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
            "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
        )
        tail = [
            '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/model_executor/model_runner.py", line 1402, in load_model',
            "    self.model = self.loader.load_model(",
            '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/model_loader/loader.py", line 688, in load_weights_and_postprocess',
            "    model.load_weights(weights)",
        ]
    lines = [
        "Traceback (most recent call last):",
        '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process',
        "    scheduler = Scheduler(",
        '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 512, in __init__',
        "    self.init_model_worker()",
        '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/managers/tp_worker.py", line 247, in __init__',
        "    self.model_runner = ModelRunner(",
        *tail,
        err,
    ]
    return "\n".join(lines)


def launch_server(server_args) -> None:
    a = server_args
    pid = os.getpid()
    host = _lab.host_config()
    gpu_count = int(host.get("gpu_count", 1))
    gpu_mib = int(host.get("gpu_memory_mib", 81920))
    # LAB_SGLANG_LOAD (_SECONDS) in the unit's environment: a spec (not a host) whose load ends so (takes that
    # long), for tests: hosts alike serve specs that load alike, or not
    load = os.environ.get("LAB_SGLANG_LOAD") or str(host.get("load", "ok"))
    load_seconds = float(os.environ.get("LAB_SGLANG_LOAD_SECONDS") or host.get("load_seconds", 0) or 0)
    pre = host.get("preinstalled_argv")
    preinstalled = pre is not None and sys.argv[1:] == list(pre)
    if preinstalled and "load" not in _lab.build():
        load = "ok"  # the preinstalled (old) configuration: rollback returns to it; a build's load is its own

    logger.info(f"server_args={a!r}")
    speed = speed_plan(a)
    state = ServerState(a, speed)
    Handler.state = state
    gpus = _gpu_ids(a)
    # first, while this process has no thread and no signal handler (see start_schedulers)
    schedulers = start_schedulers(len(gpus), decode_tokens_per_s(), speed)
    proc = _Process(state, schedulers)
    state.tp0 = schedulers[0]

    def wait(seconds: float) -> None:
        proc.pause(max(0.0, seconds), on_term=proc.exit_loading)

    tp_log("Init torch distributed begin.")
    if max(gpus) >= gpu_count:
        proc.fail(
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process\n'
            "    scheduler = Scheduler(\n"
            f"torch.AcceleratorError: CUDA error: invalid device ordinal\nGPU {max(gpus)} does not exist: "
            f"this host has {gpu_count} GPU(s)."
        )
    per_gpu = int(round(gpu_mib * float(a.mem_fraction_static)))
    # CUDA memory: the weights are loaded into what is free; other processes' memory counts.
    short = [(g, gpu_mib - _lab.used_mib_on(g)) for g in gpus]
    short = [(g, free) for g, free in short if free < per_gpu]
    if preinstalled:
        short = []  # the lab's old service always loads (it may share its GPUs with workloads)
    proc.hold(gpus, 0)
    wait(min(0.2, load_seconds * 0.05))
    tp_log("Init torch distributed ends. mem usage=0.00 GB")
    avail_gb = gpu_mib / 1024 - 0.5
    tp_log(f"Load weight begin. avail mem={avail_gb:.2f} GB")
    weight_mib = int(per_gpu * 0.55)
    proc.hold(gpus, weight_mib)

    if short and load != "hang":
        wait(load_seconds * 0.5)
        g, free = short[0]
        proc.fail("Scheduler hit an exception: " + _crash_traceback("oom", schedulers[gpus.index(g)].pid, g, gpu_mib, free))
    if load == "crash":
        wait(load_seconds * 0.5)
        proc.fail("Scheduler hit an exception: " + _crash_traceback("crash", schedulers[0].pid, gpus[0], gpu_mib, gpu_mib - per_gpu))
    wait(load_seconds * 0.5)
    arch = (a._hf_config.get("architectures") or ["UnknownForCausalLM"])[0]
    tp_log(
        f"Load weight end. elapsed={load_seconds * 0.5:.2f} s, type={arch}, dtype=torch.bfloat16, "
        f"avail mem={(gpu_mib - weight_mib) / 1024:.2f} GB, mem usage={weight_mib / 1024:.2f} GB."
    )
    if a.speculative_algorithm:
        tp_log(f"Load draft weight end. speculative_algorithm={a.speculative_algorithm}")
    proc.hold(gpus, per_gpu)
    kv_tokens = int(gpu_mib * 4)
    tp_log(f"KV Cache is allocated. #tokens: {kv_tokens}, K size: {(per_gpu - weight_mib) / 2048:.2f} GB, V size: {(per_gpu - weight_mib) / 2048:.2f} GB")
    tp_log(f"Memory pool end. avail mem={(gpu_mib - per_gpu) / 1024:.2f} GB")
    tp_log(f"Capture cuda graph begin. This can take up to several minutes. avail mem={(gpu_mib - per_gpu) / 1024:.2f} GB")
    if load == "hang":
        proc.pause(None, on_term=proc.exit_loading)  # never opens the port; only SIGTERM/SIGKILL end it
    wait(load_seconds * 0.3)
    tp_log(f"Capture cuda graph end. Time elapsed: {load_seconds * 0.3:.2f} s. mem usage=1.12 GB. avail mem={(gpu_mib - per_gpu) / 1024 - 1.12:.2f} GB.")
    tp_log(
        f"max_total_num_tokens={kv_tokens}, chunked_prefill_size={a.chunked_prefill_size or 8192}, "
        f"max_prefill_tokens={a.max_prefill_tokens}, max_running_requests={a.max_running_requests or 2048}, "
        f"context_len={a._context_len}, available_gpu_mem={(gpu_mib - per_gpu) / 1024 - 1.12:.2f} GB"
    )
    wait(load_seconds * 0.2)

    # ---- loaded: the schedulers are watched, the port opens ----
    state.tp0.start_reader()
    threading.Thread(target=proc.watchdog, name="subprocess-watchdog", daemon=True).start()
    bind_host = a.host or "127.0.0.1"
    _Server.address_family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    try:
        proc.httpd = _Server((bind_host, int(a.port)), Handler)
    except OSError as e:
        http_log(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address ({bind_host!r}, {a.port}): {e.strerror.lower() if e.strerror else e}")
        proc.release()
        sys.exit(1)
    http_log(f"INFO:     Started server process [{pid}]")
    http_log("INFO:     Waiting for application startup.")
    http_log("INFO:     Application startup complete.")
    http_log(f"INFO:     Uvicorn running on http://{bind_host}:{a.port} (Press CTRL+C to quit)")
    threading.Thread(target=proc.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    def warmup():
        if not (a.skip_server_warmup or int(a.node_rank or 0) >= 1):
            time.sleep(WARMUP_SECONDS)
            state.start_loop()  # the warm-up request is the tokenizer manager's first
            http_log(f'INFO:     127.0.0.1:{40000 + pid % 20000} - "GET /model_info HTTP/1.1" 200 OK')
            http_log(
                "Prefill batch, #new-seq: 1, #new-token: 3, #cached-token: 0, token usage: 0.00, "
                "#running-req: 0, #queue-req: 0, "
            )
            http_log(f'INFO:     127.0.0.1:{40001 + pid % 20000} - "POST /generate HTTP/1.1" 200 OK')
        state.status = "Up"
        state.startup_seconds = round(time.monotonic() - state.started, 3)
        logger.info("The server is fired up and ready to roll!")

    threading.Thread(target=warmup, daemon=True).start()
    proc.pause(None, on_term=proc.on_term)
