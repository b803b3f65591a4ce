"""The declared engine on a host (fleet.spec.EngineSpec): the commands that survey, install and
check it, what their answers say, and which unused engines go. No pyinfra here (tasks/engine.py
runs them).

An engine is a venv of its own, named by what it installs (EngineSpec.name), built at
layout.engine_partial(NAME) and renamed to layout.engine_dir(NAME) only once pip succeeded and its freeze
is written: a unit only ever runs a complete venv. One install at a time per host (a flock);
an interrupted one leaves its .partial behind, which the next install removes before it starts.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from urllib.parse import urlsplit

from fleet.core import layout, wire
from fleet.core.bounds import bounded
from fleet.rollout.render import server_argv
from fleet.spec import ClassSpec
from fleet.core.wire import ascii_int, block, frames, lines_of, mark

# What an engine directory is called (EngineSpec.name); anything else under ENGINES_DIR is not ours
NAME = re.compile(r"sglang-[0-9A-Za-z.+!_-]{1,64}-[0-9a-f]{12}\Z")
FREEZE = "engine.lock"  # the exact versions installed, one `name==version` a line
LOG = "install.log"
SAID_LIMIT = 4000  # bytes of pip's output brought back for the message


def _q(path: str) -> str:
    return shlex.quote(path)


# --- which engines there are, and which a unit runs -------------------------------------

def survey_command(spec: ClassSpec) -> str:
    """The engines installed (mtime and name, a line each) and the launchers the live unit and the
    kept backups' units run: what garbage collection must keep."""
    e = _q(layout.ENGINES_DIR)
    uses = f"{layout.ENGINES_DIR}/sglang-[^/]*/bin/python"
    return "; ".join([
        # complete ones only (the freeze is written last): an incomplete directory is nobody's engine
        block("engines", f"cd {e} && for d in sglang-*; do [ -s \"$d/{FREEZE}\" ] && stat -c '%Y %n' -- \"$d\"; done"),
        block("uses", f"grep -rhoa -- {_q(uses)} {_q(spec.unit_file)} {_q(spec.backups_dir)}"),
    ])


@dataclass(frozen=True)
class Survey:
    engines: dict[str, int]  # name -> mtime
    uses: frozenset[str]  # engines a unit runs (the live one, a kept backup's)


def read_survey(answer: str) -> Survey:
    parts = {f.key: f.text or "" for f in frames(answer)}
    engines = {}
    for line in lines_of(parts.get("engines", "")):
        mtime, _, name = line.partition(" ")
        seconds = ascii_int(mtime)
        if seconds is not None and NAME.match(name):
            engines[name] = seconds
    uses = {engine_of(u) for u in lines_of(parts.get("uses", ""))}
    return Survey(engines, frozenset(uses - {None}))


def engine_of(launcher: str) -> str | None:
    """The engine whose venv's interpreter `launcher` is (layout.engine_launcher), else None."""
    prefix, suffix = layout.ENGINES_DIR + "/", "/bin/python"
    name = launcher[len(prefix):-len(suffix)] if launcher.startswith(prefix) and launcher.endswith(suffix) else ""
    return name if NAME.match(name) else None


def running_engine(cmdline: tuple[str, ...] | list[str] | None) -> str | None:
    """The declared engine a server runs (its interpreter is one's venv), by its arguments."""
    return engine_of(cmdline[0]) if cmdline else None


def to_remove(survey: Survey, declared: str, keep: int) -> list[str]:
    """The engines no unit runs, but the `keep` newest and the declared one: removed before an
    install (a pending rollout returns to the files it backed up, whose unit is a kept backup's)."""
    unused = sorted((n for n in survey.engines if n not in survey.uses and n != declared),
                    key=lambda n: (-survey.engines[n], n))
    return unused[keep:]


# --- the install ------------------------------------------------------------------------

def pip_wheel_path(wheel_name: str) -> str:
    return f"{layout.ENGINE_PIP_DIR}/{wheel_name}"


def pip_install_argv(spec: ClassSpec) -> list[str]:
    """pip's arguments: the engine's indexes and pinned requirements, nothing interactive."""
    e = spec.engine
    argv = ["install", "--no-input", "--disable-pip-version-check", "--no-cache-dir", "--progress-bar", "off",
            "--retries", "1", "--timeout", "30"]
    argv += ["--index-url", e.index_url] if e.index_url else ["--no-index"]
    for url in e.extra_index_urls:
        argv += ["--extra-index-url", url]
    # an http:// index was declared so (an internal mirror without TLS): pip ignores one it is not told to trust
    for url in [u for u in [e.index_url, *e.extra_index_urls] if u]:
        if urlsplit(url).scheme == "http":
            argv += ["--trusted-host", urlsplit(url).netloc]
    if e.wheels:
        argv += ["--find-links", layout.engine_wheels(e.name)]
    return argv + e.requirements


def failed_log(name: str) -> str:
    """pip's log of an install of `name` that did not complete (in the venv once it did)."""
    return f"{layout.engine_partial(name)}.{LOG}"


def install_command(spec: ClassSpec, pip_wheel: str, remove: list[str]) -> str:
    """Under the host's install lock: remove `remove` and any partial install, check the free disk,
    build the venv beside the live ones, and rename it into place when pip and the freeze are done.
    pip_wheel: its path on the host (pip_wheel_path). Records: busy | removed=NAME... then
    installed=already | disk=KiB, then pip=RC (its output's tail as data) and installed=new."""
    e = spec.engine
    root, name = layout.ENGINES_DIR, e.name
    final, partial, log = layout.engine_dir(name), layout.engine_partial(name), failed_log(name)
    venv_python = f"{partial}/bin/python"
    pip = " ".join(_q(a) for a in [venv_python, f"{pip_wheel}/pip", *pip_install_argv(spec)])
    # the declared indexes only: no pip configuration of the host's adds one (credentials: netrc)
    build = f"{_q(e.python)} -m venv --without-pip {_q(partial)} && PIP_CONFIG_FILE=/dev/null {pip}"
    freeze = ("import importlib.metadata as m; "
              "print('\\n'.join(sorted(f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions())))")
    # console scripts name the interpreter they were installed with: the partial's, until renamed
    shebangs = (f"for f in {_q(partial)}/bin/*; do [ -f \"$f\" ] && [ ! -L \"$f\" ] && "
                f"sed -i {_q(f'1s|^#!{partial}/|#!{final}/|')} \"$f\"; done")
    need_kib = e.disk_mib * 1024
    return "; ".join([
        f"mkdir -p {_q(root)} && exec 9>{_q(layout.ENGINE_INSTALL_LOCK)}",
        f"if ! flock -n 9; then {mark('busy')}; exit 0; fi",
        *[f"rm -rf -- {_q(layout.engine_dir(n))} && {mark('removed', n)}" for n in remove],
        f"rm -rf -- {_q(root)}/.*.partial",
        f"if [ -x {_q(final)}/bin/python ] && [ -s {_q(final)}/{FREEZE} ]; then {mark('installed', 'already')}; "
        f"exit 0; fi",
        f"rm -rf -- {_q(final)}",  # not complete (made by hand, or damaged): built again
        f"avail=$(df -Pk -- {_q(root)} | awk 'NR == 2 {{ print $4 }}'); printf '@@disk=%s\\n' \"$avail\"",
        f"[ \"${{avail:-0}}\" -ge {need_kib} ] 2>/dev/null || exit 0",
        f"timeout -k 10 {max(1, int(e.install_timeout_s))} sh -c {_q(build)} > {_q(log)} 2>&1; rc=$?",
        f"rm -rf -- {_q(layout.engine_wheels(name))}; printf '@@pip=%s\\n' $rc; "
        f"tail -c {SAID_LIMIT} {_q(log)} | base64 -w0; echo",
        f"if [ $rc != 0 ]; then rm -rf -- {_q(partial)}; exit 0; fi",
        f"{_q(venv_python)} -c {_q(freeze)} > {_q(f'{partial}/{FREEZE}')} && {{ {shebangs}; true; }} && "
        f"mv -f -- {_q(log)} {_q(f'{partial}/{LOG}')} && mv -T -- {_q(partial)} {_q(final)} && "
        f"{mark('installed', 'new')} || {{ rc=$?; rm -rf -- {_q(partial)}; printf '@@finish=%s\\n' $rc; }}",
    ])


@dataclass(frozen=True)
class Installed:
    outcome: str  # "already", "new", or what stopped it: "busy", "disk", "pip", "finish", "no answer"
    removed: tuple[str, ...] = ()
    free_kib: int | None = None
    pip_rc: str = ""
    pip_said: str = ""  # the tail of pip's output


def read_install(answer: str) -> Installed:
    found = frames(answer)
    removed = tuple(f.value for f in found if f.key == "removed" and NAME.match(f.value))
    keys = {f.key: f for f in found}
    disk = keys.get("disk")
    free = ascii_int(disk.value) if disk is not None else None
    if "busy" in keys:
        return Installed("busy", removed)
    if "installed" in keys and keys["installed"].value in ("already", "new"):
        return Installed(keys["installed"].value, removed, free)
    if "pip" in keys:
        pip = keys["pip"]
        outcome = "finish" if pip.value == "0" and "finish" in keys else "pip"
        return Installed(outcome, removed, free, keys["finish"].value if outcome == "finish" else pip.value,
                         pip.text or "")
    if disk is not None:
        return Installed("disk", removed, free)
    return Installed("no answer", removed)


def the_pip_wheel(wheels: list) -> object:
    """The one pip wheel a download left (ValueError else)."""
    if len(wheels) != 1:
        raise ValueError(f"expected one pip wheel in the controller's cache, found {len(wheels)}: "
                         f"{', '.join(str(w) for w in wheels) or 'none'}")
    return wheels[0]


def pip_reason(said: str) -> str:
    """pip's own reason, as one line: why it discarded a candidate (a wheel whose metadata names
    another version), then its ERROR lines (else its last line)."""
    lines = [ln.strip() for ln in said.splitlines() if ln.strip()]
    discarded = [ln.split("): ", 1)[-1] for ln in lines if ln.startswith("Discarding ")]
    errors = [ln for ln in lines if ln.startswith(("ERROR:", "Error:"))] or lines[-1:]
    return " ".join(discarded[-1:] + errors)


# --- the new engine's own check of the command line -------------------------------------

ARGS_CHECK = "import sys; from sglang.srt.server_args import prepare_server_args; prepare_server_args(sys.argv[1:])"


def checked_argv(spec: ClassSpec) -> list[str]:
    """The server's flags as the unit passes them, without --config (its file holds the secrets
    and is not live yet; the spec owns every key in it)."""
    argv = server_argv(spec)[3:]
    if "--config" in argv:
        i = argv.index("--config")
        argv = argv[:i] + argv[i + 2:]
    return argv


def args_check_command(spec: ClassSpec, timeout_s: float) -> str:
    """The new engine's parser (prepare_server_args, as the server runs it first) over the command
    line: a flag that version renamed or dropped fails here, before anything stops."""
    env = " ".join(_q(f"{k}={v}") for k, v in spec.service.environment.items())
    argv = " ".join(_q(a) for a in checked_argv(spec))
    return wire.captured("args", bounded(f"env {env} {_q(spec.launcher)} -c {_q(ARGS_CHECK)} {argv}", timeout_s))


def check_command(spec: ClassSpec, timeout_s: float, engine_fact: str) -> str:
    """The new engine's capabilities (`engine_fact`: facts.sglang.SglangEngine's command, so preflight
    reads the same cache) and its parser over the command line, at once: each imports SGLang (seconds
    on a real host), and they do not depend on each other. The parser's records follow the fact's."""
    return (f"a=$(mktemp) || exit 1; {{ {args_check_command(spec, timeout_s)}; }} > \"$a\" 2>/dev/null & "
            f"{engine_fact}; wait; cat \"$a\"; rm -f \"$a\"")


def read_args_check(answer: str) -> str | None:
    """None if the parser took the command line, else what it said (its last line)."""
    f = next((f for f in frames(answer) if f.key == "args"), None)
    if f is not None and f.value == "0":
        return None
    if f is None:
        return "no answer"
    lines = [ln.strip() for ln in (f.text or "").splitlines() if ln.strip()]
    return f"exit {f.value}: " + (lines[-1] if lines else "(no message)")
