"""ops.loadgen against a local fake of the gateway (127.0.0.1, a port of its own): what counts as
a failed request, how stop() treats requests in flight, and the sampling of GET /workers."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ops.loadgen import Load, LoadReport, Request, WorkersSample, WorkersSampler, min_ready

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"1"}}]}\n\n'
DONE = b"data: [DONE]\n\n"
ERROR_EVENT = b'data: {"error": {"message": "worker http://10.0.0.11:30000 went away", "code": 502}}\n\n'

# what the fake streams for each chat behaviour; None: the connection is closed there, mid-body
STREAMS = {
    "good": [CHUNK, CHUNK, DONE],
    # comments, event:/id: fields, CRLF, a two-line data field, an event split over two chunks
    "decorated": [b": keep-alive\n\n", b"event: message\r\nid: 1\r\ndata: {\"choices\":\r\ndata: []}\r\n\r\n",
                  CHUNK[:20], CHUNK[20:], b"data: [DO", b"NE]\n\n"],
    "error_event": [CHUNK, ERROR_EVENT, DONE],
    "no_done": [CHUNK, CHUNK],
    "cut": [CHUNK, None],
    "not_json": [CHUNK, b"data: hello\n\n", DONE],
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as smg and SGLang answer

    def log_message(self, *args):
        pass

    def answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self) -> bool:
        fake = self.server.fake
        if fake.key and self.headers.get("Authorization") != f"Bearer {fake.key}":
            self.answer(401, b'{"error": "unauthorized"}')
            return False
        return True

    def do_GET(self):
        fake = self.server.fake
        if self.path != "/workers" or not self.authorized():
            return
        with fake.lock:
            fake.worker_reads += 1
            code, body = fake.workers[0] if len(fake.workers) == 1 else fake.workers.pop(0)
        self.answer(code, json.dumps(body).encode())

    def do_POST(self):
        fake = self.server.fake
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/chat/completions" or not self.authorized():
            return
        with fake.lock:
            fake.chats.append((self.client_address[1], body, self.headers.get("Authorization")))
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            self.chat(fake)
        finally:
            with fake.lock:
                fake.in_flight -= 1

    def chat(self, fake):
        if fake.chat == "hangup" or (fake.chat == "hangup_odd" and len(fake.chats) % 2):
            self.close_connection = True  # closed before any byte of an answer, as smg closes a kept-alive one
            return
        if fake.chat == "503":
            return self.answer(503, b"no workers available\n")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, data in enumerate(STREAMS["good" if fake.chat in ("slow", "hangup_odd") else fake.chat]):
            if data is None:
                self.close_connection = True  # no last chunk: the body is cut
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            if fake.chat == "slow" and i == 0:
                fake.in_stream.set()
                time.sleep(0.3)
        self.wfile.write(b"0\r\n\r\n")


class Fake:
    def __init__(self, chat: str = "good", key: str | None = None, workers: list | None = None):
        self.chat, self.key = chat, key
        self.workers = workers or [(200, {"workers": [], "total": 0})]  # answers in turn, the last one kept
        self.lock = threading.Lock()
        self.chats: list[tuple[int, dict, str | None]] = []  # client port, body, Authorization
        self.in_flight = self.max_in_flight = self.worker_reads = 0
        self.in_stream = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.fake = self
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        # a short poll so that shutdown() at teardown returns at once
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()


@pytest.fixture
def fake():
    made = []

    def make(**kw) -> Fake:
        made.append(Fake(**kw))
        return made[-1]

    yield make
    for f in made:
        f.server.shutdown()
        f.server.server_close()


def closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def wait_for(condition, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def run(url: str, n: int = 2, **kw) -> LoadReport:
    """At least n requests at concurrency 1 unless told."""
    load = Load(url, "m", **{"concurrency": 1, "failure_pause_s": 0.01, **kw})
    load.start()
    wait_for(lambda: load.completed >= n)
    return load.stop()


def test_a_good_stream_is_ok_and_the_request_is_openai_streaming(fake):
    f = fake()
    report = run(f.url + "/", max_tokens=7, prompt="Say hi.")
    assert report.total >= 2 and report.failed == 0 and report.failures() == []
    assert all(r.ok and r.error == "" and r.latency_s >= 0 for r in report.requests)
    assert re.fullmatch(r"\d+ requests, 0 failed, p50 \d+ ms, p99 \d+ ms", report.summary())
    _, body, auth = f.chats[0]
    assert body == {"model": "m", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 7, "stream": True}
    assert auth is None


def test_sse_comments_fields_crlf_multiline_data_and_split_chunks_parse(fake):
    report = run(fake(chat="decorated").url)
    assert report.failed == 0, report.failures()


@pytest.mark.parametrize("chat, error", [
    ("503", "HTTP 503: no workers available"),
    ("error_event", 'stream error event: {"error": {"message": "worker http://10.0.0.11:30000 went away"'),
    ("no_done", "stream ended without [DONE]"),
    ("cut", "transport: ChunkedEncodingError"),
    ("not_json", "stream data is not JSON: hello"),
])
def test_failed_requests_say_what_happened(fake, chat, error):
    f = fake(chat=chat)
    report = run(f.url, resend_unanswered=True)  # each of these had an answer begun, or none at all: none sent again
    assert report.failed == report.total >= 2 and report.retried == 0 and len(f.chats) == report.total
    assert all(r.error.startswith(error) for r in report.requests), report.failures()
    assert report.summary().endswith("failed, p50 n/a, p99 n/a")


def test_a_connection_closed_before_any_answer_is_a_failure_or_where_asked_sent_again_once(fake):
    f = fake(chat="hangup_odd")
    report = run(f.url, n=3)
    assert report.failed == report.total - len([r for r in report.requests if r.ok]) > 0
    assert report.failures() == ["transport: ConnectionError: ('Connection aborted.', "
                                 "RemoteDisconnected('Remote end closed connection without response'))"]
    f = fake(chat="hangup_odd")
    report = run(f.url, n=3, resend_unanswered=True)
    assert report.failed == 0 and report.retried == report.total >= 3 and len(f.chats) == 2 * report.total
    assert re.fullmatch(rf"{report.total} requests, 0 failed, {report.total} sent again, p50 \d+ ms, p99 \d+ ms",
                        report.summary())
    f = fake(chat="hangup")
    report = run(f.url, n=2, resend_unanswered=True)  # once only
    assert report.failed == report.retried == report.total >= 2 and len(f.chats) == 2 * report.total


def test_a_refused_connection_fails_as_transport(fake):
    report = run(closed_url())
    assert report.failed == report.total >= 2
    assert all(r.error.startswith("transport: ConnectionError") for r in report.requests)


def test_401_without_the_key_ok_with_it(fake):
    f = fake(key="secret")
    report = run(f.url)
    assert report.failed == report.total and report.failures() == ['HTTP 401: {"error": "unauthorized"}']
    report = run(f.url, api_key="secret")
    assert report.failed == 0 and f.chats[-1][2] == "Bearer secret"


def test_each_thread_sends_request_after_request_on_its_own_session(fake):
    f = fake()
    load = Load(f.url, "m", concurrency=3)
    load.start()
    # a session per thread keeps its connection: one client port per thread
    wait_for(lambda: len(c := Counter(p for p, _, _ in f.chats)) >= 3 and min(c.values()) >= 3)
    report = load.stop()
    per_port = Counter(p for p, _, _ in f.chats)
    assert len(per_port) == 3 and min(per_port.values()) >= 3
    assert f.max_in_flight <= 3
    assert report.total == len(f.chats) and report.failed == 0


def test_stop_lets_the_request_in_flight_finish(fake):
    f = fake(chat="slow")
    with Load(f.url, "m", concurrency=1) as load:
        assert f.in_stream.wait(3)  # the stream has begun; the rest comes 0.3 s later
    report = load.report
    assert report.total == 1 and report.failed == 0
    assert report.requests[0].latency_s >= 0.3
    assert len(f.chats) == 1  # nothing sent after stop()


def test_latency_percentile_over_ok_requests_started_in_the_window():
    report = LoadReport([
        Request(10.0, 10.1, True),
        Request(11.0, 11.4, True),
        Request(12.0, 12.2, True),
        Request(12.5, 19.0, False, "HTTP 503: x"),  # failed: never in a latency
        Request(13.0, 13.3, True),
    ])
    assert report.latency_percentile(50) == pytest.approx(0.2)
    assert report.latency_percentile(100) == pytest.approx(0.4)
    assert report.latency_percentile(99, start=11.5) == pytest.approx(0.3)
    assert report.latency_percentile(50, start=11.0, end=12.0) == pytest.approx(0.2)
    assert report.latency_percentile(50, end=10.5) == pytest.approx(0.1)
    assert report.latency_percentile(50, start=12.1, end=12.9) is None
    assert report.summary() == "5 requests, 1 failed, p50 200 ms, p99 400 ms"


def test_failures_are_distinct_first_ones():
    report = LoadReport([Request(0, 1, False, e) for e in ["a", "b", "a", "c", "d"]] + [Request(0, 1, True)])
    assert report.failed == 5 and report.total == 6
    assert report.failures() == ["a", "b", "c", "d"]
    assert report.failures(limit=2) == ["a", "b"]


def worker(url: str, status: str) -> dict:
    return {"id": url[-5:], "url": url, "status": status, "is_healthy": status == "ready"}


W1, W2, W3 = (f"http://10.0.0.1{i}:30000" for i in (1, 2, 3))


def test_workers_sampler_counts_ready_over_time(fake):
    f = fake(key="k", workers=[
        (200, {"workers": [worker(W1, "ready"), worker(W2, "ready"), worker(W3, "pending")], "total": 3}),
        (200, {"workers": [worker(W1, "ready"), worker(W2, "draining"), worker(W3, "failed")], "total": 3}),
        (200, {"workers": [worker(W1, "ready"), worker(W2, "not_ready"), worker(W3, "ready")], "total": 3}),
    ])
    with WorkersSampler(f.url, api_key="k", interval_s=0.01) as sampler:
        wait_for(lambda: f.worker_reads >= 4)
    samples = sampler.samples
    assert all(s.error == "" for s in samples)
    assert samples[0].statuses == {W1: "ready", W2: "ready", W3: "pending"}
    assert samples[1].statuses == {W1: "ready", W2: "draining", W3: "failed"}
    assert samples[2].statuses == {W1: "ready", W2: "not_ready", W3: "ready"}
    assert [s.ready for s in samples[:3]] == [2, 1, 2]
    assert min_ready(samples) == 1
    assert all(a.at <= b.at for a, b in zip(samples, samples[1:]))


def test_workers_sampler_reports_read_errors_not_zero(fake):
    f = fake(key="k")
    with WorkersSampler(f.url, interval_s=0.01) as sampler:
        wait_for(lambda: len(sampler.samples) >= 2)
    assert all(s.error == 'HTTP 401: {"error": "unauthorized"}' and s.statuses == {} for s in sampler.samples)
    assert min_ready(sampler.samples) is None

    sampler = WorkersSampler(closed_url(), interval_s=0.01)
    sampler.start()
    wait_for(lambda: len(sampler.samples) >= 2)
    samples = sampler.stop()
    assert all(s.error.startswith("transport: ConnectionError") and s.ready == 0 for s in samples)

    mixed = [WorkersSample(0, {W1: "ready", W2: "ready"}), WorkersSample(1, {}, "transport: x"),
             WorkersSample(2, {W1: "ready", W2: "pending"})]
    assert min_ready(mixed) == 1


def test_workers_sampler_reports_an_unexpected_answer(fake):
    f = fake(workers=[(200, {"nodes": []})])
    with WorkersSampler(f.url, interval_s=0.01) as sampler:
        wait_for(lambda: len(sampler.samples) >= 1)
    assert sampler.samples[0].error.startswith("unexpected answer (/workers: expected")


def test_a_caller_waits_for_traffic_that_passed_not_for_a_time(fake):
    f = fake()
    with Load(f.url, "m", concurrency=2) as load:
        load.wait_completed(5, timeout=30)
        assert load.completed >= 5
        load.wait_completed(load.completed + 3, timeout=30)
    assert load.report.total >= 8 and load.report.failed == 0
    stalled = Load(closed_url(), "m", concurrency=1, requests=2)
    with stalled:
        stalled.finished.wait(30)
        with pytest.raises(TimeoutError, match=r"load: 2 of 3 requests finished within 0.2 s"):
            stalled.wait_completed(3, timeout=0.2)  # no more will come: said, not waited on for good


def test_a_sampler_is_waited_on_for_its_reads(fake):
    f = fake(key="k", workers=[(200, {"workers": [worker(W1, "ready")], "total": 1})])
    with WorkersSampler(f.url, api_key="k", interval_s=0.01) as sampler:
        sampler.wait_samples(3, timeout=30)
        assert len(sampler.samples) >= 3
    assert min_ready(sampler.samples) == 1
    idle = WorkersSampler(f.url, api_key="k", interval_s=0.01)  # never started: nothing read
    with pytest.raises(TimeoutError, match=r"/workers: 0 of 1 samples read within 0.1 s"):
        idle.wait_samples(1, timeout=0.1)
