"""tasks/monitoring: the monitoring host's convergence as the operations it queues (recorded, not run):
the packages only where missing, the password's files, the units' arguments and the bundle only where they
differ, a restart for new arguments, a reload for a new bundle, nothing on a converged host but the readiness
wait; the targets read off the inventory; what the host's facts answer, parsed; the readiness wait; a
1000-replica bundle checked by promtool and uploaded as files through a fake host."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

import bcrypt
import pytest
from answers import answer, record
from builders import make_spec
from fakehost import Clock, Script, fake_hosts, fresh_run, this_run  # noqa: F401
from pyinfra.api import StringCommand
from pyinfra.context import ctx_host, ctx_state
from pyinfra.facts.server import Command

from facts.monitoring import MonitoringFacts, MonitoringStatus, MonitorView
from fleet.rollout.gate import CURL
from fleet.monitoring.config import bundle, bundle_id
from fleet.monitoring.host import AUTH_CURL, BUNDLES, CURL_CONFIG, DEFAULTS, LIVE, PACKAGES, PASSWORD_FILE, \
    SECRET_OWNERS, UNITS, WEB_CONFIG, MonitoringHost, bundle_staging, defaults_files, parse_monitoring_host, \
    ready_command, secret_files
from fleet.monitoring.models import CONFIG, Monitoring
from fleet.monitoring.silences import silence_command, silences_command
from fleet.core.layout import staged_path
from fleet.core import hosts
from fleet.rollout.commands import sha1
from tasks import monitoring, preflight

SPEC = make_spec(service={"host": "0.0.0.0"})
MON = Monitoring()
PASSWORD = "mon-password-0123"
HASH = secret_files(MON, PASSWORD, "")[WEB_CONFIG].split('"')[-2]  # one hash for every test: bcrypt takes time


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv("SGLANG_FLEET_MONITORING_PASSWORD", PASSWORD)


@pytest.fixture
def group_dir(tmp_path):
    d = tmp_path / "group_data"
    d.mkdir()
    data = SPEC.model_dump(mode="json", exclude_defaults=True)
    (d / "pro6000.py").write_text("".join(f"{k} = {v!r}\n" for k, v in data.items()))
    (d / "mon.py").write_text("monitoring = {}\n")
    return d


class Ops:
    """pyinfra's operations as tasks/monitoring queues them: (kind, arguments) in order."""

    def __init__(self, monkeypatch):
        self.queued = []
        for module, names in (("server", ("shell",)), ("systemd", ("service",)), ("python", ("call",))):
            monkeypatch.setattr(monitoring, module, SimpleNamespace(**{n: self.op(f"{module}.{n}") for n in names}))
        for name in ("_secret_files", "_bundle"):
            monkeypatch.setattr(monitoring, name, self.op(name))
        monkeypatch.setattr(preflight, "python", SimpleNamespace(call=self.op("refuse")))

    def op(self, kind):
        def queue(**kwargs):
            self.queued.append((kind, kwargs))
            return SimpleNamespace(will_change=True)
        return queue

    def names(self) -> list[str]:
        return [kw["name"] for _, kw in self.queued]


def converging(group_dir, facts: MonitoringHost):
    """The monitoring host's row after converge(), the bundle its inventory makes, what the task logged."""
    fakes = fake_hosts({"r1": Script({}), "r2": Script({}), "mon": Script({})},
                       {"r1": {"ssh_hostname": "10.0.0.1"}, "r2": {"ssh_hostname": "10.0.0.2"}},
                       {"pro6000": (["r1", "r2"], SPEC.model_dump(mode="json", exclude_defaults=True)),
                        "mon": (["mon"], {})})
    mon = fakes["mon"].host
    mon.get_fact = lambda cls, *args, **kw: {MonitoringFacts: facts, Command: LIVE_FILES}[cls]
    with ctx_state.use(mon.state), ctx_host.use(mon):
        assert monitoring.is_monitoring(str(group_dir))
        monitoring.converge(str(group_dir))
    return this_run().report.hosts["mon"], lambda: bundle(
        MON, hosts.scrape_targets(mon.state.inventory, group_dir), {"pro6000": SPEC}, {"pro6000": None}, []), \
        fakes["mon"].logged


LIVE_FILES = f"{'0' * 40}  ./prometheus.json"  # the live bundle's files, as sha1sum lists them

NOTHING = MonitoringHost({p: "" for p in PACKAGES}, "", {p: "" for p in DEFAULTS.values()}, {u: "" for u in UNITS},
                         False, {p: "" for p in SECRET_OWNERS})


def converged(files) -> MonitoringHost:
    return MonitoringHost({p: "2.42.0+ds-5" for p in PACKAGES}, bundle_id(files),
                          {p: sha1(t) for p, t in defaults_files(MON).items()}, {u: "active" for u in UNITS}, True,
                          {p: sha1(t) for p, t in secret_files(MON, PASSWORD, HASH).items()}, HASH)


def test_a_new_monitoring_host_gets_the_packages_arguments_bundle_and_a_restart(group_dir, monkeypatch):
    ops = Ops(monkeypatch)
    row, made, _ = converging(group_dir, NOTHING)
    files = made()
    assert ops.names() == [
        "Install prometheus, prometheus-alertmanager (apt)",
        f"Password files {WEB_CONFIG}, {PASSWORD_FILE}, {CURL_CONFIG} (0600, not shown)",
        f"Arguments {DEFAULTS['prometheus']}, {DEFAULTS['alertmanager']}",
        f"Configuration {bundle_id(files)} (2 targets, checked with promtool and amtool)",
        *(f"Enable and start {u}" for u in UNITS), *(f"Restart {u} (its arguments changed)" for u in UNITS),
        "Wait for Prometheus and Alertmanager to be ready with this configuration"]
    assert ops.queued[3][1]["files"] == files and ops.queued[3][1]["bundle"] == bundle_id(files)
    written = ops.queued[1][1]["files"]
    assert written[PASSWORD_FILE] == PASSWORD and written[CURL_CONFIG] == f'user = "sglang-fleet:{PASSWORD}"\n'
    assert "apt-get install" in ops.queued[0][1]["commands"][0]
    assert row.gpu_class == "monitoring" and row.verdict == "passed preflight"
    assert row.action.startswith("install prometheus, prometheus-alertmanager, update password files, "
                                 "update arguments, configuration ")


def test_a_converged_monitoring_host_is_read_in_one_command_and_left_as_it_is(group_dir, monkeypatch):
    ops = Ops(monkeypatch)
    files = converging(group_dir, NOTHING)[1]()  # what it would write
    ops.queued.clear()
    row, _, _ = converging(group_dir, converged(files))
    assert ops.names() == []  # its facts said ready: no operation, no second command
    assert row.action == "none (already as declared)" and row.verdict == "OK"
    not_ready = converged(files)
    ops.queued.clear()
    converging(group_dir, MonitoringHost(not_ready.installed, not_ready.live, not_ready.defaults_sha1,
                                         not_ready.active, False, not_ready.secrets_sha1, not_ready.web_hash))
    assert ops.names() == ["Wait for Prometheus and Alertmanager to be ready with this configuration"]


def test_a_new_replica_changes_the_bundle_and_reloads_without_a_restart(group_dir, monkeypatch):
    ops = Ops(monkeypatch)
    files = converging(group_dir, NOTHING)[1]()
    old = converged(files)
    stale = MonitoringHost(old.installed, "0123456789abcdef", old.defaults_sha1, old.active, False, old.secrets_sha1,
                           old.web_hash)
    ops.queued.clear()
    row, _, logged = converging(group_dir, stale)
    assert ops.names() == [f"Configuration {bundle_id(files)} (2 targets, checked with promtool and amtool)",
                           *(f"Reload {u} (its configuration changed)" for u in UNITS),
                           "Wait for Prometheus and Alertmanager to be ready with this configuration"]
    changes = [line for line in logged if line.startswith("monitoring configuration:")]
    assert changes == ["monitoring configuration: alertmanager.json added; dashboards/sglang-fleet.json added; "
                       "rules/class-pro6000.json added; prometheus.json changed"]


def test_a_broken_monitoring_file_refuses_the_host_naming_the_field(group_dir, monkeypatch):
    (group_dir / "mon.py").write_text('monitoring = {"scrape_interval_s": 0}\n')
    ops = Ops(monkeypatch)
    row, _, _ = converging(group_dir, NOTHING)
    assert row.verdict == "REFUSED" and any("monitoring.scrape_interval_s" in r for r in row.reasons), row.reasons
    assert ops.names() == ["Refuse host (preflight failed)"]


def test_the_facts_answer_is_parsed_and_garbage_reads_as_absent():
    said = answer(record("version:prometheus", "2.42.0+ds-5+deb12u1\n"), record("version:prometheus-alertmanager", ""),
                  record("live", "0123456789abcdef\n"), record(f"sha1:{DEFAULTS['prometheus']}", "a" * 40),
                  record(f"sha1:{DEFAULTS['alertmanager']}", "not a sha1; rm -rf /"),
                  record("active:prometheus.service", "active\n"), record("active:prometheus-alertmanager.service",
                                                                          "\x1b[31mactive"),
                  record("ready", "200 1\n200 1\n"), record("hash", HASH + "\n"),
                  record(f"sha1:{WEB_CONFIG}", "b" * 40), record(f"sha1:{CURL_CONFIG}", "$(reboot)"))
    got = parse_monitoring_host(said)
    assert got.web_hash == HASH and got.secrets_sha1 == {WEB_CONFIG: "b" * 40, PASSWORD_FILE: "", CURL_CONFIG: ""}
    assert parse_monitoring_host(answer(record("hash", HASH[:-1] + "'; rm -rf /"))).web_hash == ""
    assert got.installed == {"prometheus": "2.42.0+ds-5+deb12u1", "prometheus-alertmanager": ""}
    assert got.live == "0123456789abcdef"
    assert got.defaults_sha1 == {DEFAULTS["prometheus"]: "a" * 40, DEFAULTS["alertmanager"]: ""}
    assert got.active == {"prometheus.service": "active", "prometheus-alertmanager.service": ""}
    assert got.ready
    assert parse_monitoring_host("garbage\n@@live\n%%%\n") == NOTHING


def test_the_facts_command_runs_in_a_shell_and_says_what_is_missing():
    out = subprocess.run(["sh", "-c", MonitoringFacts().command(ready_command(MON))], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0
    got = parse_monitoring_host(out.stdout)
    assert got.live == "" and set(got.installed) == set(PACKAGES) and not got.ready


def test_a_1000_replica_bundle_is_checked_by_promtool_and_uploaded_as_files_through_the_host(group_dir, tools,
                                                                                               tmp_path):
    names = [f"r{i}" for i in range(1000)]
    fakes = fake_hosts({**{n: Script({}) for n in names}, "mon": Script({})},
                       {n: {"ssh_hostname": f"10.1.{i // 250}.{i % 250 + 1}"} for i, n in enumerate(names)},
                       {"pro6000": (names, SPEC.model_dump(mode="json", exclude_defaults=True)), "mon": (["mon"], {})})
    mon = fakes["mon"]
    files, scraped = hosts.monitoring_bundle(mon.host.state.inventory, group_dir, MON, {})
    assert len(scraped) == 1000 and len(files[CONFIG]) > 128 << 10  # more than one shell argument takes
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    out = subprocess.run([str(tools / "promtool"), "check", "config", CONFIG], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and f"{CONFIG} is valid" in out.stdout, out.stdout + out.stderr

    for command in monitoring.bundle_commands(files, bundle_id(files)):  # as pyinfra runs the operation's commands
        if isinstance(command, StringCommand):
            assert mon.host.run_shell_command(command)[0]
        else:
            assert command.function(mon.host.state, mon.host, *command.args, **command.kwargs)
    staging = bundle_staging(bundle_id(files))
    assert mon.uploads == {staged_path(f"{staging}/{p}"): t for p, t in files.items()}
    commands = mon.commands()
    assert max(len(c) for c in commands) < 4096  # no file's content in any command
    # staged afresh, each file 0600, then checked and made live (what bundle.sh does: test_host_programs.py)
    assert commands[0] == monitoring.stage_bundle_command(bundle_id(files))
    assert f"stage {BUNDLES} {staging} prometheus" in commands[0]
    assert all(f"install -m 0600 -o prometheus -g prometheus /dev/null {staged_path(f'{staging}/{p}')}" in commands
               for p in files)
    assert commands[-1] == monitoring.install_bundle_command(bundle_id(files))
    assert f"install {BUNDLES} {staging} {bundle_id(files)} {LIVE} " in commands[-1]


def test_the_password_comes_from_its_secret_source_and_its_hash_stays_while_it_matches(group_dir, monkeypatch):
    monkeypatch.delenv("SGLANG_FLEET_MONITORING_PASSWORD")
    ops = Ops(monkeypatch)
    row, _, _ = converging(group_dir, NOTHING)
    assert row.verdict == "REFUSED" and any("monitoring.password: environment variable "
                                            "SGLANG_FLEET_MONITORING_PASSWORD is not set" in r for r in row.reasons)
    assert ops.names() == ["Refuse host (preflight failed)"]
    assert secret_files(MON, PASSWORD, HASH) == secret_files(MON, PASSWORD, HASH)  # a second run writes nothing
    other = secret_files(MON, "another-password", HASH)[WEB_CONFIG]
    assert HASH not in other and bcrypt.checkpw(b"another-password", other.split('"')[-2].encode())
    assert secret_files(MON, PASSWORD, "$2b$10$not-a-hash")[WEB_CONFIG] != secret_files(MON, PASSWORD, HASH)[WEB_CONFIG]


def test_every_call_to_prometheus_or_alertmanager_authenticates_without_the_password_on_its_command_line():
    url = MON.url(MON.prometheus_port, "/api/v1/alerts")
    commands = [ready_command(MON), MonitoringFacts().command(ready_command(MON)),
                MonitoringStatus().command(ready_command(MON), url), MonitorView().command(url, url, url),
                silence_command(MON, "r1", "pro6000", 0, 60, "a turn"),
                silences_command(MON, "r1")]
    assert all(c.count(CURL) == c.count(AUTH_CURL) > 0 for c in commands), commands
    assert all(PASSWORD not in c for c in commands)


@pytest.mark.parametrize("answers, ok, polls", [
    (["200 1 200 1"], True, 1),
    (["000  000 ", "200 1 000 ", "200 1 200 1"], True, 3),  # Prometheus first, then Alertmanager
    (["200 0 200 1"], False, 62),  # its last configuration load failed: never ready with this one
])
def test_the_readiness_wait_passes_once_both_are_ready_with_their_configuration(monkeypatch, answers, ok, polls):
    clock = Clock()
    monkeypatch.setattr(monitoring, "time", clock)
    mon = fake_hosts({"mon": Script({"/-/ready": answers})})["mon"]
    assert monitoring._wait_ready(None, mon.host, MON) is ok
    assert mon.commands() == [ready_command(MON)] * polls
    row = this_run().report.hosts["mon"]
    assert row.verdict == ("OK" if ok else "FAILED")
    if not ok:
        assert "found 200 0 200 1" in row.reasons[0] and "journalctl -u prometheus.service" in row.reasons[0]
