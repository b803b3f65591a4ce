"""Replicas behind SGLang's real gateway (smg 1.13.0, installed by the deploy on gw-1 and gw-2, behind a
floating address keepalived moves between them): a spec change is rolled one replica at a time, drained out
of both gateways, while a client streams chat completions to the floating address at concurrency 8, and not
one request fails. The tests run in order on one lab (lab/gateway.toml): the lab as booted, the first deploy,
a second run and a dry run, make verify and make status, a clean rollout, a unit left at KillMode=control-group
(the load generator sees the failures that makes), a canary whose new spec crashes, one replica by hand, a link
lost in a replica's readiness wait. make tune behind the pair and the pair's own turns and faults:
test_gateway_pair_e2e.py, on a lab of its own (tests/lab/gwlab.py).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from fleet.gateway.smg import READY
from fleet.spec.load import load_class_specs
from fleet.core.layout import gateway_mesh_file
from lab import lab as labmod
from lab import provision
from ops.loadgen import Load, WorkersSampler, min_ready
from tests.lab.e2e import (REPO, VRRP_ENV, Run, canary_analysis, deploy, in_its_readiness_wait, main_pid, make_status,
                           make_verify, sh, summary_row)
from tests.lab.gwlab import (ENV, GATEWAYS, KEY, LAB_FILE, LOCK_FILE, MODEL, REPLICAS, assert_clean, block_size,
                             deployed, holders, passed, ready_now, rolled, routed_now, url, vip, vrrp, wait, with_mesh,
                             workdir, workers_listed)

DROPIN = "/etc/systemd/system/sglang.service.d/killmode.conf"


@pytest.fixture(scope="module")
def gw_booted(lab_manager):
    """lab/gateway.toml as booted: nothing deployed."""
    return lab_manager.ensure(LAB_FILE, fresh=True)


@pytest.fixture(scope="module")
def gw_lab(gw_booted, tmp_path_factory):
    return deployed(gw_booted, tmp_path_factory)


def _sh(lab, host, command: str) -> subprocess.CompletedProcess:
    return lab.ssh(host, command, timeout=20)


def inventory_lists(path: Path) -> dict[str, list]:
    """The lab inventory's group lists, read without running it (its last line checks group_data)."""
    tree = ast.parse(path.read_text())
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.List)}


def test_the_lab_boots_the_gateway_pair_as_its_file_says(gw_booted):
    lab = gw_booted
    assert [(h.name, h.ip) for h in lab.hosts] == [
        ("pro6000-1", "10.204.0.11"), ("pro6000-2", "10.204.0.12"), ("pro6000-3", "10.204.0.13"),
        ("gw-1", "10.204.0.14"), ("gw-2", "10.204.0.15"),
    ]
    for h in lab.hosts:
        assert _sh(lab, h.name, "hostname").stdout.strip() == h.name
    spec = load_class_specs(REPO / "group_data")["pro6000"]
    # no GPU, no SGLang: only what every host needs; smg is the deploy's to install
    for path in ("/usr/bin/nvidia-smi", provision.SGLANG_DOUBLE_DIR, spec.service.launcher, spec.service.model_path):
        assert _sh(lab, "gw-1", f"test -e {path}").returncode != 0, path
    assert _sh(lab, "gw-1", "python3 -c 'print(1)'").stdout.strip() == "1"
    assert json.loads(_sh(lab, "gw-1", "cat /etc/lab/host.json").stdout)["role"] == "gateway"
    assert json.loads(_sh(lab, "pro6000-1", "cat /etc/lab/host.json").stdout)["role"] == "gpu"
    assert _sh(lab, "pro6000-1", "test -x /usr/bin/nvidia-smi").returncode == 0
    inv = inventory_lists(lab.inventory)  # not run: the repo's group_data has no floating address for the pair
    assert [n for n, _ in inv["gateway"]] == ["gw-1", "gw-2"]
    assert [n for n, _ in inv["pro6000"]] == ["pro6000-1", "pro6000-2", "pro6000-3"]
    # what keepalived and a handoff need, as on a real host: Debian's packages from the lab's repository, the
    # network's administration in its own namespace (an address added, a sysctl of its own)
    # (a freshly booted host has no package lists yet: the deploy's apt-get update reads them from there)
    assert _sh(lab, "gw-2", "apt-get update -qq && apt-cache policy keepalived nftables | grep -c 'file:/srv/lab-debs'"
              ).stdout.strip() == "2"
    assert _sh(lab, "gw-2", "ip addr add 10.204.0.99/32 dev lo && sysctl -qw net.ipv4.conf.eth0.forwarding=1 && "
                           "ip addr del 10.204.0.99/32 dev lo && sysctl -qw net.ipv4.conf.eth0.forwarding=0"
              ).returncode == 0
    assert _sh(lab, "pro6000-1", "ip addr add 10.204.0.99/32 dev lo").returncode != 0  # a GPU host: no such right
    # a box's power cut: nothing answers, its kernel's state gone; back: booted from its disk as it was
    # its NIC keeps its MAC address: the neighbours' ARP entries stay good and it answers at once when back
    _sh(lab, "gw-2", "echo kept > /root/disk && ip addr add 10.204.0.98/32 dev lo")
    nic = _sh(lab, "gw-2", "cat /sys/class/net/eth0/address").stdout
    lab.power("gw-2", False)
    assert lab.ssh("gw-2", "true", timeout=3).returncode != 0
    lab.power("gw-2", True)
    assert _sh(lab, "gw-2", "cat /root/disk; ip -o -4 addr show dev lo to 10.204.0.98/32").stdout.strip() == "kept"
    assert _sh(lab, "gw-2", "cat /sys/class/net/eth0/address").stdout == nic
    assert _sh(lab, "gw-1", "timeout 2 bash -c '</dev/tcp/10.204.0.15/22'").returncode == 0  # its peer reaches it
    assert {r["name"]: r["state"] for r in labmod.status(lab.name, check_ssh=False)}["gw-2"] == "running"


def test_gateway_installed_and_routing(gw_lab):
    lab = gw_lab
    for g in GATEWAYS:
        assert sh(lab, g, "systemctl is-active smg.service keepalived.service").split() == ["active", "active"]
        assert sh(lab, g, "/opt/smg/venv/bin/python -c 'import importlib.metadata as m; print(m.version(\"smg\"))'"
                  ) == "1.13.0"
        assert sh(lab, g, "stat -c %a /etc/smg/smg.secret /etc/smg/smg.auth /etc/keepalived/sglang-fleet-auth.conf"
                  ).split() == ["600", "600", "600"]
        assert KEY not in sh(lab, g, "cat /etc/systemd/system/smg.service")
        # what systemd runs, as it runs it: nothing expanded into it (smg 1.13 renames its process once started,
        # so its arguments read later would hide a key given as one)
        assert "--api-key" not in sh(lab, g, "systemctl show -p ExecStart smg") and "$" not in sh(
            lab, g, "grep ^ExecStart= /etc/systemd/system/smg.service")
        arguments = sh(lab, g, "ps -eo pid=,args=; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done")
        assert re.search(rf"^ *{main_pid(lab, g, 'smg.service')} smg::router *$", arguments, re.M)  # as it names itself
        assert KEY not in arguments and VRRP_ENV["SGLANG_FLEET_VRRP_PASSWORD"] not in arguments
        assert VRRP_ENV["SGLANG_FLEET_VRRP_PASSWORD"] not in sh(lab, g, "cat /etc/keepalived/keepalived.conf")
        workers = json.loads(sh(lab, g, "cat /etc/smg/smg-workers.json"))["workers"]
        assert [w["id"] for w in workers] == REPLICAS
    assert_clean(lab)
    assert {vrrp(lab, g)[0] for g in GATEWAYS} == {"MASTER", "BACKUP"}
    assert ready_now(lab) == 3
    with Load(url(lab), MODEL, KEY, concurrency=2, max_tokens=8) as load:
        passed(load, 4)
    assert load.report.total >= 4 and load.report.failed == 0, load.report.failures()
    with Load(url(lab), MODEL, None, concurrency=1, max_tokens=8) as anonymous:
        passed(anonymous, 1)
    assert anonymous.report.failed == anonymous.report.total > 0
    assert "HTTP 401" in anonymous.report.failures()[0]


def test_second_run_changes_nothing(gw_lab, tmp_path):
    lab = gw_lab
    def pids() -> dict:
        return {h: main_pid(lab, h) for h in REPLICAS} | {
            g: (main_pid(lab, g, "smg.service"), main_pid(lab, g, "keepalived.service")) for g in GATEWAYS}

    before, held = pids(), holders(lab)
    run = deploy(lab, workdir(lab, tmp_path), env=ENV)
    assert run.returncode == 0, run.out
    assert pids() == before
    assert holders(lab) == held
    assert "Install smg" not in run.out and "in its turn" not in run.out
    for g in GATEWAYS:
        assert "none (already as declared)" in summary_row(run.out, g), run.out


def test_a_new_key_shows_in_a_dry_run_as_a_change_never_as_a_value(gw_lab, tmp_path):
    lab = gw_lab
    new_key = "gw-e2e-rotated-9876543210"
    run = deploy(lab, workdir(lab, tmp_path), "--dry", "--diff", env={**ENV, "SGLANG_FLEET_GATEWAY_KEY": new_key})
    assert run.returncode == 0, run.out
    for g in GATEWAYS:
        assert "update key" in summary_row(run.out, g) and "restart" in summary_row(run.out, g), run.out
        assert KEY in sh(lab, g, "cat /etc/smg/smg.secret")  # a dry run changes nothing
    assert new_key not in run.out and KEY not in run.out and VRRP_ENV["SGLANG_FLEET_VRRP_PASSWORD"] not in run.out


def test_a_new_key_restarts_each_smg_and_only_it_is_taken_then_the_old_one_again(gw_lab, tmp_path):
    """The key is in no argument and the unit stays the same: the generation smg started with (which reads the key
    file) restarts it, each gateway in its turn."""
    lab = gw_lab
    new_key = "gw-e2e-rotated-9876543210"
    cwd = workdir(lab, tmp_path)
    for key, old in ((new_key, KEY), (KEY, new_key)):
        before = {g: main_pid(lab, g, "smg.service") for g in GATEWAYS}
        unit = {g: sh(lab, g, "cat /etc/systemd/system/smg.service") for g in GATEWAYS}
        run = deploy(lab, cwd, env={**ENV, "SGLANG_FLEET_GATEWAY_KEY": key})
        assert run.returncode == 0, run.out
        assert new_key not in run.out and KEY not in run.out
        for g in GATEWAYS:
            assert "update key" in summary_row(run.out, g) and "restart" in summary_row(run.out, g), run.out
            assert main_pid(lab, g, "smg.service") not in (0, before[g])
            assert sh(lab, g, "cat /etc/systemd/system/smg.service") == unit[g]
            assert key not in sh(lab, g, "ps -eo args; for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done")
        with Load(url(lab), MODEL, key, concurrency=1, max_tokens=8) as load:
            passed(load, 2)
        assert load.report.failed == 0, load.report.failures()
        with Load(url(lab), MODEL, old, concurrency=1, max_tokens=8) as refused:
            passed(refused, 1)
        assert refused.report.failed == refused.report.total > 0 and "HTTP 401" in refused.report.failures()[0]


def test_verify_checks_the_gateway(gw_lab):
    lab = gw_lab
    p = make_verify(lab)
    assert p.returncode == 0, p.stdout + p.stderr
    for check in ("test_every_declared_replica_is_ready", "test_chat_completion_through_the_gateway",
                  "test_without_the_key_as_declared", "test_gateway_readiness_is_200",
                  "test_no_secret_in_any_process_arguments"):
        for g in GATEWAYS:
            assert f"test_gateway.py::{check}[{g}] PASSED" in p.stdout, p.stdout
    for check in ("test_keepalived_enabled_and_running_on_each", "test_exactly_one_gateway_holds_the_address",
                  "test_the_address_answers_from_every_gateway", "test_no_turn_was_left_unfinished"):
        assert f"test_floating.py::{check}[gateway] PASSED" in p.stdout, p.stdout
    # a replica gw-1 does not route to is named
    listed = sh(lab, "gw-1", "cat /etc/smg/smg-workers.json")
    workers = json.loads(listed)
    workers["workers"] = [w for w in workers["workers"] if w["id"] != "pro6000-3"]
    sh(lab, "gw-1", f"printf %s '{json.dumps(workers)}' > /etc/smg/x.tmp && mv /etc/smg/x.tmp /etc/smg/smg-workers.json")
    gone = f"http://{lab.host('pro6000-3').ip}:30000"
    try:
        # smg drains a removed worker for 5 s, then drops it: until /workers lists it no more
        wait("gw-1's smg dropping pro6000-3", lambda: gone not in routed_now(lab, "gw-1"), 60)
        p = make_verify(lab, "-k", "declared_replica")
        assert p.returncode == 1 and "test_every_declared_replica_is_ready[gw-1] FAILED" in p.stdout and "pro6000-3" in p.stdout and \
            "not registered" in p.stdout, p.stdout
        assert "test_every_declared_replica_is_ready[gw-2] PASSED" in p.stdout, p.stdout
        st = make_status(lab)
        assert st.returncode == 1 and f"pro6000-3 (http://{lab.host('pro6000-3').ip}:30000): not in the gateway" in \
            st.stdout, st.stdout
        assert "2/3 replicas ready" in st.stdout and "UNHEALTHY" in st.stdout, st.stdout
    finally:
        sh(lab, "gw-1", f"printf %s '{listed}' > /etc/smg/x.tmp && mv /etc/smg/x.tmp /etc/smg/smg-workers.json")
    wait("gw-1's smg routing pro6000-3 again", lambda: routed_now(lab, "gw-1").get(gone) == READY, 60)
    st = make_status(lab)
    assert st.returncode == 0 and st.stdout.count("3/3 replicas ready") == 2, st.stdout
    assert f"floating {vip(lab)}: MASTER, holds it" in st.stdout and f"floating {vip(lab)}: BACKUP; held by" in st.stdout, \
        st.stdout


def test_rolling_rollout_drops_no_request(gw_lab, tmp_path):
    lab = gw_lab
    run, report, samples = rolled(lab, tmp_path, block_size=8, canary_analysis=True)
    assert run.returncode == 0, run.out
    assert report.failed == 0, report.failures()
    assert report.total > 50, report.summary()
    assert min_ready(samples) >= 2, [s.statuses for s in samples if s.ready < 2][:3]
    assert [block_size(lab, h) for h in REPLICAS] == ["8", "8", "8"]
    # one at a time, canary first: each replica drained, rolled and ready again before the next
    order = [line.split("]")[0].strip("[ ") for line in run.out.splitlines() if "out of gateway gw-1 and gw-2" in line]
    assert order[0] == "pro6000-1" and sorted(order) == REPLICAS, run.out
    assert "canary of pro6000" in run.out
    # the canary's analysis, its load sent while it was out of smg (the clients' load above saw no failure): a shorter
    # draft accepts less by design, so its tokens/s against the old spec's decides
    said = canary_analysis(run.out, "pro6000-1")
    m = re.search(r"canary analysis passed: ([0-9.]+) tok/s, accept length ([0-9.]+) against the baseline's ([0-9.]+) "
                  r"tok/s, accept length ([0-9.]+) \(the same load on the canary before its turn \(the old spec\)\); "
                  r"bounds: 0.5 x its tok/s \(the old spec drafts otherwise \(--speculative-dflash-block-size\): "
                  r"tokens/s alone\)", said)
    assert m, run.out
    assert float(m.group(2)) < float(m.group(4))  # the speed model's a(8) < a(16)
    assert [h for h in REPLICAS if canary_analysis(run.out, h)] == ["pro6000-1"]


def test_killmode_control_group_drops_requests(gw_lab, tmp_path):
    """A unit left at systemd's default KillMode (a drop-in here) kills SGLang's schedulers with
    the server on stop: the requests still running fail, and the load generator counts them."""
    lab = gw_lab
    for h in REPLICAS:
        sh(lab, h, f"mkdir -p {DROPIN.rsplit('/', 1)[0]} && printf '[Service]\\nKillMode=control-group\\n' > {DROPIN} "
                   "&& systemctl daemon-reload")
    try:
        # no drain wait: the stop comes while requests run (1200 tokens: about 5 s each, longer than the steps
        # between a replica's leaving smg and its stop take on a busy machine), as if the drain timeout had passed
        run, report, _ = rolled(lab, tmp_path, block_size=4, gateway='gateway["rolling"] = {"drain_timeout_s": 0}',
                                max_tokens=1200, steady=8)
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
    run, report, samples = rolled(lab, tmp_path, block_size=2,
                                   environment='service = {**service, "environment": {"LAB_SGLANG_LOAD": "crash"}}')
    assert run.returncode != 0, run.out
    assert report.failed == 0, report.failures()
    assert min_ready(samples) >= 2
    assert "rolled back" in summary_row(run.out, "pro6000-1"), run.out
    for h in ("pro6000-2", "pro6000-3"):
        assert "NOT ROLLED" in summary_row(run.out, h), run.out
        assert main_pid(lab, h) == before[h]  # never stopped
    # every replica serves the previous spec, back in the gateway, no lock or pending record left
    assert [block_size(lab, h) for h in REPLICAS] == ["4", "4", "4"]
    for h in REPLICAS:
        assert sh(lab, h, f"ls {LOCK_FILE} /var/lib/sglang-fleet/sglang/pending.json 2>/dev/null") == ""
    for g in GATEWAYS:
        assert workers_listed(lab, g) == REPLICAS
    assert ready_now(lab) == 3


def test_one_replica_by_hand_through_the_same_drain(gw_lab, tmp_path):
    """--limit a replica: the gateway is not among the hosts of the run, and is used all the same."""
    lab = gw_lab
    before = {h: main_pid(lab, h) for h in REPLICAS}
    cwd = workdir(lab, tmp_path, pro6000='speculative = {**speculative, "block_size": 6}')
    with WorkersSampler(url(lab), KEY, interval_s=0.2) as sampler, \
            Load(url(lab), MODEL, KEY, concurrency=8, max_tokens=48) as load:
        passed(load)
        run = deploy(lab, cwd, "--limit", "pro6000-2", env=ENV)
    assert run.returncode == 0, run.out
    assert "out of gateway gw-1 and gw-2" in run.out and "back in gateway gw-1 and gw-2: ready" in run.out, run.out
    assert load.report.failed == 0, load.report.failures()
    assert min_ready(sampler.samples) >= 2
    assert [block_size(lab, h) for h in REPLICAS] == ["4", "6", "4"]
    assert main_pid(lab, "pro6000-1") == before["pro6000-1"] and main_pid(lab, "pro6000-3") == before["pro6000-3"]


LINK_S = 12  # readiness.link_timeout_s of the lost-link test's spec


def test_a_link_lost_in_a_replicas_readiness_wait_then_the_next_run_puts_it_back(gw_lab, tmp_path):
    """The canary's link drops while it loads out of the gateway: it is LOST, the class stops, the
    other replicas serve on; once the link is back the next run (of that host) takes its lock over
    and finishes its rollout, the canary back in smg. Through the gateway, not one request fails."""
    lab = gw_lab
    before = {h: main_pid(lab, h) for h in REPLICAS[1:]}
    sizes = [block_size(lab, h) for h in REPLICAS[1:]]
    cwd = workdir(lab, tmp_path, pro6000=(
        'speculative = {**speculative, "block_size": 10}\n'
        f'readiness = {{"load_timeout_s": 60, "poll_interval_s": 0.25, "link_timeout_s": {LINK_S}}}\n'
        # loads 1 s, then warms up 8 s before /health says 200: time to drop the link in the wait
        'service = {**service, "environment": {"LAB_SGLANG_WARMUP_SECONDS": "8"}}'))
    with WorkersSampler(url(lab), KEY, interval_s=0.2) as sampler, \
            Load(url(lab), MODEL, KEY, concurrency=8, max_tokens=48) as load:
        first = Run(lab, cwd, [], env=ENV)
        in_its_readiness_wait(lab, first, "pro6000-1", "--speculative-dflash-block-size 10")
        lab.link("pro6000-1", False)
        dropped = time.monotonic()
        try:
            rc = first.wait(timeout=180)
        finally:
            lab.link("pro6000-1", True)
        during = list(sampler.samples)
        untouched = {h: main_pid(lab, h) for h in REPLICAS[1:]}
        time.sleep(max(0.0, dropped + LINK_S + 1 - time.monotonic()))  # its lease has run out
        second = deploy(lab, cwd, "--limit", "pro6000-1", env=ENV)
        passed(load)
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
    assert [block_size(lab, h) for h in REPLICAS] == ["10", *sizes]
    for h in REPLICAS:
        assert sh(lab, h, f"ls {LOCK_FILE} /var/lib/sglang-fleet/sglang/pending.json 2>/dev/null") == ""
    assert ready_now(lab) == 3  # the canary back in the gateway, ready, beside the others


# --- smg's mesh over mTLS: turned on last (it keeps each smg busy: tests/lab/gwlab.py) ---------------------------

MESH_CHECK = "test_the_mesh_certificate_chains_to_its_ca_names_its_address_and_goes_with_its_key"


def test_smgs_mesh_over_mtls_is_rolled_in_one_gateway_at_a_time_and_verified(gw_lab, tmp_path):
    """gateway.mesh declared: an smg change like any other, one gateway at a time under load, no request failed;
    each smg connects to its peer over mTLS, its key 0600; make verify checks each certificate, and names a key that
    is not its certificate's (smg read the right one at its start: it serves on)."""
    lab = gw_lab
    with_mesh(lab, tmp_path / "pki")
    cwd = workdir(lab, tmp_path / "wd")
    with Load(url(lab), MODEL, KEY, concurrency=8, max_tokens=48, resend_unanswered=True) as load:
        passed(load)
        run = deploy(lab, cwd, env=ENV)
        passed(load)
    assert run.returncode == 0, run.out
    assert load.report.failed == 0, (load.report.summary(), load.report.failures())
    for g in GATEWAYS:
        peer = next(p for p in GATEWAYS if p != g)
        assert f"Successfully connected to peer {lab.host(peer).ip}:39527" in sh(
            lab, g, "journalctl -u smg -o cat --no-pager")
        assert sh(lab, g, f"stat -c %a {gateway_mesh_file('smg', 'key')}") == "600"
    assert_clean(lab)
    p = make_verify(lab, "-k", "mesh_certificate", cwd=cwd)
    assert p.returncode == 0 and all(f"test_floating.py::{MESH_CHECK}[{g}] PASSED" in p.stdout for g in GATEWAYS), \
        p.stdout
    key = gateway_mesh_file("smg", "key")
    sh(lab, "gw-2", f"cp -p {key} {key}.kept && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 "
                    f"-out {key}")
    try:
        p = make_verify(lab, "-k", "mesh_certificate", cwd=cwd)
        assert p.returncode == 1 and f"{MESH_CHECK}[gw-1] PASSED" in p.stdout, p.stdout
        assert f"gw-2: {gateway_mesh_file('smg', 'crt')}: expected" in p.stdout and "'goes with its key'" in p.stdout, \
            p.stdout
        assert "BEGIN PRIVATE KEY" not in p.stdout + p.stderr
    finally:
        sh(lab, "gw-2", f"mv -f {key}.kept {key}")
