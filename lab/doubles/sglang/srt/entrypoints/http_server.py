"""LAB DOUBLE of sglang.srt.entrypoints.http_server (not SGLang): start-up and HTTP.

Start-up, as SGLang 0.5.23 does it (see docs/ARCHITECTURE.md and the reference sheet):
1. GPU memory: registers /run/lab-gpu/<pid>.json (the lab's stand-in for CUDA memory)
   for tp_size GPUs at mem_fraction_static of each; removed on exit.
2. Loading: the HTTP port stays CLOSED for host.json's load_seconds. load "crash" dies
   partway (traceback, then SIGKILL, as the real launcher's kill_process_tree does),
   "hang" never opens the port, "ok" serves. A launch whose argv (ignoring
   `--api-key VALUE`) equals host.json's preinstalled_argv always loads fine.
   GPUs already held by other live processes beyond what is free: CUDA OOM crash
   (except for the preinstalled argv, which the lab boots beside its workloads).
3. Port open: /v1/models answers 200 at once; /health, /health_generate and /ready
   answer 503 while the warm-up runs (~1 s), then 200.
HTTP: a ThreadingHTTPServer that answers like the real FastAPI app for what a deploy
uses: /health*, /ready, /v1/models, /v1/chat/completions (plain and SSE), /v1/completions,
/generate, /model_info, /server_info, /metrics (--enable-metrics). The API key guards
every path except /health*, /ready* and /metrics* (as the real middleware does).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import sglang
from sglang import _lab

logger = logging.getLogger(__name__)

WARMUP_SECONDS = float(os.environ.get("LAB_SGLANG_WARMUP_SECONDS", "1.0"))

# Mean accepted length per verify step, by algorithm (what /metrics, /server_info and
# meta_info report): plausible, fixed, so lab runs are reproducible.
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


def _ts() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def tp_log(msg: str, rank: int = 0) -> None:
    """A scheduler-process line, as the real TP workers print them."""
    print(f"[{_ts()} TP{rank}] {msg}", file=sys.stderr, flush=True)


def http_log(msg: str) -> None:
    print(f"[{_ts()}] {msg}", file=sys.stderr, flush=True)


class ServerState:
    def __init__(self, server_args):
        self.args = server_args
        self.status = "Starting"  # Starting -> Up; "Shutdown" while exiting
        self.created = int(time.time())
        self.startup_time = time.time()
        self.lock = threading.Lock()
        self.num_running = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.verify_calls_total = 0
        self.last_gen_throughput = 0.0
        algo = server_args.speculative_algorithm
        self.accept_length = ACCEPT_LENGTH.get(algo, 2.5) if algo else None
        self.gpu_memory_mib = int(_lab.host_config().get("gpu_memory_mib", 81920))

    # ---- deterministic "generation" ----

    def generate(self, prompt_tokens: int, max_tokens: int | None):
        limit = len(REPLY_WORDS) if max_tokens is None else max(0, int(max_tokens))
        words = REPLY_WORDS[:limit]
        finish = "stop" if len(words) == len(REPLY_WORDS) else "length"
        with self.lock:
            self.requests_total += 1
            self.prompt_tokens_total += prompt_tokens
            self.generation_tokens_total += len(words)
            if self.accept_length:
                self.verify_calls_total += max(1, round(len(words) / self.accept_length))
            self.last_gen_throughput = 42.0 * (self.accept_length or 1.0)
        return words, finish

    def spec_meta(self, completion_tokens: int) -> dict:
        if not self.accept_length:
            return {}
        steps = max(1, round(completion_tokens / self.accept_length)) if completion_tokens else 0
        draft = self.args.speculative_num_draft_tokens or 1
        return {
            "spec_accept_length": self.accept_length,
            "spec_accept_rate": round(min(1.0, (self.accept_length - 1) / max(1, draft - 1)), 4),
            "spec_verify_ct": steps,
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


def _server_info(state: ServerState) -> dict:
    a = state.args
    info = dict(a.resolved_dict())
    info["launch_command"] = a.launch_command
    internal = {
        "last_gen_throughput": state.last_gen_throughput,
        "memory_usage": {
            "weight": round(state.gpu_memory_mib * 0.45 / 1024, 2),
            "kvcache": round(state.gpu_memory_mib * (a.mem_fraction_static - 0.45) / 1024, 2),
            "token_capacity": int(state.gpu_memory_mib * 4),
            "graph": 1.12,
        },
        "effective_max_running_requests_per_dp": a.max_running_requests or 2048,
    }
    if state.accept_length:
        internal["avg_spec_accept_length"] = state.accept_length
    info.update(
        {
            "max_total_num_tokens": int(state.gpu_memory_mib * 4),
            "max_req_input_len": max(1, (a._context_len or 4096) - 5),
            "startup_time": state.startup_time,
            "internal_states": [internal],
            "version": sglang.__version__,
            "frontend": "python",
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
    tok_labels = f'engine_type="unified",model_name="{a.served_model_name}"'
    gauges = [
        ("sglang:num_running_reqs", "The number of running requests.", state.num_running),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", 0),
        ("sglang:num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0),
        ("sglang:gen_throughput", "The generation throughput (token/s).", state.last_gen_throughput),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0),
        ("sglang:token_usage", "The token usage.", 0.0),
        (
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            state.accept_length or 0.0,
        ),
        (
            "sglang:spec_accept_rate",
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            state.spec_meta(10).get("spec_accept_rate", 0.0),
        ),
    ]
    out = []
    for name, doc, value in gauges:
        out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {float(value)}"]
    counters = [
        ("sglang:spec_verify_calls", "Number of speculative decoding verification calls.", labels, state.verify_calls_total),
        ("sglang:prompt_tokens", "Number of prefill tokens processed.", tok_labels, state.prompt_tokens_total),
        (
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            tok_labels + ',is_streaming="false"',
            state.generation_tokens_total,
        ),
        ("sglang:num_requests", "Number of requests processed.", tok_labels, state.requests_total),
    ]
    for name, doc, lab, value in counters:
        out += [
            f"# HELP {name}_total {doc}",
            f"# TYPE {name}_total counter",
            f"{name}_total{{{lab}}} {float(value)}",
        ]
    return "\n".join(out) + "\n"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    state: ServerState = None  # set by launch_server

    # ---- plumbing ----

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's name
        pass

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
        handler = getattr(self, "_r_" + path.strip("/").replace("/", "_"))
        handler(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = lambda self: self._dispatch()  # noqa: E731

    # ---- endpoints ----

    def _health(self) -> None:
        code = 200 if self.state.status == "Up" else 503
        self._send(code)

    def _r_health(self, _body):
        self._health()

    def _r_health_generate(self, _body):
        self._health()

    def _r_ready(self, _body):
        self._health()

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
        self._send(200, _metrics(self.state).encode(), "text/plain; version=1.0.0; charset=utf-8")

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
        req = self._parse_json(body)
        if req is None:
            return
        text = req.get("text") or ""
        prompt_tokens = len(req["input_ids"]) if isinstance(req.get("input_ids"), list) else _count_tokens(str(text))
        params = req.get("sampling_params") or {}
        words, finish = self.state.generate(prompt_tokens, params.get("max_new_tokens", 128))
        meta = {
            "id": uuid.uuid4().hex,
            "finish_reason": {"type": "length", "length": len(words)} if finish == "length" else {"type": "stop", "matched": 151645},
            "prompt_tokens": prompt_tokens,
            "weight_version": self.state.args.weight_version,
            "completion_tokens": len(words),
            "cached_tokens": 0,
            **self.state.spec_meta(len(words)),
            "e2e_latency": 0.05,
        }
        self._json(200, {"text": " ".join(words), "output_ids": list(range(1000, 1000 + len(words))), "meta_info": meta})

    def _r_v1_completions(self, body):
        req = self._parse_json(body)
        if req is None:
            return
        prompt = req.get("prompt") or ""
        prompt_tokens = _count_tokens(prompt if isinstance(prompt, str) else " ".join(map(str, prompt)))
        words, finish = self.state.generate(prompt_tokens, req.get("max_tokens", 16))
        self._json(
            200,
            {
                "id": uuid.uuid4().hex,
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
        max_tokens = req.get("max_completion_tokens", req.get("max_tokens"))
        with self.state.lock:
            self.state.num_running += 1
        try:
            words, finish = self.state.generate(prompt_tokens, max_tokens)
        finally:
            with self.state.lock:
                self.state.num_running -= 1
        rid = uuid.uuid4().hex
        created = int(time.time())
        model = req.get("model") or self.state.args.served_model_name
        usage = {
            "prompt_tokens": prompt_tokens,
            "total_tokens": prompt_tokens + len(words),
            "completion_tokens": len(words),
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
        }
        if not req.get("stream"):
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
                            "message": {"role": "assistant", "content": " ".join(words), "reasoning_content": None, "tool_calls": None},
                            "logprobs": None,
                            "finish_reason": finish,
                            "matched_stop": 151645 if finish == "stop" else None,
                        }
                    ],
                    "usage": usage,
                    "metadata": {"weight_version": self.state.args.weight_version},
                },
            )
            return
        # Server-sent events, chunked, as the real StreamingResponse.
        self.send_response_only(200)
        self.send_header("date", self.date_time_string())
        self.send_header("server", "uvicorn")
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def chunk(delta, finish_reason=None, with_usage=None):
            obj = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason, "matched_stop": None}],
                "usage": with_usage,
            }
            return obj

        events = [chunk({"role": "assistant", "content": ""})]
        for i, w in enumerate(words):
            events.append(chunk({"role": None, "content": (" " if i else "") + w, "reasoning_content": None, "tool_calls": None}))
        events.append(chunk({"role": None, "content": None, "reasoning_content": None, "tool_calls": None}, finish))
        if (req.get("stream_options") or {}).get("include_usage"):
            events.append({"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [], "usage": usage})
        try:
            for ev in events:
                self._write_chunk(f"data: {json.dumps(ev, separators=(',', ':'))}\n\n".encode())
                time.sleep(0.005)
            self._write_chunk(b"data: [DONE]\n\n")
            self._write_chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            return
        self._access_log(200)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def _gpu_ids(a) -> list[int]:
    n = max(1, int(a.tp_size) * int(a.pp_size))
    base = int(a.base_gpu_id or 0)
    step = int(a.gpu_id_step or 1)
    return [base + i * step for i in range(n)]


def _strip_api_key(argv: list[str]) -> list[str]:
    out, skip = [], False
    for x in argv:
        if skip:
            skip = False
            continue
        if x == "--api-key":
            skip = True
            continue
        if x.startswith("--api-key="):
            continue
        out.append(x)
    return out


def _die(pid: int, sig=signal.SIGKILL) -> None:
    _lab.unregister(pid)
    sys.stderr.flush()
    os.kill(pid, sig)
    time.sleep(5)
    os._exit(137)


def _crash_traceback(kind: str, a, gpu: int, total_mib: int, free_mib: int) -> str:
    ask_gib = 2.0 if kind == "oom" else 0.0
    if kind == "oom":
        err = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {ask_gib:.2f} GiB. GPU {gpu} has a total "
            f"capacity of {total_mib / 1024:.2f} GiB of which {max(0, free_mib) / 1024:.2f} GiB is free. "
            f"Process {os.getpid()} has {max(0, total_mib - free_mib) / 1024:.2f} GiB memory in use. Of the allocated "
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
    load = str(host.get("load", "ok"))
    load_seconds = float(host.get("load_seconds", 0) or 0)
    pre = host.get("preinstalled_argv")
    preinstalled = pre is not None and _strip_api_key(sys.argv[1:]) == _strip_api_key(list(pre))
    if preinstalled:
        load = "ok"  # the preinstalled (old) configuration: rollback returns to it

    logger.info(f"server_args={a!r}")
    state = ServerState(a)
    Handler.state = state
    stop = threading.Event()

    def on_term(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    def wait(seconds: float) -> bool:
        """Sleep; True if asked to stop meanwhile (then clean up and exit)."""
        if stop.wait(max(0.0, seconds)):
            _lab.unregister(pid)
            sys.exit(0)
        return False

    gpus = _gpu_ids(a)
    tp_log("Init torch distributed begin.")
    if max(gpus) >= gpu_count:
        bad = max(gpus)
        tp_log(
            "Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 6362, in run_scheduler_process\n'
            "    scheduler = Scheduler(\n"
            f"torch.AcceleratorError: CUDA error: invalid device ordinal\nGPU {bad} does not exist: "
            f"this host has {gpu_count} GPU(s)."
        )
        http_log("Received sigquit from a child process. It usually means the child failed.")
        _die(pid)
    per_gpu = int(round(gpu_mib * float(a.mem_fraction_static)))
    # CUDA memory: the weights are loaded into what is free; other processes' memory counts.
    short = [(g, gpu_mib - _lab.used_mib_on(g, exclude_pid=pid)) for g in gpus]
    short = [(g, free) for g, free in short if free < per_gpu]
    if preinstalled:
        short = []  # the lab's old service always loads (it may share its GPUs with workloads)
    _lab.register(pid, "sglang::scheduler_TP0", gpus, 0)
    wait(min(0.2, load_seconds * 0.05))
    tp_log("Init torch distributed ends. mem usage=0.00 GB")
    avail_gb = gpu_mib / 1024 - 0.5
    tp_log(f"Load weight begin. avail mem={avail_gb:.2f} GB")
    weight_mib = int(per_gpu * 0.55)
    _lab.register(pid, "sglang::scheduler_TP0", gpus, weight_mib)

    if short and load != "hang":
        wait(load_seconds * 0.5)
        g, free = short[0]
        tp_log("Scheduler hit an exception: " + _crash_traceback("oom", a, g, gpu_mib, free))
        http_log("Received sigquit from a child process. It usually means the child failed.")
        _die(pid)
    if load == "crash":
        wait(load_seconds * 0.5)
        tp_log("Scheduler hit an exception: " + _crash_traceback("crash", a, gpus[0], gpu_mib, gpu_mib - per_gpu))
        http_log("Received sigquit from a child process. It usually means the child failed.")
        _die(pid, signal.SIGKILL)
    wait(load_seconds * 0.5)
    arch = (a._hf_config.get("architectures") or ["UnknownForCausalLM"])[0]
    tp_log(
        f"Load weight end. elapsed={load_seconds * 0.5:.2f} s, type={arch}, dtype=torch.bfloat16, "
        f"avail mem={(gpu_mib - weight_mib) / 1024:.2f} GB, mem usage={weight_mib / 1024:.2f} GB."
    )
    if a.speculative_algorithm:
        tp_log(f"Load draft weight end. speculative_algorithm={a.speculative_algorithm}")
    _lab.register(pid, "sglang::scheduler_TP0", gpus, per_gpu)
    kv_tokens = int(gpu_mib * 4)
    tp_log(f"KV Cache is allocated. #tokens: {kv_tokens}, K size: {(per_gpu - weight_mib) / 2048:.2f} GB, V size: {(per_gpu - weight_mib) / 2048:.2f} GB")
    tp_log(f"Memory pool end. avail mem={(gpu_mib - per_gpu) / 1024:.2f} GB")
    tp_log(f"Capture cuda graph begin. This can take up to several minutes. avail mem={(gpu_mib - per_gpu) / 1024:.2f} GB")
    if load == "hang":
        while True:  # never opens the port; only SIGTERM/SIGKILL end it
            wait(3600)
    wait(load_seconds * 0.3)
    tp_log(f"Capture cuda graph end. Time elapsed: {load_seconds * 0.3:.2f} s. mem usage=1.12 GB. avail mem={(gpu_mib - per_gpu) / 1024 - 1.12:.2f} GB.")
    tp_log(
        f"max_total_num_tokens={kv_tokens}, chunked_prefill_size={a.chunked_prefill_size or 8192}, "
        f"max_prefill_tokens={a.max_prefill_tokens}, max_running_requests={a.max_running_requests or 2048}, "
        f"context_len={a._context_len}, available_gpu_mem={(gpu_mib - per_gpu) / 1024 - 1.12:.2f} GB"
    )
    wait(load_seconds * 0.2)

    # ---- the port opens ----
    bind_host = a.host or "127.0.0.1"
    _Server.address_family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    try:
        httpd = _Server((bind_host, int(a.port)), Handler)
    except OSError as e:
        http_log(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address ({bind_host!r}, {a.port}): {e.strerror.lower() if e.strerror else e}")
        _lab.unregister(pid)
        sys.exit(1)
    http_log(f"INFO:     Started server process [{pid}]")
    http_log("INFO:     Waiting for application startup.")
    http_log("INFO:     Application startup complete.")
    http_log(f"INFO:     Uvicorn running on http://{bind_host}:{a.port} (Press CTRL+C to quit)")
    server_thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    server_thread.start()

    def warmup():
        if a.skip_server_warmup or int(a.node_rank or 0) >= 1:
            state.status = "Up"
        elif not stop.wait(WARMUP_SECONDS):
            http_log(f'INFO:     127.0.0.1:{40000 + pid % 20000} - "GET /model_info HTTP/1.1" 200 OK')
            http_log(
                "Prefill batch, #new-seq: 1, #new-token: 3, #cached-token: 0, token usage: 0.00, "
                "#running-req: 0, #queue-req: 0, "
            )
            http_log(f'INFO:     127.0.0.1:{40001 + pid % 20000} - "POST /generate HTTP/1.1" 200 OK')
            state.status = "Up"
        if state.status == "Up":
            logger.info("The server is fired up and ready to roll!")

    threading.Thread(target=warmup, daemon=True).start()
    while not stop.wait(0.5):
        pass
    state.status = "Shutdown"
    http_log("INFO:     Shutting down")
    httpd.shutdown()
    httpd.server_close()
    http_log("INFO:     Waiting for application shutdown.")
    http_log("INFO:     Application shutdown complete.")
    http_log(f"INFO:     Finished server process [{pid}]")
    _lab.unregister(pid)
    sys.exit(0)
