"""Hub: the declared models' revisions (service.model, speculative.draft_model) fetched onto the host
before anything stops (fleet/weights/hub.py has the commands and the rules):

  survey   is the client there; which revisions are, and which the live unit and kept backups name
  client   huggingface_hub installed from the controller's wheel cache (hosts reach no index),
           with the engines' pip
  fetch    each revision preflight found missing, incomplete or damaged, at most hub.max_parallel
           hosts at once per endpoint in this run; the token (hub.token) in a 0600 file meanwhile
  check    the model checks preflight left to this step, on the fetched config.json
  collect  revisions no unit names, beyond hub.keep, removed

A host that fails any of it is refused with the old service and the training as they were.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Callable

import gevent
from gevent.lock import BoundedSemaphore
from pyinfra import host
from pyinfra.operations import python

from facts.models import ModelDirs
from fleet.core import bounds, layout
from fleet.rollout import guards
from fleet.weights import hub as rules
from fleet.core.outcome import HostVerdict
from fleet.weights.parse import parse_model_dirs
from fleet.core.wire import ascii_int, excerpt, frames
from adapter import run as runs
from tasks.common import (CACHE, HostLost, WheelError, asked, downloaded, fail, give_up, given_up, run,
                          uploaded)
from tasks.engine import pip_wheel
from tasks.install import upload
from tasks.preflight import Preflight, refused

# The Pythons a host may have (the client's wheels are downloaded for each: PyYAML's are per Python),
# and the platform: x86_64 Linux
PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # Ubuntu 22.04 to Debian 13; huggingface_hub 2.x needs 3.10
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")

def fetch(pf: Preflight) -> None:
    if not pf.plan.fetch_models:
        return
    try:
        pip = pip_wheel()
        client = client_wheels(pf.spec.hub.client)
    except (WheelError, ValueError) as e:
        refused(runs.of(host.state).report.host(host.name), [f"{host.name}: hub client {pf.spec.hub.client}: {e}"])
        return
    name = rules.client_name(pf.spec.hub)
    python.call(name="Fetch the declared models' revisions, and check them (nothing stops)",
                function=_fetch_or_lost, pf=pf, uploads=[(str(pip), _pip_path(pip)), *[
                    (str(w), f"{layout.hub_client_wheels(name)}/{w.name}") for w in client]])


def _pip_path(wheel: Path) -> str:
    return f"{layout.ENGINE_PIP_DIR}/{wheel.name}"


def client_wheels(client: str) -> list[Path]:
    """The client's wheels and its dependencies', for every Python of PYTHONS, from the controller's cache."""
    found: dict[str, Path] = {}
    for version in PYTHONS:
        platforms = [a for p in PLATFORMS for a in ("--platform", p)]
        for w in downloaded(CACHE / "wheels" / f"{client.replace('==', '-')}-py{version}",
                            ["--only-binary=:all:", "--python-version", version, *platforms, client],
                            f"{client} for Python {version}"):
            found[w.name] = w
    return sorted(found.values())


def _fetch_or_lost(state, host, pf: Preflight, uploads: list[tuple[str, str]]) -> bool:
    try:
        return _fetch(host, pf, uploads)
    except HostLost as e:  # nothing was begun: the host is as it was, but for a partial revision
        return fail(host, e.why, f"{host.name}: models: nothing live changed; the next run resumes a partial fetch",
                    verdict=HostVerdict.LOST)


def _fetch(host, pf: Preflight, uploads: list[tuple[str, str]]) -> bool:
    """uploads: (controller path, host path) of the pip wheel first, then the client's wheels."""
    spec, hub = pf.spec, pf.spec.hub
    refuse = lambda why: fail(host, f"{host.name}: {why}; nothing was stopped", verdict=HostVerdict.REFUSED)  # noqa: E731
    _, out = run(host, rules.survey_command(spec), bounds.reading(spec, "the survey of the fetched revisions"))
    survey = rules.read_survey(out, hub.models_dir)
    if not survey.client:
        problem = _install_client(host, pf, uploads)
        if problem:
            return refuse(f"hub client {hub.client}: {problem}")

    token = layout.staged_path(layout.hub_token_file(spec.service.unit)) if pf.secrets.hub_token else None
    if token and not _put_token(host, pf, token):
        run(host, f"rm -f -- {shlex.quote(token)}", bounds.disk("the removal of the hub token's file"))
        return refuse(f"hub.token: expected it uploaded to {token} (0600), found the upload failed")
    endpoint = hub.endpoint.rstrip("/")  # one endpoint, however it is spelt
    # one set per endpoint (and its declared number): the fetches from it in this run, across every class
    slots = runs.of(host.state).slots.setdefault((endpoint, hub.max_parallel), BoundedSemaphore(hub.max_parallel))
    if slots.locked():
        host.log(f"waiting for a fetch slot: {hub.max_parallel} hosts at once from {hub.endpoint} (hub.max_parallel)")
    try:
        with slots:  # the host's every fetch in one slot: a host fetching holds one, whatever it fetches
            for path, what in pf.plan.fetch_models:
                problem = _fetch_one(host, pf, path, token)
                if problem:
                    return refuse(f"{what}: expected it fetched from {hub.endpoint} into {path}, found {problem}")
    finally:
        if token:
            run(host, f"rm -f -- {shlex.quote(token)}", bounds.disk("the removal of the hub token's file"))

    _, out = run(host, ModelDirs().command(spec.model_paths, list(spec.hub_models)),
                 bounds.reading(spec, "the fetched revisions' config.json"))
    violations = guards.model_violations(host.name, spec, parse_model_dirs(out))
    if violations:
        return fail(host, *[f"{v}; nothing was stopped" for v in violations], verdict=HostVerdict.REFUSED)

    gone = rules.to_remove(survey, list(spec.hub_models.values()), hub.keep)
    if gone:
        _, out = run(host, rules.remove_command(hub.models_dir, gone), bounds.disk("the removal of unused revisions"))
        for removed in [f.value for f in frames(out) if f.key == "removed"]:
            host.log(f"removed revision {removed} (no unit names it; hub.keep {hub.keep})")
    return True


def _install_client(host, pf: Preflight, uploads: list[tuple[str, str]]) -> str | None:
    """The client installed from uploaded wheels; None, or what went wrong."""
    name = rules.client_name(pf.spec.hub)
    problem = uploaded(host, layout.hub_client_wheels(name), uploads)
    if problem:
        return problem
    _, out = run(host, rules.client_install_command(pf.spec.hub, uploads[0][1]),
                 bounds.client_install("the install of the hub client"))
    outcome, said = rules.read_client_install(out)
    if outcome == "busy":
        return f"expected no other install of it on the host, found one holding {layout.HUB_CLIENT_ROOT}/.install.lock " \
               "for 600 s: run again once it is done"
    if outcome == "pip":
        return f"expected pip to install it from the uploaded wheels, found {excerpt(said, 600)}"
    if outcome == "no answer":
        return f"expected the install's records, found {excerpt(out, 300)}"
    host.log(f"hub client {pf.spec.hub.client} installed at {layout.hub_client_dir(name)}")
    return None


def _put_token(host, pf: Preflight, token: str) -> bool:
    """The token into a file made 0600 first (tasks.install.upload's way: never readable by others)."""
    made, _ = run(host, f"umask 077 && mkdir -p {layout.CONFIG_DIR} && : > {shlex.quote(token)}",
                  bounds.disk("the hub token's file"))
    return made and upload(None, host, layout.hub_token_file(pf.spec.service.unit), pf.secrets.hub_token, True)


def _fetch_one(host, pf: Preflight, path: str, token: str | None) -> str | None:
    """One revision fetched; None, or what went wrong (in words)."""
    spec, hub = pf.spec, pf.spec.hub
    model = spec.hub_models[path]
    host.log(f"fetching {model.describe()} from {hub.endpoint} into {path}")
    started = time.monotonic()
    watcher = gevent.spawn(watch, host, spec, layout.revision_partial(path), model.describe())
    try:
        _, out = run(host, rules.fetch_command(spec, path, model, token), bounds.fetch(spec))
    finally:
        watcher.kill()
    done = rules.read_fetch(out)
    if done.outcome == "already":
        return None
    if done.outcome == "new":
        host.log(f"fetched {model.describe()}: {done.files} files, {_mib(done.total)}, {_mib(done.downloaded)} "
                 f"downloaded in {time.monotonic() - started:.1f}s")
        return None
    log = layout.revision_log(path)
    return {
        "busy": f"another fetch of it still running after {hub.fetch_timeout_s:g}s (it holds its lock): run again "
                "once it is done",
        "client": f"the hub client not importable ({excerpt(rules.reason(done.said), 300)})",
        "unsafe": f"a file name that is no relative path inside the revision: {excerpt(done.said)}",
        "integrity": f"files that differ from what the endpoint says after fetching them twice: "
                     f"{excerpt(done.said, 400)} (kept at its .partial; not served)",
        "disk": f"{_mib(done.free)} free at {hub.models_dir}, {_mib(done.need)} needed (what is left to fetch of the "
                f"revision's {_mib(done.total)}, and hub.disk_margin_mib {hub.disk_margin_mib})",
        "error": f"the client's {done.stage} request failed: {excerpt(rules.reason(done.said), 600)}",
        "killed": f"the client ended without a result ({done.said}; its log: {log}); a partial fetch is resumed "
                  "by the next run",
    }.get(done.outcome, f"no records from the fetch ({excerpt(out, 300)})")


def watch(host, spec, partial: str, what: str, ask: Callable[[str, float], str | None] | None = None,
          now: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = gevent.sleep) -> None:
    """Beside a fetch (hours, for a big model): what it has so far, logged every
    readiness.progress_every_s; no answer to that for readiness.link_timeout_s, and the link is lost:
    the host is given up and its connection closed, which ends the fetch's wait at once."""
    every, lost_after = spec.readiness.progress_every_s, spec.readiness.link_timeout_s
    ask = ask or (lambda command, within: asked(host, command, within))
    answered = now()
    while not given_up(host):
        sleep(every)
        said = ask(f"du -sk -- {shlex.quote(partial)} 2>/dev/null | cut -f1", max(1.0, answered + lost_after - now()))
        if said is not None:
            answered = now()
            kib = ascii_int(said.strip())
            if kib is not None:
                host.log(f"fetching {what}: {kib / 1024:.1f} MiB so far")
        elif now() - answered >= lost_after:
            give_up(host, f"{host.name}: link lost: expected an answer to the fetch's progress check every {every:g}s, "
                          f"found none for {lost_after:g}s (readiness.link_timeout_s)", hang_up=True)


def _mib(n: int | None) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n is not None else "(no figure)"
