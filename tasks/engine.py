"""Engine: the declared SGLang (group_data `engine`) installed into a venv of its own beside the live
one, and checked there, before anything stops (fleet/engine/install.py has the commands and the rules):

  survey   which engines are installed, which the live unit and the kept backups run
  install  pip (run from the controller's pip wheel: a host's Python needs no pip of its own) into
           a hidden .partial beside the others, renamed once complete; unused engines beyond
           engine.keep removed first
  check    the new venv's capabilities (the engine fact's own command: cached as preflight reads
           them) against the spec, and its parser over the unit's command line

A host that fails any of it is refused with the old service and the training as they were.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pyinfra import host
from pyinfra.operations import python

from facts.sglang import SglangEngine
from fleet.core import bounds, layout
from fleet.rollout import guards
from fleet.engine import install as rules
from fleet.core.outcome import HostVerdict
from fleet.engine.parse import EngineStatus, parse_engine
from fleet.core.wire import excerpt
from adapter import run as runs
from tasks.common import CACHE, HostLost, WheelError, downloaded, fail, run, uploaded
from tasks.preflight import Preflight, refused

PIP = "pip==24.3.1"  # what installs every engine: the same pip on every host, whatever its Python has


def install(pf: Preflight) -> None:
    if pf.plan.install_engine is None:
        return
    try:
        wheel = pip_wheel()
        wheels = declared_wheels(pf.spec)
    except (WheelError, ValueError) as e:
        refused(runs.of(host.state).report.host(host.name), [f"{host.name}: engine {pf.plan.install_engine}: {e}"])
        return
    python.call(name="Install the declared engine beside the live one, and check it (nothing stops)",
                function=_install_or_lost, pf=pf, uploads=[(str(wheel), rules.pip_wheel_path(wheel.name)), *[
                    (str(w), f"{layout.engine_wheels(pf.spec.engine.name)}/{w.name}") for w in wheels]])


def pip_wheel() -> Path:
    """The pip wheel hosts install with (engines, the hub client), from the controller's cache."""
    return rules.the_pip_wheel(downloaded(CACHE / "wheels" / PIP.replace("==", "-"),
                                          ["--no-deps", "--only-binary=:all:", PIP], PIP))


def declared_wheels(spec) -> list[Path]:
    """engine.wheels on the controller, each a readable file (ValueError naming the first that is not)."""
    found = []
    for w in spec.engine.wheels:
        path = Path(w).expanduser()
        if not path.is_file() or not os.access(path, os.R_OK):
            raise ValueError(f"engine.wheels: expected a readable wheel file at {w} (from {Path.cwd()}), found "
                             + ("a directory" if path.is_dir() else "none"))
        found.append(path)
    return found


def _install_or_lost(state, host, pf: Preflight, uploads: list[tuple[str, str]]) -> bool:
    try:
        return _install(host, pf, uploads)
    except HostLost as e:  # nothing was begun: the host is as it was, but for what the install left
        return fail(host, e.why, f"{host.name}: engine {pf.spec.engine.name}: nothing live changed; the next run "
                                 "keeps a complete install and removes a partial one", verdict=HostVerdict.LOST)


def _install(host, pf: Preflight, uploads: list[tuple[str, str]]) -> bool:
    """uploads: (controller path, host path) of the pip wheel first, then the engine's own wheels."""
    spec, name = pf.spec, pf.spec.engine.name
    refuse = lambda why: fail(host, f"{host.name}: engine {name}: {why}; nothing was stopped", verdict=HostVerdict.REFUSED)  # noqa: E731
    _, out = run(host, rules.survey_command(spec), bounds.reading(spec, "the survey of the installed engines"))
    survey = rules.read_survey(out)
    remove = rules.to_remove(survey, name, spec.engine.keep)

    if name not in survey.engines:  # else installed since preflight: nothing to upload
        problem = uploaded(host, layout.engine_wheels(name), uploads)
        if problem:
            return refuse(problem)

    host.log(f"installing engine {name} ({', '.join(spec.engine.requirements)} from {_sources(spec)})")
    started = time.monotonic()
    _, out = run(host, rules.install_command(spec, uploads[0][1], remove), bounds.install(spec))
    done = rules.read_install(out)
    for gone in done.removed:
        host.log(f"removed engine {gone} (no unit runs it; engine.keep {spec.engine.keep})")
    if done.outcome == "busy":
        return refuse(f"expected no other install on the host, found one running (it holds "
                      f"{layout.ENGINE_INSTALL_LOCK}): run again once it is done")
    if done.outcome == "disk":
        free = f"{done.free_kib / 1024:.1f} MiB" if done.free_kib is not None else "no figure from df"
        return refuse(f"expected {spec.engine.disk_mib} MiB free at {layout.ENGINES_DIR} (engine.disk_mib), found "
                      f"{free}")
    if done.outcome == "pip":
        return refuse(f"expected pip to install {', '.join(spec.engine.requirements)} from {_sources(spec)}, found "
                      f"pip exit {done.pip_rc}: {excerpt(rules.pip_reason(done.pip_said), 600)} (the partial venv is "
                      f"removed; pip's log: {rules.failed_log(name)})")
    if done.outcome == "finish":
        return refuse(f"expected its freeze written and the venv renamed into place once pip was done, found exit "
                      f"{done.pip_rc} (the partial venv is removed)")
    if done.outcome == "no answer":
        return refuse(f"expected the install's records, found {excerpt(out, 300)}")
    if done.outcome == "new":
        host.log(f"engine {name} installed in {time.monotonic() - started:.1f}s at {layout.engine_dir(name)}")
    return _checked(host, pf, refuse)


def _sources(spec) -> str:
    """Where pip looks for the engine, in words."""
    e = spec.engine
    where = [u for u in [e.index_url, *e.extra_index_urls] if u]
    if e.wheels:
        where.append(f"{len(e.wheels)} wheel(s) uploaded to {layout.engine_wheels(e.name)}")
    return ", ".join(where) + ("" if e.index_url else " (no index)")


def _checked(host, pf: Preflight, refuse) -> bool:
    """The new engine against the spec, from its own venv, as preflight checks a live one."""
    spec, timeout = pf.spec, pf.spec.readiness.command_timeout_s
    started = time.monotonic()
    fact = SglangEngine().command(spec.launcher, timeout, spec.service.environment, layout.ENGINE_CACHE_DIR)
    _, out = run(host, rules.check_command(spec, timeout, fact), bounds.engine_check(spec))
    engine = parse_engine(out)
    if engine.status is EngineStatus.NO_LAUNCHER:
        return refuse(f"expected its venv at {spec.launcher}, found no executable there")
    violations = guards.engine_violations(host.name, spec, engine)
    if violations:
        return fail(host, *[f"{v}; nothing was stopped" for v in violations], verdict=HostVerdict.REFUSED)
    problem = rules.read_args_check(out)
    if problem is not None:
        return refuse(f"expected SGLang {engine.version}'s parser (prepare_server_args) to take the unit's command "
                      f"line, found {excerpt(problem, 300)}")
    host.log(f"engine {spec.engine.name} checked in {time.monotonic() - started:.1f}s: SGLang {engine.version}, "
             f"offers {', '.join(engine.algorithms)}; the command line parses")
    return True
