"""`make status`: what each host serves now, and whether it is what the repo declares.

Plain functions over what one round trip read (the preflight facts, the deploy records,
/metrics): no SSH here. Drift is judged by the same plan a deploy makes, so status and
`make dry` name a difference in the same words.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from fleet.rollout import guards, lock
from fleet.engine.install import running_engine
from fleet.weights.hub import served_weights
from fleet.gateway.floating import Vrrp, parse_vrrp
from fleet.rollout.gate import parse_metrics
from fleet.gateway.models import Gateway
from fleet.gateway.smg import READY, SMG_RELEASE, Replica, parse_workers
from fleet.rollout.history import History, Record, describe_record, describe_serving, when
from fleet.monitoring.host import UNIT_STATE, MonitoringHost, firing, is_ready
from fleet.rollout.parse import HostFacts
from fleet.rollout.gpus import NvidiaSmiStatus
from fleet.rollout.plan import declared_files, plan
from fleet.rollout.pending import read_pending
from fleet.core.report import describe_gpu_list
from fleet.rollout.commands import ManagedFile
from fleet.spec.secrets import Secrets, unread
from fleet.spec import ClassSpec
from fleet.core.wire import LINE, Unreadable, ascii_int, capped, excerpt, shown

# the verdicts, worst first: the exit code is non-zero for all but OK
UNREACHABLE, REFUSED, UNHEALTHY, DRIFT, OK = "UNREACHABLE", "REFUSED", "UNHEALTHY", "DRIFT", "OK"


@dataclass
class HostStatus:
    host: str
    verdict: str = OK
    gpu_class: str = "-"
    gpus: str = "-"
    unit: str = "-"  # ActiveState (SubState), UnitFileState
    health: int = 0  # /health's HTTP status now; 0: no answer
    served_model: str = "-"  # as the running server was started
    speculative: str = "-"  # its algorithm and knobs
    weights: str = "-"  # the revisions it serves (fleet.weights.hub.served_weights), '-' for directories placed by hand
    sglang: str = "-"
    accept_length: float | None = None  # sglang:spec_accept_length now
    gen_throughput: float | None = None  # sglang:gen_throughput now, tokens/s
    last_deploy: Record | None = None  # the newest deploy record
    drift: str = ""  # what `make deploy` would do, as `make dry` says it; '' when nothing
    tuning: str = ""  # a make tune left it on a candidate (which, since when, by whom); '' when none
    reasons: list[str] = field(default_factory=list)  # why the verdict: drift details, refusals, notes
    alerts: list[str] = field(default_factory=list)  # the alerts firing for this host, as Prometheus says
    firing: dict[str, list[str]] = field(default_factory=dict)  # the monitoring host's row: every host's alerts
    floating: dict = field(default_factory=dict)  # a gateway behind a floating address: address, state, holds

    def to_json(self) -> dict:
        return asdict(self)


def unreachable(host: str, gpu_class: str, reason: str) -> HostStatus:
    return HostStatus(host, UNREACHABLE, gpu_class, reasons=[f"{host}: {reason}"])


def refused(host: str, gpu_class: str, problems: list[str]) -> HostStatus:
    return HostStatus(host, REFUSED, gpu_class, reasons=list(problems))


def _not_compared(files: list[ManagedFile], facts: HostFacts) -> list[ManagedFile]:
    """Secret files taken as they are on the host (their content cannot be compared without the
    secrets); a missing one is still a difference."""
    return [replace(f, content=None, copied_from=f.path, copied_sha1=facts.deployed.sha1(f.path))
            if f.secret and facts.deployed.sha1(f.path) is not None else f for f in files]


def _file_drift(f: ManagedFile, facts: HostFacts) -> str:
    if facts.deployed.sha1(f.path) is None:
        return f"{f.path}: missing"
    return f"{f.path}: differs from group_data" if f.present else f"{f.path}: present, group_data declares none"


def judge(host: str, group: str, spec: ClassSpec, facts: HostFacts, history: History, metrics: str,
          secrets: Secrets | None, secrets_problem: str, now: float) -> HostStatus:
    """One host's row. secrets: the class's, read here; None when they cannot be (secrets_problem
    says why): their files are then compared by presence only."""
    # what runs: a declared engine by its venv, else the SGLang at the declared launcher
    running = running_engine(facts.runtime.cmdline)
    row = HostStatus(host, gpu_class=group, sglang=running or facts.engine.version or facts.engine.status)
    row.gpus = describe_gpu_list(facts.gpus.gpus) if facts.gpus.status is NvidiaSmiStatus.OK else facts.gpus.status
    row.reasons += [f"nvidia-smi said: {w}" for w in facts.gpus.warnings]
    unit = facts.units.get(spec.service_unit)
    row.unit = f"{unit.active_state} ({unit.sub_state}), {unit.unit_file_state or 'no unit file'}" if unit else "-"
    row.health = facts.runtime.health
    row.served_model, row.speculative = describe_serving(facts.runtime.cmdline)
    row.weights = served_weights(facts.runtime.cmdline, spec.hub.models_dir)
    m = parse_metrics(metrics)
    row.accept_length, row.gen_throughput = m.get("sglang:spec_accept_length"), m.get("sglang:gen_throughput")
    row.last_deploy = history.last

    violations = [str(v) for v in guards.preflight(host, spec, facts)]
    if violations:
        row.verdict, row.reasons = REFUSED, violations
        return row
    held = lock.judge(facts.deployed.lock, spec.lock_file, now, lock.stale_after(spec))
    if held.kind != "free":
        row.reasons.append(f"deploy lock: {held.message}")
    want = declared_files(spec, group, facts, secrets or unread(spec))
    if secrets is None:
        want = _not_compared(want, facts)
        row.reasons.append(f"secret files compared by presence only: {secrets_problem}")
    interrupted = read_pending(facts.deployed.pending, spec) if facts.deployed.pending else None
    p = plan(spec, want, facts, interrupted, "-", int(now), "-")
    if p.overlaid:
        row.tuning = f"{p.overlaid.candidate}, since {when(p.overlaid.since)} by {p.overlaid.by}"
    if p.has_work:
        row.drift = p.action()
        row.reasons[:0] = [*p.why] + [_file_drift(f, facts) for f in p.swap]
        row.verdict = DRIFT
    if facts.runtime.health != 200:
        row.verdict = UNHEALTHY
        row.reasons.insert(0, f"/health {facts.runtime.health or 'no answer'}")
    return row


def unreadable(host: str, what: str, expected: str, found: str) -> str:
    """A reason: what of a host's answer is not of the shape expected (quoted bounded and printable)."""
    return f"{host}: unreadable: {what}: expected {expected}, found {excerpt(found)}"


def judge_gateway(host: str, group: str, gw: Gateway, read: dict[str, str], replicas: list[Replica]) -> HostStatus:
    """The gateway host's row (facts.gateway.GatewayStatus read it): smg serving, its version, which declared
    replicas it routes to; behind a floating address, its keepalived's state and whether it holds the address.
    A value not of its shape is `?`, and a reason says what it was."""
    problems = []

    def checked(what: str, text: str, pattern, expected: str) -> str:
        if text and not pattern.fullmatch(text):
            problems.append(unreadable(host, what, expected, text))
            return "?"
        return text

    said = dict(line.split("=", 1) for line in read.get("unit", "").splitlines() if "=" in line)
    unit = {k: checked(f"systemctl show's {k}", said.get(k, ""), UNIT_STATE, "a unit state ([a-z-], 1 to 32)")
            for k in ("ActiveState", "SubState", "UnitFileState")}
    installed = checked("smg's version", read.get("installed", ""), SMG_RELEASE, "a version such as 1.13.0")
    row = HostStatus(host, gpu_class=group, gpus="-", sglang=f"smg {installed or 'not installed'}")
    row.unit = f"{unit['ActiveState'] or '?'} ({unit['SubState'] or '?'}), {unit['UnitFileState'] or 'no unit file'}"
    row.health = ascii_int(read.get("readiness"), 0, 999) or 0
    try:
        statuses = parse_workers(read.get("workers", ""))
    except Unreadable as e:
        statuses = {}
        problems.append(f"{host}: unreadable: {e}")
    ready = [r for r in replicas if statuses.get(r.url) == READY]
    row.served_model = f"{len(ready)}/{len(replicas)} replicas ready"
    row.speculative = f"routes {', '.join(gw.routes)}"
    if installed != gw.version:
        row.verdict = DRIFT
        row.drift = f"install smg {gw.version}"
    for r in replicas:
        if statuses.get(r.url) != READY:
            row.reasons.append(f"{r.host} ({r.url}): {statuses.get(r.url, 'not in the gateway')}")
    row.reasons += problems
    if unit["ActiveState"] != "active" or row.health != 200 or len(ready) < len(replicas):
        row.verdict = UNHEALTHY
        row.reasons.insert(0, f"/readiness {row.health or 'no answer'}")
    if gw.floating is not None:
        _judge_floating(row, gw, parse_vrrp(read))
    return row


def _judge_floating(row: HostStatus, gw: Gateway, v: Vrrp) -> None:
    address = gw.floating.address
    row.floating = {"address": address, "state": v.state or "-", "holds": v.holds}
    why = next((text for text, yes in (
        ("keepalived is not running", not v.active), (f"{row.host}: unreadable: {v.problem}", bool(v.problem)),
        ("held out of the election by a deploy's turn that did not end (the next make deploy finishes it)", v.handoff),
        ("its smg stopped", v.stopped), ("keepalived says FAULT: its smg is not ready", v.state == "FAULT"))
                if yes), "")
    if why:
        row.verdict = UNHEALTHY
        row.reasons.append(f"floating address {address}: {why}")
    if v.forwards_to or v.on_loopback:
        left = [w for w, on in ((f"route to {v.forwards_to}", v.forwards_to), ("hold on the loopback", v.on_loopback))
                if on]
        row.reasons.append(f"floating address {address}: a handoff's {' and '.join(left)} is still there (a deploy's "
                           "turn did not end: the next make deploy finishes it)")


def with_floating(rows: list[HostStatus]) -> list[HostStatus]:
    """Each gateway row of a group behind a floating address, with what the group's rows say together: which
    holds the address, or that none does, or more than one (keepalived's on both sides of a split link)."""
    groups: dict[tuple[str, str], list[HostStatus]] = {}
    for r in rows:
        if r.floating:
            groups.setdefault((r.gpu_class, r.floating["address"]), []).append(r)
    for (group, address), members in groups.items():
        holders = [r.host for r in members if r.floating["holds"]]
        for r in members:
            r.floating["held_by"] = holders
            if len(holders) != 1:
                r.verdict = UNHEALTHY if r.verdict in (OK, DRIFT) else r.verdict
                r.reasons.append(f"floating address {address}: " + (
                    "held by no gateway of " + group + ": clients reach none" if not holders else
                    f"held by {' and '.join(holders)} at once: each answers ARP for it (a split link?)"))
    return rows


def judge_monitoring(host: str, group: str, facts: MonitoringHost, ready: str, alerts: str,
                     declared_bundle: str) -> HostStatus:
    """The monitoring host's row (facts.monitoring.MonitoringStatus read it): both installed, active and ready
    with their configuration, the live bundle the one this inventory makes, and what fires."""
    row = HostStatus(host, gpu_class=group, sglang=", ".join(f"{p} {v or 'not installed'}"
                                                               for p, v in facts.installed.items()))
    row.unit = ", ".join(f"{u.removesuffix('.service')} {s or '?'}" for u, s in facts.active.items())
    row.health = 200 if is_ready(ready) else 0
    try:
        row.firing, odd = firing(alerts)
        if odd:
            row.reasons.append(f"{host}: unreadable: {odd} of Prometheus' /api/v1/alerts (expected an object with "
                               "labels, a string alertname and host)")
    except Unreadable as e:
        row.reasons.append(f"{host}: unreadable: {e}")
    row.served_model = f"{sum(len(v) for v in row.firing.values())} alert(s) firing"
    if facts.live != declared_bundle:
        row.verdict = DRIFT
        row.drift = f"write configuration {declared_bundle} (the host has {facts.live or 'none'})"
    if not all(facts.installed.values()) or any(s != "active" for s in facts.active.values()) or not row.health:
        row.verdict = UNHEALTHY
        row.reasons.insert(0, f"ready: {shown(' '.join(ready.split()), 40) or 'no answer'} (expected /-/ready 200 and "
                              "the configuration loaded, each)")
    return row


def with_alerts(rows: list[HostStatus]) -> list[HostStatus]:
    """Each row with the alerts firing for its host, as the monitoring host's row says (none without one)."""
    fired: dict[str, list[str]] = {}
    for r in rows:
        for h, names in r.firing.items():
            fired.setdefault(h, []).extend(names)
    return [replace(r, alerts=sorted(set(fired.get(r.host, [])))) for r in rows]


def exit_code(rows: list[HostStatus]) -> int:
    return 0 if all(r.verdict == OK for r in rows) else 1


REASONS_SHOWN = 20  # lines under a row: a host's answer may give it any number of reasons


def table(rows: list[HostStatus]) -> str:
    """The rows as make status prints them: every cell and line printable and bounded (wire.shown), whatever the
    hosts said; at most REASONS_SHOWN reasons under a row."""
    head = ("host", "class", "GPUs", "unit", "/health", "serving", "speculative", "weights", "SGLang", "accept",
            "tok/s", "last deploy", "verdict")
    cells = [tuple(map(shown, (
        r.host, r.gpu_class, r.gpus, r.unit, str(r.health or "-"), r.served_model, r.speculative, r.weights, r.sglang,
        f"{r.accept_length:.2f}" if r.accept_length is not None else "-",
        f"{r.gen_throughput:.1f}" if r.gen_throughput is not None else "-",
        describe_record(r.last_deploy), r.verdict)))
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *cells)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head).rstrip(), fmt.format(*("-" * w for w in widths))]
    for r, c in zip(rows, cells):
        out.append(fmt.format(*c).rstrip())
        under = [f"drift: make deploy would {r.drift}"] if r.drift else []
        under += capped([f"- {reason}" for reason in r.reasons], REASONS_SHOWN)
        if r.floating:
            f = r.floating
            under.append(f"floating {f['address']}: {f['state']}" + (", holds it" if f["holds"] else "") + (
                f"; held by {', '.join(f['held_by'])}" if f.get("held_by") and not f["holds"] else ""))
        if r.alerts:
            under.append(f"firing: {', '.join(r.alerts)}")
        out += [f"    {shown(line, LINE)}" for line in under]
    return "\n".join(out)
