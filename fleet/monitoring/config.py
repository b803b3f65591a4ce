"""The configuration directory's files (`bundle()`: relative path -> text) and its id: Prometheus' and
Alertmanager's configurations, the rules (rules.py) and the Grafana dashboard, with the webhook URLs read from
their secret sources: generated from the inventory and group_data, plain data in, files out.
tasks/monitoring.py puts the bundle on the host (checked there with promtool and amtool before it goes live).
The files are JSON, which Prometheus and Alertmanager read as the YAML it is a subset of.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from fleet.core import controller
from fleet.rollout.gate import local_address, url_host
from fleet.spec import ClassSpec, SecretSource
from fleet.spec.secrets import SecretError, read_key
from fleet.spec.names import _host, split_http
from fleet.spec.text import TEXT_MAX
from fleet.monitoring.host import PASSWORD_FILE
from fleet.monitoring.models import ALERTMANAGER_CONFIG, CONFIG, DASHBOARD, NO_RECEIVER, RULES_DIR, Monitoring
from fleet.monitoring.rules import ACCEPT_LENGTH, Scraped, _s, class_rules, gateway_rules


def _panel(title: str, exprs: dict[str, str], unit: str, x: int, y: int) -> dict:
    return {"type": "timeseries", "title": title, "datasource": {"type": "prometheus"},
            "gridPos": {"h": 8, "w": 8, "x": x, "y": y}, "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [{"expr": e, "legendFormat": legend, "refId": chr(ord("A") + i)}
                        for i, (legend, e) in enumerate(exprs.items())]}


def dashboard(mon: Monitoring, scraped_classes: list[str], gateways: list[str]) -> dict:
    """One Grafana dashboard for the fleet: a row per class (accept length, tokens/s, time to first token,
    requests running and queued, its gateway's view of its replicas), every query over the rules' series."""
    w = _s(mon.rate_window_s)
    panels, y = [], 0
    for c in scraped_classes:
        sel = f'gpu_class="{c}"'
        panels.append({"type": "row", "title": f"{c}", "collapsed": False, "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                       "panels": []})
        y += 1
        panels += [
            _panel("Accept length (tokens per verify step)", {"{{host}}": f"{ACCEPT_LENGTH}{{{sel}}}"}, "none", 0, y),
            _panel("Generated tokens/s", {"{{host}}": f"sglang_fleet:generation_tokens:rate{{{sel}}}"}, "none", 8, y),
            _panel("Time to first token", {
                f"p{q} {{{{host}}}}": f"histogram_quantile(0.{q}, sum by (host, le) "
                                      f"(rate(sglang:time_to_first_token_seconds_bucket{{{sel}}}[{w}])))"
                for q in (50, 99)}, "s", 16, y)]
        y += 8
        panels += [
            _panel("Requests running and queued", {
                "running {{host}}": f"sum by (host) (sglang:num_running_reqs{{{sel}}})",
                "queued {{host}}": f"sum by (host) (sglang:num_queue_reqs{{{sel}}})"}, "none", 0, y),
            _panel("Replicas scraped (up)", {"{{host}}": f'up{{job="sglang",{sel}}}'}, "none", 8, y)]
        if gateways:
            panels.append(_panel("Replicas healthy in smg", {
                "{{gateway}}": f'sum by (gateway) (smg_worker_health{{job="smg",gateway=~"{"|".join(gateways)}"}})'},
                "none", 16, y))
        y += 8
    return {"title": "SGLang fleet", "uid": "sglang-fleet", "schemaVersion": 39, "editable": True,
            "time": {"from": "now-6h", "to": "now"}, "refresh": "30s", "tags": ["sglang", "speculative-decoding"],
            "panels": panels}


def dashboard_queries(doc: dict) -> list[str]:
    """Every query of a dashboard (the lab's test runs each against Prometheus)."""
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


# SGLang 0.5.23's /metrics (prometheus_client 0.26) answers Prometheus' request for OpenMetrics with its sample
# names escaped, `sglang_generation_tokens_total` (content type `...; escaping=underscores`), where its plain text
# says `sglang:generation_tokens_total` (measured against the real server in the lab: no rule matched a series of
# it). Prometheus 2.42 (Debian 12) cannot ask for the text format (scrape_protocols is 2.49's), so the names are
# put back to SGLang's own, those the rules, the dashboard and SGLang's documentation use, whatever the format.
SGLANG_NAMES = [{"source_labels": ["__name__"], "regex": "sglang_(.+)", "target_label": "__name__",
                 "replacement": "sglang:$1"}]


def prometheus_config(mon: Monitoring, targets: list[Scraped]) -> dict:
    jobs: dict[str, list[dict]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append({"targets": [t.target], "labels": t.labels})
    local = url_host(local_address(mon.host))
    auth = {"basic_auth": {"username": mon.user, "password_file": PASSWORD_FILE}}  # both ask for it, of Prometheus too
    if mon.tls is not None:  # the certificate is for its name, not the local address Prometheus connects to
        auth |= {"scheme": "https", "tls_config": {"server_name": mon.tls.name,
                                                   **({"ca_file": mon.tls.ca_file} if mon.tls.ca_file else {})}}
    return {
        "global": {"scrape_interval": _s(mon.scrape_interval_s), "evaluation_interval": _s(mon.evaluation_interval_s),
                   "scrape_timeout": _s(mon.scrape_timeout_s)},
        "alerting": {"alertmanagers": [{**auth,
                                        "static_configs": [{"targets": [f"{local}:{mon.alertmanager_port}"]}]}]},
        "rule_files": [f"{RULES_DIR}/*.json"],
        "scrape_configs": [
            {"job_name": "prometheus", **auth, "static_configs": [{"targets": [f"{local}:{mon.prometheus_port}"]}]},
            {"job_name": "alertmanager", **auth, "static_configs": [{"targets": [f"{local}:{mon.alertmanager_port}"]}]},
            *({"job_name": job, "metrics_path": "/metrics", "static_configs": configs,
               **({"metric_relabel_configs": SGLANG_NAMES} if job == "sglang" else {})}
              for job, configs in sorted(jobs.items())),
        ],
    }


def _secret_url_problem(v: str) -> str | None:
    # read from a secret source: a token may sit anywhere in it, and it goes only into a 0600 file
    expected = "expected an http(s) URL to a host, of one line without spaces"
    u = split_http(v)
    if u is None or len(v) > TEXT_MAX or not v.isprintable():
        return expected
    try:
        _host(u.hostname)
    except ValueError:
        return expected
    return None


def webhook_urls(mon: Monitoring, where: str, environ: Mapping[str, str] = controller.ENVIRON,
                 read_file: Callable[[Path], str] = controller.read_file) -> dict[str, str]:
    """Each receiver's webhook URL declared as a secret source (receiver name -> URL), read now; SecretError
    naming each field and source (never a value). where: the group file, for the messages."""
    urls, problems = {}, []
    for i, r in enumerate(mon.receivers):
        if isinstance(r.webhook_url, SecretSource):
            try:
                urls[r.name] = read_key(r.webhook_url, where, f"monitoring.receivers.{i}.webhook_url", environ,
                                        read_file, problem=_secret_url_problem, what="webhook URL")
            except SecretError as e:
                problems += e.problems
    if problems:
        raise SecretError(problems)
    return urls


def alertmanager_config(mon: Monitoring, urls: Mapping[str, str]) -> dict:
    receivers = [{"name": r.name, "webhook_configs": [{"url": urls[r.name] if isinstance(r.webhook_url, SecretSource)
                                                       else r.webhook_url, "send_resolved": r.send_resolved}]}
                 for r in mon.receivers]
    route = {"receiver": NO_RECEIVER, "group_by": ["alertname", "gpu_class", "host"],
             "group_wait": _s(mon.group_wait_s), "group_interval": _s(mon.group_interval_s),
             "repeat_interval": _s(mon.repeat_interval_s),
             "routes": [{"receiver": r.name, "continue": True, "matchers": ['alertname=~".+"']} for r in mon.receivers]}
    return {"route": route, "receivers": [{"name": NO_RECEIVER}, *receivers]}


def bundle(mon: Monitoring, targets: list[Scraped], classes: dict[str, ClassSpec], floors: dict[str, float | None],
           gateways: list[str], urls: Mapping[str, str] = MappingProxyType({})) -> dict[str, str]:
    """Every file of the configuration directory (relative path -> text): the scraped classes' and
    gateways' rules, the two configurations. urls: the webhook URLs declared as secret sources (webhook_urls)."""
    scraped = sorted({t.labels["gpu_class"] for t in targets if t.job == "sglang"})
    files = {f"{RULES_DIR}/class-{c}.json": class_rules(mon, c, classes[c], floors.get(c)) for c in scraped}
    files |= {f"{RULES_DIR}/gateway-{g}.json": gateway_rules(mon, g) for g in sorted(gateways)}
    files[CONFIG] = prometheus_config(mon, targets)
    files[DASHBOARD] = dashboard(mon, scraped, sorted(gateways))
    files[ALERTMANAGER_CONFIG] = alertmanager_config(mon, urls)
    # UTF-8 as it is: Prometheus' and Alertmanager's YAML reader refuses JSON's surrogate escapes (\ud83d...)
    # of a name outside the Basic Multilingual Plane, and with them the whole bundle
    return {path: json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
            for path, doc in sorted(files.items())}


def bundle_id(files: dict[str, str]) -> str:
    """The bundle's name on the host: what it holds decides it, so an unchanged bundle is found as it is."""
    h = hashlib.sha256()
    for path, text in sorted(files.items()):
        h.update(path.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()[:16]
