"""Where features meet, on one lab: three PRO 6000 replicas and two A6000 replicas behind one smg
(gw-1 routes both classes), the lab's mirror (package index and model hub), and mon-1 (Debian's
Prometheus and Alertmanager, installed by the same deploy, scraping both classes).

1. A controller with an empty cache (no pip wheel, no hub client wheels, no smg wheels) runs the
   first deploy of everything at once: an engine declared for the class of three, the A6000s'
   weights by revision, the gateway. The run ends (the wheels' lock used to block pyinfra's one
   process for good), every PRO 6000 on the new engine, every A6000 on the fetched revision,
   smg routing both; each wheel downloaded once.
2. Both classes change in one run under load on both models through the gateway: a sampler on
   gw-1 never sees a replica listed in smg's discovery file while its server is down (one gateway
   object writes the file for both classes), and not one request fails; every turn of both classes is
   silenced on mon-1, no notification reaches its webhook, and no silence is left active.
3. One served model on both classes, one replica of it each (the others stopped), both changing in one run under
   load on that model through smg: the two canaries start together and each saw the other ready in smg; the
   second finds its peer drained on gw-1 (fleet/turns/drains.py) and waits for it, so the model always has a replica
   and not one request fails (it was: both left, smg answered 503 no_available_workers then 404).
"""

from __future__ import annotations

import shlex
import time

import pytest
from e2e import deploy, health, monitoring_overrides, no_silence_left, notifications, prometheus, quiet_alerts, \
    quiet_since, sh, summary_row, wait_for, workdir

from fleet.turns import drains
from fleet.gateway.smg import parse_workers
from fleet.core.layout import env_file, gateway_auth_header_file, gateway_discovery_file
from lab import hf
from ops.loadgen import Load

PRO = [f"pro6000-{i}" for i in (1, 2, 3)]
A6K = ["a6000-1", "a6000-2"]
HOST = 'load_seconds = 1\nengine_import_seconds = 1\nworkloads = ["dflash-train"]\npreinstalled = {}\n'
LAB = ('[lab]\nname = "meetlab"\nsubnet = "10.209.0.0/24"\n\n[[hosts]]\nname = "mirror-1"\nrole = "mirror"\n\n'
       '[[hosts]]\nname = "gw-1"\ngroup = "gateway"\nrole = "gateway"\n\n'
       '[[hosts]]\nname = "mon-1"\ngroup = "monitoring"\nrole = "monitoring"\n\n'
       + "".join(f'[[hosts]]\nname = "{h}"\ngroup = "pro6000"\ngpu_model = "NVIDIA RTX PRO 6000 Blackwell Workstation '
                 f'Edition"\ngpu_count = 1\ngpu_memory_mib = 97887\n{HOST}\n' for h in PRO)
       + "".join(f'[[hosts]]\nname = "{h}"\ngroup = "a6000"\ngpu_model = "NVIDIA RTX A6000"\ngpu_count = 2\n'
                 f'gpu_memory_mib = 49140\n{HOST}\n' for h in A6K))
KEY = "meet-e2e-key-0123456789"
ENV = {"SGLANG_FLEET_GATEWAY_KEY": KEY}
FAST = ('readiness = {"load_timeout_s": 30, "poll_interval_s": 0.25, "progress_every_s": 5}\n'
        'workloads = ["dflash-train.service"]')
MODELS = {"pro6000": "qwen3.6-27b", "a6000": "qwen3-8b"}


def pro6000(index: str, more: str = "") -> str:
    """The class of three: its SGLang declared (installed by the deploy), not the hand-made launcher."""
    return ('service = {k: v for k, v in service.items() if k != "launcher"}\n'
            f'engine = {{"sglang": "sglang==0.5.23", "index_url": {index!r}, "disk_mib": 1}}\n{FAST}\n{more}')


def a6000(endpoint: str, target: str, draft: str, more: str = "") -> str:
    """Target and draft by repository and commit, from the lab's hub."""
    return ('service = {k: v for k, v in service.items() if k != "model_path"}\n'
            f'service["model"] = {{"repo": "{hf.TARGET}", "revision": "{target}"}}\n'
            f'speculative = {{"algorithm": "DFLASH", "draft_model": {{"repo": "{hf.DRAFT}", "revision": "{draft}"}}, '
            f'"block_size": 16}}\nhub = {{"endpoint": {endpoint!r}, "disk_margin_mib": 0}}\n{FAST}\n{more}')


GATEWAY = 'gateway = {**gateway, "routes": ["pro6000", "a6000"], "health_check_interval_s": 1}'
MONITORING = monitoring_overrides({"pro6000": 3.0, "a6000": 3.0})


@pytest.fixture(scope="module")
def meet(lab_manager, tmp_path_factory):
    lab = lab_manager.ensure(LAB, fresh=True)
    tmp = tmp_path_factory.mktemp("meet")
    return lab, tmp, {"index": lab.index_url(), "endpoint": lab.hf_endpoint(),
                      "target": lab.hf_revisions(hf.TARGET)[0], "draft": lab.hf_revisions(hf.DRAFT)[0]}


def argv(lab, host: str) -> str:
    return sh(lab, host, "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline")


def test_a_cold_controller_deploys_an_engine_weights_and_a_gateway_to_several_hosts_at_once(meet, tmp_path):
    lab, tmp, m = meet
    cache = tmp_path / "empty-cache"  # no wheel of any kind
    cwd = workdir(tmp / "cold", pro6000=pro6000(m["index"]), a6000=a6000(m["endpoint"], m["target"], m["draft"]),
                  gateway=GATEWAY, monitoring=MONITORING)
    run = deploy(lab, cwd, env={**ENV, "SGLANG_FLEET_CACHE": str(cache)})
    assert run.returncode == 0, run.out[-6000:]
    for h in PRO:
        assert " OK " in summary_row(run.out, h) and "install engine" in summary_row(run.out, h), run.out
        assert health(lab, h) == "200" and "/opt/sglang-fleet/engines/sglang-0.5.23-" in argv(lab, h)
    for h in A6K:
        assert " OK " in summary_row(run.out, h) and f"fetch {hf.TARGET}@{m['target'][:12]}" in summary_row(run.out, h)
        assert f"/opt/sglang-fleet/models/{hf.TARGET}/{m['target']} " in argv(lab, h)
    assert health(lab, "gw-1", 8000) == "200"
    listed = sh(lab, "gw-1", f"cat {gateway_discovery_file('smg')}")
    assert all(f"{lab.host(h).ip}:30000" in listed for h in PRO + A6K), listed
    # each wheel set downloaded once into the cache, whichever host wanted it first
    assert run.out.count("Downloading pip==") == 1, run.out
    done = sorted(p.parent.name for p in cache.rglob("complete"))
    assert any(d.startswith("pip-") for d in done) and any(d.startswith("smg-") for d in done), done
    assert any(d.startswith("huggingface_hub-") for d in done), done
    # mon-1 installed by the same run, scraping both classes' replicas and smg
    assert " OK " in summary_row(run.out, "mon-1"), run.out
    wanted = {("sglang", h) for h in PRO + A6K} | {("smg", "gw-1")}
    wait_for("every replica and smg scraped", lambda: wanted <= {
        (t["labels"]["job"], t["labels"].get("host")) for t in
        prometheus(lab, "/api/v1/targets?state=active")["data"]["activeTargets"] if t["health"] == "up"}, 30)


# On gw-1, every 0.2 s: the time, the replicas' addresses smg's discovery file lists, and each replica's /health.
def sampler(lab) -> str:
    curls = " ".join(f"{lab.host(h).ip}=$(curl -s -o /dev/null -w '%{{http_code}}' --max-time 1 "
                     f"http://{lab.host(h).ip}:30000/health)" for h in PRO + A6K)
    listed = f"$(grep -o '[0-9.]*:30000' {gateway_discovery_file('smg')} | tr '\\n' ,)"
    return f"while :; do printf '%s %s %s\\n' \"$(date +%s.%N)\" \"{listed}\" \"{curls}\"; sleep 0.2; done"


def test_two_classes_behind_one_gateway_change_in_one_run_and_no_replica_is_listed_while_down(meet, tmp_path):
    lab, tmp, m = meet
    change = 'service = {**service, "environment": {"LAB_MEET": "2"}}'
    cwd = workdir(tmp / "both", pro6000=pro6000(m["index"], change),
                  a6000=a6000(m["endpoint"], m["target"], m["draft"], change), gateway=GATEWAY, monitoring=MONITORING)
    before = quiet_alerts(lab)
    pid = sh(lab, "gw-1", f"setsid sh -c {shlex.quote(sampler(lab))} > /tmp/meet-samples 2>&1 < /dev/null & echo $!")
    url = f"http://{lab.host('gw-1').ip}:8000"
    try:
        with Load(url, MODELS["pro6000"], KEY, concurrency=4, max_tokens=32) as pro_load, \
                Load(url, MODELS["a6000"], KEY, concurrency=4, max_tokens=32) as a6k_load:
            for load in (pro_load, a6k_load):  # steady state first
                load.wait_completed(8, 120)
            run = deploy(lab, cwd, env=ENV)
            ended = time.time()
            quiet_since(lab, ended)  # what the turns could have paged is known (no window slept through)
    finally:
        sh(lab, "gw-1", f"kill {int(pid)}")
    assert run.returncode == 0, run.out[-6000:]
    for h in PRO + A6K:
        assert " OK " in summary_row(run.out, h), run.out
        assert 'LAB_MEET="2"' in sh(lab, h, f"cat {env_file('sglang')}")
    for load in (pro_load, a6k_load):
        assert load.report.failed == 0, load.report.failures()
        assert load.report.total > 10, load.report.summary()
    ips = {lab.host(h).ip: h for h in PRO + A6K}
    samples, down_seen = sh(lab, "gw-1", "cat /tmp/meet-samples").splitlines(), set()
    assert len(samples) > 20
    for line in samples:
        t, listed, *healths = line.split(" ")
        for pair in healths:
            ip, code = pair.split("=")
            if code != "200":
                down_seen.add(ips[ip])
                assert f"{ip}:30000" not in listed.split(","), (t, ips[ip], "listed while down", line)
    assert down_seen == set(PRO + A6K), down_seen  # every replica was restarted, and seen down
    assert notifications(lab)[before:] == []  # both classes rolled, no page
    made = no_silence_left(lab, ended)  # each ends once its alerts have resolved after its turn
    assert {m["value"] for s in made for m in s["matchers"] if m["name"] == "host"} >= set(PRO + A6K)


def limits(*hosts: str) -> list[str]:
    return [a for h in hosts for a in ("--limit", h)]


def workers(lab) -> dict[str, str]:
    """smg's /workers on gw-1: url -> status."""
    return parse_workers(sh(lab, "gw-1", f"curl -s --max-time 5 -H @{gateway_auth_header_file('smg')} "
                                         "http://127.0.0.1:8000/workers"))


def test_one_model_on_two_classes_never_loses_its_last_replica_when_both_change_at_once(meet, tmp_path):
    lab, tmp, m = meet
    model = MODELS["pro6000"]
    change = 'service = {**service, "environment": {"LAB_MEET": "3"}}'
    same = f'service = {{**service, "served_model_name": "{model}"}}'  # the A6000s serve it too
    cwd = workdir(tmp / "one-model", pro6000=pro6000(m["index"], change),
                  a6000=a6000(m["endpoint"], m["target"], m["draft"], f"{change}\n{same}"), gateway=GATEWAY,
                  monitoring=MONITORING)
    # one replica of the model each: a6000-1 first serves it (an earlier run), then the others stop
    first = deploy(lab, cwd, *limits("a6000-1", "gw-1", "mon-1"), env=ENV)
    assert first.returncode == 0 and " OK " in summary_row(first.out, "a6000-1"), first.out[-6000:]
    for h in ("pro6000-2", "pro6000-3", "a6000-2"):
        sh(lab, h, "systemctl stop sglang.service")
    url = f"http://{lab.host('gw-1').ip}:8000"
    ips = {lab.host(h).ip for h in ("pro6000-1", "a6000-1")}
    wait_for("smg routing the model to pro6000-1 and a6000-1 only", lambda: {
        u.split("//")[1].split(":")[0] for u, s in workers(lab).items() if s == "ready"} == ips, 120)
    change = 'service = {**service, "environment": {"LAB_MEET": "4"}}'
    cwd = workdir(tmp / "one-model-2", pro6000=pro6000(m["index"], change),
                  a6000=a6000(m["endpoint"], m["target"], m["draft"], f"{change}\n{same}"), gateway=GATEWAY,
                  monitoring=MONITORING)
    with Load(url, model, KEY, concurrency=4, max_tokens=32) as load:
        load.wait_completed(8, 120)
        run = deploy(lab, cwd, *limits("pro6000-1", "a6000-1", "gw-1", "mon-1"), env=ENV)
    assert run.returncode == 0, run.out[-6000:]
    for h in ("pro6000-1", "a6000-1"):
        assert " OK " in summary_row(run.out, h), run.out
        assert 'LAB_MEET="4"' in sh(lab, h, f"cat {env_file('sglang')}")
    assert load.report.failed == 0, load.report.failures()
    assert load.report.total > 10, load.report.summary()
    assert sh(lab, "gw-1", f"cat {drains.state_file('smg')}").replace(" ", "") == '{"drains":{},"version":1}'
