"""What Prometheus is told of each target: the scrape targets (a replica's SGLang, a gateway's smg) and what
make check says of them, the accept-length floors (group_data's, else the tuning records'), and the recording and
alerting rules of each class and each gateway. Plain data in, rule documents out (config.py bundles them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fleet.core import controller
from fleet.rollout.gate import url_host
from fleet.spec import ClassSpec, is_loopback
from fleet.core.wire import load_json
from fleet.monitoring.models import Monitoring

TUNING = Path("tuning")  # the tuning records (make tune), beside group_data: the default accept-length floors
# What a rule's expression says of a class's accept length (the recording rule's name)
ACCEPT_LENGTH = "sglang_fleet:accept_length"


@dataclass(frozen=True)
class Scraped:
    """One target: a replica's SGLang or a gateway's smg, with the labels every series of it gets."""

    job: str  # "sglang" or "smg"
    target: str  # address:port as Prometheus reaches it
    labels: dict[str, str] = field(default_factory=dict)


def replica_target(host: str, address: str, gpu_class: str, spec: ClassSpec) -> Scraped:
    """A replica's /metrics (SGLang serves it without the API key) with what the deploy declares of it (the GPU
    model a host has is its own fact, not group_data's: a class may accept several)."""
    engine = spec.engine.sglang if spec.engine is not None else "as installed"
    return Scraped("sglang", f"{url_host(address)}:{spec.service.port}", {
        "host": host, "gpu_class": gpu_class, "engine": engine, "served_model": spec.service.served_model_name,
        "speculative": spec.speculative.algorithm})


def gateway_target(host: str, address: str, group: str, prometheus_port: int) -> Scraped:
    return Scraped("smg", f"{url_host(address)}:{prometheus_port}", {"host": host, "gateway": group})


def scrape_problems(group: str, classes: dict[str, ClassSpec], scraped_classes: set[str]) -> list[str]:
    """A class Prometheus must scrape from another host cannot bind loopback."""
    return [f"group_data/{c}.py: service.host: {classes[c].service.host!r} only the replica itself reaches; "
            f"the monitoring host ({group}) scrapes its /metrics: expected an address of the replica's network, "
            "or 0.0.0.0 / ::" for c in sorted(scraped_classes) if c in classes and is_loopback(classes[c].service.host)]


def accept_length_max(spec: ClassSpec) -> float:
    """The most tokens one verify step can give (ACCEPT_LENGTH's expression: generated tokens per verify step):
    every drafted token accepted, plus the target's own: the block (DFLASH, DDTREE), the draft's steps (EAGLE:
    unset, SGLang picks them, at most the spec's 64), the n-gram draft's tokens (unset: SGLang's 12)."""
    s = spec.speculative
    if hasattr(s, "block_size"):
        return s.block_size + 1
    if s.algorithm == "NGRAM":
        return (s.num_draft_tokens or 12) + 1
    return (s.num_steps or 64) + 1


def floor_problems(group: str, mon: Monitoring, classes: dict[str, ClassSpec]) -> list[str]:
    """Each declared floor names a GPU class with a speculative algorithm, and an accept length it can have: above
    1 (every verify step gives at least the target's token: a floor of 1 or under never fires) and at most
    accept_length_max (a floor above it always fires)."""
    where = f"group_data/{group}.py: monitoring.alerts.accept_length_floor"
    problems = []
    for c, floor in mon.alerts.accept_length_floor.items():
        spec = classes.get(c)
        if spec is None:
            problems.append(f"{where}: {c!r} is not a GPU class; expected one of {', '.join(classes)}")
        elif spec.speculative.algorithm == "none":
            problems.append(f"{where}.{c}: {floor:g} for a class without speculative decoding: expected no floor "
                            "(its accept length is never measured)")
        elif not 1 < floor <= accept_length_max(spec):
            problems.append(f"{where}.{c}: {floor:g}: expected above 1 and at most {accept_length_max(spec):g} (the "
                            f"most one verify step of {spec.speculative.algorithm} gives), else the alert never or "
                            "always fires")
    return problems


def tuned_accept_length(record: dict, spec: ClassSpec) -> float | None:
    """From a tuning record (fleet/tune/search.py's record()): the accept length measured at the objective
    concurrency for the speculative settings the class declares now, else for the record's winner."""
    try:
        objective = int(record["objective"]["concurrency"])
        candidates = record["candidates"]
        s = spec.speculative
        declared = {"block_size": getattr(s, "block_size", None),
                    **({"tree_budget": s.tree_budget} if hasattr(s, "tree_budget") else {})}
        for wanted in (declared, record.get("winner")):
            for c in candidates:
                if wanted and c.get("candidate") == wanted:
                    for lv in c.get("levels", []):
                        if lv.get("concurrency") == objective and isinstance(lv.get("accept_length"), (int, float)):
                            figure = float(lv["accept_length"])  # one no verify step can give is no figure
                            return figure if 1 <= figure <= accept_length_max(spec) else None
    except (AttributeError, KeyError, TypeError, ValueError):  # not the shape of a record: no figure
        return None
    return None


def accept_length_floor(mon: Monitoring, gpu_class: str, spec: ClassSpec, record: dict | None) -> float | None:
    """The accept length under which the class's alert fires, or None for no such alert."""
    if spec.speculative.algorithm == "none":
        return None
    if gpu_class in mon.alerts.accept_length_floor:
        return mon.alerts.accept_length_floor[gpu_class]
    tuned = tuned_accept_length(record, spec) if record else None
    floor = round(tuned * mon.alerts.accept_length_fraction, 3) if tuned is not None else None
    return floor if floor is not None and floor > 1 else None  # at 1 or under it would never fire


def floors(mon: Monitoring, classes: dict[str, ClassSpec], tuning_dir: Path) -> dict[str, float | None]:
    """Each class's accept-length floor, from group_data or its tuning record (tuning/<class>.json,
    committed beside group_data; one that does not read as a record gives none)."""
    out = {}
    for c, spec in classes.items():
        path = tuning_dir / f"{c}.json"
        try:
            text = controller.read_if_file(path)
            record = load_json(text, str(path)) if text is not None else None
        except (OSError, ValueError):  # Unreadable is a ValueError
            record = None
        out[c] = accept_length_floor(mon, c, spec, record if isinstance(record, dict) else None)
    return out


def _s(seconds: float) -> str:
    return f"{int(seconds)}s"


def _alert(name: str, expr: str, for_s: int, severity: str, summary: str, runbook: str) -> dict:
    return {"alert": name, "expr": expr, "for": _s(for_s), "labels": {"severity": severity},
            "annotations": {"summary": summary, "runbook": runbook}}


def class_rules(mon: Monitoring, gpu_class: str, spec: ClassSpec, floor: float | None) -> dict:
    """The recording and alerting rules of one class, each alert with its runbook line."""
    a, w = mon.alerts, _s(mon.rate_window_s)
    sel = f'job="sglang",gpu_class="{gpu_class}"'
    by = "gpu_class, host"
    unit = spec.service.unit
    records = [
        {"record": ACCEPT_LENGTH, "expr": f"sum by ({by}) (rate(sglang:generation_tokens_total{{{sel}}}[{w}])) / "
                                          f"sum by ({by}) (rate(sglang:spec_verify_calls_total{{{sel}}}[{w}]))"},
        {"record": "sglang_fleet:ttft_seconds:p99",
         "expr": f"histogram_quantile(0.99, sum by ({by}, le) "
                 f"(rate(sglang:time_to_first_token_seconds_bucket{{{sel}}}[{w}])))"},
        {"record": "sglang_fleet:generation_tokens:rate",
         "expr": f"sum by ({by}) (rate(sglang:generation_tokens_total{{{sel}}}[{w}]))"},
    ]
    alerts = [
        _alert("SGLangReplicaDown", f"up{{{sel}}} == 0", a.replica_down_for_s, "page",
               f"{gpu_class} replica {{{{ $labels.host }}}}: /metrics does not answer",
               f"make status ARGS='--limit {{{{ $labels.host }}}}'; on the host: systemctl status {unit}.service, "
               f"journalctl -u {unit}.service"),
        _alert("SGLangQueueDeep", f"max by ({by}) (sglang:num_queue_reqs{{{sel}}}) > {a.queue_depth_max}",
               a.queue_for_s, "warning",
               f"{gpu_class} replica {{{{ $labels.host }}}}: {{{{ $value }}}} requests queued "
               f"(over {a.queue_depth_max})",
               "more load than the class serves: add replicas or shed load; check the gateway spreads it"),
        _alert("SGLangTTFTHigh", f'sglang_fleet:ttft_seconds:p99{{gpu_class="{gpu_class}"}} > {a.ttft_p99_max_s:g}',
               a.ttft_for_s, "warning",
               f"{gpu_class} replica {{{{ $labels.host }}}}: time to first token p99 {{{{ $value }}}} s "
               f"(over {a.ttft_p99_max_s:g} s)",
               "long prompts or a queue: see SGLangQueueDeep and the replica's running requests"),
        _alert("SGLangThroughputCollapsed",
               f"max by ({by}) (sglang:num_running_reqs{{{sel}}}) > 0 and on ({by}) "
               f'sglang_fleet:generation_tokens:rate{{gpu_class="{gpu_class}"}} == 0',
               a.throughput_for_s, "page",
               f"{gpu_class} replica {{{{ $labels.host }}}}: requests run and no token is made",
               f"a hung scheduler: journalctl -u {unit}.service; make rollback HOST={{{{ $labels.host }}}} "
               "if it began with a change"),
    ]
    # what the server says it serves (its model_name) against what group_data declares (the target's label)
    declared = f'label_replace(sglang:num_running_reqs{{{sel}}}, "serves", "$1", "served_model", "(.*)")'
    running = f'label_replace(sglang:num_running_reqs{{{sel}}}, "serves", "$1", "model_name", "(.*)")'
    alerts.append(_alert(
        "SGLangServesOtherThanDeclared", f"{declared} unless on (host, serves) {running}", a.replica_down_for_s,
        "page", f"{gpu_class} replica {{{{ $labels.host }}}} serves {{{{ $labels.model_name }}}}, not "
        "{{ $labels.served_model }}",
        "a unit changed by hand or a deploy not finished: make status ARGS='--limit {{ $labels.host }}', "
        "then make deploy"))
    if floor is not None:
        alerts.insert(0, _alert(
            "SGLangAcceptLengthLow", f'{ACCEPT_LENGTH}{{gpu_class="{gpu_class}"}} < {floor:g}', a.accept_length_for_s,
            "warning", f"{gpu_class} replica {{{{ $labels.host }}}}: accept length {{{{ $value | printf \"%.2f\" }}}} "
            f"under {floor:g} ({spec.speculative.algorithm}): the draft pays less than it costs",
            "a new target revision, a traffic shift or a draft that no longer fits: compare the target and draft "
            f"revisions with tuning/{gpu_class}.json; make tune CLASS={gpu_class} measures again"))
    return {"groups": [{"name": f"sglang-fleet-{gpu_class}", "rules": records + alerts}]}


def gateway_rules(mon: Monitoring, group: str) -> dict:
    a = mon.alerts
    sel = f'job="smg",gateway="{group}"'
    # A group of two or more behind a floating address still serves while one smg answers: only that is a page.
    # The down one is a warning then (one more failure is the outage); a group of one pages at once.
    return {"groups": [{"name": f"sglang-fleet-gateway-{group}", "rules": [
        _alert("SmgDown", f"up{{{sel}}} == 0 unless on (gateway) up{{{sel}}} == 1", a.gateway_down_for_s, "page",
               f"gateway {group} ({{{{ $labels.host }}}}): smg's /metrics does not answer, nor on any other host "
               "of the group",
               "every class it routes is offline: on the host, systemctl status smg.service, journalctl -u smg.service"),
        _alert("SmgRedundancyLost", f"up{{{sel}}} == 0 and on (gateway) up{{{sel}}} == 1", a.gateway_down_for_s,
               "warning", f"gateway {group} ({{{{ $labels.host }}}}): smg's /metrics does not answer; the others of "
               "the group serve",
               "one more failure takes every class it routes offline: on the host, systemctl status smg.service "
               "keepalived.service; make status names the floating address's holder"),
        _alert("SmgWorkerUnhealthy", f"smg_worker_health{{{sel}}} == 0", a.worker_unhealthy_for_s, "warning",
               f"gateway {group}: smg calls {{{{ $labels.worker }}}} unhealthy",
               "the replica fails smg's health probe: make status; its /health from the gateway host"),
    ]}]}
