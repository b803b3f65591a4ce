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

_PR_SET_PDEATHSIG = 1


class SchedulerGone(Exception):
    """The scheduler's channel broke: the tokens asked of it will never come."""


def _ts() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def tp_log(msg: str, rank: int = 0) -> None:
    """A scheduler-process line, as the real TP workers print them."""
    print(f"[{_ts()} TP{rank}] {msg}", file=sys.stderr, flush=True)


class SchedulerProcess:
    """The main process's side of one scheduler process: pid, channel, exit code."""

    def __init__(self, rank: int, pid: int, conn: socket.socket):
        self.rank = rank
        self.pid = pid
        self.conn = conn
        self._send_lock = threading.Lock()
        self._wait_lock = threading.Lock()
        self._exitcode: int | None = None
        self._streams: dict[str, queue.SimpleQueue] = {}  # rid -> one item per token; None: channel broke
        self._streams_lock = threading.Lock()
        self._broken = False

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
                for rid in lines:
                    q = self._streams.get(rid.decode())
                    if q is not None:
                        q.put(True)
        with self._streams_lock:
            self._broken = True
            for q in self._streams.values():
                q.put(None)

    def generate(self, rid: str, n: int):
        """Yield 0..n-1, each when this scheduler has produced that token of request `rid`.
        Raises SchedulerGone if the channel breaks first; closing it early aborts the request."""
        if n <= 0:
            return
        q: queue.SimpleQueue = queue.SimpleQueue()
        with self._streams_lock:
            if self._broken:
                raise SchedulerGone()
            self._streams[rid] = q
        done = 0
        try:
            self.send(op="gen", rid=rid, n=n)
            while done < n:
                if q.get() is None:
                    raise SchedulerGone()
                done += 1
                yield done - 1
        finally:
            with self._streams_lock:
                self._streams.pop(rid, None)
            if done < n:
                self.send(op="abort", rid=rid)


def start_schedulers(count: int, decode_tokens_per_s: float) -> list[SchedulerProcess]:
    """Fork `count` scheduler processes, ranks 0..count-1.

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
                _run(rank, theirs, parent, decode_tokens_per_s)
            except BaseException:
                traceback.print_exc()
                code = 1
            os._exit(code)
        theirs.close()
        procs.append(SchedulerProcess(rank, pid, ours))
    return procs


def _run(rank: int, conn: socket.socket, parent: int, decode_tokens_per_s: float) -> None:
    """A scheduler process: decode steps for the running requests until told to stop."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        return
    step = 1.0 / decode_tokens_per_s
    running: dict[str, int] = {}  # rid -> tokens still to make
    next_step = 0.0
    buf = b""
    while True:
        timeout = max(0.0, next_step - time.monotonic()) if running else None
        if select.select([conn], [], [], timeout)[0]:
            data = conn.recv(65536)
            if not data:
                return  # the main process is gone
            *lines, buf = (buf + data).split(b"\n")
            for line in lines:
                msg = json.loads(line)
                if msg["op"] == "gen":
                    if not running:
                        next_step = time.monotonic() + step
                    running[msg["rid"]] = int(msg["n"])
                elif msg["op"] == "abort":
                    running.pop(msg["rid"], None)
                elif msg["op"] == "raise":
                    # as run_scheduler_process's except: log, SIGQUIT the parent, return
                    tp_log(msg["text"], rank)
                    os.kill(parent, signal.SIGQUIT)
                    return
                elif msg["op"] == "shutdown":
                    return
        if running and time.monotonic() >= next_step:
            conn.sendall("".join(f"{rid}\n" for rid in running).encode())
            for rid in list(running):
                running[rid] -= 1
                if not running[rid]:
                    del running[rid]
            next_step += step
