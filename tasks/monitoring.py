"""The monitoring host: Prometheus and Alertmanager from Debian's packages, converged like any service
(each step changes only what differs; a second run changes nothing):

  install    apt installs the packages where they are missing (the host's own apt sources)
  configure  the password's files (0600: the web configuration both read, with its bcrypt hash; Prometheus'
             own; the deploy's curl configuration), the units' arguments (/etc/default/...), and the bundle
             fleet/monitoring/config.py generates from the inventory and group_data: scrape targets, rules, routes;
             uploaded as files, checked on the host with promtool and amtool before it goes live, by an
             atomic symlink swap
  activate   restart where the arguments changed, reload where the bundle did; wait until both are
             ready and say their configuration loaded

A host added to the inventory is scraped after the next deploy (this host's bundle changes).
"""

from __future__ import annotations

import time
from pathlib import Path

from pyinfra import host
from pyinfra.api import StringCommand, operation
from pyinfra.facts.server import Command
from pyinfra.operations import python, server, systemd

from adapter import run as runs
from facts.monitoring import MonitoringFacts
from fleet.core import bounds, hosts
from fleet.spec.load import SpecError, load_class_specs, load_monitoring, monitoring_files
from fleet.monitoring.config import bundle_id, webhook_urls
from fleet.monitoring.host import OWNER, PACKAGES, SECRET_OWNERS, UNITS, bundle_changes, bundle_staging, \
    defaults_files, install_bundle_command, is_ready, live_files_command, ready_command, secret_files, \
    stage_bundle_command
from fleet.monitoring.models import Monitoring
from fleet.core.outcome import HostVerdict
from fleet.rollout.commands import sha1, write_command
from fleet.spec.secrets import SecretError, read_key
from tasks.common import HostLost, fail, run
from tasks.install import secret_commands
from tasks.preflight import contained, refused

READY_TIMEOUT_S = 60  # Prometheus replays its write-ahead log at start: seconds for a fleet's


def is_monitoring(group_dir: str = "group_data") -> bool:
    return any(g in monitoring_files(Path(group_dir)) for g in host.groups)


def converge(group_dir: str = "group_data") -> None:
    report = runs.of(host.state).report.host(host.name)
    report.gpu_class = "monitoring"
    contained(report, "monitoring", lambda: _converge(report, Path(group_dir)))


def _converge(report, group_dir: Path) -> None:
    try:
        group = next(g for g in host.groups if g in monitoring_files(group_dir))
        mon = load_monitoring(group_dir, load_class_specs(group_dir))[group]
        password = read_key(mon.password, f"group_data/{group}.py", "monitoring.password")
        urls = webhook_urls(mon, f"group_data/{group}.py")
        files, scraped = hosts.monitoring_bundle(host.state.inventory, group_dir, mon, urls)
    except (SpecError, SecretError, ValueError) as e:
        return refused(report, [f"{host.name}: monitoring: {p}" for p in getattr(e, "problems", [str(e)])])
    facts = host.get_fact(MonitoringFacts, ready=ready_command(mon))

    missing = [p for p in PACKAGES if not facts.installed[p]]
    installed = server.shell(
        name=f"Install {', '.join(missing)} (apt)",
        commands=["DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
                  f"apt-get install -y -qq --no-install-recommends {' '.join(PACKAGES)}"]) if missing else None
    secrets = {path: text for path, text in secret_files(mon, password, facts.web_hash).items()
               if facts.secrets_sha1.get(path) != sha1(text)}
    locked = _secret_files(name=f"Password files {', '.join(secrets)} (0600, not shown)", files=secrets) \
        if secrets else None  # both read them on each request: no restart for a new password
    changed_args = [path for path, text in defaults_files(mon).items() if facts.defaults_sha1[path] != sha1(text)]
    args = server.shell(name=f"Arguments {', '.join(changed_args)}",
                        commands=[write_command(p, defaults_files(mon)[p]) for p in changed_args]) \
        if changed_args or missing else None  # a fresh install writes Debian's own: put ours over them
    new_bundle = facts.live != bundle_id(files)
    if new_bundle:  # what it changes, said before it is written (make dry shows it): one more read, on a change only
        if facts.live:
            said = host.get_fact(Command, live_files_command()) or ""
            host.log_styled(f"monitoring configuration: {'; '.join(bundle_changes(files, said)) or 'no file changed'}",
                            fg="cyan")
        _bundle(name=f"Configuration {bundle_id(files)} ({len(scraped)} targets, checked with promtool and amtool)",
                files=files, bundle=bundle_id(files))
    if missing or any(facts.active[u] != "active" for u in UNITS):
        for unit in UNITS:
            systemd.service(name=f"Enable and start {unit}", service=unit, running=True, enabled=True)
    if args is not None:
        for unit in UNITS:
            systemd.service(name=f"Restart {unit} (its arguments changed)", service=unit, restarted=True)
    elif new_bundle:
        for unit in UNITS:
            systemd.service(name=f"Reload {unit} (its configuration changed)", service=unit, reloaded=True)
    changes = [what for what, did in ((f"install {', '.join(missing)}", installed is not None),
                                      ("update password files", locked is not None),
                                      ("update arguments", args is not None),
                                      (f"configuration {bundle_id(files)}", new_bundle)) if did]
    report.action = ", ".join(changes) or "none (already as declared)"
    if not changes and facts.ready and all(s == "active" for s in facts.active.values()):
        report.verdict = HostVerdict.OK  # read ready in the facts' one command: nothing to wait for
        return None
    report.verdict = HostVerdict.PASSED_PREFLIGHT
    python.call(name="Wait for Prometheus and Alertmanager to be ready with this configuration",
                function=_wait_ready, mon=mon)


@operation()
def _secret_files(files: dict[str, str]):
    for path, text in files.items():
        yield from secret_commands(path, text, SECRET_OWNERS[path])


def bundle_commands(files: dict[str, str], bundle: str):
    """The bundle as files (uploaded one by one, each 0600: no command carries it, whatever its size), then checked
    and made live."""
    yield StringCommand(stage_bundle_command(bundle))
    for path, text in sorted(files.items()):
        yield from secret_commands(f"{bundle_staging(bundle)}/{path}", text, OWNER)
    yield StringCommand(install_bundle_command(bundle))


_bundle = operation()(bundle_commands)


def _wait_ready(state, host, mon: Monitoring) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            _, out = run(host, ready_command(mon), bounds.gateway("Prometheus' and Alertmanager's /-/ready"))
        except HostLost as e:
            return fail(host, e.why)
        if is_ready(out):
            runs.of(host.state).report.host(host.name).verdict = HostVerdict.OK
            return True
        if time.monotonic() > deadline:
            return fail(host, f"{host.name}: monitoring: expected Prometheus and Alertmanager ready with their "
                              f"configuration loaded within {READY_TIMEOUT_S}s (/-/ready 200, "
                              f"*_config_last_reload_successful 1 each), found {out.strip() or 'no answer'} "
                              f"(journalctl -u {UNITS[0]} -u {UNITS[1]})")
        time.sleep(1)
