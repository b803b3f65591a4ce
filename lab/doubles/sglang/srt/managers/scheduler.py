"""LAB DOUBLE of sglang.srt.managers.scheduler (not SGLang): the scheduler processes.

SGLang 0.5.23's main process (HTTP server + tokenizer manager) starts one scheduler
process per GPU rank. They hold the GPU memory and run the model; no request completes
without them. What the double keeps of that, because stopping a service depends on it:
- one child process of the server per GPU; the lab GPU registry entries carry their pids,
  so nvidia-smi lists them (not the main process), one per GPU;
- no SIGTERM handler (default action: die), and PR_SET_PDEATHSIG=SIGKILL as SGLang's
  kill_itself_when_parent_died() sets: under systemd's KillMode=control-group a stop kills
  them at once, and they never outlive the main process;
- TP0 makes the tokens: each decode step (1 / decode_tokens_per_s seconds) gives one token
  to every running request (continuous batching), sent to the main process over a socket.
A scheduler leaves on EOF of its channel or when the main process asks it to (the
ShutdownReq at the end of a drain). Stdlib only.

The speed model (host.json "speculation"; sglang/_lab.py has the formulas, lab/doubles/README.md
the model): a documented stand-in for a real GPU; lab figures come from this double. With it, a
decode step batches the n requests running when it starts (requests that come during a step join
the next one), takes s(b, n) seconds, and gives each of them the tokens of one verify step: its
fractional credit of a(b) tokens, in whole tokens (at least 1, never more than it has left). The
steps follow each other without a gap while anything runs. Each step starts at the acceptance the
lab's control file says (sglang/_lab.py control(): a stat per step), else the model's, so a lab test
can lower and restore it in a running server. Without "speculation": the fixed decode rate above,
exactly as before.

The channel, one line per message. Main process to scheduler: JSON objects ({"op": "gen", "rid",
"n"}, "abort", "raise", "shutdown"). Scheduler to main process, per decode step: without the
speed model, one `RID` line per running request (one token each); with it, first `@step N TOKENS
SECONDS` (the step: the requests it served, the tokens it made, how long it took), then one `RID K`
line per request served: one verify step that made K tokens.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections import deque

from sglang import _lab

_PR_SET_PDEATHSIG = 1


class SchedulerGone(Exception):
    """The scheduler's channel broke: the tokens asked of it will never come."""


def _ts() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def tp_log(msg: str, rank: int = 0) -> None:
    """A scheduler-process line, as the real TP workers print them."""
    print(f"[{_ts()} TP{rank}] {msg}", file=sys.stderr, flush=True)


DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default: its gauges cover that many decode steps


class DecodeStats:
    """What TP0 reported of its decode steps (the speed model only): counters since the start,
    and the last DECODE_LOG_INTERVAL steps (a sliding window, updated each step) for the gauges."""

    def __init__(self):
        self.lock = threading.Lock()
        self.tokens_total = 0  # sglang:generation_tokens_total
        self.tokens_streamed = 0  # of which for streamed requests (its is_streaming="true" child)
        self.verify_total = 0  # sglang:spec_verify_calls_total: one per request per step
        self.window: deque[tuple[int, int, float]] = deque(maxlen=DECODE_LOG_INTERVAL)  # (requests, tokens, seconds)

    def step(self, requests: int, tokens: int, seconds: float) -> None:
        with self.lock:
            self.tokens_total += tokens
            self.verify_total += requests
            self.window.append((requests, tokens, seconds))

    def streamed(self, tokens: int) -> None:
        with self.lock:
            self.tokens_streamed += tokens

    def snapshot(self) -> dict:
        """The counters, and the window's verify steps, tokens and seconds of decoding, at one moment."""
        with self.lock:
            return {"tokens_total": self.tokens_total, "tokens_streamed": self.tokens_streamed,
                    "verify_total": self.verify_total,
                    "verify": sum(w[0] for w in self.window), "tokens": sum(w[1] for w in self.window),
                    "seconds": sum(w[2] for w in self.window)}


class Progress:
    """One request as the main process saw TP0 make it: its tokens and its verify steps."""

    def __init__(self):
        self.tokens = 0
        self.steps = 0


class SchedulerProcess:
    """The main process's side of one scheduler process: pid, channel, exit code."""

    def __init__(self, rank: int, pid: int, conn: socket.socket):
        self.rank = rank
        self.pid = pid
        self.conn = conn
        self._send_lock = threading.Lock()
        self._wait_lock = threading.Lock()
        self._exitcode: int | None = None
        self._streams: dict[str, queue.SimpleQueue] = {}  # rid -> one item per step: its tokens; None: channel broke
        self._streaming: set[str] = set()  # rids of streamed requests: their tokens are counted apart
        self._streams_lock = threading.Lock()
        self._broken = False
        self.stats = DecodeStats()

    def send(self, **msg) -> None:
        data = (json.dumps(msg) + "\n").encode()
        try:
            with self._send_lock:
                self.conn.sendall(data)
        except OSError:
            pass  # it is gone: the reader sees EOF, the watchdog sees the exit code

    def exitcode(self) -> int | None:
        """None while it runs, else as multiprocessing reports it (-N: killed by signal N)."""
        with self._wait_lock:
            if self._exitcode is None:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self._exitcode = os.waitstatus_to_exitcode(status)
            return self._exitcode

    def kill(self) -> None:
        if self.exitcode() is None:
            os.kill(self.pid, signal.SIGKILL)

    def shutdown(self) -> None:
        self.send(op="shutdown")

    def start_reader(self) -> None:
        threading.Thread(target=self._read, name=f"scheduler-{self.rank}-reader", daemon=True).start()

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                data = self.conn.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            *lines, buf = (buf + data).split(b"\n")
            with self._streams_lock:
                for line in lines:
                    if line.startswith(b"@step "):  # first, so a request's tokens never come before its step's counts
                        _, requests, tokens, seconds = line.split()
                        self.stats.step(int(requests), int(tokens), float(seconds))
                        continue
                    rid, _, k = line.partition(b" ")
                    q = self._streams.get(rid.decode())
                    if q is not None:
                        q.put(int(k) if k else 1)
                        if rid.decode() in self._streaming:  # counted with its step, as the step's tokens
                            self.stats.streamed(int(k) if k else 1)
        with self._streams_lock:
            self._broken = True
            for q in self._streams.values():
                q.put(None)

    def generate(self, rid: str, n: int, progress: Progress | None = None, streaming: bool = False):
        """Yield 0..n-1, each when this scheduler has produced that token of request `rid` (a
        verify step's tokens one after the other; `progress` counts tokens and steps; `streaming`:
        its tokens are also counted as a streamed request's).
        Raises SchedulerGone if the channel breaks first; closing it early aborts the request."""
        progress = progress if progress is not None else Progress()
        if n <= 0:
            return
        q: queue.SimpleQueue = queue.SimpleQueue()
        with self._streams_lock:
            if self._broken:
                raise SchedulerGone()
            self._streams[rid] = q
            if streaming:
                self._streaming.add(rid)
        done = 0
        try:
            self.send(op="gen", rid=rid, n=n)
            while done < n:
                k = q.get()
                if k is None:
                    raise SchedulerGone()
                progress.steps += 1
                for _ in range(min(k, n - done)):
                    done += 1
                    progress.tokens = done
                    yield done - 1
        finally:
            with self._streams_lock:
                self._streams.pop(rid, None)
                self._streaming.discard(rid)
            if done < n:
                self.send(op="abort", rid=rid)


def start_schedulers(count: int, decode_tokens_per_s: float, speed: dict | None = None) -> list[SchedulerProcess]:
    """Fork `count` scheduler processes, ranks 0..count-1. `speed`: the speed model's plan
    (_lab.speed_plan), else None (one token per step at decode_tokens_per_s).

    Forked rather than spawned: quick, and the child needs nothing re-imported. So this
    must run before the server process starts any thread (fork copies only the calling
    thread; a lock another thread held would stay locked in the child) and before it
    installs its signal handlers (the child keeps Python's defaults: SIGTERM kills it).
    """
    parent = os.getpid()
    procs: list[SchedulerProcess] = []
    for rank in range(count):
        ours, theirs = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()  # else the child would print the parent's buffered text again
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                ours.close()
                for p in procs:  # hold no other channel, so each one's death reaches the main process as EOF
                    p.conn.close()
                _run(rank, theirs, parent, decode_tokens_per_s, speed)
            except BaseException:
                traceback.print_exc()
                code = 1
            os._exit(code)
        theirs.close()
        procs.append(SchedulerProcess(rank, pid, ours))
    return procs


def _run(rank: int, conn: socket.socket, parent: int, decode_tokens_per_s: float, speed: dict | None = None) -> None:
    """A scheduler process: decode steps for the running requests until told to stop."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        return
    if speed is not None:
        return _run_speed_model(rank, conn, parent, speed)
    step = 1.0 / decode_tokens_per_s
    running: dict[str, int] = {}  # rid -> tokens still to make
    next_step = 0.0
    channel = _Channel(conn, rank, parent)
    while True:
        msgs = channel.receive(max(0.0, next_step - time.monotonic()) if running else None)
        if msgs is None:
            return
        for msg in msgs:
            if msg["op"] == "gen":
                if not running:
                    next_step = time.monotonic() + step
                running[msg["rid"]] = int(msg["n"])
            else:
                running.pop(msg["rid"], None)
        if running and time.monotonic() >= next_step:
            conn.sendall("".join(f"{rid}\n" for rid in running).encode())
            for rid in list(running):
                running[rid] -= 1
                if not running[rid]:
                    del running[rid]
            next_step += step


class _Channel:
    """A scheduler's side of its channel: the main process's gen and abort requests; None once it is
    told to stop (shutdown, a raise, EOF)."""

    def __init__(self, conn: socket.socket, rank: int, parent: int):
        self.conn, self.rank, self.parent, self.buf = conn, rank, parent, b""

    def receive(self, timeout: float | None) -> list[dict] | None:
        if not select.select([self.conn], [], [], timeout)[0]:
            return []
        data = self.conn.recv(65536)
        if not data:
            return None  # the main process is gone
        *lines, self.buf = (self.buf + data).split(b"\n")
        msgs = []
        for line in lines:
            msg = json.loads(line)
            if msg["op"] == "raise":
                # as run_scheduler_process's except: log, SIGQUIT the parent, return
                tp_log(msg["text"], self.rank)
                os.kill(self.parent, signal.SIGQUIT)
                return None
            if msg["op"] == "shutdown":
                return None
            msgs.append(msg)  # gen, abort
        return msgs


def _run_speed_model(rank: int, conn: socket.socket, parent: int, plan: dict) -> None:
    """_run with the speed model: a step batches the requests running when it starts, lasts
    s(b, n) and gives each of them one verify step's tokens (see the module's docstring)."""
    a, c = plan["accept_length"], plan["c"]
    running: dict[str, list] = {}  # rid -> [tokens still to make, credit]
    batch: list[str] | None = None  # the step under way: the requests it serves
    step_s = 0.0
    step_end = 0.0
    channel = _Channel(conn, rank, parent)
    while True:
        msgs = channel.receive(max(0.0, step_end - time.monotonic()) if batch is not None else None)
        if msgs is None:
            return
        for msg in msgs:
            if msg["op"] == "gen":
                running[msg["rid"]] = [int(msg["n"]), 0.0]
            else:
                running.pop(msg["rid"], None)
        now = time.monotonic()
        start = now  # from idle, a step starts at once
        if batch is not None and now >= step_end:
            made = []
            for rid in batch:
                req = running.get(rid)
                if req is None:  # aborted during the step
                    continue
                k, req[1] = _lab.credit_tokens(req[1], a, req[0])
                req[0] -= k
                if not req[0]:
                    del running[rid]
                made.append((rid, k))
            if made:
                lines_out = [f"@step {len(made)} {sum(k for _, k in made)} {step_s!r}\n"]
                lines_out += [f"{rid} {k}\n" for rid, k in made]
                conn.sendall("".join(lines_out).encode())
            batch = None
            start = step_end  # the next step starts where this one ended: no drift
        if batch is None and running:
            batch = list(running)
            # the step's accept length: the control file's acceptance, read as it starts (no restart)
            a = _lab.with_acceptance(plan, _lab.control()["acceptance"])["accept_length"]
            step_s = _lab.step_seconds(plan, len(batch), c)
            step_end = start + step_s
