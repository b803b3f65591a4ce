"""What the gateway pair's lab tests share. lab/gateway.toml (three RTX PRO 6000 replicas behind smg on gw-1 and
gw-2, a floating address in front) is booted twice, under a name and subnet of each module's own, so that the two
modules run at once (tests/lab/conftest.py): test_gateway_e2e.py (the replicas behind the pair, and smg's mesh)
and test_gateway_pair_e2e.py (make tune behind it, and the pair itself). Each module's first deploy puts smg on both
gateways and keepalived in front; smg's mesh over mTLS is turned on by the one test of it (lab.mesh, then in every
later deploy of that lab): smg 1.13's mesh keeps a third of a core busy on each gateway, idle (docs/figures.md),
and two labs' worth of it starved the machine's other tests. The helpers read the floating address from the lab's
own subnet."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fleet.gateway import floating as floating_lib
from fleet.gateway.smg import READY
from fleet.core.layout import LOCK_ROOT
from ops.loadgen import Load, WorkersSampler
from tests.lab.e2e import REPO, VRRP_ENV, deploy, floating, floating_address, mesh_pki, sh
from tests.lab.e2e import workdir as _workdir

LAB_FILE = REPO / "lab" / "gateway.toml"
REPLICAS = ["pro6000-1", "pro6000-2", "pro6000-3"]
GATEWAYS = ["gw-1", "gw-2"]
KEY = "gw-e2e-key-0123456789"
ENV = {"SGLANG_FLEET_GATEWAY_KEY": KEY, **VRRP_ENV}
MODEL = "qwen3.6-27b"
LOCK_FILE = f"{LOCK_ROOT}/sglang.lock"
STEADY = 16  # requests a load has completed before a change starts, and again after it: traffic passed, whatever
# the machine's speed


def lab_text(name: str, subnet: str) -> str:
    """lab/gateway.toml under another [lab] name and subnet: the same hosts, beside the first."""
    text = LAB_FILE.read_text()
    return text.replace('name = "sglgw"', f'name = "{name}"', 1).replace('subnet = "10.204.0.0/24"',
                                                                        f'subnet = "{subnet}"', 1)


def vip(lab) -> str:
    """The lab's floating address (its subnet's .100)."""
    return floating_address(lab.subnet)


def url(lab) -> str:
    return f"http://{vip(lab)}:8000"


def workdir(lab, tmp: Path, gateway: str = "", canary_analysis: bool = False, **overrides: str) -> Path:
    """The deploy with this lab's gateway pair behind its floating address, in smg's mesh once it is on, and more
    group_data lines."""
    return _workdir(tmp, canary_analysis, gateway=f"{floating(lab.subnet)}\n{getattr(lab, 'mesh', '')}\n{gateway}",
                    **overrides)


def with_mesh(lab, where: Path) -> None:
    """smg's mesh over mTLS for this lab's gateways (certificates openssl makes in `where`): every later workdir
    of the lab declares it."""
    lab.mesh = mesh_pki(where, {g: lab.host(g).ip for g in GATEWAYS})


def deployed(lab, tmp_path_factory):
    """The lab's first deploy: smg on both gateways, keepalived, the replicas on the base spec."""
    lab.mesh = ""
    base = workdir(lab, tmp_path_factory.mktemp("gw-base"))
    run = deploy(lab, base, env=ENV)
    assert run.returncode == 0, run.out
    lab.base = base  # group_data as deployed: make verify and make status run there
    return lab


def block_size(lab, host: str) -> str:
    unit = sh(lab, host, "cat /etc/systemd/system/sglang.service")
    return unit.split("--speculative-dflash-block-size", 1)[1].split()[0]


def passed(load: Load, more: int = STEADY, timeout: float = 120) -> None:
    """Until `more` requests more than now have completed (on a busy machine as on an idle one)."""
    load.wait_completed(load.completed + more, timeout)


def routed_now(lab, gateway: str | None = None, timeout: float = 60) -> dict[str, str]:
    """What the gateway behind the address (or `gateway` itself) lists now (worker url -> status): one read of
    its /workers, waited for (a sample, not a window slept through); {} when it could not be read."""
    at = url(lab) if gateway is None else f"http://{lab.host(gateway).ip}:8000"
    with WorkersSampler(at, KEY) as sampler:
        sampler.wait_samples(1, timeout)
    return sampler.samples[0].statuses


def ready_now(lab, timeout: float = 60) -> int:
    """The gateway's ready replicas now (routed_now)."""
    return sum(status == READY for status in routed_now(lab, timeout=timeout).values())


def rolled(lab, tmp: Path, block_size: int, gateway: str = "", environment: str = "", max_tokens: int = 48,
           steady: int = STEADY, canary_analysis: bool = False):
    """Deploy a new block size (and more group_data lines) while the load runs through the gateway."""
    cwd = workdir(lab, tmp, pro6000=f'speculative = {{**speculative, "block_size": {block_size}}}\n{environment}',
                  gateway=gateway, canary_analysis=canary_analysis)
    with WorkersSampler(url(lab), KEY, interval_s=0.2) as sampler, \
            Load(url(lab), MODEL, KEY, concurrency=8, max_tokens=max_tokens) as load:
        passed(load, steady)  # steady state first
        run = deploy(lab, cwd, env=ENV)
        passed(load, steady)
    return run, load.report, sampler.samples


def holders(lab) -> list[str]:
    """The gateways holding the floating address on their interface (answering ARP for it)."""
    return [g for g in GATEWAYS if " eth0 " in f" {sh(lab, g, f'ip -o -4 addr show to {vip(lab)}/32')} "]


def vrrp(lab, gateway: str) -> tuple[str, float]:
    """keepalived's state on the gateway and when it came (the host's clock is this machine's)."""
    state, since = sh(lab, gateway, f"cat {floating_lib.state_file('gateway')}").split()
    return state, float(since)


def assert_clean(lab) -> None:
    """One holder; keepalived running on each; nothing a turn leaves held, routed or flagged."""
    assert len(holders(lab)) == 1, holders(lab)
    for g in GATEWAYS:
        assert sh(lab, g, "systemctl is-active keepalived smg").split() == ["active", "active"], g
        assert sh(lab, g, f"cat {floating_lib.handoff_file('smg')}") == "0", g
        assert sh(lab, g, f"ip -4 route show table {floating_lib.ROUTES}; ip -o -4 addr show dev lo to {vip(lab)}/32; "
                          "ip rule show pref 100") == "", g


def workers_listed(lab, gateway: str) -> list[str]:
    return [w["id"] for w in json.loads(sh(lab, gateway, "cat /etc/smg/smg-workers.json"))["workers"]]


def wait(what: str, check, timeout: float):
    """check() until true, or AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.2)
