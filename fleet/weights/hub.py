"""Models by Hugging Face repository and commit (fleet.spec.HubModel): the commands that survey,
fetch and check a revision on a host, what their answers say, and which unused revisions go. No
pyinfra here (tasks/hub.py runs them).

A revision lives at hub.models_dir/ORG/NAME/REVISION. It is fetched by huggingface_hub (the real
client, installed by the deploy at layout.hub_client_dir: hosts need no index) into a hidden
.REVISION.partial beside it, which an interrupted fetch leaves behind and the next one resumes: the
files already complete are kept, a file cut short is fetched from its start (huggingface_hub 2.4
resumes no .incomplete file of another process; the fetch removes them). Once every file has its
sha256 (LFS files) or git blob id (the others) where the endpoint gives one, the manifest
(MANIFEST: `SIZE DIGEST NAME` a line) is written and the directory renamed into place: a unit
only ever names a complete revision. Preflight checks each file's size against the manifest at
every run; a file that differs makes the revision fetched again, beside the damaged one.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from typing import Callable
from urllib.parse import quote

from fleet.core import controller, layout
from fleet.weights.parse import NOT_FETCHED, ModelDir
from fleet.spec import COMMIT, ClassSpec, HubModel, HubSpec
from fleet.core.wire import Unreadable, ascii_int, block, excerpt, frames, lines_of, load_json, mark

MANIFEST = ".sglang-fleet-files"  # written last: a revision directory without it is not complete
SAID_LIMIT = 4000  # characters of the client's words brought back for a message
REVISION_DIR = re.compile(r"[A-Za-z0-9._-]{1,96}/[A-Za-z0-9._-]{1,96}/[0-9a-f]{40}\Z")  # ORG/NAME/REVISION


def _q(path: str) -> str:
    return shlex.quote(path)


def _bre(text: str) -> str:
    """`text` as a grep pattern (BRE) matching itself: a models_dir of /srv/models[1] too."""
    return re.sub(r"([\\.\[\]*^$])", r"\\\1", text)


def to_fetch(spec: ClassSpec, models: dict[str, ModelDir]) -> list[str]:
    """The declared revisions (their directories) preflight found missing, incomplete or damaged:
    fetched before anything stops, and only then checked (preflight skips their checks)."""
    return [p for p in spec.hub_models if models.get(p) is not None and models[p].status in NOT_FETCHED]


def revision_of(path: str | None, models_dir: str) -> str | None:
    """ORG/NAME@REVISION if `path` is a revision directory under models_dir, else None."""
    if not path or not path.startswith(models_dir + "/") or not REVISION_DIR.match(path[len(models_dir) + 1:]):
        return None
    repo, _, revision = path[len(models_dir) + 1:].rpartition("/")
    return f"{repo}@{revision}"


def served_weights(cmdline: tuple[str, ...] | list[str] | None, models_dir: str) -> str:
    """The revisions a server runs (target, then draft), from its arguments: '-' if none is one."""
    args = list(cmdline or ())
    found = [revision_of(args[args.index(flag) + 1], models_dir) for flag in ("--model-path",
             "--speculative-draft-model-path") if flag in args[:-1]]
    return " + ".join(short(r) for r in found if r) or "-"


def short(revision: str) -> str:
    """ORG/NAME@REVISION with the commit's first 12 digits."""
    repo, _, commit = revision.partition("@")
    return f"{repo}@{commit[:12]}"


def declared_weights(spec: ClassSpec) -> str:
    """The revisions the spec declares, in full (target, then draft): the deploy record's."""
    return " + ".join(f"{m.repo}@{m.revision}" for m in spec.hub_models.values())


# --- branches: resolved to their commit once per run, on the controller -------------------

BRANCH_ANSWER_LIMIT = 4 << 20  # bytes of the endpoint's answer read (a model's info lists its files)


def branch_url(endpoint: str, model: HubModel) -> str:
    """The endpoint's model info at a branch (huggingface_hub's model_info(repo, revision=branch))."""
    return f"{endpoint.rstrip('/')}/api/models/{model.repo}/revision/{quote(model.branch, safe='')}"


def read_commit(status: int, body: bytes) -> tuple[str | None, str]:
    """(the commit, '') from the endpoint's answer, or (None, what it answered instead)."""
    if status != 200:
        return None, f"HTTP {status}: {excerpt(body.decode('utf-8', 'replace'), 200)}"
    try:
        sha = load_json(body.decode("utf-8", "replace"), "the model's info").get("sha")
    except (Unreadable, AttributeError) as e:
        return None, f"no model info ({excerpt(str(e), 200)})"
    if not isinstance(sha, str) or not COMMIT.match(sha):
        return None, f"no commit in its model info (sha {excerpt(str(sha), 60)})"
    return sha, ""


def http_get(url: str, token: str | None, timeout: float = 30) -> tuple[int, bytes]:
    """(status, at most BRANCH_ANSWER_LIMIT bytes of the body); requests' errors (OSErrors) as it raises them."""
    import requests  # here: 80 ms of imports that only a branch needs, not every run

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with requests.get(url, headers=headers, timeout=timeout, stream=True) as r:
        return r.status_code, r.raw.read(BRANCH_ANSWER_LIMIT, decode_content=True)


def pin_branches(spec: ClassSpec, token: str | None, resolved: dict[tuple[str, str, str], str],
                 get: Callable[[str, str | None], tuple[int, bytes]] | None = None) -> tuple[ClassSpec, list[str]]:
    """The spec with each model declared by branch at the branch's commit, asked of the endpoint once
    per run (every host of the run gets the same commit, however the branch moves meanwhile); or
    the spec and, per branch that cannot be resolved, why. resolved: the run's (endpoint, repo,
    branch) -> commit, which this adds to."""
    endpoint, problems, get = spec.hub.endpoint.rstrip("/"), [], get or http_get
    for m in spec.branches:
        key = (endpoint, m.repo, m.branch)
        if key not in resolved:
            try:
                sha, why = read_commit(*get(branch_url(endpoint, m), token))
            except OSError as e:  # requests' errors are OSErrors
                sha, why = None, f"{type(e).__name__}: {excerpt(str(e), 300)}"
            if sha is None:
                problems.append(f"{m.repo}: branch {m.branch}: expected its commit from {endpoint}, found {why}")
                continue
            resolved[key] = sha
    if problems:
        return spec, problems
    return spec.with_commits({(r, b): sha for (e, r, b), sha in resolved.items() if e == endpoint}), []


# --- the client ------------------------------------------------------------------------

def client_name(hub: HubSpec) -> str:
    """The client's directory name: its pin and the Python it is installed for."""
    what = f"{hub.client} {hub.python}"
    return f"{hub.client.replace('==', '-')}-{hashlib.sha256(what.encode()).hexdigest()[:12]}"


def client_install_command(hub: HubSpec, pip_wheel: str) -> str:
    """Under the client's install lock: pip --target a .partial from the uploaded wheels only (no
    index), renamed into place once done. Records: busy (another install holds the lock for 600 s),
    installed=already|new, else pip=RC and its output's tail."""
    name = client_name(hub)
    final, partial, wheels = layout.hub_client_dir(name), f"{layout.hub_client_dir(name)}.partial", \
        layout.hub_client_wheels(name)
    pip = " ".join(_q(a) for a in [hub.python, f"{pip_wheel}/pip", "install", "--no-input", "--no-index",
                                   "--disable-pip-version-check", "--no-cache-dir", "--progress-bar", "off",
                                   "--no-compile",  # the host's Python compiles what it imports, once
                                   "--find-links", wheels, "--target", partial, hub.client])
    return "; ".join([
        f"mkdir -p {_q(layout.HUB_CLIENT_ROOT)} && exec 9>{_q(layout.HUB_CLIENT_ROOT)}/.install.lock || exit 1",
        f"if ! flock -w 600 9; then {mark('busy')}; exit 0; fi",
        f"if [ -e {_q(final)}/.complete ]; then {mark('installed', 'already')}; exit 0; fi",
        f"rm -rf -- {_q(partial)} {_q(final)}",
        f"out=$(PIP_CONFIG_FILE=/dev/null timeout -k 10 600 {pip} 2>&1); rc=$?; printf '@@pip=%s\\n' $rc; "
        f"printf '%s' \"$out\" | tail -c {SAID_LIMIT} | base64 -w0; echo",
        f"rm -rf -- {_q(wheels)}",
        f"if [ $rc != 0 ]; then rm -rf -- {_q(partial)}; exit 0; fi",
        f"touch {_q(partial)}/.complete && mv -T -- {_q(partial)} {_q(final)} && {mark('installed', 'new')}",
    ])


def read_client_install(answer: str) -> tuple[str, str]:
    """("already" | "new", ""), ("busy", ""), ("pip", its exit status and words) or ("no answer", "")."""
    keys = {f.key: f for f in frames(answer)}
    if "busy" in keys:
        return "busy", ""
    if "installed" in keys and keys["installed"].value in ("already", "new"):
        return keys["installed"].value, ""
    if "pip" in keys:
        lines = [ln for ln in (keys["pip"].text or "").splitlines() if ln.strip()]
        return "pip", f"exit {keys['pip'].value}: " + " ".join(
            [ln.strip() for ln in lines if ln.startswith("ERROR")] or lines[-1:])
    return "no answer", ""


# --- which revisions there are, and which a unit names ----------------------------------

def survey_command(spec: ClassSpec) -> str:
    """Whether the client is installed; the complete revisions of the declared repositories
    (mtime and ORG/NAME/REVISION, a line each); the revision directories the live unit and the
    kept backups' units name (what garbage collection must keep)."""
    root = spec.hub.models_dir
    repos = " ".join(_q(r) for r in sorted({m.repo for m in spec.hub_models.values()}))
    names_one = f"{_bre(root)}/[A-Za-z0-9._-]*/[A-Za-z0-9._-]*/[0-9a-f]\\{{40\\}}"
    return "; ".join([
        f"if [ -e {_q(layout.hub_client_dir(client_name(spec.hub)))}/.complete ]; then {mark('client', 'yes')}; "
        f"else {mark('client', 'no')}; fi",
        block("revisions", f"cd {_q(root)} && for r in {repos}; do for d in \"$r\"/*; do "
                           f"[ -s \"$d/{MANIFEST}\" ] && stat -c '%Y %n' -- \"$d\"; done; done"),
        block("uses", f"grep -rhoa -- {_q(names_one)} {_q(spec.unit_file)} {_q(spec.backups_dir)}"),
    ])


@dataclass(frozen=True)
class Survey:
    client: bool
    revisions: dict[str, int]  # ORG/NAME/REVISION -> mtime
    uses: frozenset[str]  # ORG/NAME/REVISION a unit names


def read_survey(answer: str, models_dir: str) -> Survey:
    parts = {f.key: f for f in frames(answer)}
    revisions = {}
    for line in lines_of((parts["revisions"].text or "") if "revisions" in parts else ""):
        mtime, _, name = line.partition(" ")
        seconds = ascii_int(mtime)
        if seconds is not None and REVISION_DIR.match(name):
            revisions[name] = seconds
    prefix = models_dir + "/"
    uses = {u[len(prefix):] for u in lines_of((parts["uses"].text or "") if "uses" in parts else "")
            if u.startswith(prefix) and REVISION_DIR.match(u[len(prefix):])}
    return Survey("client" in parts and parts["client"].value == "yes", revisions, frozenset(uses))


def to_remove(survey: Survey, declared: list[HubModel], keep: int) -> list[str]:
    """Per declared repository: its revisions no unit names and not declared, but the `keep`
    newest (a pending rollout returns to backed-up files, whose unit is a kept backup's)."""
    wanted = {f"{m.repo}/{m.revision}" for m in declared}
    gone: list[str] = []
    for repo in sorted({m.repo for m in declared}):
        unused = sorted((r for r in survey.revisions if r.rsplit("/", 1)[0] == repo and r not in survey.uses
                         and r not in wanted), key=lambda r: (-survey.revisions[r], r))
        gone += unused[keep:]
    return gone


def remove_command(models_dir: str, revisions: list[str]) -> str:
    """Each revision directory removed (names checked by to_remove's caller: REVISION_DIR)."""
    return "; ".join(f"rm -rf -- {_q(f'{models_dir}/{r}')} && {mark('removed', r)}" for r in revisions
                     if REVISION_DIR.match(r)) or "true"


# --- the fetch --------------------------------------------------------------------------

# Run on the host by the client's Python: python3 -c FETCH REPO REVISION FINAL MARGIN_BYTES STAGING. Its
# answer is framed as fleet.core.wire's (a marker line, values of its own; host text as base64 data).
# `python3 -c FETCH --verify DIR` (any Python 3: it imports no client) prints each file of DIR's
# manifest whose size or digest differs. The program is a file of its own, fleet/programs/fetch_revision.py
# (its MANIFEST and LIMIT are this module's MANIFEST and SAID_LIMIT), sent whole.
FETCH = controller.program("fetch_revision.py")


def fetch_command(spec: ClassSpec, path: str, model: HubModel, token_file: str | None) -> str:
    """The fetch of one revision into `path`, under its lock (a fetch left running by a lost
    controller is waited for, then its work kept), bounded by hub.fetch_timeout_s."""
    hub = spec.hub
    client = layout.hub_client_dir(client_name(hub))
    lock = layout.revision_lock(path)
    env = {"PYTHONPATH": client, "HF_ENDPOINT": hub.endpoint.rstrip("/"), "HF_HOME": layout.HUB_HOME,
           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "PIP_CONFIG_FILE": "/dev/null"}
    if token_file:
        env["HF_TOKEN_PATH"] = token_file
    timeout = max(1, int(hub.fetch_timeout_s))
    argv = " ".join(_q(a) for a in [hub.python, "-c", FETCH, model.repo, model.revision, path,
                                    str(hub.disk_margin_mib << 20), layout.revision_partial(path)])
    run = f"env -u HF_TOKEN {' '.join(_q(f'{k}={v}') for k, v in env.items())} timeout -k 10 {timeout} {argv}"
    return "; ".join([
        f"mkdir -p {_q(path.rsplit('/', 1)[0])} && exec 9>{_q(lock)}",
        f"if ! flock -w {timeout} 9; then {mark('busy')}; exit 0; fi",
        f"if [ -s {_q(path)}/{MANIFEST} ] && {manifest_sizes_ok(path)}; then {mark('fetched', 'already')}; exit 0; fi",
        f"{run} 2>{_q(layout.revision_log(path))}; printf '@@exit=%s\\n' $?",
    ])


def verify_command(path: str, python: str = "python3") -> str:
    """make verify's check of a revision: the files of its manifest whose size or digest differs."""
    return " ".join(_q(a) for a in [python, "-c", FETCH, "--verify", path])


def manifest_sizes_ok(path: str) -> str:
    """Shell: true if the manifest of `path` is all of fetch_revision.py's lines and every file it lists has its
    size (a stat each)."""
    return f"! {_each_listed(path, 'break')} | grep -q ."


def damaged_files(path: str) -> str:
    """Shell printing the files (at most 5) of `path`'s manifest whose size differs, and a line saying so where
    the manifest has a line of another form: damaged all the same, fetched again."""
    return f"{_each_listed(path, 'true')} | head -n 5"


# fetch_revision.py's manifest line (its manifest_line()): SIZE DIGEST NAME
MANIFEST_LINE = "[0-9]{1,15} (sha256:[0-9a-f]{64}|blob:[0-9a-f]{40}|-) .+"


def _each_listed(path: str, then: str) -> str:
    """Shell printing each file of the manifest whose size differs (`then` after the first: break or
    true), then a line of its own where the manifest has a line of another form. Each line read whole and cut at
    its first two spaces: a name's own blanks are kept."""
    d = _q(path)
    return (f"{{ while IFS= read -r line; do size=${{line%% *}}; rest=${{line#* }}; name=${{rest#* }}; "
            f"[ \"$(stat -c %s -- {d}/\"$name\" 2>/dev/null)\" = \"$size\" ] || {{ printf '%s\\n' \"$name\"; {then}; }}; "
            f"done < {d}/{MANIFEST}; "
            f"if LC_ALL=C grep -qvxE {_q(MANIFEST_LINE)} {d}/{MANIFEST}; then "
            f"echo '{MANIFEST}: a line of another form'; fi; }}")


@dataclass(frozen=True)
class Fetched:
    outcome: str  # "already", "new", or what stopped it: busy, client, error, unsafe, disk, integrity, killed, no answer
    stage: str = ""  # error: metadata | revision | download
    said: str = ""  # the client's words, a file's name, the damaged files
    files: int | None = None
    total: int | None = None  # bytes of the revision
    downloaded: int | None = None  # bytes fetched this time
    free: int | None = None  # bytes free at the models directory
    need: int | None = None  # bytes the fetch needed free (with the margin)


def read_fetch(answer: str) -> Fetched:
    found = frames(answer)
    keys = {f.key: f for f in found}
    sizes = [ascii_int(x) for x in keys["sizes"].value.split()] if "sizes" in keys else []
    files, total, have, free = (sizes + [None] * 4)[:4] if len(sizes) == 4 else (None,) * 4
    base = dict(files=files, total=total, free=free)
    if "busy" in keys:
        return Fetched("busy")
    if "fetched" in keys:
        if keys["fetched"].value == "already":
            return Fetched("already")
        total_now, downloaded = ([ascii_int(x) for x in keys["fetched"].value.split()] + [None, None])[:2]
        return Fetched("new", files=files, total=total_now, downloaded=downloaded, free=free)
    for key in ("client", "unsafe", "integrity"):
        if key in keys:
            return Fetched(key, said=keys[key].text or "", **base)
    if "error" in keys:
        return Fetched("error", keys["error"].value, keys["error"].text or "", **base)
    if "disk" in keys:
        got = ([ascii_int(x) for x in keys["disk"].value.split()] + [None, None])[:2]
        return Fetched("disk", files=files, total=total, free=got[0], need=got[1])
    if "exit" in keys:  # the client died without a word: killed (timeout: 124), or a crash
        return Fetched("killed", said=f"exit {keys['exit'].value}", **base)
    return Fetched("no answer")


def reason(said: str) -> str:
    """The client's words as one line: its first two non-empty lines (huggingface_hub's errors put
    the cause first, the request id and URL after)."""
    lines = [ln.strip() for ln in said.splitlines() if ln.strip()]
    return " ".join(lines[:2]) if lines else "(no message)"
