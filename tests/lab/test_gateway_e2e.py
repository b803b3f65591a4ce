"""Replicas behind SGLang's real gateway (smg 1.13.0, installed by the deploy on gw-1 and gw-2, behind a
floating address keepalived moves between them): a spec change is rolled one replica at a time, drained out
of both gateways, while a client streams chat completions to the floating address at concurrency 8, and not
one request fails. The tests run in order on one lab (lab/gateway.toml): baseline, make tune, a clean rollout,
a unit left at KillMode=control-group (the load generator sees the failures that makes), a canary whose new
spec crashes; then the gateways themselves: an smg change rolled one gateway at a time, a run killed in a
gateway's turn, failover (smg killed, a link dropped, a box powered off), and preemption back to gw-1 once ready.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fleet import floating as floating_lib
from fleet.layout import LOCK_ROOT, gateway_mesh_file
from lab import lab as labmod
from ops.loadgen import Load, WorkersSampler, min_ready
from tests.lab.e2e import (BIN, FAILOVER_S, GATEWAY_FAULTS, REPO, VRRP_ENV, Run, deploy, floating, floating_address,
                           gateway_fault, health, in_its_readiness_wait, main_pid, mesh_pki, records, sh, summary_row)
from tests.lab.e2e import workdir as _workdir

LAB_FILE = REPO / "lab" / "gateway.toml"
REPLICAS = ["pro6000-1", "pro6000-2", "pro6000-3"]
GATEWAYS = ["gw-1", "gw-2"]
KEY = "gw-e2e-key-0123456789"
ENV = {"SGLANG_FLEET_GATEWAY_KEY": KEY, **VRRP_ENV}
MODEL = "qwen3.6-27b"
LOCK_FILE = f"{LOCK_ROOT}/sglang.lock"
DROPIN = "/etc/systemd/system/sglang.service.d/killmode.conf"


SUBNET = "10.204.0.0/24"  # lab/gateway.toml's
VIP = floating_address(SUBNET)


MESH = {}  # group_data/gateway.py's line for smg's mesh with mTLS: its certificates made once, by the fixture


def workdir(tmp: Path, gateway: str = "", **overrides: str) -> Path:
    """The deploy with this lab's gateway pair behind its floating address, in smg's mesh, and more group_data lines."""
    return _workdir(tmp, gateway=f"{floating(SUBNET)}\n{MESH['line']}\n{gateway}", **overrides)


@pytest.fixture(scope="module")
def gw_lab(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB_FILE)
    assert lab.subnet == SUBNET
    MESH["line"] = mesh_pki(tmp_path_factory.mktemp("mesh-pki"), {g: lab.host(g).ip for g in GATEWAYS})
    base = workdir(tmp_path_factory.mktemp("gw-base"))
    run = deploy(lab, base, env=ENV)
    assert run.returncode == 0, run.out
    lab.base = base  # group_data as deployed: make verify and make status run there
    return lab  # no later module uses the session's default lab: test_lab.py brings it up afresh


def _url(lab) -> str:
    return f"http://{VIP}:8000"


def _block_size(lab, host: str) -> str:
    unit = sh(lab, host, "cat /etc/systemd/system/sglang.service")
    return unit.split("--speculative-dflash-block-size", 1)[1].split()[0]


def _rolled(lab, tmp: Path, block_size: int, gateway: str = "", environment: str = "", max_tokens: int = 48):
    """Deploy a new block size (and more group_data lines) while the load runs through the gateway."""
    cwd = workdir(tmp, pro6000=f'speculative = {{**speculative, "block_size": {block_size}}}\n{environment}',
                  gateway=gateway)
    with WorkersSampler(_url(lab), KEY, interval_s=0.2) as sampler, \
            Load(_url(lab), MODEL, KEY, concurrency=8, max_tokens=max_tokens) as load:
        time.sleep(2)  # steady state first
        run = deploy(lab, cwd, env=ENV)
        time.sleep(1)
    return run, load.report, sampler.samples


def holders(lab) -> list[str]:
    """The gateways holding the floating address on their interface (answering ARP for it)."""
    return [g for g in GATEWAYS if " eth0 " in f" {sh(lab, g, f'ip -o -4 addr show to {VIP}/32')} "]


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
        assert sh(lab, g, f"ip -4 route show table {floating_lib.ROUTES}; ip -o -4 addr show dev lo to {VIP}/32; "
                          "ip rule show pref 100") == "", g


def test_gateway_installed_and_routing(gw_lab):
    lab = gw_lab
    for g in GATEWAYS:
        assert sh(lab, g, "systemctl is-active smg.service keepalived.service").split() == ["active", "active"]
        assert sh(lab, g, "/opt/smg/venv/bin/python -c 'import importlib.metadata as m; print(m.version(\"smg\"))'"
                  ) == "1.13.0"
        assert sh(lab, g, "stat -c %a /etc/smg/smg.secret /etc/smg/smg.auth /etc/keepalived/sglang-fleet-auth.conf "
                          "/etc/smg/smg-mesh.key").split() == ["600", "600", "600", "600"]
        peer = next(p for p in GATEWAYS if p != g)
        assert f"Successfully connected to peer {lab.host(peer).ip}:39527" in sh(
            lab, g, "journalctl -u smg -o cat --no-pager")  # smg's mesh, over mTLS
        assert KEY not in sh(lab, g, "cat /etc/systemd/system/smg.service "
                                     "/proc/$(systemctl show -p MainPID --value smg)/cmdline")
        assert VRRP_ENV["SGLANG_FLEET_VRRP_PASSWORD"] not in sh(lab, g, "cat /etc/keepalived/keepalived.conf")
        workers = json.loads(sh(lab, g, "cat /etc/smg/smg-workers.json"))["workers"]
        assert [w["id"] for w in workers] == REPLICAS
    assert_clean(lab)
    assert {vrrp(lab, g)[0] for g in GATEWAYS} == {"MASTER", "BACKUP"}
    with WorkersSampler(_url(lab), KEY) as sampler:
        time.sleep(0.5)
    assert min_ready(sampler.samples) == 3
    with Load(_url(lab), MODEL, KEY, concurrency=2, max_tokens=8) as load:
        time.sleep(1)
    assert load.report.total > 0 and load.report.failed == 0, load.report.failures()
    with Load(_url(lab), MODEL, None, concurrency=1, max_tokens=8) as anonymous:
        time.sleep(0.3)
    assert anonymous.report.failed == anonymous.report.total > 0
    assert "HTTP 401" in anonymous.report.failures()[0]


# --- make tune on one replica (ops/tune.py), first, while the replicas are on the base spec. This lab's pro6000
# hosts' `speculation` (lab/gateway.toml) plants the best block size at 8 for concurrency 1 and at 4 for 32, and
# the tuner must find both by measuring.
TUNE_HOST = "pro6000-1"
TUNE = 'tune = {"concurrency": [1, 32], "rounds": 1, "max_tokens": 32}'


def _tune(lab, cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    p = subprocess.run([str(BIN / "python"), "-m", "ops", "tune", str(lab.inventory), "--class", "pro6000",
                        "--host", TUNE_HOST, *args], cwd=cwd, env={**os.environ, **ENV, "PYTHONUNBUFFERED": "1"},
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
    p.out = p.stdout + p.stderr
    return p


def _declared(lab, cwd: Path) -> None:
    """The tuned host on the workdir's spec (block size 16, as group_data declares), the others as they are."""
    run = deploy(lab, cwd, "--limit", TUNE_HOST, env=ENV)
    assert run.returncode == 0, run.out


def _on_its_spec(lab, cwd: Path) -> None:
    assert _block_size(lab, TUNE_HOST) == "16"
    assert health(lab, TUNE_HOST) == "200"
    assert sh(lab, TUNE_HOST, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline"
              " | grep -o -- '--speculative-dflash-block-size [0-9]*'") == "--speculative-dflash-block-size 16"
    state = "/var/lib/sglang-fleet/sglang"
    assert sh(lab, TUNE_HOST, f"ls {LOCK_FILE} {state}/pending.json {state}/tune.json 2>/dev/null") == ""
    status = subprocess.run([str(BIN / "python"), "-m", "ops", "status", str(lab.inventory), "--limit", TUNE_HOST,
                             "--json"], cwd=cwd, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=120)
    assert json.loads(status.stdout)[0]["verdict"] == "OK", status.stdout + status.stderr


def test_tune_behind_the_gateway_finds_the_planted_optimum_and_returns_the_host(gw_lab, tmp_path):
    lab = gw_lab
    cwd = workdir(tmp_path, pro6000=TUNE)
    _declared(lab, cwd)
    backups = sh(lab, TUNE_HOST, "ls /var/lib/sglang-fleet/sglang/backups")
    with WorkersSampler(_url(lab), KEY, interval_s=0.2) as sampler, \
            Load(_url(lab), MODEL, KEY, concurrency=4, max_tokens=16) as load:
        run = _tune(lab, cwd, "--apply")
        time.sleep(1)
    assert run.returncode == 0, run.out
    rec = json.loads((cwd / "tuning" / "pro6000.json").read_text())
    assert rec["winner_per_concurrency"] == {"1": {"block_size": 8}, "32": {"block_size": 4}}, run.out
    assert rec["winner"] == {"block_size": 4} and rec["change"] == {"block_size": 4}
    assert [c["candidate"]["block_size"] for c in rec["candidates"]] == [4, 8, 12, 16]
    assert all(c["deployed"] and len(c["levels"]) == 2 for c in rec["candidates"])
    for c in rec["candidates"]:
        for lv in c["levels"]:
            assert lv["failed"] == 0 and lv["requests"] == max(lv["concurrency"], 8) and lv["accept_length"] > 1
    assert "double" in rec["figures_from"] and rec["host"] == TUNE_HOST
    assert "recommended group_data/pro6000.py change: speculative.block_size: 16 -> 4" in run.out
    assert '"block_size": 4' in (cwd / "group_data" / "pro6000.py").read_text()  # --apply
    assert (cwd / "tuning" / "pro6000.png").read_bytes()[:4] == b"\x89PNG"  # matplotlib: in the test extra
    assert "kept out of gateway gw-1 and gw-2: a make tune candidate" in (cwd / "tuning" / "pro6000.log").read_text()
    _on_its_spec(lab, workdir(tmp_path / "declared", pro6000=TUNE))  # the spec before --apply changed it
    assert load.report.total > 0 and load.report.failed == 0, load.report.failures()
    assert min_ready(sampler.samples) >= 2  # one replica out at a time, never more
    with WorkersSampler(_url(lab), KEY) as after:
        time.sleep(0.5)
    assert min_ready(after.samples) == 3  # back in the gateway, ready
    kinds = [r["kind"] for r in records(lab, TUNE_HOST)[-5:]]
    assert kinds == ["tune"] * 5  # four candidates and the return
    assert sh(lab, TUNE_HOST, "ls /var/lib/sglang-fleet/sglang/backups") == backups  # the tune keeps no backup set


def test_tune_without_a_gateway_asks_first(gw_lab, tmp_path):
    lab = gw_lab
    # the gateway routes another class here: pro6000 is behind none
    cwd = workdir(tmp_path, pro6000=TUNE, gateway='gateway = {**gateway, "routes": ["a6000"]}')
    _declared(lab, cwd)
    pid = main_pid(lab, TUNE_HOST)
    refused = _tune(lab, cwd)
    assert refused.returncode == 2, refused.out
    assert f"{TUNE_HOST}: tune: {TUNE_HOST} is behind no gateway" in refused.out and "--yes" in refused.out
    assert main_pid(lab, TUNE_HOST) == pid and not (cwd / "tuning" / "pro6000.json").exists()
    run = _tune(lab, cwd, "--yes", "--block-sizes", "8", "--concurrency", "1")
    assert run.returncode == 0, run.out
    assert json.loads((cwd / "tuning" / "pro6000.json").read_text())["winner"] == {"block_size": 8}
    _on_its_spec(lab, cwd)


def test_tune_cut_off_mid_candidate_then_make_deploy_returns_the_host(gw_lab, tmp_path):
    lab = gw_lab
    cwd = workdir(tmp_path, pro6000=TUNE)
    _declared(lab, cwd)
    p = subprocess.Popen([str(BIN / "python"), "-m", "ops", "tune", str(lab.inventory), "--class", "pro6000", "--host",
                          TUNE_HOST, "--block-sizes", "4,8"], cwd=cwd, env={**os.environ, **ENV, "PYTHONUNBUFFERED": "1"},
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    server = "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline"
    deadline = time.monotonic() + 120
    while "--speculative-dflash-block-size 4" not in sh(lab, TUNE_HOST, server):  # the candidate's server loads
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.2)
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C: the terminal's whole group, the deploy under the tune too
    out = p.communicate(timeout=120)[0]
    assert p.returncode == 130, out
    assert "keeps its tune mark" in out, out
    assert sh(lab, TUNE_HOST, "cat /var/lib/sglang-fleet/sglang/tune.json")  # the mark is there
    run = deploy(lab, cwd, "--limit", TUNE_HOST, env=ENV)
    assert run.returncode == 0, run.out
    assert "return from make tune" in summary_row(run.out, TUNE_HOST), run.out
    _on_its_spec(lab, cwd)
    with WorkersSampler(_url(lab), KEY) as after:
        time.sleep(0.5)
    assert min_ready(after.samples) == 3


def test_second_run_changes_nothing(gw_lab, tmp_path):
    lab = gw_lab
    def pids() -> dict:
        return {h: main_pid(lab, h) for h in REPLICAS} | {
            g: (main_pid(lab, g, "smg.service"), main_pid(lab, g, "keepalived.service")) for g in GATEWAYS}

    before, held = pids(), holders(lab)
    run = deploy(lab, workdir(tmp_path), env=ENV)
    assert run.returncode == 0, run.out
    assert pids() == before
    assert holders(lab) == held
    assert "Install smg" not in run.out and "in its turn" not in run.out
    for g in GATEWAYS:
        assert "none (already as declared)" in summary_row(run.out, g), run.out


def test_a_new_key_shows_in_a_dry_run_as_a_change_never_as_a_value(gw_lab, tmp_path):
    lab = gw_lab
    new_key = "gw-e2e-rotated-9876543210"
    run = deploy(lab, workdir(tmp_path), "--dry", "--diff", env={**ENV, "SGLANG_FLEET_GATEWAY_KEY": new_key})
    assert run.returncode == 0, run.out
    for g in GATEWAYS:
        assert "update key" in summary_row(run.out, g) and "restart" in summary_row(run.out, g), run.out
        assert KEY in sh(lab, g, "cat /etc/smg/smg.secret")  # a dry run changes nothing
    assert new_key not in run.out and KEY not in run.out and VRRP_ENV["SGLANG_FLEET_VRRP_PASSWORD"] not in run.out


def _verify(lab, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "pytest"), "-v", "-p", "no:cacheprovider", str(REPO / "tests/verify"),
                           "--inventory", str(lab.inventory), *args], cwd=lab.base, capture_output=True, text=True,
                          timeout=300)


def test_verify_checks_the_gateway(gw_lab):
    lab = gw_lab
    p = _verify(lab)
    assert p.returncode == 0, p.stdout + p.stderr
    for check in ("test_every_declared_replica_is_ready", "test_chat_completion_through_the_gateway",
                  "test_without_the_key_as_declared", "test_gateway_readiness_is_200"):
        for g in GATEWAYS:
            assert f"test_gateway.py::{check}[{g}] PASSED" in p.stdout, p.stdout
    for check in ("test_keepalived_enabled_and_running_on_each", "test_exactly_one_gateway_holds_the_address",
                  "test_the_address_answers_from_every_gateway", "test_no_turn_was_left_unfinished"):
        assert f"test_floating.py::{check}[gateway] PASSED" in p.stdout, p.stdout
    mesh_check = "test_the_mesh_certificate_chains_to_its_ca_names_its_address_and_goes_with_its_key"
    for g in GATEWAYS:
        assert f"test_floating.py::{mesh_check}[{g}] PASSED" in p.stdout, p.stdout
    # a mesh key that is not its certificate's is named (smg read the right one at its start: it serves on)
    key = gateway_mesh_file("smg", "key")
    sh(lab, "gw-2", f"cp -p {key} {key}.kept && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 "
                    f"-out {key}")
    try:
        p = _verify(lab, "-k", "mesh_certificate")
        assert p.returncode == 1 and f"{mesh_check}[gw-1] PASSED" in p.stdout, p.stdout
        assert f"gw-2: {gateway_mesh_file('smg', 'crt')}: expected" in p.stdout and "'goes with its key'" in p.stdout, \
            p.stdout
        assert "BEGIN PRIVATE KEY" not in p.stdout + p.stderr
    finally:
        sh(lab, "gw-2", f"mv -f {key}.kept {key}")
    # a replica the gateway does not route to is named
    listed = sh(lab, "gw-1", "cat /etc/smg/smg-workers.json")
    workers = json.loads(listed)
    workers["workers"] = [w for w in workers["workers"] if w["id"] != "pro6000-3"]
    sh(lab, "gw-1", f"printf %s '{json.dumps(workers)}' > /etc/smg/x.tmp && mv /etc/smg/x.tmp /etc/smg/smg-workers.json")
    try:
        time.sleep(7)  # smg drains a removed worker for 5 s, then drops it
        p = _verify(lab, "-k", "declared_replica")
        assert p.returncode == 1 and "pro6000-3" in p.stdout and "not registered" in p.stdout, p.stdout
        st = _status(lab)
        assert st.returncode == 1 and "pro6000-3 (http://10.204.0.13:30000): not in the gateway" in st.stdout, st.stdout
        assert "2/3 replicas ready" in st.stdout and "UNHEALTHY" in st.stdout, st.stdout
    finally:
        sh(lab, "gw-1", f"printf %s '{listed}' > /etc/smg/x.tmp && mv /etc/smg/x.tmp /etc/smg/smg-workers.json")
    with WorkersSampler(_url(lab), KEY) as sampler:
        deadline = time.monotonic() + 60
        while (min_ready(sampler.samples[-1:]) or 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.5)
    assert min_ready(sampler.samples[-1:]) == 3
    st = _status(lab)
    assert st.returncode == 0 and st.stdout.count("3/3 replicas ready") == 2, st.stdout
    assert f"floating {VIP}: MASTER, holds it" in st.stdout and f"floating {VIP}: BACKUP; held by" in st.stdout, \
        st.stdout


def _status(lab) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "python"), "-m", "ops", "status", str(lab.inventory)], cwd=lab.base,
                          capture_output=True, text=True, timeout=120)


def test_rolling_rollout_drops_no_request(gw_lab, tmp_path):
    lab = gw_lab
    run, report, samples = _rolled(lab, tmp_path, block_size=8)
    assert run.returncode == 0, run.out
    assert report.failed == 0, report.failures()
    assert report.total > 50, report.summary()
    assert min_ready(samples) >= 2, [s.statuses for s in samples if s.ready < 2][:3]
    assert [_block_size(lab, h) for h in REPLICAS] == ["8", "8", "8"]
    # one at a time, canary first: each replica drained, rolled and ready again before the next
    order = [line.split("]")[0].strip("[ ") for line in run.out.splitlines() if "out of gateway gw-1 and gw-2" in line]
    assert order[0] == "pro6000-1" and sorted(order) == REPLICAS, run.out
    assert "canary of pro6000" in run.out


def test_killmode_control_group_drops_requests(gw_lab, tmp_path):
    """A unit left at systemd's default KillMode (a drop-in here) kills SGLang's schedulers with
    the server on stop: the requests still running fail, and the load generator counts them."""
    lab = gw_lab
    for h in REPLICAS:
        sh(lab, h, f"mkdir -p {DROPIN.rsplit('/', 1)[0]} && printf '[Service]\\nKillMode=control-group\\n' > {DROPIN} "
                   "&& systemctl daemon-reload")
    try:
        # no drain wait: the stop comes while requests run (3 s each), as if the drain timeout had passed
        run, report, _ = _rolled(lab, tmp_path, block_size=4, gateway='gateway["rolling"] = {"drain_timeout_s": 0}',
                                 max_tokens=300)
    finally:
        for h in REPLICAS:
            sh(lab, h, f"rm -f {DROPIN} && systemctl daemon-reload")
    assert run.returncode == 0, run.out
    assert f"warning: pro6000-1: {DROPIN} sets KillMode=control-group" in run.out, run.out  # said before the stop
    assert report.failed > 0, report.summary()
    assert any("error" in f or "transport" in f or "DONE" in f for f in report.failures()), report.failures()


def test_canary_crash_stops_the_class(gw_lab, tmp_path):
    lab = gw_lab
    before = {h: main_pid(lab, h) for h in REPLICAS}
    run, report, samples = _rolled(lab, tmp_path, block_size=2,
                                   environment='service = {**service, "environment": {"LAB_SGLANG_LOAD": "crash"}}')
    assert run.returncode != 0, run.out
    assert report.failed == 0, report.failures()
    assert min_ready(samples) >= 2
    assert "rolled back" in summary_row(run.out, "pro6000-1"), run.out
    for h in ("pro6000-2", "pro6000-3"):
        assert "NOT ROLLED" in summary_row(run.out, h), run.out
        assert main_pid(lab, h) == before[h]  # never stopped
    # every replica serves the previous spec, back in the gateway, no lock or pending record left
    assert [_block_size(lab, h) for h in REPLICAS] == ["4", "4", "4"]
    for h in REPLICAS:
        assert sh(lab, h, f"ls {LOCK_FILE} /var/lib/sglang-fleet/sglang/pending.json 2>/dev/null") == ""
    for g in GATEWAYS:
        assert [w["id"] for w in json.loads(sh(lab, g, "cat /etc/smg/smg-workers.json"))["workers"]] == REPLICAS
    with WorkersSampler(_url(lab), KEY) as sampler:
        time.sleep(0.5)
    assert min_ready(sampler.samples) == 3


def test_one_replica_by_hand_through_the_same_drain(gw_lab, tmp_path):
    """--limit a replica: the gateway is not among the hosts of the run, and is used all the same."""
    lab = gw_lab
    before = {h: main_pid(lab, h) for h in REPLICAS}
    cwd = workdir(tmp_path, pro6000='speculative = {**speculative, "block_size": 6}')
    with WorkersSampler(_url(lab), KEY, interval_s=0.2) as sampler, \
            Load(_url(lab), MODEL, KEY, concurrency=8, max_tokens=48) as load:
        time.sleep(1)
        run = deploy(lab, cwd, "--limit", "pro6000-2", env=ENV)
    assert run.returncode == 0, run.out
    assert "out of gateway gw-1 and gw-2" in run.out and "back in gateway gw-1 and gw-2: ready" in run.out, run.out
    assert load.report.failed == 0, load.report.failures()
    assert min_ready(sampler.samples) >= 2
    assert [_block_size(lab, h) for h in REPLICAS] == ["4", "6", "4"]
    assert main_pid(lab, "pro6000-1") == before["pro6000-1"] and main_pid(lab, "pro6000-3") == before["pro6000-3"]


LINK_S = 12  # readiness.link_timeout_s of the lost-link test's spec


def test_a_link_lost_in_a_replicas_readiness_wait_then_the_next_run_puts_it_back(gw_lab, tmp_path):
    """The canary's link drops while it loads out of the gateway: it is LOST, the class stops, the
    other replicas serve on; once the link is back the next run (of that host) takes its lock over
    and finishes its rollout, the canary back in smg. Through the gateway, not one request fails."""
    lab = gw_lab
    before = {h: main_pid(lab, h) for h in REPLICAS[1:]}
    sizes = [_block_size(lab, h) for h in REPLICAS[1:]]
    cwd = workdir(tmp_path, pro6000=(
        'speculative = {**speculative, "block_size": 10}\n'
        f'readiness = {{"load_timeout_s": 60, "poll_interval_s": 0.25, "link_timeout_s": {LINK_S}}}\n'
        # loads 3 s, then warms up 8 s before /health says 200: time to drop the link in the wait
        'service = {**service, "environment": {"LAB_SGLANG_WARMUP_SECONDS": "8"}}'))
    with WorkersSampler(_url(lab), KEY, interval_s=0.2) as sampler, \
            Load(_url(lab), MODEL, KEY, concurrency=8, max_tokens=48) as load:
        first = Run(lab, cwd, [], env=ENV)
        in_its_readiness_wait(lab, first, "pro6000-1", "--speculative-dflash-block-size 10")
        labmod.link("pro6000-1", False)
        dropped = time.monotonic()
        try:
            rc = first.wait(timeout=180)
        finally:
            labmod.link("pro6000-1", True)
        during = list(sampler.samples)
        untouched = {h: main_pid(lab, h) for h in REPLICAS[1:]}
        time.sleep(max(0.0, dropped + LINK_S + 1 - time.monotonic()))  # its lease has run out
        second = deploy(lab, cwd, "--limit", "pro6000-1", env=ENV)
        time.sleep(1)
    assert rc != 0, first.out
    assert first.first("pro6000-1", "link lost") - dropped <= LINK_S, first.out
    assert " LOST " in summary_row(first.out, "pro6000-1"), first.out
    for h in REPLICAS[1:]:
        assert "NOT ROLLED" in summary_row(first.out, h), first.out
    assert untouched == before  # the other replicas were never stopped
    assert min_ready(during) >= 2
    assert second.returncode == 0, second.out
    assert "take over an interrupted rollout" in summary_row(second.out, "pro6000-1"), second.out
    assert "back in gateway gw-1 and gw-2: ready" in second.out, second.out  # the gateways are not in this run
    assert load.report.total > 0 and load.report.failed == 0, load.report.failures()
    assert [_block_size(lab, h) for h in REPLICAS] == ["10", *sizes]
    for h in REPLICAS:
        assert sh(lab, h, f"ls {LOCK_FILE} /var/lib/sglang-fleet/sglang/pending.json 2>/dev/null") == ""
    with WorkersSampler(_url(lab), KEY) as sampler:
        time.sleep(0.5)
    assert min_ready(sampler.samples) == 3  # the canary back in the gateway, ready, beside the others


# --- the gateways themselves: rolled one at a time, a run lost in a turn, failover ------------------------

def _turns(out: str) -> list[tuple[str, str]]:
    """(gateway, what) of the turns' own lines, in the order they came."""
    said = []
    for line in out.splitlines():
        for what in ("hands the floating address", "restarts smg.service"):
            if what in line and line.strip().startswith("["):
                said.append((line.split("]")[0].strip("[ "), what))
    return said


# The client of these tests sends a request again, once, where a kept-alive connection was closed before any byte
# of an answer, as the OpenAI SDK does: smg 1.13 closes its connections when it exits without a `Connection: close`
# first, so a client sending on one at that moment meets it however the roll drains (ops/loadgen.py). A restart
# closes each of the 8 connections at most once; refused, reset or cut requests still fail these tests.
RESENT_AT_MOST = 8 * len(GATEWAYS)


def _generations(lab) -> dict[str, tuple[str, str]]:
    return {g: (sh(lab, g, "cat /etc/smg/smg.generation"), sh(lab, g, "cat /run/sglang-fleet/smg.running"))
            for g in GATEWAYS}


def test_an_smg_change_rolls_the_gateways_one_at_a_time_and_fails_no_request(gw_lab, tmp_path):
    lab = gw_lab
    before = {g: main_pid(lab, g, "smg.service") for g in GATEWAYS}
    held = holders(lab)[0]
    cwd = workdir(tmp_path, gateway='gateway["policy"] = "least_load"')
    with WorkersSampler(_url(lab), KEY, interval_s=0.2) as sampler, \
            Load(_url(lab), MODEL, KEY, concurrency=8, max_tokens=48, resend_unanswered=True) as load:
        time.sleep(2)
        run = deploy(lab, cwd, env=ENV)
        time.sleep(1)
    assert run.returncode == 0, run.out
    assert load.report.failed == 0 and load.report.total > 40, (load.report.summary(), load.report.failures())
    assert load.report.retried <= RESENT_AT_MOST, load.report.summary()
    # behind the address, always a gateway routing the replicas (smg's own probes may flap one under load)
    assert min_ready(sampler.samples) >= 2, [s for s in sampler.samples if s.ready < 2][:5]
    # one at a time in inventory order; the holder handed the address over before its restart
    assert [g for g, what in _turns(run.out) if what == "restarts smg.service"] == GATEWAYS, run.out
    assert (held, "hands the floating address") in _turns(run.out), run.out
    assert f"handed the floating address {VIP} to" in run.out
    for g in GATEWAYS:
        assert main_pid(lab, g, "smg.service") != before[g]
        assert "--policy least_load" in sh(lab, g, "cat /etc/systemd/system/smg.service")
        new, running = _generations(lab)[g]
        assert new == running != ""
    assert_clean(lab)
    assert holders(lab) == [_holder_after_a_roll(held)], run.out


def _holder_after_a_roll(held: str) -> str:
    """nopreempt: each holder hands the address to the other gateway in its own turn, and it stays there. Which
    gateway held it before the roll is keepalived's choice (which came up first, earlier tests' faults)."""
    for g in GATEWAYS:
        if g == held:
            held = next(other for other in GATEWAYS if other != g)
    return held


def test_a_run_lost_in_a_gateways_turn_is_finished_by_the_next(gw_lab, tmp_path):
    """The controller killed (SIGKILL) right after a holder handed the address over: the next run finds that
    gateway held out of the election, its connections routed back to it; it finishes that turn first, then
    rolls the rest. Through both runs, not one request fails."""
    lab = gw_lab
    cwd = workdir(tmp_path, gateway='gateway["health_check_interval_s"] = 3')  # a change whatever came before
    with Load(_url(lab), MODEL, KEY, concurrency=8, max_tokens=48, resend_unanswered=True) as load:
        time.sleep(2)
        first = Run(lab, cwd, [], env=ENV)
        deadline = time.monotonic() + 120
        while not any(what == "hands the floating address" for _, what in _turns(first.out)):
            assert time.monotonic() < deadline and first.p.poll() is None, first.out
            time.sleep(0.05)
        handed = next(g for g, what in _turns(first.out) if what == "hands the floating address")
        while sh(lab, handed, f"cat {floating_lib.handoff_file('smg')}") != "1":  # held out: the address moves
            assert time.monotonic() < deadline and first.p.poll() is None, first.out
        first.p.kill()
        first.wait(timeout=30)
        assert sh(lab, handed, f"cat {floating_lib.handoff_file('smg')}; ip -o -4 addr show dev lo to {VIP}/32"
                  ).startswith("1\n")  # what the lost run left: held out, its connections still landing there
        second = deploy(lab, cwd, env=ENV)
        time.sleep(1)
    assert second.returncode == 0, second.out
    assert "finish a lost run's turn" in summary_row(second.out, handed) or \
        "restart" in summary_row(second.out, handed), second.out
    assert _turns(second.out)[0][0] == handed, second.out  # the lost run's turn first
    assert load.report.failed == 0, (load.report.summary(), load.report.failures())
    assert load.report.retried <= RESENT_AT_MOST, load.report.summary()
    for g in GATEWAYS:
        assert "--health-check-interval-secs 3" in sh(lab, g, "cat /etc/systemd/system/smg.service")
        new, running = _generations(lab)[g]
        assert new == running != ""
    assert_clean(lab)


def _wait(what: str, check, timeout: float):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.2)


def _moved(lab, to: str, since: float) -> float:
    """Once `to` holds the address: how long after `since` (this machine's clock, the hosts' too) it took it."""
    _wait(f"{to} holding {VIP}", lambda: vrrp(lab, to)[0] == "MASTER" and vrrp(lab, to)[1] > since, 3 * FAILOVER_S)
    return vrrp(lab, to)[1] - since


def _rejoined(lab, gateway: str, since: float) -> None:
    """Back in the election, as a backup (nopreempt: the address stays where it is)."""
    _wait(f"{gateway} back as BACKUP", lambda: vrrp(lab, gateway)[0] == "BACKUP" and vrrp(lab, gateway)[1] > since,
          60)


def test_failover_smg_killed_a_link_dropped_a_box_powered_off(gw_lab):
    """Under a steady stream to the floating address: each time the holder fails the address moves to the other
    gateway within gateway.floating.failover_s, new requests succeed through it, and the only requests lost were
    in flight on the failed one; each failed gateway comes back and rejoins without failing a request."""
    lab = gw_lab
    assert_clean(lab)
    faults = []  # (what, started, ended) on this machine's monotonic clock: the requests in flight then may fail
    moved = {}
    with Load(_url(lab), MODEL, KEY, concurrency=8, max_tokens=48, timeout_s=15) as load:
        time.sleep(2)
        for what in GATEWAY_FAULTS:
            failed, = holders(lab)
            other = next(g for g in GATEWAYS if g != failed)
            t, start = time.time(), time.monotonic()
            gateway_fault(lab, failed, what, on=True)
            faults.append((what, start, time.monotonic()))
            moved[what] = _moved(lab, other, t)
            time.sleep(2)  # new requests through the other gateway
            back = time.time()
            gateway_fault(lab, failed, what, on=False)
            _rejoined(lab, failed, back)
            time.sleep(2)
        rejoined = time.monotonic()
        time.sleep(3)
    report = load.report
    for what, seconds in moved.items():
        assert 0 < seconds <= FAILOVER_S, (what, moved)
    # a dead link or box tells nothing: the other waits out missed advertisements (1 s each) before it takes
    # the address; an earlier move means something on the failed box still acted (a power cut killing its
    # processes one by one let its systemd run smg's ExecStopPost)
    assert all(moved[what] > 2 for what in ("link dropped", "box powered off")), moved
    in_flight = [r for r in report.requests if any(r.started < end and r.ended > start for _, start, end in faults)]
    lost = [r for r in report.requests if not r.ok]
    assert set(map(id, lost)) <= set(map(id, in_flight)), [r.error for r in lost if id(r) not in map(id, in_flight)]
    assert all(r.ok for r in report.requests if r.started > rejoined)  # back, and nothing fails
    after = [r for r in report.requests if r.ok and r.started > faults[-1][2]]
    assert after, report.summary()  # new requests went through the other gateway
    assert_clean(lab)


PREEMPT_DELAY_S = 2


def test_preempt_takes_the_address_back_only_once_ready(gw_lab, tmp_path):
    """gateway.floating.preempt: the preferred gateway (gw-1, first in inventory order) holds the address; its smg
    killed -9, the address moves to gw-2; systemd starts smg again, and gw-1 takes the address back only once its
    smg answers /readiness and preempt_delay_s have passed."""
    lab = gw_lab
    cwd = workdir(tmp_path, gateway='gateway["floating"] = {**gateway["floating"], "preempt": True, '
                                    f'"preempt_delay_s": {PREEMPT_DELAY_S}}}')
    run = deploy(lab, cwd, env=ENV)
    assert run.returncode == 0, run.out
    assert "update keepalived" in summary_row(run.out, "gw-1"), run.out
    assert f"preempt_delay {PREEMPT_DELAY_S}" in sh(lab, "gw-1", "cat /etc/keepalived/keepalived.conf")
    _wait("gw-1 holding the address (preempt)", lambda: holders(lab) == ["gw-1"], 3 * FAILOVER_S)
    readiness = ("while :; do printf '%s %s\\n' \"$(date +%s.%N)\" \"$(curl -s -o /dev/null -w '%{http_code}' "
                 "--max-time 1 http://127.0.0.1:8000/readiness)\"; sleep 0.1; done")
    pid = sh(lab, "gw-1", f"setsid sh -c {shlex.quote(readiness)} > /tmp/readiness 2>&1 < /dev/null & echo $!")
    try:
        killed = time.time()
        gateway_fault(lab, "gw-1", "smg killed -9", on=True)
        assert _moved(lab, "gw-2", killed) <= FAILOVER_S
        _wait("gw-1 back as MASTER", lambda: vrrp(lab, "gw-1")[0] == "MASTER" and vrrp(lab, "gw-1")[1] > killed, 60)
    finally:
        sh(lab, "gw-1", f"kill {int(pid)}")
    took_back = vrrp(lab, "gw-1")[1]
    samples = [(float(t), code) for t, code in (line.split() for line in sh(lab, "gw-1", "cat /tmp/readiness")
                                                 .splitlines() if len(line.split()) == 2)]
    down = [t for t, code in samples if killed < t and code != "200"]
    assert down, samples[-20:]  # smg was seen not ready after the kill
    ready = min(t for t, code in samples if t > down[0] and code == "200")
    assert took_back >= ready + PREEMPT_DELAY_S - 0.5, (took_back - ready, samples[-20:])
    assert holders(lab) == ["gw-1"]
    assert_clean(lab)
