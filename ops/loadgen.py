"""Steady streaming chat load, and the gateway's view of its workers, sampled over time.

End-to-end tests and the rolling-rollout benchmark need to know whether any client request
failed while workers were replaced behind the gateway (smg), and how latency moved in each
window. smg reports a failure after it has answered HTTP 200 as an SSE `error` event, so a
status code alone is not enough: every stream is read to its end and checked.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field

import requests

from fleet.gateway.smg import READY, parse_workers
from fleet.tune.search import percentile
from fleet.core.wire import Unreadable

BODY_CHARS = 200  # of an error body or event kept in an error text


@dataclass
class Request:
    """One finished request; times are time.monotonic()."""

    started: float
    ended: float
    ok: bool
    error: str = ""
    tokens: int = 0  # output tokens: the stream's usage, else its chunks with text
    first_token: float | None = None  # when the first of them came
    retried: bool = False  # sent again once: its connection was closed before any byte of an answer

    @property
    def latency_s(self) -> float:
        return self.ended - self.started


@dataclass
class LoadReport:
    requests: list[Request] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.requests)

    @property
    def failed(self) -> int:
        return sum(not r.ok for r in self.requests)

    @property
    def retried(self) -> int:
        return sum(r.retried for r in self.requests)

    def failures(self, limit: int = 5) -> list[str]:
        """The first `limit` distinct error texts, in the order they first happened."""
        seen: dict[str, None] = {}
        for r in self.requests:
            if not r.ok and r.error not in seen:
                seen[r.error] = None
                if len(seen) == limit:
                    break
        return list(seen)

    def latency_percentile(self, p: float, start: float | None = None, end: float | None = None) -> float | None:
        """Nearest-rank p-th percentile (0 < p <= 100) of the latency, in seconds, of the ok
        requests that started within [start, end]; None when there are none."""
        return percentile([r.latency_s for r in self.requests
                           if r.ok and (start is None or r.started >= start) and (end is None or r.started <= end)], p)

    def summary(self) -> str:
        def ms(p: float) -> str:
            s = self.latency_percentile(p)
            return "n/a" if s is None else f"{s * 1000:.0f} ms"

        retried = f", {self.retried} sent again" if self.retried else ""
        return f"{self.total} requests, {self.failed} failed{retried}, p50 {ms(50)}, p99 {ms(99)}"


def _session(api_key: str | None) -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # lab targets are private addresses: never through an environment proxy
    if api_key:
        session.headers["Authorization"] = f"Bearer {api_key}"
    return session


def _http_error(resp: requests.Response) -> str:
    body = resp.content.decode("utf-8", "replace").strip()
    return f"HTTP {resp.status_code}: {body[:BODY_CHARS]}"


def _lines(resp: requests.Response):
    """The body's lines as they arrive, without their end of line (LF or CRLF)."""
    pending = b""
    for chunk in resp.iter_content(chunk_size=None):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            yield line.rstrip(b"\r").decode("utf-8", "replace")
    if pending:
        yield pending.rstrip(b"\r").decode("utf-8", "replace")


@dataclass
class Stream:
    error: str = ""  # '' when it ended with [DONE] and no error, else why not
    chunks: int = 0  # events with text (content or reasoning)
    usage_tokens: int | None = None  # completion_tokens of its usage event, where one was asked for
    first_token: float | None = None

    @property
    def tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.chunks


def _has_text(event: dict) -> bool:
    for choice in event.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")):
            return True
    return False


def _read_stream(resp: requests.Response, deadline: float) -> Stream:
    """Read an SSE chat stream to its end, counting its tokens."""
    out = Stream()
    data: list[str] = []
    done = False
    for line in _lines(resp):
        if time.monotonic() > deadline:
            out.error = "timeout: the stream outlasted the request timeout"
            return out
        if line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
            continue
        if line or not data:
            continue  # a comment (':'), an event:/id:/retry: field, or a blank line ending no event
        payload, data = "\n".join(data), []
        if done:
            continue  # read on after [DONE] only so that the connection goes back to the pool
        if payload == "[DONE]":
            done = True
            continue
        try:
            event = json.loads(payload)
        except ValueError:
            out.error = f"stream data is not JSON: {payload[:BODY_CHARS]}"
            return out
        if isinstance(event, dict) and "error" in event:
            out.error = f"stream error event: {payload[:BODY_CHARS]}"
            return out
        if isinstance(event, dict) and _has_text(event):
            out.chunks += 1
            out.first_token = out.first_token or time.monotonic()
        usage = event.get("usage") if isinstance(event, dict) else None
        if isinstance(usage, dict) and type(usage.get("completion_tokens")) is int:
            out.usage_tokens = usage["completion_tokens"]
    # an event cut before its blank line is discarded, as SSE says: a cut [DONE] does not count
    out.error = "" if done else "stream ended without [DONE]"
    return out


class Load:
    """`concurrency` threads, each sending one streaming chat completion after another until stop(),
    or until `requests` have been sent (then `finished` is set once the last ends). The prompts go
    in turn, one per request; usage: ask for the stream's usage (its token count).

    A failed request is followed by a pause of failure_pause_s, so that a target that refuses
    at once does not turn each thread into a busy loop flooding the report.

    resend_unanswered: a request whose connection the server closed before any byte of an answer
    (http.client's RemoteDisconnected: a keep-alive connection closed under it) is sent again, once, on a
    new connection, as the OpenAI SDK's retries do; the report counts them. smg 1.13 closes its kept-alive
    connections when it exits without announcing it (no `Connection: close`), so a client that sends on one
    at that moment meets this whatever a roll does. Anything else (refused, reset, a cut stream) stays a failure.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, concurrency: int = 8,
                 max_tokens: int = 32, prompt: str = "Count to ten.", timeout_s: float = 120.0,
                 failure_pause_s: float = 0.05, prompts: list[str] | None = None, requests: int | None = None,
                 usage: bool = False, resend_unanswered: bool = False):
        self.url = base_url.rstrip("/") + "/v1/chat/completions"
        self.body = {"model": model, "max_tokens": max_tokens, "stream": True,
                     **({"stream_options": {"include_usage": True}} if usage else {})}
        self.prompts = list(prompts or [prompt])
        self.limit = requests
        self.sent = 0
        self.finished = threading.Event()
        self.api_key = api_key
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.failure_pause_s = failure_pause_s
        self.resend_unanswered = resend_unanswered
        self.report: LoadReport | None = None
        self._done: list[Request] = []
        self._lock = threading.Lock()
        self._progress = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def completed(self) -> int:
        """Requests finished so far, for callers waiting for some traffic to have passed."""
        with self._lock:
            return len(self._done)

    def wait_completed(self, n: int, timeout: float) -> None:
        """Until `n` requests have finished (ok or not): traffic that passed, whatever the machine's speed.
        TimeoutError after `timeout` s, saying how many did."""
        with self._progress:
            if not self._progress.wait_for(lambda: len(self._done) >= n, timeout):
                raise TimeoutError(f"load: {len(self._done)} of {n} requests finished within {timeout:g} s")

    def start(self) -> None:
        if self._threads:
            raise RuntimeError("Load already started")
        self._threads = [threading.Thread(target=self._worker, name=f"loadgen-{i}", daemon=True)
                         for i in range(self.concurrency)]
        for t in self._threads:
            t.start()

    def stop(self) -> LoadReport:
        """Stop sending; requests in flight run to their end (a cut one would count as a failure)."""
        if self.report is None:
            self._stopping.set()
            for t in self._threads:
                t.join()
            with self._lock:
                self.report = LoadReport(sorted(self._done, key=lambda r: r.started))
        return self.report

    def __enter__(self) -> Load:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _next_prompt(self) -> str | None:
        with self._lock:
            if self.limit is not None and self.sent >= self.limit:
                return None
            self.sent += 1
            return self.prompts[(self.sent - 1) % len(self.prompts)]

    def _worker(self) -> None:
        with _session(self.api_key) as session:
            while not self._stopping.is_set() and (prompt := self._next_prompt()) is not None:
                request = self._send(session, prompt)
                with self._lock:
                    self._done.append(request)
                    self._progress.notify_all()
                    if len(self._done) == self.limit:
                        self.finished.set()
                if not request.ok:
                    self._stopping.wait(self.failure_pause_s)

    def _send(self, session: requests.Session, prompt: str) -> Request:
        started = time.monotonic()
        stream, unanswered = self._attempt(session, prompt, started)
        retried = unanswered and self.resend_unanswered
        if retried:
            stream, _ = self._attempt(session, prompt, started)
        return Request(started, time.monotonic(), not stream.error, stream.error, stream.tokens, stream.first_token,
                       retried)

    def _attempt(self, session: requests.Session, prompt: str, started: float) -> tuple[Stream, bool]:
        """The request sent once; and whether the server closed its connection before any byte of an answer."""
        body = {**self.body, "messages": [{"role": "user", "content": prompt}]}
        stream = Stream()
        try:
            with session.post(self.url, json=body, stream=True, timeout=self.timeout_s) as resp:
                if resp.status_code != 200:
                    stream.error = _http_error(resp)
                else:
                    stream = _read_stream(resp, started + self.timeout_s)
        except requests.RequestException as e:  # refused, reset, timed out, cut mid-chunk
            stream.error = f"transport: {type(e).__name__}: {e}"
            return stream, _unanswered(e)
        return stream, False


def _unanswered(e: BaseException) -> bool:
    """requests' error wraps urllib3's, which wraps http.client's RemoteDisconnected in its args."""
    seen: list[BaseException] = [e]
    while seen:
        err = seen.pop()
        if isinstance(err, http.client.RemoteDisconnected):
            return True
        seen += [a for a in err.args if isinstance(a, BaseException)]
    return False


@dataclass
class WorkersSample:
    at: float  # time.monotonic()
    statuses: dict[str, str]  # worker url -> status; {} when the read failed
    error: str = ""

    @property
    def ready(self) -> int:
        return sum(s == READY for s in self.statuses.values())


def min_ready(samples: list[WorkersSample]) -> int | None:
    """The fewest ready workers over the samples that were read; None when none was."""
    return min((s.ready for s in samples if not s.error), default=None)


class WorkersSampler:
    """Reads the gateway's GET /workers every interval_s until stop(); a failed read is kept as a
    sample with its error, never taken for zero workers."""

    def __init__(self, base_url: str, api_key: str | None = None, interval_s: float = 0.2,
                 timeout_s: float = 5.0):
        self.url = base_url.rstrip("/") + "/workers"
        self.api_key = api_key
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.samples: list[WorkersSample] = []
        self._read = threading.Condition()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def wait_samples(self, n: int, timeout: float) -> None:
        """Until `n` samples have been read (a failed read is one). TimeoutError after `timeout` s."""
        with self._read:
            if not self._read.wait_for(lambda: len(self.samples) >= n, timeout):
                raise TimeoutError(f"/workers: {len(self.samples)} of {n} samples read within {timeout:g} s")

    def start(self) -> None:
        if self._thread:
            raise RuntimeError("WorkersSampler already started")
        self._thread = threading.Thread(target=self._run, name="workers-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> list[WorkersSample]:
        self._stopping.set()
        if self._thread:
            self._thread.join()
        return self.samples

    def __enter__(self) -> WorkersSampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        with _session(self.api_key) as session:
            while True:
                sample = self._sample(session)
                with self._read:
                    self.samples.append(sample)
                    self._read.notify_all()
                if self._stopping.wait(self.interval_s):
                    return

    def _sample(self, session: requests.Session) -> WorkersSample:
        at = time.monotonic()
        try:
            resp = session.get(self.url, timeout=self.timeout_s)
        except requests.RequestException as e:
            return WorkersSample(at, {}, f"transport: {type(e).__name__}: {e}")
        if resp.status_code != 200:
            return WorkersSample(at, {}, _http_error(resp))
        try:
            return WorkersSample(at, parse_workers(resp.text))
        except Unreadable as e:
            return WorkersSample(at, {}, f"unexpected answer ({e})")
