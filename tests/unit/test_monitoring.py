"""The monitoring spec and what it generates (fleet/monitoring/config.py), no hosts: every generated file through
Debian's promtool and amtool (tools/debs.sh takes them out of the packages, once, into the cache), and
`promtool test rules` for every alert: it fires on its input series, and stays quiet on a normal one,
including a replica that restarts (a rollout's turn) inside the alert's `for:`."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import bcrypt
import pytest
from pydantic import ValidationError

from fleet.spec.inventory import check_inventory
from fleet.spec.load import SpecError, load_class_specs, load_monitoring
from fleet.monitoring.config import bundle, bundle_id, dashboard_queries
from fleet.monitoring.host import CURL_CONFIG, PACKAGES, PASSWORD_FILE, UNITS, WEB_CONFIG, MonitoringHost, \
    bundle_changes, defaults_files, firing, secret_files
from fleet.monitoring.models import CONFIG, DASHBOARD, Monitoring, Receiver
from fleet.monitoring.rules import ACCEPT_LENGTH, accept_length_floor, accept_length_max, floor_problems, floors, \
    gateway_target, replica_target, tuned_accept_length
from fleet.monitoring.views import describe_monitor
from fleet.rollout.status import HostStatus, judge_monitoring, table, with_alerts
from fleet.core.wire import Unreadable

REPO = Path(__file__).resolve().parents[2]
GROUP_DATA = REPO / "group_data"
CLASSES = load_class_specs(GROUP_DATA)
MON = Monitoring(alerts={"accept_length_floor": {"pro6000": 3.0}})
TARGETS = [replica_target("pro6000-1", "10.0.0.1", "pro6000", CLASSES["pro6000"]),
           replica_target("pro6000-2", "10.0.0.2", "pro6000", CLASSES["pro6000"]),
           replica_target("a6000-1", "10.0.0.3", "a6000", CLASSES["a6000"]),
           gateway_target("gw-1", "10.0.0.9", "gateway", 29000)]


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("monitoring")
    for path, text in bundle(MON, TARGETS, CLASSES, floors(MON, CLASSES, d / "no-tuning"), ["gateway"]).items():
        (d / path).parent.mkdir(parents=True, exist_ok=True)
        (d / path).write_text(text)
    return d


def promtool(tools: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(tools / "promtool"), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


# --- the spec ------------------------------------------------------------------------------------

def test_the_repos_monitoring_file_is_valid():
    mons = load_monitoring(GROUP_DATA, CLASSES)
    assert mons["monitoring"].alerts.accept_length_floor == {"pro6000": 3.0}


@pytest.mark.parametrize("data, words", [
    ({"rate_window_s": 30, "scrape_interval_s": 15}, "under 4 scrape intervals"),
    ({"prometheus_port": 9093}, "expected two ports"),
    ({"receivers": [{"name": "a", "webhook_url": "http://h/x"}, {"name": "a", "webhook_url": "http://h/y"}]},
     "a name used twice"),
    ({"receivers": [{"name": "a", "webhook_url": "https://h/x?token=s3cret"}]}, "query"),
    ({"receivers": [{"name": "a", "webhook_url": "https://u:p@h/x"}]}, "credentials"),
    ({"receivers": [{"name": "a b", "webhook_url": "https://h/x"}]}, "letters, digits"),
    ({"alerts": {"accept_length_fraction": 0}}, "greater than or equal to 0.05"),
    ({"scrape_interval_s": "15"}, "integer"),
    ({"retension_days": 15}, "Extra inputs"),
])
def test_bad_monitoring_tables_are_refused(data, words):
    with pytest.raises(ValidationError, match=words):
        Monitoring(**data)


def amtool_accepts(tools: Path, tmp_path: Path, mon: Monitoring) -> subprocess.CompletedProcess:
    path = tmp_path / "alertmanager.json"
    path.write_text(bundle(mon, TARGETS, CLASSES, {}, [])["alertmanager.json"], encoding="utf-8")
    return subprocess.run([str(tools / "amtool"), "check-config", str(path)], capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("name, url, refused", [
    ("none", "https://h.example/x", "a receiver name other than 'none'"),
    # a port Python's URL parser refuses too: not an http(s) URL at all (fleet.spec.names.http_url)
    ("chat", "https://h.example:abc/x", "an http(s) URL of a webhook"),
    ("chat", "https://h.example:99999/x", "an http(s) URL of a webhook"),
    ("chat", "https://h.example:0/x", "an http(s) URL of a webhook"),
    ("chat", "https://h.example:\u00b2/x", "an http(s) URL of a webhook"),
    ("chat", "https://h.example:/x", "found ''"),
    ("chat", "https://h.example/a%zz", "every % starts an escape of two hex digits"),
    ("chat", "https://h.example/a%2", "every % starts an escape"),
    ("chat", "https://h.example/\U0001f680/hook", ""),  # outside the BMP: written as UTF-8, read as it is
    ("chat", "https://[fd00::5]:9099/hook%2Fx", ""),
    ("chat", "http://10.0.0.5:9099/alerts", ""),
])
def test_receivers_are_accepted_only_as_amtool_reads_them(tools, tmp_path, name, url, refused):
    """What make check accepts, amtool accepts on the host; what amtool would refuse, make check names first."""
    try:
        mon = Monitoring(receivers=[{"name": name, "webhook_url": url}])
    except ValidationError as e:
        assert refused and refused in str(e), str(e)
        return
    assert not refused, f"accepted: {url}"
    out = amtool_accepts(tools, tmp_path, mon)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_refused_receivers_are_those_amtool_refuses(tools, tmp_path):
    """The rules above are amtool's own: the same receivers, let past the spec, fail amtool's check."""
    for name, url in (("none", "https://h.example/x"), ("chat", "https://h.example:abc/x"),
                      ("chat", "https://h.example/a%zz")):
        mon = Monitoring.model_construct(**{**Monitoring().__dict__, "receivers": [
            Receiver.model_construct(name=name, webhook_url=url, send_resolved=True)]})
        assert amtool_accepts(tools, tmp_path, mon).returncode != 0, url


def test_names_outside_the_bmp_are_written_as_utf8_and_promtool_and_amtool_take_them(tools, tmp_path):
    spec = CLASSES["pro6000"].model_validate({**CLASSES["pro6000"].model_dump(exclude_none=True), "service": {
        **CLASSES["pro6000"].service.model_dump(exclude_none=True), "served_model_name": "qwen-\U0001f680"}})
    classes = {**CLASSES, "pro6000": spec}
    targets = [replica_target("gpu-\U0001f525", "10.0.0.1", "pro6000", spec),
               gateway_target("gw-\U0001f525", "10.0.0.9", "gateway", 29000)]
    mon = Monitoring(receivers=[{"name": "chat", "webhook_url": "https://h.example/\U0001f680"}],
                     alerts={"accept_length_floor": {"pro6000": 3.0}})
    for path, text in bundle(mon, targets, classes, floors(mon, classes, tmp_path / "none"), ["gateway"]).items():
        assert "\\ud83d" not in text
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    assert "qwen-\U0001f680" in (tmp_path / "prometheus.json").read_text(encoding="utf-8")
    out = promtool(tools, "check", "config", "prometheus.json", cwd=tmp_path)
    assert out.returncode == 0 and "SUCCESS: 2 rule files found" in out.stdout, out.stdout + out.stderr
    out = subprocess.run([str(tools / "amtool"), "check-config", str(tmp_path / "alertmanager.json")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_sglang_series_keep_sglangs_own_names_whatever_the_exposition_format():
    """The real SGLang 0.5.23 answers Prometheus' OpenMetrics request with `sglang_...` sample names (seen in the
    lab): the sglang job puts them back to `sglang:...`, the names of the rules; nothing else is renamed."""
    jobs = {j["job_name"]: j for j in json.loads(bundle(MON, TARGETS, CLASSES, {}, ["gateway"])[CONFIG])[
        "scrape_configs"]}
    assert all("metric_relabel_configs" not in jobs[j] for j in ("smg", "prometheus", "alertmanager"))
    [rule] = jobs["sglang"]["metric_relabel_configs"]
    assert rule["source_labels"] == ["__name__"] and rule["target_label"] == "__name__"

    def relabelled(name: str) -> str:  # as Prometheus applies it: the regex anchored, $1 its group
        m = re.fullmatch(rule["regex"], name)
        return rule["replacement"].replace("$1", m.group(1)) if m else name
    assert relabelled("sglang_generation_tokens_total") == "sglang:generation_tokens_total"
    assert relabelled("sglang_time_to_first_token_seconds_bucket") == "sglang:time_to_first_token_seconds_bucket"
    assert [relabelled(n) for n in ("sglang:num_running_reqs", "up", "scrape_duration_seconds")] == [
        "sglang:num_running_reqs", "up", "scrape_duration_seconds"]


def test_a_broken_monitoring_file_names_the_file_field_and_value(tmp_path):
    g = tmp_path / "group_data"
    g.mkdir()
    (g / "mon.py").write_text('monitoring = {"scrape_interval_s": 0, "alerts": {"accept_length_floor": {"nope": 2.0}}}\n')
    with pytest.raises(SpecError) as e:
        load_monitoring(g, CLASSES)
    text = "\n".join(e.value.problems)
    assert "mon.py" in text and "monitoring.scrape_interval_s" in text and "0" in text
    (g / "mon.py").write_text('monitoring = {"alerts": {"accept_length_floor": {"nope": 2.0}}}\n')
    with pytest.raises(SpecError, match="'nope' is not a GPU class"):
        load_monitoring(g, CLASSES)


@pytest.mark.parametrize("floor, refused", [(-1, True), (0, True), (1, True), (1e300, True), (17.01, True),
                                           (1.01, False), (17, False)])
def test_a_floor_is_an_accept_length_the_class_can_have(tmp_path, floor, refused):
    """pro6000 is DFLASH, block size 16: a verify step gives 1 to 17 tokens. Under or at 1 the alert never fires,
    over 17 it always does."""
    g = tmp_path / "group_data"
    g.mkdir()
    (g / "mon.py").write_text(f'monitoring = {{"alerts": {{"accept_length_floor": {{"pro6000": {floor!r}}}}}}}\n')
    if not refused:
        assert load_monitoring(g, CLASSES)["mon"].alerts.accept_length_floor == {"pro6000": floor}
        return
    with pytest.raises(SpecError) as e:
        load_monitoring(g, CLASSES)
    assert e.value.problems == [f"group_data/mon.py: monitoring.alerts.accept_length_floor.pro6000: {floor:g}: "
                                "expected above 1 and at most 17 (the most one verify step of DFLASH gives), else "
                                "the alert never or always fires"]


def test_the_most_a_verify_step_gives_follows_the_algorithm():
    def spec(**speculative):
        return CLASSES["pro6000"].model_validate({**CLASSES["pro6000"].model_dump(exclude_none=True),
                                                  "speculative": speculative})
    assert accept_length_max(spec(algorithm="DFLASH", block_size=8, draft_model_path="/models/draft")) == 9
    assert accept_length_max(spec(algorithm="NGRAM")) == 13 and accept_length_max(spec(algorithm="NGRAM",
                                                                                       num_draft_tokens=4)) == 5
    assert accept_length_max(spec(algorithm="EAGLE", num_steps=3, topk=1)) == 4
    assert accept_length_max(spec(algorithm="EAGLE")) == 65
    none = spec(algorithm="none")
    classes = {**CLASSES, "pro6000": none}
    (p,) = floor_problems("mon", Monitoring(alerts={"accept_length_floor": {"pro6000": 2.0}}), classes)
    assert p == ("group_data/mon.py: monitoring.alerts.accept_length_floor.pro6000: 2 for a class without "
                 "speculative decoding: expected no floor (its accept length is never measured)")
    # a tuning record's figure no verify step can give is no figure, and a floor at 1 or under is no floor
    declared = CLASSES["pro6000"].speculative.block_size
    assert accept_length_floor(Monitoring(), "pro6000", CLASSES["pro6000"], record(declared, 1e300)) is None
    assert accept_length_floor(Monitoring(), "pro6000", CLASSES["pro6000"], record(declared, 1.2)) is None


def test_the_inventory_has_one_monitoring_host_and_scrapes_no_loopback_class():
    groups = {"pro6000": ["p1"], "monitoring": ["m1", "m2"], "h200": ["h1"]}
    with pytest.raises(SpecError) as e:
        check_inventory(groups, {"p1": {}, "m1": {}, "m2": {}, "h1": {}}, GROUP_DATA)
    text = "\n".join(e.value.problems)
    assert "monitoring group monitoring has 2 hosts (m1, m2); expected one" in text
    # h200 binds 127.0.0.1 (group_data/h200.py): Prometheus on another host cannot scrape it
    assert "group_data/h200.py: service.host: '127.0.0.1'" in text
    assert check_inventory({"pro6000": ["p1"], "monitoring": ["m1"]}, {"p1": {}, "m1": {}}, GROUP_DATA)


def test_a_replica_cannot_be_the_monitoring_host():
    with pytest.raises(SpecError, match="host p1 is filed under GPU class pro6000 and monitoring group monitoring"):
        check_inventory({"pro6000": ["p1"], "monitoring": ["p1"]}, {"p1": {}}, GROUP_DATA)


# --- the floor -----------------------------------------------------------------------------------

def record(block_size: int, accept: float, winner: int = 4) -> dict:
    return {"objective": {"concurrency": 32}, "winner": {"block_size": winner},
            "candidates": [{"candidate": {"block_size": b}, "levels": [
                {"concurrency": 1, "accept_length": 9.9}, {"concurrency": 32, "accept_length": a}]}
                for b, a in ((block_size, accept), (winner, 2.0))]}


def test_the_floor_is_declared_or_a_fraction_of_the_tuned_figure_at_the_tuned_concurrency():
    spec = CLASSES["pro6000"]  # DFLASH, block size 16
    declared = spec.speculative.block_size
    assert accept_length_floor(MON, "pro6000", spec, record(declared, 5.0)) == 3.0  # declared wins
    mon = Monitoring()
    assert tuned_accept_length(record(declared, 5.0), spec) == 5.0  # the declared block size's, at 32
    assert accept_length_floor(mon, "pro6000", spec, record(declared, 5.0)) == 3.5
    assert accept_length_floor(mon, "pro6000", spec, record(99, 5.0)) == 1.4  # not measured: the winner's
    assert accept_length_floor(mon, "pro6000", spec, None) is None
    assert accept_length_floor(mon, "pro6000", spec, {"objective": "garbage"}) is None
    assert accept_length_floor(mon, "pro6000", spec, {"objective": {"concurrency": 32}, "candidates": [7, None]}) is None
    assert accept_length_floor(MON, "pro6000", CLASSES["pro6000"].model_validate(
        {**CLASSES["pro6000"].model_dump(), "speculative": {"algorithm": "none"}}), None) is None


def test_floors_read_tuning_records_and_survive_a_broken_one(tmp_path):
    (tmp_path / "pro6000.json").write_text(json.dumps(record(CLASSES["pro6000"].speculative.block_size, 4.0)))
    (tmp_path / "a6000.json").write_text("{not json")
    got = floors(Monitoring(), CLASSES, tmp_path)
    assert got["pro6000"] == 2.8 and got["a6000"] is None


# --- what is generated ---------------------------------------------------------------------------

def test_every_replica_is_scraped_with_what_the_deploy_declares_of_it(written):
    config = json.loads((written / "prometheus.json").read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    sglang = jobs["sglang"]["static_configs"]
    assert [c["targets"] for c in sglang] == [["10.0.0.1:30000"], ["10.0.0.2:30000"], ["10.0.0.3:30000"]]
    assert sglang[0]["labels"] == {"host": "pro6000-1", "gpu_class": "pro6000", "engine": "as installed",
                                   "served_model": CLASSES["pro6000"].service.served_model_name,
                                   "speculative": "DFLASH"}
    assert jobs["smg"]["static_configs"] == [{"targets": ["10.0.0.9:29000"], "labels": {"host": "gw-1",
                                                                                        "gateway": "gateway"}}]
    assert sorted(p.name for p in (written / "rules").iterdir()) == ["class-a6000.json", "class-pro6000.json",
                                                                     "gateway-gateway.json"]


def test_the_bundle_is_named_by_what_it_holds():
    one = bundle(MON, TARGETS, CLASSES, {}, ["gateway"])
    assert bundle_id(one) == bundle_id(bundle(MON, list(TARGETS), CLASSES, {}, ["gateway"]))
    assert bundle_id(one) != bundle_id(bundle(MON, TARGETS[:2], CLASSES, {}, ["gateway"]))


def test_promtool_and_amtool_accept_everything_generated(tools, written):
    out = promtool(tools, "check", "config", "prometheus.json", cwd=written)
    assert out.returncode == 0, out.stdout + out.stderr
    # the config and each of its three rule files, read and counted
    assert "SUCCESS: 3 rule files found" in out.stdout and "prometheus.json is valid" in out.stdout, out.stdout
    for name in ("class-a6000", "class-pro6000", "gateway-gateway"):
        assert re.search(rf"Checking rules/{name}\.json\n  SUCCESS: [1-9][0-9]* rules found", out.stdout), out.stdout
    out = promtool(tools, "check", "rules", *sorted(str(p) for p in (written / "rules").iterdir()))
    assert out.returncode == 0, out.stdout + out.stderr
    out = subprocess.run([str(tools / "amtool"), "check-config", str(written / "alertmanager.json")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_alertmanager_sends_every_alert_to_every_receiver(tools, tmp_path):
    mon = Monitoring(receivers=[{"name": "oncall", "webhook_url": "http://10.0.0.5:9099/alerts"},
                                {"name": "chat", "webhook_url": "https://chat.fleet.example/hook"}])
    path = tmp_path / "alertmanager.json"
    path.write_text(bundle(mon, TARGETS, CLASSES, {}, [])["alertmanager.json"])
    out = subprocess.run([str(tools / "amtool"), "config", "routes", "test", "--config.file", str(path),
                          "alertname=SGLangAcceptLengthLow", "gpu_class=pro6000"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["oncall,chat"] or sorted(out.stdout.replace(",", " ").split()) == ["chat", "oncall"]


# --- promtool test rules: every alert fires on its input, stays quiet on a normal one ---------------

P = 'job="sglang",gpu_class="pro6000",host="pro6000-1"'
G = 'job="smg",gateway="gateway",host="gw-1"'
G2 = 'job="smg",gateway="gateway",host="gw-2"'


def series(name: str, values: str) -> dict:
    return {"series": name, "values": values}


def accept(tokens_per_step: int, steps: int = 10) -> list[dict]:
    """A replica making `tokens_per_step` tokens per verify step, `steps` steps a second (15 s samples)."""
    return [series(f'sglang:generation_tokens_total{{{P},is_streaming="false"}}', f"0+{15 * steps * tokens_per_step}x100"),
            series(f"sglang:spec_verify_calls_total{{{P}}}", f"0+{15 * steps}x100")]


def fires(alert: str, labels: dict, annotations: dict) -> list[dict]:
    return [{"exp_labels": {"alertname": alert, **labels}, "exp_annotations": annotations}]


HOST = {"gpu_class": "pro6000", "host": "pro6000-1"}
RUNBOOK_DOWN = ("make status ARGS='--limit pro6000-1'; on the host: systemctl status sglang.service, "
                "journalctl -u sglang.service")
CASES = {
    "accept length under the floor": (accept(2), "SGLangAcceptLengthLow", "20m", fires(
        "SGLangAcceptLengthLow", {**HOST, "severity": "warning"},
        {"summary": "pro6000 replica pro6000-1: accept length 2.00 under 3 (DFLASH): the draft pays less than it costs",
         "runbook": "a new target revision, a traffic shift or a draft that no longer fits: compare the target and "
                    "draft revisions with tuning/pro6000.json; make tune CLASS=pro6000 measures again"})),
    "accept length over the floor": (accept(4), "SGLangAcceptLengthLow", "20m", []),
    "accept length of an idle replica (no step: no figure)": (
        [series(f'sglang:generation_tokens_total{{{P},is_streaming="false"}}', "100+0x100"),
         series(f"sglang:spec_verify_calls_total{{{P}}}", "50+0x100")], "SGLangAcceptLengthLow", "20m", []),
    "accept length under the floor for less than its for:": (accept(2), "SGLangAcceptLengthLow", "9m", []),
    "a replica down": ([series(f"up{{{P}}}", "1 1 1 0x40")], "SGLangReplicaDown", "10m", fires(
        "SGLangReplicaDown", {**HOST, "job": "sglang", "severity": "page"},
        {"summary": "pro6000 replica pro6000-1: /metrics does not answer", "runbook": RUNBOOK_DOWN})),
    "a replica restarting in its rollout turn (down 60 s)": (
        [series(f"up{{{P}}}", "1x20 0x4 1x40")], "SGLangReplicaDown", "10m", []),
    "a queue over its bound": ([series(f"sglang:num_queue_reqs{{{P}}}", "100x40")], "SGLangQueueDeep", "10m", fires(
        "SGLangQueueDeep", {**HOST, "severity": "warning"},
        {"summary": "pro6000 replica pro6000-1: 100 requests queued (over 64)",
         "runbook": "more load than the class serves: add replicas or shed load; check the gateway spreads it"})),
    "a short queue": ([series(f"sglang:num_queue_reqs{{{P}}}", "10x40")], "SGLangQueueDeep", "10m", []),
    "time to first token over its bound": (
        [series(f'sglang:time_to_first_token_seconds_bucket{{{P},le="{le}"}}', f"0+{n}x100")
         for le, n in (("1", 0), ("20", 10), ("+Inf", 10))], "SGLangTTFTHigh", "15m", fires(
            "SGLangTTFTHigh", {**HOST, "severity": "warning"},
            {"summary": "pro6000 replica pro6000-1: time to first token p99 19.81 s (over 10 s)",
             "runbook": "long prompts or a queue: see SGLangQueueDeep and the replica's running requests"})),
    "time to first token within its bound": (
        [series(f'sglang:time_to_first_token_seconds_bucket{{{P},le="{le}"}}', f"0+{n}x100")
         for le, n in (("1", 10), ("20", 10), ("+Inf", 10))], "SGLangTTFTHigh", "15m", []),
    "requests running and no token made": (
        [series(f"sglang:num_running_reqs{{{P}}}", "4x100"), *accept(0)], "SGLangThroughputCollapsed", "15m", fires(
            "SGLangThroughputCollapsed", {**HOST, "severity": "page"},
            {"summary": "pro6000 replica pro6000-1: requests run and no token is made",
             "runbook": "a hung scheduler: journalctl -u sglang.service; make rollback HOST=pro6000-1 if it began "
                        "with a change"})),
    "requests running and tokens made": (
        [series(f"sglang:num_running_reqs{{{P}}}", "4x100"), *accept(3)], "SGLangThroughputCollapsed", "15m", []),
    "a replica serving another model than declared": (
        [series(f'sglang:num_running_reqs{{{P},served_model="qwen3.6-27b",model_name="qwen3-8b"}}', "0x40")],
        "SGLangServesOtherThanDeclared", "10m", fires("SGLangServesOtherThanDeclared", {
            **HOST, "job": "sglang", "served_model": "qwen3.6-27b", "model_name": "qwen3-8b", "serves": "qwen3.6-27b",
            "severity": "page"},
            {"summary": "pro6000 replica pro6000-1 serves qwen3-8b, not qwen3.6-27b",
             "runbook": "a unit changed by hand or a deploy not finished: make status ARGS='--limit pro6000-1', "
                        "then make deploy"})),
    "a replica serving the model declared": (
        [series(f'sglang:num_running_reqs{{{P},served_model="qwen3.6-27b",model_name="qwen3.6-27b"}}', "0x40")],
        "SGLangServesOtherThanDeclared", "10m", []),
    "the gateway down": ([series(f"up{{{G}}}", "0x40")], "SmgDown", "5m", fires(
        "SmgDown", {"job": "smg", "gateway": "gateway", "host": "gw-1", "severity": "page"},
        {"summary": "gateway gateway (gw-1): smg's /metrics does not answer, nor on any other host of the group",
         "runbook": "every class it routes is offline: on the host, systemctl status smg.service, journalctl -u "
                    "smg.service"})),
    "the gateway restarting (down 30 s)": ([series(f"up{{{G}}}", "1x10 0x2 1x30")], "SmgDown", "10m", []),
    "one gateway of a pair down: no page": (
        [series(f"up{{{G}}}", "0x40"), series(f"up{{{G2}}}", "1x40")], "SmgDown", "5m", []),
    "one gateway of a pair down: a warning naming it": (
        [series(f"up{{{G}}}", "0x40"), series(f"up{{{G2}}}", "1x40")], "SmgRedundancyLost", "5m", fires(
            "SmgRedundancyLost", {"job": "smg", "gateway": "gateway", "host": "gw-1", "severity": "warning"},
            {"summary": "gateway gateway (gw-1): smg's /metrics does not answer; the others of the group serve",
             "runbook": "one more failure takes every class it routes offline: on the host, systemctl status "
                        "smg.service keepalived.service; make status names the floating address's holder"})),
    "both gateways of a pair down: both page": (
        [series(f"up{{{G}}}", "0x40"), series(f"up{{{G2}}}", "1x4 0x40")], "SmgDown", "5m",
        fires("SmgDown", {"job": "smg", "gateway": "gateway", "host": "gw-1", "severity": "page"},
              {"summary": "gateway gateway (gw-1): smg's /metrics does not answer, nor on any other host of the group",
               "runbook": "every class it routes is offline: on the host, systemctl status smg.service, journalctl "
                          "-u smg.service"})
        + fires("SmgDown", {"job": "smg", "gateway": "gateway", "host": "gw-2", "severity": "page"},
                {"summary": "gateway gateway (gw-2): smg's /metrics does not answer, nor on any other host of the "
                            "group",
                 "runbook": "every class it routes is offline: on the host, systemctl status smg.service, journalctl "
                            "-u smg.service"})),
    "a gateway alone down: no redundancy to lose": ([series(f"up{{{G}}}", "0x40")], "SmgRedundancyLost", "5m", []),
    "a replica unhealthy in smg": (
        [series(f'smg_worker_health{{{G},worker="http://10.0.0.1:30000"}}', "0x40")], "SmgWorkerUnhealthy", "5m",
        fires("SmgWorkerUnhealthy", {"job": "smg", "gateway": "gateway", "host": "gw-1",
                                     "worker": "http://10.0.0.1:30000", "severity": "warning"},
              {"summary": "gateway gateway: smg calls http://10.0.0.1:30000 unhealthy",
               "runbook": "the replica fails smg's health probe: make status; its /health from the gateway host"})),
    "every replica healthy in smg": (
        [series(f'smg_worker_health{{{G},worker="http://10.0.0.1:30000"}}', "1x40")], "SmgWorkerUnhealthy", "5m", []),
}


@pytest.mark.parametrize("case", CASES)
def test_promtool_test_rules(tools, written, tmp_path, case):
    inputs, alert, at, expected = CASES[case]
    rules = [str(written / "rules" / f) for f in ("class-pro6000.json", "gateway-gateway.json")]
    test = {"rule_files": rules, "evaluation_interval": "15s", "tests": [{
        "interval": "15s", "input_series": inputs,
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}]}]}
    path = tmp_path / "test.json"
    path.write_text(json.dumps(test))
    out = promtool(tools, "test", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_generated_has_a_firing_and_a_quiet_case(written):
    alerts = {r["alert"] for f in (written / "rules").iterdir() for g in json.loads(f.read_text())["groups"]
              for r in g["rules"] if "alert" in r}
    firing = {c[1] for c in CASES.values() if c[3]}
    quiet = {c[1] for c in CASES.values() if not c[3]}
    assert alerts == firing == quiet
    records = {r["record"] for g in json.loads((written / "rules/class-pro6000.json").read_text())["groups"]
               for r in g["rules"] if "record" in r}
    assert ACCEPT_LENGTH in records


# --- make status -----------------------------------------------------------------------------------

def alerts_body(*alerts: tuple[str, str, str]) -> str:
    return json.dumps({"status": "success", "data": {"alerts": [
        {"labels": {"alertname": name, "host": host}, "state": state} for name, host, state in alerts]}})


def test_firing_alerts_by_host_and_garbage_refused():
    body = alerts_body(("SGLangAcceptLengthLow", "p1", "firing"), ("SGLangReplicaDown", "p1", "firing"),
                       ("SGLangQueueDeep", "p2", "pending"))
    assert firing(body) == ({"p1": ["SGLangAcceptLengthLow", "SGLangReplicaDown"]}, 0)
    for garbage in ("", "<html>", '{"data": {"alerts": 5}}', "[" * 10000):
        with pytest.raises(Unreadable):
            firing(garbage)
    odd = json.dumps({"data": {"alerts": [None, 7, {"labels": ["alertname", "X"], "state": "firing"},
                                          {"labels": {"alertname": "Y", "host": {"a": 1}}, "state": "firing"},
                                          {"labels": {"alertname": "Z\x1b]0;pwned\x07"}, "state": "firing"}]}})
    assert firing(odd) == ({"-": ["Z\ufffd]0;pwned\ufffd"]}, 4)  # what reads is kept, the rest counted


def test_the_monitoring_row_and_each_hosts_firing_alerts():
    up = MonitoringHost({p: "2.42.0" for p in PACKAGES}, "0" * 16, {}, {u: "active" for u in UNITS})
    row = judge_monitoring("mon-1", "monitoring", up, "200 1\n200 1\n", alerts_body(
        ("SGLangAcceptLengthLow", "p1", "firing")), "0" * 16)
    assert row.verdict == "OK" and row.served_model == "1 alert(s) firing" and row.health == 200
    rows = with_alerts([row, HostStatus("p1"), HostStatus("p2")])
    assert [r.alerts for r in rows] == [[], ["SGLangAcceptLengthLow"], []]
    assert "    firing: SGLangAcceptLengthLow" in table(rows)
    drifted = judge_monitoring("mon-1", "monitoring", up, "200 1 200 1", alerts_body(), "1" * 16)
    assert drifted.verdict == "DRIFT" and "write configuration 1111111111111111" in drifted.drift
    down = judge_monitoring("mon-1", "monitoring", MonitoringHost({p: "" for p in PACKAGES}, "", {}, {}), "", "",
                            "1" * 16)
    assert down.verdict == "UNHEALTHY" and down.reasons[0].startswith("ready: no answer")
    assert any("/api/v1/alerts" in r for r in down.reasons)  # what it answered is said, not a crash


# --- the dashboard ---------------------------------------------------------------------------------

def test_the_dashboard_has_a_row_per_class_and_every_query_parses(tools, written, tmp_path):
    doc = json.loads((written / DASHBOARD).read_text())
    assert [p["title"] for p in doc["panels"] if p["type"] == "row"] == ["a6000", "pro6000"]
    queries = dashboard_queries(doc)
    assert any(ACCEPT_LENGTH in q and 'gpu_class="pro6000"' in q for q in queries)
    assert any("smg_worker_health" in q for q in queries)
    # promtool has no query checker offline: each query as a recording rule is parsed as Prometheus would
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"q:{i}", "expr": q} for i, q in enumerate(queries)]}]}
    (tmp_path / "queries.json").write_text(json.dumps(rules))
    out = promtool(tools, "check", "rules", str(tmp_path / "queries.json"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_make_monitor_says_what_is_scraped_fires_and_is_silenced_and_survives_garbage():
    targets = json.dumps({"data": {"activeTargets": [
        {"labels": {"job": "sglang", "host": "p1"}, "scrapeUrl": "http://10.0.0.1:30000/metrics", "health": "up"},
        {"labels": {"job": "smg", "host": "gw"}, "scrapeUrl": "http://10.0.0.9:29000/metrics", "health": "down",
         "lastError": "connection refused"}]}})
    alerts = json.dumps({"data": {"alerts": [
        {"labels": {"alertname": "SGLangAcceptLengthLow", "host": "p1", "severity": "warning"}, "state": "firing",
         "activeAt": "2026-12-03T10:00:00Z", "annotations": {"summary": "accept length 1.40 under 3"}},
        {"labels": {"alertname": "SmgDown", "host": "gw"}, "state": "pending"}]}})
    silences = json.dumps([{"status": {"state": "active"}, "matchers": [{"name": "host", "value": "p2"}],
                            "endsAt": "2026-12-03T10:10:00Z", "createdBy": "sglang-fleet", "comment": "p2's turn"},
                           {"status": {"state": "expired"}, "matchers": []}])
    text = describe_monitor("mon-1", "http://10.0.0.5:9090/alerts", targets, alerts, silences)
    assert text.splitlines() == [
        "mon-1: Prometheus http://10.0.0.5:9090/alerts",
        "scraped: 2 targets, 1 up",
        "  sglang       p1               http://10.0.0.1:30000/metrics  up",
        "  smg          gw               http://10.0.0.9:29000/metrics  down (connection refused)",
        "firing: 1 (and 1 pending)",
        "  SGLangAcceptLengthLow p1 (warning) since 2026-12-03T10:00:00Z: accept length 1.40 under 3",
        "silenced: 1 active",
        "  host=p2 until 2026-12-03T10:10:00Z by sglang-fleet: p2's turn"]
    broken = describe_monitor("mon-1", "link", "<html>", '{"data": 3}', "").splitlines()
    assert broken[1].startswith("  mon-1: unreadable: Prometheus' targets: not valid JSON")
    assert broken[2] == ("""  mon-1: unreadable: Prometheus' alerts: expected {"data": {"alerts": [...]}}, """
                         """found '{"data": 3}'""")
    assert broken[3].startswith("  mon-1: unreadable: Alertmanager's silences: not valid JSON")


def test_make_monitor_shows_a_target_without_labels_or_with_labels_of_another_shape():
    targets = json.dumps({"data": {"activeTargets": [
        {"scrapeUrl": "http://10.0.0.7:30000/metrics", "health": "up"},
        {"labels": ["job", "sglang"], "scrapeUrl": "http://10.0.0.8:30000/metrics", "health": "down"},
        {"labels": {"job": 3, "host": None}, "health": "up"}, "not an object"]}})
    alerts = json.dumps({"data": {"alerts": [{"state": "firing", "annotations": "a string"}, 7]}})
    silences = json.dumps([{"status": {"state": "active"}, "matchers": [3, {"name": "host"}]}, {"status": "active"}])
    text = describe_monitor("mon-1", "link", targets, alerts, silences).splitlines()
    assert text[1] == "scraped: 3 targets, 2 up; 1 unreadable (expected an object each)"
    assert "  ?            -                http://10.0.0.7:30000/metrics  up" in text
    assert "  ?            -                http://10.0.0.8:30000/metrics  down" in text
    assert "  3            None             ?  up" in text
    assert text[5:] == ["firing: 1; 1 unreadable (expected an object each)", "  ? - (?) since ?: ",
                        "silenced: 1 active", "  ?, host=? until ? by ?: "]


def test_both_ask_for_the_password_and_prometheus_gives_it_from_a_file(tools, tmp_path):
    files = secret_files(MON, "mon-password-0123", "")
    web = json.loads(files[WEB_CONFIG])
    assert list(web) == ["basic_auth_users"]
    assert bcrypt.checkpw(b"mon-password-0123", web["basic_auth_users"]["sglang-fleet"].encode())
    (tmp_path / "web.json").write_text(files[WEB_CONFIG])
    out = promtool(tools, "check", "web-config", str(tmp_path / "web.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert all(f"--web.config.file={WEB_CONFIG}" in text for text in defaults_files(MON).values())
    config = json.loads(bundle(MON, TARGETS, CLASSES, {}, [])["prometheus.json"])
    auth = {"username": "sglang-fleet", "password_file": PASSWORD_FILE}
    assert config["alerting"]["alertmanagers"][0]["basic_auth"] == auth
    assert [j.get("basic_auth") for j in config["scrape_configs"][:2]] == [auth, auth]  # itself and Alertmanager
    assert "mon-password-0123" not in json.dumps(config)


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    """A certificate for `name` and its key (PEM files), as a PKI would have put on the monitoring host."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(key, hashes.SHA256()))
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    return directory / "cert.pem", directory / "key.pem"


def test_with_tls_both_serve_https_and_every_call_verifies_the_certificates_name(tools, tmp_path):
    cert, key = self_signed(tmp_path, "mon.fleet.example")
    mon = Monitoring(tls={"cert_file": str(cert), "key_file": str(key), "name": "mon.fleet.example",
                          "ca_file": str(cert)})
    files = secret_files(mon, "mon-password-0123", "")
    (tmp_path / "web.json").write_text(files[WEB_CONFIG])
    out = promtool(tools, "check", "web-config", str(tmp_path / "web.json"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(files[WEB_CONFIG])["tls_server_config"] == {"cert_file": str(cert), "key_file": str(key)}
    assert files[CURL_CONFIG].splitlines()[1:] == ['resolve = "mon.fleet.example:9090:127.0.0.1"',
                                                   'resolve = "mon.fleet.example:9093:127.0.0.1"',
                                                   f'cacert = "{cert}"']
    assert mon.url(9093, "/api/v2/silences") == "https://mon.fleet.example:9093/api/v2/silences"
    # a restart when TLS comes or goes (both read whether to serve it at start only): their arguments change
    assert [t.count("--web.external-url=https://mon.fleet.example:") for t in defaults_files(mon).values()] == [1, 1]
    assert "--web.external-url" not in "".join(defaults_files(MON).values())
    for path, text in bundle(mon, TARGETS, CLASSES, {}, []).items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    out = promtool(tools, "check", "config", "prometheus.json", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    config = json.loads((tmp_path / "prometheus.json").read_text())
    tls = {"scheme": "https", "tls_config": {"server_name": "mon.fleet.example", "ca_file": str(cert)}}
    calls = [*config["scrape_configs"][:2], config["alerting"]["alertmanagers"][0]]  # Prometheus' own
    assert all(c.items() >= tls.items() for c in calls)
    with pytest.raises(ValidationError, match="without"):
        Monitoring(tls={"cert_file": '/etc/x"y', "key_file": "/k", "name": "m"})


def test_a_new_bundle_says_which_files_it_adds_changes_and_removes():
    files = bundle(MON, TARGETS, CLASSES, {}, ["gateway"])
    live = "\n".join(f"{hashlib.sha1(t.encode()).hexdigest()}  ./{p}" for p, t in files.items()
                     if p != "rules/class-a6000.json")
    live = live.replace(hashlib.sha1(files["prometheus.json"].encode()).hexdigest(), "0" * 40)
    live += f"\n{'1' * 40}  ./rules/class-h200.json\n\x1b[31mgarbage ./../../etc/passwd"
    assert bundle_changes(files, live) == ["rules/class-a6000.json added", "prometheus.json changed",
                                           "rules/class-h200.json removed"]
    assert bundle_changes(files, "") == [f"{p} added" for p in sorted(files)]


def test_the_delivery_bound_adds_up_what_an_alert_waits_for():
    mon = Monitoring(scrape_interval_s=15, evaluation_interval_s=10, rate_window_s=300, group_wait_s=30)
    # a scrape and its timeout (10 s at most), two evaluations, the for:, group_wait; a rate's window and its rule
    assert mon.delivery_bound_s(120) == 15 + 10 + 2 * 10 + 120 + 30
    assert mon.delivery_bound_s(120, windowed=True) == 15 + 10 + 300 + 10 + 2 * 10 + 120 + 30
    lab = Monitoring(scrape_interval_s=1, evaluation_interval_s=1, rate_window_s=5, group_wait_s=1)
    assert lab.delivery_bound_s(2) == 1 + 1 + 2 + 2 + 1
