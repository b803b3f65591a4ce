"""The spec of `monitoring = {...}` (group_data/monitoring.py): Prometheus and Alertmanager on the monitoring
host (Monitoring, its receivers, alert bounds and TLS, with their validators), and the names the package's other
modules share: the files of the configuration directory, the route's receiver of nothing, Prometheus' send timeout.
"""

from __future__ import annotations

import re
import typing
from typing import Annotated, Union
from urllib.parse import urlsplit

from pydantic import AfterValidator, Discriminator, Field, Tag, ValidationError, WrapValidator, model_validator

from fleet.rollout.gate import local_address, url_host
from fleet.spec import AbsPath, Bool, HostAddress, Int, Kind, Number, SecretSource, Source, Strict, Text
from fleet.spec.names import http_url
from fleet.core.wire import excerpt

CONFIG = "prometheus.json"  # Prometheus' --config.file, in the configuration directory
ALERTMANAGER_CONFIG = "alertmanager.json"
RULES_DIR = "rules"  # a file per class and per gateway; rule_files are relative to the config file
DASHBOARD = "dashboards/sglang-fleet.json"  # Grafana's dashboard JSON, for an operator to import
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,62}\Z")
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
