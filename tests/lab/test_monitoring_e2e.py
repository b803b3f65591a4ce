"""Monitoring as declared state, in the lab (lab/monitoring.toml): two PRO 6000 replicas behind smg on gw-1,
and mon-1, where the deploy installs Debian's real Prometheus and Alertmanager from the lab's repository of
Debian's packages, scraping both replicas and smg with the rules generated for the class; lab-webhook on
mon-1 records what Alertmanager sends.

Under a steady load through the gateway: the double's acceptance lowered on one replica (at run time, no
restart) fires that host's accept-length alert, which reaches the webhook within its declared bound
(Monitoring.delivery_bound_s, from the lowering's own timestamp on the host to the webhook's record); raised
again, it resolves. A replica stopped by hand fires its down alert, within its bound too. A second deploy changes
nothing on mon-1. Both ask for the password: a client on another host without it makes no silence, and no process on
mon-1 shows the password or the webhook's token. The lab's intervals are seconds (e2e.monitoring_overrides): these
tests take seconds.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time

import pytest
from e2e import BIN, DOWN_FOR_S, FOR_S, MON_CURL, MONITORING_ENV, REPO, at_on, deploy, lab_monitoring, \
    monitoring_overrides, no_silence_left, notifications, prometheus, quiet_alerts, quiet_since, sh, silences, \
    summary_row, wait_for, workdir

from fleet.monitoring.config import dashboard_queries
from fleet.monitoring.host import LIVE, SECRET_OWNERS
from fleet.monitoring.models import ALERTMANAGER_CONFIG, DASHBOARD
from ops.loadgen import Load

KEY = "mon-e2e-key-0123456789"
ENV = {"SGLANG_FLEET_GATEWAY_KEY": KEY}
MODEL = "qwen3.6-27b"
TOKEN = "hook-token-5f1c2e9a"  # in the webhook URL's path, as a chat service's hook has it: a secret
MONITORING = monitoring_overrides({"pro6000": 3.0}) + (
    f'\nmonitoring = {{**monitoring, "receivers": [{{"name": "lab", "webhook_url": '
    f'"http://127.0.0.1:9099/alerts/{TOKEN}"}}]}}')
# The latest an alert reaches the webhook after its condition begins, as the product declares it
ACCEPT_BOUND_S = lab_monitoring().delivery_bound_s(FOR_S, windowed=True)
DOWN_BOUND_S = lab_monitoring().delivery_bound_s(DOWN_FOR_S)
RESTART_S = 30  # a replica stopped by hand started again: its load (lab/monitoring.toml) before it is scraped up
# How long a test looks for a notification: no product timing (that is asserted from the event's and the webhook's
# own timestamps), only when to give up looking, the test's polls slow on a busy machine.
LOOK_S = 120
CONTROL = "PYTHONPATH=/usr/local/lib/sglang-double python3 -m sglang._lab_control"


@pytest.fixture(scope="module")
def mon(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(REPO / "lab/monitoring.toml", fresh=True)
    cwd = workdir(tmp_path_factory.mktemp("wd"), monitoring=MONITORING)
    run = deploy(lab, cwd, env=ENV)
    assert run.returncode == 0, run.out
    return lab, cwd, run


def accept_lengths(lab) -> dict[str, float]:
    result = prometheus(lab, "/api/v1/query", "sglang_fleet:accept_length")["data"]["result"]
    return {r["metric"]["host"]: float(r["value"][1]) for r in result}


def test_the_deploy_installs_prometheus_and_alertmanager_and_scrapes_every_replica_and_smg(mon):
    lab, cwd, run = mon
    assert "OK" in summary_row(run.out, "mon-1"), run.out
    assert sh(lab, "mon-1", "systemctl is-active prometheus prometheus-alertmanager").split() == ["active", "active"]
    assert "SGLangAcceptLengthLow" in sh(lab, "mon-1", "cat /etc/prometheus/sglang-fleet/rules/class-pro6000.json")

    def all_up():
        targets = prometheus(lab, "/api/v1/targets?state=active")["data"]["activeTargets"]
        up = {(t["labels"]["job"], t["labels"].get("host")) for t in targets if t["health"] == "up"}
        return {("sglang", "pro6000-1"), ("sglang", "pro6000-2"), ("smg", "gw-1")} <= up
    wait_for("every replica and smg scraped", all_up, 30)
    labels = prometheus(lab, "/api/v1/query", 'up{job="sglang"}')["data"]["result"][0]["metric"]
    assert {labels[k] for k in ("gpu_class", "served_model", "speculative")} == {"pro6000", MODEL, "DFLASH"}

    again = deploy(lab, cwd, env=ENV)
    assert again.returncode == 0, again.out
    assert "none (already as declared)" in summary_row(again.out, "mon-1"), again.out


def ops(lab, cwd, *args: str) -> str:
    """`make monitor` / `make status` as an operator runs them, on the lab's inventory."""
    return subprocess.run([str(BIN / "python"), "-m", "ops", *args, str(lab.inventory)], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **ENV}).stdout


def test_a_replica_whose_draft_accepts_less_pages_for_that_host_and_resolves(mon):
    lab, cwd, _ = mon
    with Load(f"http://{lab.host('gw-1').ip}:8000", MODEL, KEY, concurrency=4, max_tokens=64) as load:
        wait_for("an accept length over the floor on both replicas",
                 lambda: (a := accept_lengths(lab)) and len(a) == 2 and min(a.values()) > 3.0, 30)
        assert not [n for n in notifications(lab) if n[1]["alertname"] == "SGLangAcceptLengthLow"]
        lowered = at_on(lab, "pro6000-1", f"{CONTROL} --acceptance 0.3")
        try:
            [fired, *_] = wait_for("SGLangAcceptLengthLow firing for pro6000-1 at the webhook", lambda: [
                n[2] for n in notifications(lab) if n[0] == "firing" and n[1]["alertname"] == "SGLangAcceptLengthLow"
                and n[1]["host"] == "pro6000-1" and n[2] > lowered], LOOK_S)
            assert fired - lowered <= ACCEPT_BOUND_S  # from the event, by the hosts' own clocks
            assert "SGLangAcceptLengthLow pro6000-1 (warning)" in ops(lab, cwd, "monitor")
            status = ops(lab, cwd, "status").split("\n")
            row = next(i for i, line in enumerate(status) if line.startswith("pro6000-1 "))
            assert "    firing: SGLangAcceptLengthLow" in status[row + 1:row + 6], status
        finally:
            sh(lab, "pro6000-1", f"{CONTROL} --reset")
        wait_for("SGLangAcceptLengthLow resolved for pro6000-1", lambda: [
            n for n in notifications(lab) if n[0] == "resolved" and n[1]["alertname"] == "SGLangAcceptLengthLow"
            and n[1]["host"] == "pro6000-1"], LOOK_S)
    assert load.report.failed == 0, load.report.failures()
    low = [n for n in notifications(lab) if n[1]["alertname"] == "SGLangAcceptLengthLow"]
    assert {n[1]["host"] for n in low} == {"pro6000-1"}  # the other replica never paged
    assert low[0][1]["gpu_class"] == "pro6000" and low[0][1]["severity"] == "warning"
    print(f"accept length alert at the webhook {fired - lowered:.1f} s after the acceptance fell "
          f"(bound {ACCEPT_BOUND_S:g} s)")


def test_every_dashboard_query_returns_data(mon):
    lab, _, _ = mon
    doc = json.loads(sh(lab, "mon-1", f"cat /etc/prometheus/sglang-fleet/{DASHBOARD}"))
    queries = dashboard_queries(doc)
    assert len(queries) >= 8
    def empty() -> list[str]:
        return [q for q in queries if not prometheus(lab, "/api/v1/query", q)["data"]["result"]]
    with Load(f"http://{lab.host('gw-1').ip}:8000", MODEL, KEY, concurrency=4, max_tokens=32):
        # the rates need their window's samples of the load: as soon as they have them, not a window slept through
        wait_for("every dashboard query with data", lambda: not empty(), LOOK_S)


def test_a_replica_stopped_by_hand_or_whose_metrics_hang_fires_its_down_alert(mon):
    lab, _, _ = mon
    faults = {"pro6000-2": at_on(lab, "pro6000-2", "systemctl stop sglang.service"),
              # serving, but /metrics answers no more: a scrape times out
              "pro6000-1": at_on(lab, "pro6000-1", f"{CONTROL} --metrics off")}
    try:
        for h, at in faults.items():
            [fired, *_] = wait_for(f"SGLangReplicaDown firing for {h}", lambda h=h: [
                n[2] for n in notifications(lab) if n[0] == "firing" and n[1]["alertname"] == "SGLangReplicaDown"
                and n[1]["host"] == h and n[2] > at], LOOK_S)
            assert fired - at <= DOWN_BOUND_S, (h, fired - at)
    finally:
        sh(lab, "pro6000-2", "systemctl start sglang.service")
        sh(lab, "pro6000-1", f"{CONTROL} --reset")
    for h in ("pro6000-2", "pro6000-1"):
        wait_for(f"SGLangReplicaDown resolved for {h}", lambda h=h: [
            n for n in notifications(lab) if n[0] == "resolved" and n[1]["alertname"] == "SGLangReplicaDown"
            and n[1]["host"] == h and n[2] > faults[h]], LOOK_S + RESTART_S)


def test_a_rolling_change_behind_smg_pages_no_one_and_leaves_no_silence(mon, tmp_path):
    lab, _, _ = mon
    before = quiet_alerts(lab)
    cwd = workdir(tmp_path, monitoring=MONITORING, pro6000='speculative = {**speculative, "block_size": 8}')
    with Load(f"http://{lab.host('gw-1').ip}:8000", MODEL, KEY, concurrency=4, max_tokens=32) as load:
        run = deploy(lab, cwd, env=ENV)
        ended = time.time()
        assert run.returncode == 0, run.out
        quiet_since(lab, ended)  # what the turns could have paged is known (no window slept through)
    assert notifications(lab)[before:] == []  # no page
    assert load.report.failed == 0, load.report.failures()
    for h in ("pro6000-1", "pro6000-2"):
        unit = sh(lab, h, "cat /etc/systemd/system/sglang.service")
        assert unit.split("--speculative-dflash-block-size", 1)[1].split()[0] == "8"
    assert run.out.count("silenced on mon-1 for its turn") >= 2, run.out
    made = no_silence_left(lab, ended)  # each ends once its alerts have resolved after its turn
    assert {m["value"] for s in made for m in s["matchers"] if m["name"] == "host"} == {"pro6000-1", "pro6000-2"}


def test_without_the_password_no_one_makes_a_silence_and_no_process_shows_a_secret(mon):
    lab, _, _ = mon
    before = {s["id"] for s in silences(lab)}
    body = json.dumps({"matchers": [{"name": "host", "value": "pro6000-1", "isRegex": False, "isEqual": True}],
                       "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z", "createdBy": "intruder",
                       "comment": "mute the fleet"})
    mon_ip = lab.host("mon-1").ip
    for auth in ("", "-u sglang-fleet:not-the-password "):  # from the gateway host, over the lab's network
        said = sh(lab, "gw-1", f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 {auth}-X POST "
                               f"-H 'Content-Type: application/json' -d {shlex.quote(body)} "
                               f"http://{mon_ip}:9093/api/v2/silences")
        assert said == "401", (auth, said)
        said = sh(lab, "gw-1", f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 {auth}"
                               f"http://{mon_ip}:9090/api/v1/alerts")
        assert said == "401", (auth, said)
    assert {s["id"] for s in silences(lab)} == before and not [s for s in silences(lab) if s["createdBy"] == "intruder"]

    args = sh(lab, "mon-1", "ps -e -ww -o args=")
    assert "--web.config.file=" in args  # both run with it
    [password] = MONITORING_ENV.values()
    assert password not in args and TOKEN not in args
    assert TOKEN in sh(lab, "mon-1", f"cat {LIVE}/{ALERTMANAGER_CONFIG}")  # where it is: a 0600 file
    files = [*SECRET_OWNERS, f"{LIVE}/{ALERTMANAGER_CONFIG}"]
    modes = sh(lab, "mon-1", f"stat -L -c '%n %a %U' {' '.join(files)}").splitlines()
    assert modes == [f"{path} 600 {SECRET_OWNERS.get(path, 'prometheus')}" for path in files]
    verify = subprocess.run([str(BIN / "pytest"), "-q", "-p", "no:cacheprovider",
                             str(REPO / "tests/verify/test_monitoring.py"), "--inventory", str(lab.inventory)],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0 and "4 passed" in verify.stdout, verify.stdout[-3000:]  # make verify, authenticated


def test_with_tls_declared_both_answer_https_only_and_every_call_of_the_deploy_still_reaches_them(mon, tmp_path):
    """Last: it leaves mon-1 on HTTPS (the helpers above speak HTTP)."""
    lab, _, _ = mon
    name, d = "mon-1.sglmon.lab", "/etc/prometheus/tls"
    assert sh(lab, "mon-1", f"install -d -m 0755 {d} && cd {d} && openssl req -x509 -newkey ec -pkeyopt "
                            f"ec_paramgen_curve:P-256 -nodes -subj /CN={name} -addext subjectAltName=DNS:{name} "
                            "-days 2 -keyout key.pem -out cert.pem 2>/dev/null && chown prometheus: key.pem && "
                            "chmod 0600 key.pem && echo made") == "made"  # as a PKI would have put them there
    tls = {"cert_file": f"{d}/cert.pem", "key_file": f"{d}/key.pem", "name": name, "ca_file": f"{d}/cert.pem"}
    cwd = workdir(tmp_path, monitoring=f"{MONITORING}\nmonitoring = {{**monitoring, 'tls': {tls!r}}}")
    run = deploy(lab, cwd, env=ENV)
    assert run.returncode == 0, run.out
    assert "OK" in summary_row(run.out, "mon-1"), run.out  # ready, read over HTTPS with the password

    mon_ip = lab.host("mon-1").ip
    for port in (9090, 9093):
        plain = sh(lab, "gw-1", f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 http://{mon_ip}:{port}/")
        assert plain in ("000", "400"), plain  # Go's TLS server answers plain HTTP with 400, nothing else
        said = sh(lab, "gw-1", f"curl -sk -o /dev/null -w '%{{http_code}}' --max-time 5 https://{mon_ip}:{port}/")
        assert said == "401", said
    # Prometheus' own calls verify the certificate's name and authenticate: both its own targets up
    wait_for("Prometheus scraping itself and Alertmanager over HTTPS", lambda: {
        t["labels"]["job"] for t in json.loads(sh(lab, "mon-1", f"{MON_CURL} -s --max-time 5 "
                                                              f"'https://{name}:9090/api/v1/targets?state=active'"))[
            "data"]["activeTargets"] if t["health"] == "up"} >= {"prometheus", "alertmanager", "sglang"}, LOOK_S)
    shown = ops(lab, cwd, "monitor")
    assert f"Prometheus https://{name}:9090/alerts" in shown and "scraped: " in shown, shown
