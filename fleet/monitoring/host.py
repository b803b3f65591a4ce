"""The monitoring host itself: Debian's packages and units, the password's files and the units' defaults
files, what the host has (MonitoringHost, one round trip), the commands that stage, check and install a bundle and
ask whether both servers are ready, and what Prometheus says fires (`firing`).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field

import bcrypt

from fleet.core import controller
from fleet.rollout.gate import CURL, local_address, url_host
from fleet.core.wire import Unreadable, excerpt, frames, load_json, shown
from fleet.monitoring.models import ALERTMANAGER_CONFIG, CONFIG, DASHBOARD, RULES_DIR, Monitoring

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
