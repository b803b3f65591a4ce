"""The one measured load (fleet/tune/measure.py): its program run here as the host runs it, against a small
OpenAI-shaped streaming server with SGLang's counters, and its answer read back; a hostile answer is
refused, never taken for figures."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import builders

from fleet.tune import measure
from fleet.core.wire import Unreadable


class Server:
    """Streams `tokens` chunks per request (`delay_s` apart), counts them in /metrics as SGLang does, one verify
    step per `accept` tokens; `fail_every`: each n-th request answers HTTP 500."""

    def __init__(self, tokens=5, accept=2.5, delay_s=0.0, fail_every=0, key=None):
        self.tokens, self.accept, self.delay_s, self.fail_every, self.key = tokens, accept, delay_s, fail_every, key
        self.made = self.steps = self.seen = 0
        self.auth: list[str | None] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                # as SGLang 0.5.23 counts: one child per is_streaming value, the streamed tokens in "true"'s
                body = (f'sglang:generation_tokens_total{{is_streaming="false",model_name="m"}} 0\n'
                        f'sglang:generation_tokens_total{{is_streaming="true",model_name="m"}} {outer.made}\n'
                        f'sglang:spec_verify_calls_total{{model_name="m"}} {outer.steps}\n').encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.seen += 1
                    n = outer.seen
                    outer.auth.append(self.headers.get("Authorization"))
                if outer.fail_every and n % outer.fail_every == 0:
                    self.send_response(500)
                    self.send_header("Content-Length", "4")
                    self.end_headers()
                    self.wfile.write(b"oops")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for _ in range(outer.tokens):
                    time.sleep(outer.delay_s)
                    self.wfile.write(b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n')
                    self.wfile.flush()
                usage = {"choices": [], "usage": {"completion_tokens": outer.tokens}}
                self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
                with outer.lock:
                    outer.made += outer.tokens
                    outer.steps += outer.tokens / outer.accept

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self):
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def server():
    made = []

    def make(**kw):
        made.append(Server(**kw))
        return made[-1]
    yield make
    for s in made:
        s.close()


def spec_at(port: int, key: bool = False):
    return builders.make_spec(service={"host": "127.0.0.1", "port": port, **(builders.KEYED if key else {})})


def run_on_this_host(spec, load: measure.Load) -> str:
    """The command as the host's shell runs it, with this Python for the server's."""
    command = measure.command(spec, load).replace(spec.launcher, sys.executable, 1)
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                          timeout=measure.bound(load, "test").seconds).stdout


def test_the_load_is_sent_at_its_concurrency_and_read_with_the_servers_counters(server):
    s = server(tokens=5, accept=2.5)
    load = measure.Load(requests=6, concurrency=3, max_tokens=5, prompts=("a", "b"), timeout_s=30)
    lv = measure.parse(run_on_this_host(spec_at(s.port), load), load)
    assert (lv.concurrency, lv.requests, lv.failed, lv.output_tokens) == (3, 6, 0, 30)
    assert lv.accept_length == 2.5 and lv.tokens_per_s > 0 and lv.ttft_p50_s is not None
    assert s.seen == 6


def test_failed_requests_and_requests_past_the_deadline_count_as_failed(server):
    s = server(tokens=2, fail_every=2)
    load = measure.Load(requests=4, concurrency=1, max_tokens=2, prompts=("a",), timeout_s=30)
    lv = measure.parse(run_on_this_host(spec_at(s.port), load), load)
    assert (lv.requests, lv.failed) == (4, 2) and lv.errors == ["HTTP 500: b'oops'"]
    slow = server(tokens=50, delay_s=0.1)
    load = measure.Load(requests=3, concurrency=1, max_tokens=50, prompts=("a",), timeout_s=1)
    lv = measure.parse(run_on_this_host(spec_at(slow.port), load), load)
    assert lv.requests == 3 and lv.failed == 3  # one cut off, two never sent
    assert "cut off: the load's time ran out" in lv.errors[0]


def test_the_api_key_is_read_on_the_host_from_its_header_file(server, tmp_path):
    s = server()
    spec, load = spec_at(s.port, key=True), measure.Load(1, 1, 5, ("a",), 10)
    config = json.loads(base64.b64decode(measure.command(spec, load).rsplit(" ", 1)[1]))
    assert config["auth_file"] == spec.auth_header_file  # the key itself is never an argument (ps shows them)
    assert measure.parse(run_on_this_host(spec, load), load).failed == 1  # no header file here: not sent keyless
    header = tmp_path / "auth"
    header.write_text("Authorization: Bearer sk-lab\n")
    config["auth_file"] = str(header)
    program = [sys.executable, "-c", measure.PROGRAM, base64.b64encode(json.dumps(config).encode()).decode()]
    lv = measure.parse(subprocess.run(program, capture_output=True, text=True, timeout=30).stdout, load)
    assert lv.failed == 0 and s.auth == ["Bearer sk-lab"]


@pytest.mark.parametrize("answer", [
    "", "python3: not found", "@@measure\n", "@@measure\nbm90IGpzb24=\n",
    "@@measure\n" + base64.b64encode(
        b'{"wall_s": 1, "requests": [[1, true, 5, null, ""], [1, true, 5, null, ""]]}').decode(),
    "@@measure\n" + base64.b64encode(b'{"wall_s": -1, "requests": []}').decode(),
    "@@measure\n" + base64.b64encode(b'{"wall_s": 1, "requests": [[1, "yes", 5, null, ""]]}').decode(),
    "@@measure\n" + base64.b64encode(b'{"wall_s": 1, "requests": [[1, true, -5, null, ""]]}').decode(),
    "@@measure\n" + base64.b64encode(b'{"wall_s": 1, "requests": [[1, true]]}').decode(),
])
def test_an_answer_that_is_not_the_loads_record_is_unreadable(answer):
    with pytest.raises(Unreadable):
        measure.parse(answer, measure.Load(1, 1, 5, ("a",), 10))


def test_counters_that_are_not_numbers_are_left_out():
    answer = {"wall_s": 2, "before": {"sglang:generation_tokens_total": "NaN"},
              "after": {"sglang:generation_tokens_total": 10, "sglang:spec_verify_calls_total": "x", "other": 1},
              "requests": [[1.0, True, 10, 0.1, ""]]}
    text = "@@measure\n" + base64.b64encode(json.dumps(answer).encode()).decode()
    lv = measure.parse(text, measure.Load(1, 1, 10, ("a",), 10))
    assert lv.accept_length is None and lv.tokens_per_s == 5.0
