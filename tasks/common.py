"""Small helpers shared by the task files (pyinfra-side only): run a command within its bound,
give a host up, keep a begun host's lock leased, fail a host, the hosts mid-rollout."""

from __future__ import annotations

import fcntl
import functools
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gevent
from paramiko import SSHException
from pyinfra import logger
from pyinfra.api import StringCommand

from fleet.core import bounds, layout, wire
from fleet.rollout import lock
from fleet.core.bounds import Bound
from fleet.core.outcome import HostVerdict
from adapter.connection import connector_arguments
from fleet.spec import ClassSpec
from adapter import run as runs


@dataclass
class Begun:
    """A rollout that has begun on a host (lock taken, pending record written) and not ended."""

    pf: object  # tasks.preflight.Preflight
    lease: Lease | None = None  # its lock's lease, renewed until the rollout ends
    applied: bool = False  # its files went live: the new service may have been started
    workloads_stopped: bool = False  # its workloads' stop was asked for: a rollback gives them back

    def end(self) -> None:
        """Its rollout ends (the record, the lock's release follow): no more renewals."""
        if self.lease is not None:
            self.lease.stop()
            self.lease = None


ESCALATIONS = ("_sudo", "_su_user", "_doas")  # connector settings that run commands as another user


def escalates(arguments: dict) -> bool:
    """The commands run as another user than the login (sudo, su, doas)."""
    return any(arguments.get(k) for k in ESCALATIONS)


def as_login(arguments: dict) -> dict:
    """The same connector settings, as the login user itself."""
    return {k: v for k, v in arguments.items() if k not in ESCALATIONS}


class HostLost(Exception):
    """This run gave the host up (its link is lost, its lock is another deploy's now, or a command got
    no answer within its bound): nothing more runs on it; it keeps its pending-rollout record."""

    def __init__(self, why: str, doing: str):
        super().__init__(why)
        self.why = why
        self.doing = doing  # the command it was given up at


# The lease's clock: on Linux one that counts a suspended laptop's sleep too (monotonic does not).
CLOCK = functools.partial(time.clock_gettime, time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") \
    else time.monotonic


class _Unanswered(Exception):
    """A command got no answer in time, or its connection broke."""


def run(host, command: str, bound: Bound) -> tuple[bool, str]:
    """Run one shell command on the host at execution time, as pyinfra's operations would (sudo
    if the host's data says so): (ok, what it printed, stdout and stderr in order). The output
    crosses as base64 (fleet.core.wire.transported) and is read back printable: any byte a host sends
    (a journal line, a server's reply) is text here, never an error of the reading.
    bound (fleet.core.bounds): without an answer within it, or over a connection that broke, the host
    is given up for this run and HostLost raised; so it is for a host given up before."""
    this = runs.of(host.state)
    begun = this.begun.get(host.name)
    if begun is not None and begun.lease is not None and not begun.lease.fresh():
        begun.lease.lapsed()
    if host.name in this.lost:
        raise HostLost(this.lost[host.name], bound.what)
    try:
        ok, output = _call(host, command, bound.seconds)
    except _Unanswered as e:
        give_up(host, f"{host.name}: {bound.what}: expected an answer within {bound.seconds:g}s ({bound.basis}), "
                      f"found {e}")
        raise HostLost(this.lost[host.name], bound.what) from None
    if not ok and not connected(host):  # the connection closed under the command: no answer either
        give_up(host, f"{host.name}: {bound.what}: expected an answer, found the connection closed (its link lost)")
        raise HostLost(this.lost[host.name], bound.what)
    said = wire.untransported(output.stdout)
    # what ran the command (sudo, the login shell) speaks on stderr, outside the transport
    return ok, said if ok or not output.stderr else f"{said}\n{wire.printable(output.stderr)}"


def _call(host, command: str, seconds: float):
    # pyinfra's _timeout bounds the reading of the output only (and kills its readers); opening the
    # channel and the exit status are outside it: the outer timeout, a second later, bounds them.
    try:
        with gevent.Timeout(math.ceil(seconds) + 1, TimeoutError):
            return host.run_shell_command(StringCommand(wire.transported(command)),
                                          **connector_arguments(host, _timeout=math.ceil(seconds)))
    except TimeoutError:
        raise _Unanswered("none") from None
    except (OSError, EOFError, SSHException) as e:  # the connection broke (or could not be opened)
        raise _Unanswered(f"the connection broken ({type(e).__name__}: {wire.excerpt(str(e), 120)})") from None


def connected(host) -> bool:
    """The host's SSH connection is up (another connector: as far as can be told)."""
    client = getattr(host.connector, "client", None)
    if client is None:
        return True
    transport = client.get_transport()
    return transport is not None and transport.is_active()


def asked(host, command: str, within: float) -> str | None:
    """What `command` printed (as run() reads it), or None without an answer within `within` seconds:
    for a watcher beside a long command on the same connection."""
    try:
        _, out = _call(host, command, within)
    except _Unanswered:
        return None
    return wire.untransported(out.stdout)


def uploaded(host, wheels_dir: str, uploads: list[tuple[str, str]]) -> str | None:
    """The pip wheel's directory and `wheels_dir` made afresh, then each (controller path, host path)
    uploaded: None, or what went wrong (a full disk, a broken link: this host's, not the run's)."""
    ok, out = run(host, f"mkdir -p {layout.ENGINE_PIP_DIR} && rm -rf {wheels_dir} && mkdir -p {wheels_dir}",
                  bounds.disk("the uploads' directories"))
    if not ok:
        return f"expected the uploads' directories made, found {wire.excerpt(out)}"
    for local, remote in uploads:
        try:
            said = "" if host.put_file(local, remote, **connector_arguments(host)) else "the transfer failed"
        except (OSError, EOFError, SSHException) as e:
            said = str(e)
        if said:
            return f"expected {local} uploaded to {remote}, found {wire.excerpt(said)}"
    return None


def give_up(host, why: str, hang_up: bool = False) -> None:
    """Nothing more runs on the host this run (run raises HostLost); said once. hang_up: close its
    connection too, which ends at once whatever waits on it there (a link found lost)."""
    lost = runs.of(host.state).lost
    if host.name in lost:
        return
    lost[host.name] = why
    host.log_styled(why, fg="red")
    client = getattr(host.connector, "client", None)
    if hang_up and client is not None:
        client.close()


def given_up(host) -> bool:
    """This run gave the host up (give_up): nothing more runs on it."""
    return host.name in runs.of(host.state).lost


class Lease:
    """A begun host's deploy lock, leased while its rollout runs: renewed every lock.renew_every_s
    (fleet.rollout.lock.renew_command, by the host's clock). No renewal answered for lock.lost_after_s: its
    link is lost, the host is given up and its connection closed (which ends the command its
    rollout waits on); the lock gone or another deploy's: given up too. The clock and the sleep
    are injected for tests; `renew(within)` answers lock.RENEWED_MARK, lock.NOT_OURS_MARK, or
    what it got instead (None: nothing within `within` seconds)."""

    def __init__(self, host, spec: ClassSpec, renew: Callable[[float], str | None] | None = None,
                 now: Callable[[], float] = CLOCK, sleep: Callable[[float], None] = gevent.sleep):
        self.host, self.spec, self.now, self.sleep = host, spec, now, sleep
        self.renew = renew or self._renew
        self.greenlet: gevent.Greenlet | None = None
        self.answered = now()  # when the last renewal that was answered was sent (begin wrote the lease)

    def start(self) -> Lease:
        self.greenlet = gevent.spawn(self.keep)
        return self

    def stop(self) -> None:
        if self.greenlet is not None:
            self.greenlet.kill()

    def fresh(self) -> bool:
        """A renewal was answered within lock.lost_after_s: the lock is this run's still."""
        return self.now() - self.answered < lock.lost_after_s(self.spec)

    def lapsed(self) -> None:
        """Given up: its lease has not been renewed in time (this controller was stopped or asleep:
        another deploy may have taken the lock over since)."""
        give_up(self.host, f"{self.host.name}: deploy lock: expected its lease renewed within "
                           f"{lock.lost_after_s(self.spec):g}s (half of readiness.link_timeout_s), found it last "
                           f"renewed {self.now() - self.answered:.0f}s ago (this controller was stopped or asleep): "
                           "another deploy may hold the lock now", hang_up=True)

    def keep(self) -> None:
        every, lost_after = lock.renew_every_s(self.spec), lock.lost_after_s(self.spec)
        last = ""
        while not given_up(self.host):
            self.sleep(every)
            sent = self.now()
            left = self.answered + lost_after - sent
            said = self.renew(left) if left > 0 else None
            if said == lock.RENEWED_MARK:
                self.answered, last = sent, ""
            elif said == lock.NOT_OURS_MARK:
                give_up(self.host, f"{self.host.name}: deploy lock: expected this run's, found it gone or another "
                                   "deploy's (taken over): nothing more runs on it", hang_up=True)
            else:
                last = said or last  # a renewal that failed on the host says why
                if not self.fresh():
                    give_up(self.host, f"{self.host.name}: link lost: expected an answer to its lock's lease renewal "
                                       f"every {every:g}s, found none for {lost_after:g}s (half of "
                                       f"readiness.link_timeout_s {self.spec.readiness.link_timeout_s:g})"
                                       + (f"; its last answer: {wire.excerpt(last, 120)}" if last else ""),
                            hang_up=True)

    def _renew(self, within: float) -> str | None:
        try:
            _, out = _call(self.host, lock.renew_command(self.spec), within)
        except _Unanswered:
            return None
        said = wire.untransported(out.stdout).split()
        return next((m for m in (lock.RENEWED_MARK, lock.NOT_OURS_MARK) if m in said), " ".join(said))


class PeerError(Exception):
    """A command on another host of the run (a replica's gateway, the monitoring host) did not succeed."""


def on_peer(peer, connect_lock, command: str, label: str, what: str, bound: Bound | None = None) -> str:
    """Run `command` on `peer` from another host's greenlet: connected first where --limit left it out of
    pyinfra's connected hosts (one greenlet connects, under connect_lock); PeerError, naming `label`, if it
    cannot be, or the command fails or finds the host lost. bound: a gateway command's unless given."""
    with connect_lock:
        if not peer.connected:
            peer.connect(reason=f"{label}, for another host's turn", show_errors=False)
    if not peer.connected:
        raise PeerError(f"{label}: cannot connect")
    try:
        ok, out = run(peer, command, bound or bounds.gateway(f"{label}: {what}"))
    except HostLost as e:
        raise PeerError(e.why) from None
    if not ok:
        raise PeerError(f"{label}: {out.strip()[-300:]}")
    return out


def fail(host, *reasons: str, verdict: HostVerdict = HostVerdict.FAILED) -> bool:
    """Fail the host at execution time: say why and put it in the summary. Returns False, which
    is how a python.call callback fails its host in pyinfra (a begun rollout then rolls back)."""
    report = runs.of(host.state).report.host(host.name)
    report.verdict = verdict
    for reason in reasons:
        host.log_styled(reason, fg="red")
        report.reasons.append(reason)
    return False


@functools.cache
def repo_state() -> tuple[str, bool | None]:
    """The commit of the repo the deploy runs in (where its group_data is) and whether it has
    uncommitted changes: ('', None) outside git."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return "", None
        return head.stdout.strip(), bool(git("status", "--porcelain", "--untracked-files=no").stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        return "", None


# The controller's cache (wheels it uploads to hosts that reach no index), outside the checkout
CACHE = Path(os.environ.get("SGLANG_FLEET_CACHE") or Path.home() / ".cache" / "sglang-fleet")
DOWNLOAD_TIMEOUT_S = 600
LOCK_WAIT_S = 2 * DOWNLOAD_TIMEOUT_S  # another's download, with room for one retry of it
LOCK_POLL_S = 0.2
PROGRESS_EVERY_S = 15


class WheelError(Exception):
    pass


def downloaded(where: Path, pip_args: list[str], what: str, sleep: Callable[[float], None] = gevent.sleep,
               now: Callable[[], float] = time.monotonic) -> list[Path]:
    """Wheels `pip download <pip_args>` gets, downloaded once into `where` (a `complete` file, written
    last, marks a finished download and lists them). One download at a time per directory (a lock
    beside it): two hosts of this run, make test's two processes, or two deploys may want the same
    wheels at once. The lock is tried, never waited on: pyinfra runs every host in one process, and a
    blocking flock would stop every host's greenlet while another holds it (the holder too)."""
    done = where / "complete"
    if done.exists():
        return [where / name for name in done.read_text().split()]
    where.parent.mkdir(parents=True, exist_ok=True)
    lock_path = where.with_name(where.name + ".lock")
    with open(lock_path, "w") as lock:
        started = said = now()
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = now() - started
                if waited >= LOCK_WAIT_S:
                    raise WheelError(f"expected {lock_path} free within {LOCK_WAIT_S:g} s (another download of "
                                     f"{what}), found it still held") from None
                if now() - said >= PROGRESS_EVERY_S:
                    logger.info(f"Waiting for another download of {what} into {where}: {waited:.0f} s")
                    said = now()
                sleep(LOCK_POLL_S)
        if not done.exists():  # else another host or process downloaded it meanwhile
            _download(where, pip_args, what)
    return [where / name for name in done.read_text().split()]


def _download(where: Path, pip_args: list[str], what: str) -> None:
    logger.info(f"Downloading {what} into {where}")
    where.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--dest", str(where), *pip_args]
    try:
        got = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise WheelError(f"downloading {what} took more than {DOWNLOAD_TIMEOUT_S} s") from None
    if got.returncode != 0:
        raise WheelError(f"could not download {what}: "
                         + (got.stderr.strip().splitlines() or ["pip said nothing"])[-1])
    (where / "complete").write_text("\n".join(sorted(p.name for p in where.glob("*.whl"))) + "\n")
