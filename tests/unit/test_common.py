"""tasks.common: every remote command within its bound, a host given up once and for all, the lease of
a begun host's lock (renewals, a lost link, a lock taken over) with a scripted clock; and the SSH
keepalive every connection gets (adapter.connection.Keepalive). Hosts: pyinfra's @local connector (the
same output handling as ssh), and stand-ins for a connection that breaks."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest
from fakehost import fresh_run, this_run  # noqa: F401
from paramiko import SSHException
from pyinfra.api import Config, Inventory, State

from fleet.rollout import lock
from fleet.core.bounds import Bound
from fleet.spec import ClassSpec
from tasks import activate, common
from tasks.common import HostLost, Lease, run
from adapter.connection import Keepalive

REPO = Path(__file__).resolve().parents[2]
SPEC = ClassSpec.model_validate({
    "gpu_class": {"accepted_models": ["NVIDIA H200"], "gpu_count": 1, "min_memory_mib": 1},
    "service": {"model_path": "/m", "served_model_name": "m"},
    "readiness": {"link_timeout_s": 12},
})


def local():
    """A connected pyinfra @local host."""
    inventory = Inventory((["@local"], {}))
    State(inventory, Config())
    host = inventory.get_host("@local")
    host.connect(raise_exceptions=True)
    return host


def test_a_command_answers_within_its_bound():
    ok, out = run(local(), "printf 'a\\n'; printf 'b' >&2; exit 0", Bound("a print", 5, "five"))
    assert (ok, out) == (True, "a\nb")


def test_a_command_past_its_bound_gives_the_host_up_and_nothing_more_runs_on_it(tmp_path):
    host = local()
    with pytest.raises(HostLost) as lost:
        run(host, "sleep 5", Bound("the wait for sglang.service's /health", 1, "its budget 0 + 1"))
    assert lost.value.why == ("@local: the wait for sglang.service's /health: expected an answer within 1s "
                              "(its budget 0 + 1), found none")
    assert lost.value.doing == "the wait for sglang.service's /health"
    assert this_run().lost == {"@local": lost.value.why}
    made = tmp_path / "made"
    with pytest.raises(HostLost) as again:
        run(host, f"touch {made}", Bound("the smoke test", 5, "five"))
    assert not made.exists()  # never sent
    assert again.value.why == lost.value.why and again.value.doing == "the smoke test"


class Broken:
    """A host whose connection breaks under the command (paramiko raises), or is found closed after it."""

    def __init__(self, raises: Exception | None = None):
        self.name, self.raises, self.logged = "gpu-1", raises, []
        local_host = local()
        self.state, self.data, self.current_deploy_kwargs = local_host.state, local_host.data, None
        transport = SimpleNamespace(is_active=lambda: False)
        self.connector = SimpleNamespace(client=SimpleNamespace(get_transport=lambda: transport, close=lambda: None))

    def run_shell_command(self, command, **arguments):
        if self.raises:
            raise self.raises
        return False, SimpleNamespace(stdout="", stderr="")

    def log_styled(self, message, **kwargs):
        self.logged.append(message)


@pytest.mark.parametrize("raises, found", [
    (SSHException("SSH session not active"), "found the connection broken (SSHException: 'SSH session not active')"),
    (EOFError(), "found the connection broken (EOFError: '')"),
    (None, "found the connection closed (its link lost)"),
])
def test_a_connection_that_breaks_gives_the_host_up_naming_the_command(raises, found):
    host = Broken(raises)
    with pytest.raises(HostLost) as lost:
        run(host, "true", Bound("the restart of sglang.service", 150, "service.drain_timeout_s 120 + 30"))
    assert lost.value.why.startswith("gpu-1: the restart of sglang.service: expected an answer")
    assert lost.value.why.endswith(found)
    assert host.logged == [lost.value.why]


def test_a_failed_operation_over_a_lost_link_rolls_nothing_back_and_reports_lost(monkeypatch):
    """An upload that failed because the link went: no rollback tried over it; the row says LOST,
    at what, and what the next run does."""
    report = this_run().report
    host, ran = Broken(), []
    host.run_shell_command = lambda *args, **kwargs: ran.append(args)
    begun = common.Begun(pf=SimpleNamespace(spec=SPEC))
    this_run().begun[host.name] = begun
    activate.after_failure(host, begun, "'Upload the new files beside the live ones' failed")
    row = report.hosts["gpu-1"]
    assert row.verdict == "LOST" and ran == [] and host.name not in this_run().begun
    assert row.reasons[:2] == ["gpu-1: link lost: expected its connection up, found it closed",
                               "gpu-1: given up at: 'Upload the new files beside the live ones' failed"]
    assert row.reasons[-1] == ("next: once it answers again, make deploy (from any machine: the lock's lease runs "
                               "out 12s after its last renewal) finishes this rollout or rolls it back to the state "
                               "recorded before it")


# --- the lease ---------------------------------------------------------------------------

class Clock:
    """now() and sleep(s) of a scripted clock: a renewal takes `took` seconds of it."""

    def __init__(self):
        self.t = 1000.0

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def lease_with(answers: list, took: float = 0.1):
    """A lease whose renewals answer `answers` in turn (None: nothing within the time given)."""
    clock, asked = Clock(), []
    host = Broken()
    hung_up = []
    host.connector.client.close = lambda: hung_up.append(clock.t)

    def renew(within: float):
        asked.append((clock.t, within))
        said = answers.pop(0)
        clock.t += within if said is None else took  # no answer: the whole time given passes
        return said

    lease = Lease(host, SPEC, renew=renew, now=clock.now, sleep=clock.sleep)
    return lease, host, clock, asked, hung_up


def test_a_lease_is_renewed_every_quarter_of_the_link_timeout_while_the_host_answers():
    lease, host, clock, asked, hung_up = lease_with([lock.RENEWED_MARK] * 5 + [lock.NOT_OURS_MARK])
    lease.keep()
    assert [round(t - 1000, 1) for t, _ in asked] == [3, 6.1, 9.2, 12.3, 15.4, 18.5]  # every 3 s (12 / 4)
    # each bounded by what is left of half the lease since the last one answered
    assert [round(within, 1) for _, within in asked] == [3, 2.9, 2.9, 2.9, 2.9, 2.9]
    # the lock found another deploy's: given up, hung up, nothing more
    assert this_run().lost["gpu-1"] == ("gpu-1: deploy lock: expected this run's, found it gone or another deploy's "
                                    "(taken over): nothing more runs on it")
    assert hung_up


def test_a_host_that_answers_no_renewal_for_half_the_link_timeout_is_given_up_and_hung_up():
    lease, host, clock, asked, hung_up = lease_with([lock.RENEWED_MARK, None])
    lease.keep()
    renewed_at = asked[0][0]
    assert asked[1] == (renewed_at + 3.1, pytest.approx(6 - 3.1))  # bounded by the time left
    assert this_run().lost["gpu-1"] == ("gpu-1: link lost: expected an answer to its lock's lease renewal every 3s, "
                                    "found none for 6s (half of readiness.link_timeout_s 12)")
    assert hung_up == [pytest.approx(renewed_at + 6)]  # at the deadline, well before the host's lease (12 s) runs out


def test_renewals_that_fail_on_the_host_give_it_up_saying_what_it_answered():
    lease, host, clock, asked, hung_up = lease_with(["flock: timed out"])
    lease.keep()  # the next renewal would come after the deadline: given up then
    assert len(asked) == 1 and this_run().lost["gpu-1"].startswith("gpu-1: link lost: ")
    assert this_run().lost["gpu-1"].endswith("found none for 6s (half of readiness.link_timeout_s 12); "
                                         "its last answer: 'flock: timed out'")


def test_a_controller_that_was_stopped_or_asleep_runs_nothing_more_on_its_begun_host(monkeypatch):
    """Its lease went unrenewed (SIGSTOP, a laptop's lid): another deploy may hold the lock now."""
    clock, host, hung_up = Clock(), Broken(), []
    host.connector.client.close = lambda: hung_up.append(True)
    lease = Lease(host, SPEC, renew=lambda within: lock.RENEWED_MARK, now=clock.now, sleep=clock.sleep)
    this_run().begun[host.name] = common.Begun(pf=None, lease=lease)
    clock.t += 7  # half the link timeout (6 s) passed without a renewal answered
    with pytest.raises(HostLost) as lost:
        run(host, "true", Bound("the smoke test", 150, "smoke.timeout_s 120 + 30"))
    assert lost.value.why == ("gpu-1: deploy lock: expected its lease renewed within 6s (half of "
                              "readiness.link_timeout_s), found it last renewed 7s ago (this controller was stopped "
                              "or asleep): another deploy may hold the lock now")
    assert hung_up and lost.value.doing == "the smoke test"


def test_a_stopped_lease_renews_no_more():
    asked = []
    spec = SPEC.model_copy(update={"readiness": SPEC.readiness.model_copy(update={"link_timeout_s": 4})})
    lease = Lease(Broken(), spec, renew=lambda within: asked.append(within) or lock.RENEWED_MARK).start()
    gevent.sleep(1.5)  # a renewal every second
    lease.stop()
    renewed = len(asked)
    gevent.sleep(1.5)
    assert renewed >= 1 and len(asked) == renewed and "gpu-1" not in this_run().lost


# --- keepalive ---------------------------------------------------------------------------

class Transport:
    def __init__(self):
        self.keepalive, self.options = None, {}
        self.sock = SimpleNamespace(setsockopt=lambda level, name, value: self.options.__setitem__((level, name), value))

    def set_keepalive(self, interval):
        self.keepalive = interval


def connecting(groups: list[str], data: dict) -> Transport:
    transport = Transport()
    host = SimpleNamespace(groups=groups, data=SimpleNamespace(dict=lambda: data),
                           connector=SimpleNamespace(client=SimpleNamespace(get_transport=lambda: transport)))
    Keepalive.host_connect(None, host)
    return transport


def test_every_connection_gets_a_keepalive_and_a_kernel_timeout_of_its_class(tmp_path, monkeypatch):
    (tmp_path / "x.py").write_text("gpu_class = {}\n")
    monkeypatch.setattr(Keepalive, "group_dir", tmp_path)
    data = {"gpu_class": SPEC.gpu_class.model_dump(), "service": {"model_path": "/m", "served_model_name": "m"},
            "readiness": {"link_timeout_s": 12}}
    of_class, no_class = connecting(["x"], data), connecting(["gateway"], {})
    assert of_class.keepalive == 3 and no_class.keepalive == 15  # a quarter of 12, of the default 60
    if hasattr(socket, "TCP_USER_TIMEOUT"):
        assert of_class.options == {(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT): 12000}
        assert no_class.options == {(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT): 60000}


def test_a_connector_without_ssh_gets_nothing():
    asked = []

    class Local:  # @local: no client; its class (groups, data) is not even looked up
        connector = SimpleNamespace()
        groups = property(lambda self: asked.append("groups"))
        data = property(lambda self: asked.append("data"))

    Keepalive.host_connect(None, Local())
    assert asked == []


@pytest.mark.parametrize("footer", ["from tasks.inventory import checked\n\nchecked(globals())\n", ""])
def test_make_status_and_make_verify_connect_with_the_keepalive(tmp_path, footer):
    """The inventory's footer arms it (the deploy's); an inventory without one gets it all the same.
    (In a process of its own: ops.fleet loads pyinfra's CLI, which monkey-patches the process.)"""
    inventory = tmp_path / "inventory.py"
    inventory.write_text("a6000 = ['@local']\n" + footer)
    count = ("from ops.fleet import Fleet; from tasks.inventory import Keepalive; import sys; "
             "print(sum(isinstance(h, Keepalive) for h in Fleet(sys.argv[1]).state.callback_handlers))")
    p = subprocess.run([sys.executable, "-c", count, str(inventory)], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert p.stdout.split()[-1:] == ["1"], p.stdout + p.stderr


# Every host of a pyinfra run is a greenlet of one process: the wheels' lock must not block it.
COLD_CACHE_HOSTS = """
import sys, time
from pathlib import Path
import gevent
from tasks import common

calls = []
def download(where, pip_args, what):  # pip, as slow as a cold cache: the other hosts come meanwhile
    calls.append(what)
    gevent.sleep(0.5)
    where.mkdir(parents=True, exist_ok=True)
    (where / "pip-24.3.1-py3-none-any.whl").write_text("wheel")
    (where / "complete").write_text("pip-24.3.1-py3-none-any.whl\\n")
common._download = download
where = Path(sys.argv[1]) / "wheels" / "pip-24.3.1"
hosts = [gevent.spawn(common.downloaded, where, ["pip==24.3.1"], f"pip for h{i}") for i in range(3)]
gevent.joinall(hosts, raise_error=True)
print(len(calls), sorted({tuple(p.name for p in h.value) for h in hosts}))
"""


def test_hosts_of_one_run_share_a_cold_wheel_cache_without_blocking_the_process(tmp_path):
    # a blocking flock here hung the whole run for good (the second host's greenlet waited on the first's lock)
    got = subprocess.run([sys.executable, "-c", COLD_CACHE_HOSTS, str(tmp_path)], capture_output=True, text=True,
                         timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert got.returncode == 0, got.stderr
    assert got.stdout.split(None, 1) == ["1", "[('pip-24.3.1-py3-none-any.whl',)]\n"]


def test_a_wheel_lock_held_by_another_process_is_waited_for_within_a_bound_and_said(tmp_path, monkeypatch):
    import fcntl
    where = tmp_path / "pip-24.3.1"
    holder = open(tmp_path / "pip-24.3.1.lock", "w")
    fcntl.flock(holder, fcntl.LOCK_EX)  # another deploy's download, as a second open file description

    clock, said = [0.0], []
    monkeypatch.setattr(common.logger, "info", said.append)
    with pytest.raises(common.WheelError, match=r"pip-24.3.1.lock free within 1200 s \(another download of pip"):
        common.downloaded(where, ["pip==24.3.1"], "pip", sleep=lambda s: clock.__setitem__(0, clock[0] + s),
                          now=lambda: clock[0])
    assert said and all("Waiting for another download of pip" in s for s in said)
    assert not (where / "complete").exists()
    fcntl.flock(holder, fcntl.LOCK_UN)
    holder.close()
