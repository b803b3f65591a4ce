"""The fleet's monitoring: Prometheus and Alertmanager on the monitoring host, declared as
`monitoring = {...}` in a group_data file of its own (group_data/monitoring.py), and what they are
told, generated from the inventory and group_data: the scrape targets (every replica of every class,
each gateway's smg), the recording and alerting rules per class (speculative decoding first: the
accept length), Alertmanager's routes and receivers.

Plain data in, files out: `bundle()` is every file of the configuration directory, by relative path;
tasks/monitoring.py puts it on the host (checked there with promtool and amtool before it goes live).
The files are JSON, which Prometheus and Alertmanager read as the YAML it is a subset of.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
import shlex
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Callable, Mapping, Union
from urllib.parse import urlsplit

import bcrypt
from pydantic import AfterValidator, Discriminator, Field, Tag, ValidationError, WrapValidator, model_validator

from fleet.core import controller
from fleet.rollout.gate import CURL, local_address, url_host
from fleet.spec import AbsPath, Bool, ClassSpec, HostAddress, Int, Kind, Number, SecretSource, Source, Strict, Text, \
    is_loopback
from fleet.spec.secrets import SecretError, read_key
from fleet.spec.names import _host, http_url, split_http
from fleet.spec.text import TEXT_MAX
from fleet.core.wire import Unreadable, capped, excerpt, frames, load_json, shown

TUNING = Path("tuning")  # the tuning records (make tune), beside group_data: the default accept-length floors
CONFIG = "prometheus.json"  # Prometheus' --config.file, in the configuration directory
ALERTMANAGER_CONFIG = "alertmanager.json"
RULES_DIR = "rules"  # a file per class and per gateway; rule_files are relative to the config file
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}\Z")
# What a rule's expression says of a class's accept length (the recording rule's name)
ACCEPT_LENGTH = "sglang_fleet:accept_length"
NO_RECEIVER = "none"  # the route's default receiver, sending nothing: each receiver of group_data has its own route
NOTIFY_S = 10  # Prometheus' timeout of a send to Alertmanager: its default, prometheus_config() sets none


def _name(v: str) -> str:
    if not NAME.match(v):
        raise ValueError("a name of letters, digits, - and _, starting with a letter, at most 63 characters")
    return v


Name = Annotated[str, AfterValidator(_name), Kind("name")]


# What Go's url.Parse (Alertmanager's, amtool's) refuses and Python's urlsplit lets by: a port that is not
# digits (1..65535 here: another cannot be reached), a % not starting an escape of two hex digits
_PORT = re.compile(r":([^:\]]*)\Z")  # the text after the host's last colon, outside an IPv6 [address]
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _webhook_url(v: str) -> str:
    http_url(v, "a webhook", "https://hooks.example/alerts",
             "group_data is in git and printed by debug-inventory; declare a URL that holds a secret as a "
             "secret source, {'env': 'SLACK_WEBHOOK_URL'} or {'file': '~/path'}")
    port = _PORT.search(urlsplit(v).netloc)
    if port and not (re.fullmatch(r"[0-9]{1,5}", port[1], re.ASCII) and 1 <= int(port[1]) <= 65535):
        raise ValueError(f"a webhook URL whose port is a number 1..65535, found {excerpt(port[1], 16)} "
                         "(Alertmanager's URL parser refuses it)")
    if _BAD_ESCAPE.search(v):
        raise ValueError("a webhook URL whose every % starts an escape of two hex digits (%2F), found one that does "
                         "not (Alertmanager's URL parser refuses it)")
    return v


def _receiver_name(v: str) -> str:
    if v == NO_RECEIVER:
        raise ValueError(f"a receiver name other than {NO_RECEIVER!r}: the route's own receiver of nothing has it")
    return _name(v)


def _webhook_kind(v: typing.Any) -> str:
    return "source" if isinstance(v, (dict, SecretSource)) else "url"


def _at_the_field(v: typing.Any, handler: typing.Any) -> typing.Any:
    # a refusal is reported at webhook_url, not at the union's webhook_url.url or webhook_url.source
    try:
        return handler(v)
    except ValidationError as e:
        first = e.errors()[0]
        inner = ".".join(str(p) for p in first["loc"][1:])
        raise ValueError((f"{inner}: " if inner else "") + first["msg"].removeprefix("Value error, ")) from None


WebhookUrl = Annotated[
    Union[Annotated[Text, AfterValidator(_webhook_url), Tag("url")], Annotated[Source, Tag("source")]],
    Discriminator(_webhook_kind), WrapValidator(_at_the_field), Kind("webhook URL | secret source")]


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


class Receiver(Strict):
    """Where Alertmanager sends a notification: a webhook (Alertmanager's webhook_config, JSON POSTs)."""

    name: Annotated[str, AfterValidator(_receiver_name), Kind("name")] = Field(
        description="How Alertmanager and the run's summary call it; not `none` (the route's own receiver).")
    webhook_url: WebhookUrl = Field(description="The http(s) URL Alertmanager POSTs each notification to (no "
                                    "credentials, query, fragment or token in its path); or, for a URL that is a "
                                    "secret itself (Slack's, Discord's, Teams'), the secret source it is read from "
                                    "when the monitoring host is deployed (`{'env': 'SLACK_WEBHOOK_URL'}`): written "
                                    "only into Alertmanager's configuration, a 0600 file, never shown.")
    send_resolved: Bool = Field(True, description="Whether a resolved alert is sent too.")


class AlertBounds(Strict):
    """What fires, and after how long. Every `*_for_s` is the alert's `for:`: the condition must hold that long
    (a replica restarting in its rollout turn is back well inside the defaults)."""

    accept_length_floor: dict[Text, Number] = Field(
        default_factory=dict, description="Per GPU class, the accept length (generation tokens per verify step, "
        "over rate_window_s) below which it fires: above 1 and at most what one verify step gives (DFLASH and "
        "DDTREE: block_size + 1; EAGLE: num_steps + 1; NGRAM: num_draft_tokens + 1). A class not listed gets "
        "accept_length_fraction of its tuned figure (tuning/<class>.json, make tune); a class with neither gets no "
        "accept-length alert (make check says so). A class without speculative decoding gets none (a floor for it "
        "is refused).")
    accept_length_fraction: Number = Field(0.7, ge=0.05, le=1, description="The floor as a fraction of the tuned "
                                           "accept length at the tuned concurrency, 0.05..1.")
    accept_length_for_s: Int = Field(600, ge=0, le=86400, description="How long it stays below the floor, 0..86400 s.")
    replica_down_for_s: Int = Field(120, ge=0, le=86400, description="How long a replica's /metrics fails to "
                                    "answer before it fires, 0..86400 s.")
    gateway_down_for_s: Int = Field(60, ge=0, le=86400, description="How long smg's /metrics fails to answer, 0..86400 s.")
    worker_unhealthy_for_s: Int = Field(120, ge=0, le=86400, description="How long smg calls a replica unhealthy "
                                        "(smg_worker_health 0), 0..86400 s.")
    queue_depth_max: Int = Field(64, ge=1, le=1_000_000, description="Requests waiting in a replica's queue "
                                 "(sglang:num_queue_reqs) above which it fires, 1..1000000.")
    queue_for_s: Int = Field(300, ge=0, le=86400, description="How long the queue stays over queue_depth_max, 0..86400 s.")
    ttft_p99_max_s: Number = Field(10.0, ge=0.01, le=3600, description="Time to first token, p99 over "
                                   "rate_window_s, above which it fires, 0.01..3600 s.")
    ttft_for_s: Int = Field(300, ge=0, le=86400, description="How long p99 stays over ttft_p99_max_s, 0..86400 s.")
    throughput_for_s: Int = Field(300, ge=0, le=86400, description="How long a replica with running requests "
                                  "makes no token before it fires, 0..86400 s.")


def _unquoted(v: str) -> str:
    if '"' in v or "\\" in v:
        raise ValueError('a path without " or \\ (curl\'s configuration quotes it)')
    return v


HostPath = Annotated[AbsPath, AfterValidator(_unquoted)]


class MonitoringTls(Strict):
    """HTTPS for Prometheus and Alertmanager, with a certificate already on the monitoring host (your PKI puts it
    there: the deploy neither makes nor copies it). Plain HTTP is refused then."""

    cert_file: HostPath = Field(description="The certificate (PEM, any intermediates after it) on the monitoring host, "
                                "valid for `name`.")
    key_file: HostPath = Field(description="Its private key (PEM) on the monitoring host, readable by the prometheus "
                               "user (e.g. 0600, the prometheus user's).")
    name: HostAddress = Field(description="The name (or address) the certificate is for: the deploy's calls and "
                              "Prometheus' own (its scrapes of both, its alerts) verify the certificate against it, "
                              "connecting to the host's own listen address.")
    ca_file: HostPath | None = Field(None, description="The CA certificate(s) (PEM) on the monitoring host the "
                                     "certificate chains to; unset: the host's system CAs.")


class Monitoring(Strict):
    """Prometheus and Alertmanager, Debian's packages, on the one host of the monitoring group."""

    host: HostAddress = Field("0.0.0.0", description="The address Prometheus and Alertmanager listen on (both "
                              "ask for a password whatever it is): 0.0.0.0 every address of the host, 127.0.0.1 "
                              "the host itself only.")
    user: Name = Field("sglang-fleet", description="The user name Prometheus and Alertmanager ask for (HTTP basic "
                       "auth, every page and API) and the deploy's own calls give.")
    password: Source = Field(SecretSource(env="SGLANG_FLEET_MONITORING_PASSWORD"), description="Where that user's "
                             "password comes from (a secret source, read by the deploy of the monitoring host only): "
                             "8 or more of A-Z a-z 0-9 . _ ~ + / = - (not starting with -). The host keeps its "
                             "bcrypt hash in Prometheus' and Alertmanager's web configuration, the password itself "
                             "only in files of mode 0600, never in a command line.")
    prometheus_port: Int = Field(9090, ge=1, le=65535, description="Prometheus' web and API port, 1..65535.")
    alertmanager_port: Int = Field(9093, ge=1, le=65535, description="Alertmanager's web and API port, 1..65535.")
    tls: MonitoringTls | None = Field(None, description="HTTPS for both (unset: plain HTTP, the password in clear "
                                      "on the network: bind `host` to 127.0.0.1 and reach it through an SSH tunnel).")
    scrape_interval_s: Int = Field(15, ge=1, le=300, description="How often every target is scraped, 1..300 s.")
    evaluation_interval_s: Int = Field(15, ge=1, le=300, description="How often the rules are evaluated, 1..300 s.")
    rate_window_s: Int = Field(300, ge=4, le=3600, description="The window of every rate() in the rules (accept "
                               "length, TTFT, throughput), 4..3600 s and at least 4 scrape intervals.")
    retention_days: Int = Field(15, ge=1, le=3650, description="How long Prometheus keeps samples, 1..3650 days.")
    receivers: list[Receiver] = Field(default_factory=list, max_length=16, description="Where notifications go, "
                                      "each one gets every alert; none: alerts are seen in Prometheus and "
                                      "Alertmanager only.")
    group_wait_s: Int = Field(30, ge=0, le=3600, description="Alertmanager's group_wait: how long a new group of "
                              "alerts waits for others before its first notification, 0..3600 s.")
    group_interval_s: Int = Field(300, ge=1, le=86400, description="Alertmanager's group_interval, 1..86400 s.")
    repeat_interval_s: Int = Field(14400, ge=60, le=604800, description="Alertmanager's repeat_interval: a "
                                   "firing alert is sent again after this long, 60..604800 s.")
    alerts: AlertBounds = Field(default_factory=AlertBounds, description="The alerts' bounds.")

    @model_validator(mode="after")
    def _coherent(self) -> Monitoring:
        if self.prometheus_port == self.alertmanager_port:
            raise ValueError(f"prometheus_port and alertmanager_port both {self.prometheus_port}; expected two ports")
        if self.rate_window_s < 4 * self.scrape_interval_s:
            raise ValueError(f"rate_window_s {self.rate_window_s} is under 4 scrape intervals "
                             f"({4 * self.scrape_interval_s} s): a rate() needs at least two samples in its window")
        names = [r.name for r in self.receivers]
        if len(set(names)) < len(names):
            raise ValueError(f"receivers: a name used twice in {names}; expected each once")
        return self

    def delivery_bound_s(self, for_s: float, windowed: bool = False) -> float:
        """The latest an alert's first notification leaves Alertmanager after its condition begins: a scrape and
        its timeout to see it, (for an alert over a rate: the rate window to fill with it, and the evaluation of the
        recording rule it reads), an evaluation to start its `for:`, the `for:`, the evaluation that fires it, and
        Alertmanager's group_wait. docs/operations.md says it; the lab's alert tests hold the deploy to it."""
        rate = self.rate_window_s + self.evaluation_interval_s if windowed else 0
        return self.scrape_interval_s + self.scrape_timeout_s + rate + 2 * self.evaluation_interval_s + for_s \
            + self.group_wait_s

    def resolve_s(self) -> float:
        """The latest Alertmanager holds a replica's down alert as resolved after the replica answers again: the
        scrape that finds it up (an interval away, within its timeout), the evaluation that resolves the alert, and
        Prometheus' send of that to Alertmanager. A turn's silence ends this long after the turn (tasks/silences.py):
        a replica serving again by then pages no one (Alertmanager sends no resolution of an alert it never sent);
        one that does not serve pages as soon as its silence ends."""
        return self.scrape_interval_s + self.scrape_timeout_s + self.evaluation_interval_s + NOTIFY_S

    @property
    def scrape_timeout_s(self) -> int:
        return min(self.scrape_interval_s, 10)

    @property
    def scheme(self) -> str:
        return "http" if self.tls is None else "https"

    def url(self, port: int, path: str) -> str:
        """Prometheus' or Alertmanager's URL as a command on the monitoring host reaches it (with TLS: by the
        certificate's name, which the deploy's curl configuration resolves to the local address)."""
        where = local_address(self.host) if self.tls is None else self.tls.name
        return f"{self.scheme}://{url_host(where)}:{port}{path}"


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


DASHBOARD = "dashboards/sglang-fleet.json"  # Grafana's dashboard JSON, for an operator to import


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


# --- on the monitoring host ------------------------------------------------------------------------
# Debian's packages (bookworm and trixie name them alike) and what they read: the units pass $ARGS from
# /etc/default/<unit>, and the configuration lives in a directory named by its content, made live by an
# atomic symlink swap (a reader sees the old bundle or the new one).
PACKAGES = ("prometheus", "prometheus-alertmanager")
UNITS = ("prometheus.service", "prometheus-alertmanager.service")
LIVE = "/etc/prometheus/sglang-fleet"
BUNDLES = "/etc/prometheus/sglang-fleet.d"
KEEP_BUNDLES = 3  # the live one and two before it, for a look at what changed
DEFAULTS = {"prometheus": "/etc/default/prometheus", "alertmanager": "/etc/default/prometheus-alertmanager"}
# The password's files, each 0600 (the Debian units run as the package's user, `prometheus`)
WEB_CONFIG = "/etc/prometheus/sglang-fleet-web.json"  # both's --web.config.file: the user and its bcrypt hash
PASSWORD_FILE = "/etc/prometheus/sglang-fleet-password"  # Prometheus' own calls: its scrapes of both, its alerts
CURL_CONFIG = "/etc/prometheus/sglang-fleet-curl"  # the deploy's calls on the host (curl -K), root's
SECRET_OWNERS = {WEB_CONFIG: "prometheus", PASSWORD_FILE: "prometheus", CURL_CONFIG: "root"}
OWNER = "prometheus"  # every file of a bundle: Alertmanager's configuration may hold a webhook's token
# The deploy's calls to Prometheus and Alertmanager on the monitoring host: the user and password from the 0600
# file, never on a command line (another user of the host reads every process's arguments)
AUTH_CURL = f"{CURL} -K {CURL_CONFIG}"
BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
BCRYPT_COST = 10  # checked on every request that is not cached yet: the cost Prometheus' own docs show


def password_hash(password: str, current: str) -> str:
    """The bcrypt hash the web configuration holds: the host's current one while the password still matches it
    (a new salt each run would rewrite the file every run), else a new one."""
    if BCRYPT.fullmatch(current) and bcrypt.checkpw(password.encode(), current.encode()):
        return current
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_COST)).decode()


def secret_files(mon: Monitoring, password: str, current_hash: str) -> dict[str, str]:
    """The password's files on the monitoring host (path -> text; each 0600, owned as SECRET_OWNERS says).
    current_hash: the one the host's web configuration holds ('' for none)."""
    web = {"basic_auth_users": {mon.user: password_hash(password, current_hash)}}
    curl = [f'user = "{mon.user}:{password}"']  # the password's characters need no escape (KEY_RULE)
    if mon.tls is not None:
        web["tls_server_config"] = {"cert_file": mon.tls.cert_file, "key_file": mon.tls.key_file}
        local = url_host(local_address(mon.host))
        curl += [f'resolve = "{mon.tls.name}:{port}:{local}"' for port in (mon.prometheus_port, mon.alertmanager_port)]
        curl += [f'cacert = "{mon.tls.ca_file}"'] if mon.tls.ca_file else []
    return {WEB_CONFIG: json.dumps(web, indent=2, sort_keys=True) + "\n", PASSWORD_FILE: password,
            CURL_CONFIG: "\n".join(curl) + "\n"}


def defaults_files(mon: Monitoring) -> dict[str, str]:
    """/etc/default/prometheus and /etc/default/prometheus-alertmanager: the units' arguments."""
    listen = url_host(mon.host)
    prom = [f"--config.file={LIVE}/{CONFIG}", f"--web.listen-address={listen}:{mon.prometheus_port}",
            f"--web.config.file={WEB_CONFIG}",
            f"--storage.tsdb.retention.time={mon.retention_days}d"]
    # one Alertmanager: no gossip port (the HA cluster is Alertmanager's, and off)
    am = [f"--config.file={LIVE}/{ALERTMANAGER_CONFIG}", f"--web.listen-address={listen}:{mon.alertmanager_port}",
          f"--web.config.file={WEB_CONFIG}",
          "--storage.path=/var/lib/prometheus/alertmanager", "--cluster.listen-address="]
    if mon.tls is not None:  # the links both send go to the certificate's name; and HTTPS begins only at a start
        prom.append(f"--web.external-url={mon.url(mon.prometheus_port, '/')}")
        am.append(f"--web.external-url={mon.url(mon.alertmanager_port, '/')}")
    head = "# Written by the sglang-fleet deploy from group_data (monitoring); edits here are put back.\n"
    return {DEFAULTS["prometheus"]: head + f'ARGS="{" ".join(prom)}"\n',
            DEFAULTS["alertmanager"]: head + f'ARGS="{" ".join(am)}"\n'}


@dataclass(frozen=True)
class MonitoringHost:
    """What the monitoring host has (facts/monitoring.py, one round trip)."""

    installed: dict[str, str]  # package -> version, '' where not installed
    live: str  # the live bundle's id, '' for none
    defaults_sha1: dict[str, str]  # path -> sha1 of its content, '' for none
    active: dict[str, str]  # unit -> ActiveState
    ready: bool = False  # both /-/ready 200 with their configuration loaded (ready_command)
    secrets_sha1: dict[str, str] = field(default_factory=dict)  # path -> sha1 of the password's files, '' for none
    web_hash: str = ""  # the bcrypt hash the web configuration holds, '' for none


_VERSION = re.compile(r"[A-Za-z0-9.+~:-]{1,64}")
_ID = re.compile(r"[0-9a-f]{16}")
_SHA1 = re.compile(r"[0-9a-f]{40}")
UNIT_STATE = re.compile(r"[a-z-]{1,32}")  # a unit's ActiveState, SubState or UnitFileState


def parse_monitoring_host(answer: str | list[str]) -> MonitoringHost:
    """The records of facts/monitoring.py; what is not of the expected form reads as absent."""
    said = {f.key: (f.text or "").strip() for f in frames(answer)}

    def one(key: str, pattern: re.Pattern) -> str:
        text = said.get(key, "")
        return text if pattern.fullmatch(text) else ""

    return MonitoringHost(
        installed={p: one(f"version:{p}", _VERSION) for p in PACKAGES},
        live=one("live", _ID),
        defaults_sha1={path: one(f"sha1:{path}", _SHA1) for path in DEFAULTS.values()},
        active={u: one(f"active:{u}", UNIT_STATE) for u in UNITS},
        ready=is_ready(said.get("ready", "")),
        secrets_sha1={path: one(f"sha1:{path}", _SHA1) for path in SECRET_OWNERS},
        web_hash=one("hash", BCRYPT))


def live_files_command() -> str:
    """The live bundle's files and their sha1, one `SHA1  ./PATH` line each (sha1sum's)."""
    return f"{{ cd {shlex.quote(LIVE)}/ && find . -type f -print0 | sort -z | xargs -0 -r sha1sum; }} 2>/dev/null; true"


_LIVE_LINE = re.compile(r"([0-9a-f]{40}) {2}\./([A-Za-z0-9._/-]{1,200})")


def bundle_changes(files: dict[str, str], live_answer: str) -> list[str]:
    """What a new bundle changes against the live one (live_files_command's answer): each file added,
    changed or removed, as a dry run shows it; a line not of sha1sum's form is not read."""
    live = {m.group(2): m.group(1) for line in live_answer.splitlines() if (m := _LIVE_LINE.fullmatch(line.strip()))}
    out = [f"{p} added" for p in sorted(files) if p not in live]
    out += [f"{p} changed" for p in sorted(files) if p in live and live[p] != hashlib.sha1(files[p].encode()).hexdigest()]
    return out + [f"{p} removed" for p in sorted(live) if p not in files]


def ready_command(mon: Monitoring) -> str:
    """Each one's /-/ready and whether its last configuration load succeeded (its own metric): one line each."""
    checks = []
    for port, metric in ((mon.prometheus_port, "prometheus_config_last_reload_successful"),
                         (mon.alertmanager_port, "alertmanager_config_last_reload_successful")):
        ready, metrics = mon.url(port, "/-/ready"), mon.url(port, "/metrics")
        checks.append(f"echo \"$({AUTH_CURL} -s -o /dev/null --max-time 5 -w '%{{http_code}}' {ready}) "
                      f"$({AUTH_CURL} -s --max-time 5 {metrics} | sed -n 's/^{metric} //p')\"")
    return "; ".join(checks)


def is_ready(answer: str) -> bool:
    """ready_command's answer: both /-/ready 200 and both configurations loaded."""
    return answer.split() == ["200", "1", "200", "1"]


def firing(alerts_json: str) -> tuple[dict[str, list[str]], int]:
    """Prometheus' /api/v1/alerts: host -> the names of the alerts firing for it (sorted; a host-less alert under
    "-"), each printable and bounded (wire.shown); and how many alerts are not of an alert's shape (an object with
    labels, a string alertname, and a string host if any). An answer without data.alerts, a list: Unreadable."""
    alerts, odd = _objects(alerts_json, "Prometheus' /api/v1/alerts", ("data", "alerts"),
                           '{"data": {"alerts": [...]}}')
    out: dict[str, set[str]] = {}
    for a in alerts:
        labels = a.get("labels") if isinstance(a.get("labels"), dict) else {}
        name, where = labels.get("alertname"), labels.get("host", "-")
        if not isinstance(name, str) or not isinstance(where, str):
            odd += 1
        elif a.get("state") == "firing":
            out.setdefault(shown(where, 256), set()).add(shown(name))
    return {h: sorted(names) for h, names in sorted(out.items())}, odd


def bundle_staging(bundle: str) -> str:
    """Where a bundle's files are uploaded before install_bundle_command checks them and makes them live."""
    return f"{BUNDLES}/.{bundle}.tmp"


def stage_bundle_command(bundle: str) -> str:
    """An empty staging directory of the bundle's, only its owner's (Alertmanager's file may hold a token):
    fleet/programs/bundle.sh's stage."""
    tmp = bundle_staging(bundle)
    return controller.shell("bundle.sh", "stage", BUNDLES, tmp, OWNER,
                            *(f"{tmp}/{d}" for d in ("", RULES_DIR, DASHBOARD.rsplit("/", 1)[0])))


def install_bundle_command(bundle: str) -> str:
    """Check the uploaded bundle with the host's promtool and amtool, then make it live; the bundles before it but
    the last KEEP_BUNDLES go. Nothing live changes if a check fails: fleet/programs/bundle.sh's install."""
    return controller.shell("bundle.sh", "install", BUNDLES, bundle_staging(bundle), bundle, LIVE, KEEP_BUNDLES, CONFIG,
                            ALERTMANAGER_CONFIG)


# --- silences: no page during a rollout ------------------------------------------------------------
SILENCE_BY = "sglang-fleet"
_SILENCE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _iso(t: float) -> str:
    ms = round(t * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def silence_command(mon: Monitoring, host: str, gpu_class: str, starts: float, ends: float, comment: str,
                    sid: str | None = None) -> str:
    """A silence of every alert about `host` from now until `ends` (epoch seconds), through Alertmanager's
    API on the monitoring host; prints its answer (the silence's id). With `sid`, that silence of ours given these
    times instead (Alertmanager changes it in place, or expires it and answers the id of its replacement)."""
    if sid is not None and not _SILENCE_ID.fullmatch(sid):
        raise ValueError(f"not a silence id: {sid!r}")
    body = {"matchers": [{"name": "host", "value": host, "isRegex": False, "isEqual": True},
                         {"name": "gpu_class", "value": gpu_class, "isRegex": False, "isEqual": True}],
            "startsAt": _iso(starts), "endsAt": _iso(ends), "createdBy": SILENCE_BY, "comment": comment,
            **({"id": sid} if sid is not None else {})}
    return (f"{AUTH_CURL} -s --max-time 10 -X POST -H 'Content-Type: application/json' "
            f"-d {shlex.quote(json.dumps(body))} "
            f"{shlex.quote(mon.url(mon.alertmanager_port, '/api/v2/silences'))}")


def silence_id(answer: str) -> str:
    """The id in Alertmanager's answer to a new silence ({"silenceID": "..."}); Unreadable otherwise."""
    doc = load_json(answer, "Alertmanager's answer to a new silence")
    sid = doc.get("silenceID") if isinstance(doc, dict) else None
    if not isinstance(sid, str) or not _SILENCE_ID.fullmatch(sid):
        raise Unreadable(f"Alertmanager's answer to a new silence: expected a silenceID, found {excerpt(answer)}")
    return sid


@dataclass(frozen=True)
class Silence:
    """A silence of a host's turn in Alertmanager, made by this run or by one killed before its turn ended."""

    id: str
    starts: float  # epoch seconds
    ends: float


def silences_command(mon: Monitoring, host: str) -> str:
    """Alertmanager's silences with a host="<host>" matcher, any state, as its API answers them (a JSON list)."""
    return (f"{AUTH_CURL} -s --max-time 10 -G --data-urlencode {shlex.quote(f'filter=host={json.dumps(host)}')} "
            f"{shlex.quote(mon.url(mon.alertmanager_port, '/api/v2/silences'))}")


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z")


def _epoch(text) -> float | None:
    """Alertmanager's UTC timestamp (RFC 3339, Z) as epoch seconds; None for anything else."""
    m = _RFC3339.fullmatch(text) if isinstance(text, str) else None
    if m is None:
        return None
    try:
        whole = datetime.datetime.fromisoformat(m.group(1) + "+00:00").timestamp()
    except ValueError:  # a day or an hour out of range
        return None
    return whole + float(f"0.{m.group(2) or 0}")


def ours(answer: str, host: str, gpu_class: str) -> list[Silence]:
    """Of Alertmanager's silences (silences_command's answer), those of a turn of `host`, whichever run made them: by
    SILENCE_BY, on exactly the host's and its class's labels (silence_command's matchers), active or pending.
    An answer that is not a list of silences: Unreadable; a silence not of that shape is not ours."""
    doc = load_json(answer, "Alertmanager's silences")
    if not isinstance(doc, list):
        raise Unreadable(f"Alertmanager's silences: expected a list, found {excerpt(answer)}")
    turn = [("gpu_class", gpu_class), ("host", host)]
    found = []
    for s in doc:
        if not isinstance(s, dict) or s.get("createdBy") != SILENCE_BY or not isinstance(s.get("status"), dict) \
                or s["status"].get("state") not in ("active", "pending") or not isinstance(s.get("matchers"), list):
            continue
        matchers = s["matchers"]
        if not all(isinstance(m, dict) and m.get("isRegex") is False and m.get("isEqual", True) is True
                   for m in matchers) or sorted((str(m.get("name")), str(m.get("value"))) for m in matchers) != turn:
            continue
        sid, starts, ends = s.get("id"), _epoch(s.get("startsAt")), _epoch(s.get("endsAt"))
        if isinstance(sid, str) and _SILENCE_ID.fullmatch(sid) and starts is not None and ends is not None:
            found.append(Silence(sid, starts, ends))
    return found


def turn_ended(silences: list[Silence], now: float, mon: Monitoring) -> dict[str, float]:
    """When each silence of a host whose turn ended `now` is to end (id -> epoch seconds): once its alerts have
    resolved (resolve_s from now), sooner than the turn bound it was made with, later than a turn that took
    nearly that bound left it; none outlives its turn by more."""
    return {s.id: now + mon.resolve_s() for s in silences}


# --- make monitor -----------------------------------------------------------------------------------
MONITOR_LISTED = 100  # lines of each of make monitor's lists (targets, alerts, silences): a server may say any number


def _objects(text: str, what: str, path: tuple[str, ...], expected: str) -> tuple[list[dict], int]:
    """The list at `path` in a server's JSON answer: its objects, and how many of it are not objects. Unreadable,
    saying what was expected, for an answer without that list."""
    value = load_json(text, what)
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if not isinstance(value, list):
        raise Unreadable(f"{what}: expected {expected}, found {excerpt(text)}")
    items = [v for v in value if isinstance(v, dict)]
    return items, len(value) - len(items)


def _labels(item: dict) -> dict:
    """An item's labels, none where it has none or they are not of that shape (the item is still shown)."""
    labels = item.get("labels")
    return labels if isinstance(labels, dict) else {}


def describe_monitor(host: str, link: str, targets_json: str, alerts_json: str, silences_json: str) -> str:
    """What the monitoring host scrapes (and whether each answers), what fires, what is silenced, and where
    to look: Prometheus' answers (/api/v1/targets, /api/v1/alerts) and Alertmanager's (/api/v2/silences),
    each read as untrusted: one that does not read is said, the others still shown; an item that is not an
    object is counted; every value shown printable and bounded (wire.shown), each list at most MONITOR_LISTED."""
    out = [f"{host}: Prometheus {link}"]

    def read(text: str, what: str, path: tuple[str, ...], expected: str) -> tuple[list[dict] | None, str]:
        try:
            items, odd = _objects(text, what, path, expected)
        except Unreadable as e:
            out.append(f"  {host}: unreadable: {e}")
            return None, ""
        return items, f"; {odd} unreadable (expected an object each)" if odd else ""

    def target(t: dict) -> str:
        lab = _labels(t)
        why = f" ({shown(t.get('lastError'), 120)})" if t.get("lastError") else ""
        return (f"  {shown(lab.get('job', '?')):<12} {shown(lab.get('host', '-')):<16} "
                f"{shown(t.get('scrapeUrl', '?'))}  {shown(t.get('health', '?'))}{why}")

    def alert(a: dict) -> str:
        lab, said = _labels(a), a.get("annotations")
        summary = said.get("summary", "") if isinstance(said, dict) else ""
        return (f"  {shown(lab.get('alertname', '?'))} {shown(lab.get('host', '-'))} "
                f"({shown(lab.get('severity', '?'))}) since {shown(a.get('activeAt', '?'))}: {shown(summary, 200)}")

    def silence(s: dict) -> str:
        matchers = s.get("matchers") if isinstance(s.get("matchers"), list) else []
        on = ", ".join(f"{shown(m.get('name', '?'))}={shown(m.get('value', '?'))}" if isinstance(m, dict) else "?"
                       for m in matchers[:MONITOR_LISTED])
        return (f"  {shown(on, 200)} until {shown(s.get('endsAt', '?'))} by {shown(s.get('createdBy', '?'))}: "
                f"{shown(s.get('comment', ''), 200)}")

    targets, odd = read(targets_json, "Prometheus' targets", ("data", "activeTargets"),
                        '{"data": {"activeTargets": [...]}}')
    if targets is not None:
        up = [t for t in targets if t.get("health") == "up"]
        out.append(f"scraped: {len(targets)} targets, {len(up)} up{odd}")
        order = sorted(targets, key=lambda t: (str(_labels(t).get("job", "")), str(_labels(t).get("host", ""))))
        out += capped(order, MONITOR_LISTED, target)
    alerts, odd = read(alerts_json, "Prometheus' alerts", ("data", "alerts"), '{"data": {"alerts": [...]}}')
    if alerts is not None:
        firing_now = [a for a in alerts if a.get("state") == "firing"]
        out.append(f"firing: {len(firing_now)}" + (f" (and {len(alerts) - len(firing_now)} pending)"
                                                    if len(alerts) > len(firing_now) else "") + odd)
        out += capped(firing_now, MONITOR_LISTED, alert)
    silences, odd = read(silences_json, "Alertmanager's silences", (), "a list of silences")
    if silences is not None:
        active = [s for s in silences if isinstance(s.get("status"), dict) and s["status"].get("state") == "active"]
        out.append(f"silenced: {len(active)} active{odd}")
        out += capped(active, MONITOR_LISTED, silence)
    return "\n".join(out)
