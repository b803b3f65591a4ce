"""tasks/hub over a pyinfra Host whose commands the test answers (fakehost): the declared revisions
(service.model, speculative.draft_model) surveyed, the hub client installed from uploaded wheels
where it is missing, each revision preflight found missing fetched (the token in a 0600 file
meanwhile, removed after, its value on no command line), at most hub.max_parallel hosts at once
per endpoint, then checked from the fetched config.json and the unused revisions beyond hub.keep
removed, before anything stops; every answer that stops it refuses the host with nothing stopped
and nothing more sent; a host that stops answering is LOST; and the generation-time step that finds
pip's and the client's wheels in the controller's cache, or refuses the host. Each command is named
by comparing it with what fleet/ builds for the spec; the clock is scripted."""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest
from answers import answer, record
from builders import DRAFT, SPEC, converged, draft, target
from fakehost import Call, Clock, Script, fake_host, fake_hosts, fresh_run, this_run, preflight_of  # noqa: F401
from paramiko import SSHException
from pyinfra.context import ctx_host, ctx_state

from facts.models import ModelDirs
from fleet.core import bounds, layout
from fleet.weights import hub as rules
from fleet.rollout.parse import HostFacts
from fleet.weights.parse import ModelDir
from fleet.spec import ClassSpec
from tasks import engine, hub, preflight
from tasks.common import CACHE, WheelError

TARGET_MODEL = {"repo": "Qwen/Qwen3.6-27B", "revision": "6f1c2d3e4b5a69788796a5b4c3d2e1f00f1e2d3c"}
DRAFT_MODEL = {"repo": "z-lab/Qwen3.6-27B-DFlash", "revision": "0a9b8c7d6e5f40312f3e4d5c6b7a8990a1b2c3d4"}
TOKEN = "hf_SecretTokenValue0123456789abcdefXYZ"  # never on a command line, in a log or a message


def hub_spec(hub_fields: dict | None = None, draft_model: bool = True, **service) -> ClassSpec:
    """builders.SPEC (DFlash) with its target (and draft) declared by repository and commit."""
    data = SPEC.model_dump(mode="json")
    data["service"].pop("model_path")
    data["service"].update(model=TARGET_MODEL, **service)
    if draft_model:
        data["speculative"].pop("draft_model_path")
        data["speculative"]["draft_model"] = DRAFT_MODEL
    return ClassSpec.model_validate({**data, "hub": hub_fields or {}})


def missing(spec: ClassSpec, *there: str) -> HostFacts:
    """A host that runs the spec's service but has none of its model directories except `there`."""
    def found(p: str) -> ModelDir:
        return replace(target(), path=p) if p == spec.target_path else draft(p)

    models = {p: found(p) if p in there else ModelDir(p, "no directory") for p in spec.model_paths}
    return converged(spec, models=models)


NEW = hub_spec()
HUB = NEW.hub
TPATH, DPATH = NEW.target_path, NEW.draft_path
T_NAME, D_NAME = NEW.hub_models[TPATH].describe(), NEW.hub_models[DPATH].describe()
PF = preflight_of(NEW, missing(NEW))
CLIENT = rules.client_name(HUB)
TOKEN_FILE = layout.staged_path(layout.hub_token_file(NEW.service.unit))

PIP = CACHE / "wheels" / "pip-24.3.1" / "pip-24.3.1-py3-none-any.whl"  # as fetch(pf) passes it
PIP_ON_HOST = f"{layout.ENGINE_PIP_DIR}/{PIP.name}"
CLIENT_WHEELS = [CACHE / "wheels" / "huggingface_hub-2.4.0-py3.11" / name for name in (
    "PyYAML-6.0.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "huggingface_hub-2.4.0-py3-none-any.whl", "requests-2.32.3-py3-none-any.whl")]
UPLOADS = [(str(PIP), PIP_ON_HOST), *((str(w), f"{layout.hub_client_wheels(CLIENT)}/{w.name}") for w in CLIENT_WHEELS)]

# --- what the host answers, framed as fleet/weights/hub.py's commands and the models fact print them -----------

MIB = 1 << 20


def survey(client: bool = True, revisions: str = "", uses: str = "") -> str:
    return answer(record("client", value="yes" if client else "no"), record("revisions", revisions),
                  record("uses", uses))


def fetched(files: int = 14, total_mib: int = 51200, had_mib: int = 0, free_mib: int = 900_000) -> str:
    """The FETCH script's records of a complete fetch (sizes, then fetched), then the shell's exit."""
    sizes = f"{files} {total_mib * MIB} {had_mib * MIB} {free_mib * MIB}"
    return answer(record("sizes", value=sizes), record("fetched", value=f"{total_mib * MIB} {(total_mib - had_mib) * MIB}"),
                  record("exit", value="0"))


SIZES = record("sizes", value=f"14 {51200 * MIB} {10240 * MIB} {20480 * MIB}")
ALREADY = answer(record("fetched", value="already"))
TARGET_CONFIG = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "vocab_size": 248320,
                 "hidden_size": 5120, "num_hidden_layers": 64}
DRAFT_CONFIG = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "vocab_size": 248320,
                "hidden_size": 5120, "num_hidden_layers": 5, "block_size": 16, "dflash_config": {"mask_token_id": 248077}}


def configs(spec: ClassSpec = NEW, draft_config: dict = DRAFT_CONFIG) -> str:
    """The models fact's records: each of the spec's directories with its config.json."""
    return answer(*[r for path, config in zip(spec.model_paths, (TARGET_CONFIG, draft_config))
                    for r in (record("path", value=path), record("config", json.dumps(config), "0"))])


INSTALLED = answer(record("pip", "Successfully installed huggingface-hub-2.4.0\n", "0"), record("installed", value="new"))
DONE = {"survey": survey(), "fetch target": fetched(), "fetch draft": fetched(5, 3200), "check": configs()}
TAKES = {"fetch target": 300.0, "fetch draft": 20.0}  # seconds each command takes on the scripted clock


class Named:
    """A command _fetch sends for `spec`, by name: each compared with what fleet/ builds for it."""

    def __init__(self, spec: ClassSpec = NEW, token: str | None = None):
        wheels = layout.hub_client_wheels(rules.client_name(spec.hub))
        roles = {spec.target_path: "target", spec.draft_path: "draft"}
        self.exact = {rules.survey_command(spec): "survey",
                      f"mkdir -p {layout.ENGINE_PIP_DIR} && rm -rf {wheels} && mkdir -p {wheels}": "mkdirs",
                      rules.client_install_command(spec.hub, PIP_ON_HOST): "install",
                      ModelDirs().command(spec.model_paths, list(spec.hub_models)): "check",
                      **{rules.fetch_command(spec, p, m, token): f"fetch {roles[p]}" for p, m in spec.hub_models.items()}}
        self.token, self.models_dir = token, spec.hub.models_dir

    def __call__(self, call: Call | str) -> str:
        if isinstance(call, Call) and call.kind == "upload":
            return "upload token" if call.command == self.token else f"upload {call.command}"
        command = call.command if isinstance(call, Call) else call
        if command in self.exact:
            return self.exact[command]
        if self.token and command.startswith("umask 077 ") and shlex.quote(self.token) in command:
            return "token file"
        if self.token and command == f"rm -f -- {shlex.quote(self.token)}":
            return "rm token"
        if command.startswith(f"rm -rf -- {shlex.quote(self.models_dir + '/')}"):
            return "remove"
        return f"unknown: {command[:80]}"


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(hub, "time", clock)
    return clock


@pytest.fixture(autouse=True)
def slots(fresh_run):
    """Each test's own fetch slots (they are the run's: one per endpoint across every class)."""
    return fresh_run.slots


def uploading(fake, results: dict[str, bool | BaseException]):
    """The uploads as the task makes them: a cached wheel by its local path, the token as a file object
    (tasks.install.upload); recorded, then what `results` says for its destination (else True)."""
    def put_file(src, dest, **kwargs):
        fake.calls.append(Call(dest, bool(kwargs.get("_sudo")), "upload"))
        result = results.get(dest, True)
        if isinstance(result, BaseException):
            raise result
        fake.uploads[dest] = src.read() if hasattr(src, "read") else src
        return result

    fake.host.put_file = put_file


def fetching(answers: dict, pf=PF, uploads=UPLOADS, upload: dict | None = None, clock=None, token: str | None = None):
    """_fetch_or_lost on a host answering `answers` (name -> answer(s)) and `upload` (destination ->
    put_file's result); (ok, what it was sent by name, the fake, the host's row or None)."""
    named = Named(pf.spec, token)
    script = Script(answers, key=named)

    def answering(command):
        if clock is not None:
            clock.sleep(TAKES.get(named(command), 0))
        return script(command)

    fake = fake_host(answering)
    uploading(fake, upload or {})
    ok = hub._fetch_or_lost(None, fake.host, pf, uploads)
    sent = [named(c) for c in fake.calls]
    assert not [s for s in sent if s.startswith("unknown")], sent
    return ok, sent, fake, this_run().report.hosts.get("h")


def refusal_of(row) -> str:
    """The one reason of a refused host: it names the host and says nothing was stopped."""
    assert row.verdict == "REFUSED" and len(row.reasons) == 1, row.reasons
    (reason,) = row.reasons
    assert reason.startswith("h: ") and reason.endswith("; nothing was stopped"), reason
    return reason


def fetch_refusal(found: str, what: str = T_NAME, path: str = TPATH, endpoint: str = HUB.endpoint) -> str:
    return f"h: {what}: expected it fetched from {endpoint} into {path}, found {found}; nothing was stopped"


CLIENT_UPLOADS = ["mkdirs", *(f"upload {dest}" for _, dest in UPLOADS), "install"]


# --- at generation time: pip's and the client's wheels from the controller's cache ------------------------

def generating(monkeypatch, pf, pip=lambda *a: [PIP], client=lambda *a: CLIENT_WHEELS):
    """fetch(pf) for host `h`, the controller's cache answering `pip` (tasks.engine's download of
    pip's wheel) and `client` (each Python's of the client): (the operations it queued, its row)."""
    queued = []
    queue = SimpleNamespace(call=lambda **kwargs: queued.append(kwargs))
    monkeypatch.setattr(hub, "python", queue)
    monkeypatch.setattr(preflight, "python", queue)
    monkeypatch.setattr(engine, "downloaded", pip)
    monkeypatch.setattr(hub, "downloaded", client)
    fake = fake_host(Script({}))
    with ctx_state.use(fake.host.state), ctx_host.use(fake.host):
        hub.fetch(pf)
    assert fake.calls == []  # nothing runs on the host while operations are generated
    return queued, this_run().report.hosts.get("h")


def test_a_plan_with_nothing_to_fetch_queues_nothing_and_downloads_nothing(monkeypatch):
    pf = preflight_of(NEW, missing(NEW, TPATH, DPATH))  # both revisions there, complete
    assert pf.plan.fetch_models == ()
    def never(*args):
        pytest.fail("downloaded a wheel for nothing")

    queued, row = generating(monkeypatch, pf, never, never)
    assert queued == [] and row is None


def test_a_plan_that_fetches_queues_one_call_with_pips_wheel_first_then_the_clients(monkeypatch):
    assert PF.plan.fetch_models == ((TPATH, T_NAME), (DPATH, D_NAME))
    queued, row = generating(monkeypatch, PF)
    assert queued == [{"name": "Fetch the declared models' revisions, and check them (nothing stops)",
                       "function": hub._fetch_or_lost, "pf": PF, "uploads": UPLOADS}]
    assert row is None
    assert all(dest.startswith(layout.ENGINE_WHEELS_DIR + f"/{CLIENT}/") for _, dest in UPLOADS[1:])


def test_the_clients_wheels_are_downloaded_for_every_python_a_host_may_have_and_listed_once(monkeypatch):
    asked = []
    pure = ["huggingface_hub-2.4.0-py3-none-any.whl", "requests-2.32.3-py3-none-any.whl"]

    def downloaded(where, pip_args, what):
        asked.append((where, pip_args, what))
        version = pip_args[pip_args.index("--python-version") + 1].replace(".", "")
        return [where / n for n in (*pure, f"PyYAML-6.0.2-cp{version}-cp{version}-manylinux_2_17_x86_64.whl")]

    monkeypatch.setattr(hub, "downloaded", downloaded)
    found = hub.client_wheels("huggingface_hub==2.4.0")
    platforms = ["--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64",
                 "--platform", "manylinux_2_28_x86_64"]
    assert hub.PYTHONS[0] == "3.10"  # huggingface_hub 2.x needs 3.10: none older is asked for
    assert asked == [(CACHE / "wheels" / f"huggingface_hub-2.4.0-py{v}",
                      ["--only-binary=:all:", "--python-version", v, *platforms, "huggingface_hub==2.4.0"],
                      f"huggingface_hub==2.4.0 for Python {v}") for v in hub.PYTHONS]
    # the pure wheels once (each Python's copy is the same file), each Python's PyYAML; sorted by name
    yaml = [f"PyYAML-6.0.2-cp{v.replace('.', '')}-cp{v.replace('.', '')}-manylinux_2_17_x86_64.whl" for v in hub.PYTHONS]
    assert [w.name for w in found] == sorted({*pure, *yaml}) and len(found) == 2 + len(hub.PYTHONS)


@pytest.mark.parametrize("broken", ["pip", "client"])
def test_wheels_missing_from_the_controllers_cache_refuse_the_host_naming_the_client(monkeypatch, broken):
    said = f"could not download {'pip==24.3.1' if broken == 'pip' else 'huggingface_hub==2.4.0 for Python 3.10'}: " \
           "ERROR: No matching distribution found"

    def failing(*args):
        raise WheelError(said)

    queued, row = generating(monkeypatch, PF, **{broken: failing})
    assert [q["name"] for q in queued] == ["Refuse host (preflight failed)"]
    assert (row.verdict, row.action, row.reasons) == ("REFUSED", "none", [f"h: hub client huggingface_hub==2.4.0: {said}"])


def test_a_cache_that_lists_other_than_one_pip_wheel_refuses_the_host_at_generation_time(monkeypatch):
    queued, row = generating(monkeypatch, PF, pip=lambda *a: [PIP, PIP.with_name("pip-24.3-py3-none-any.whl")])
    assert [q["name"] for q in queued] == ["Refuse host (preflight failed)"]
    assert row.verdict == "REFUSED" and row.reasons[0].startswith("h: hub client huggingface_hub==2.4.0: ")


# --- the client ----------------------------------------------------------------------------------

def test_with_the_client_installed_both_revisions_are_fetched_and_checked_with_no_upload(clock):
    ok, sent, fake, row = fetching(DONE, clock=clock)
    assert ok is True and row is None  # nothing failed: the host's row is the plan's
    assert sent == ["survey", "fetch target", "fetch draft", "check"] and fake.uploads == {}
    assert fake.logged == [
        f"fetching {T_NAME} from https://huggingface.co into {TPATH}",
        f"fetched {T_NAME}: 14 files, 51200.0 MiB, 51200.0 MiB downloaded in 300.0s",
        f"fetching {D_NAME} from https://huggingface.co into {DPATH}",
        f"fetched {D_NAME}: 5 files, 3200.0 MiB, 3200.0 MiB downloaded in 20.0s"]
    assert TPATH == f"{layout.MODELS_DIR}/Qwen/Qwen3.6-27B/{TARGET_MODEL['revision']}"


def test_a_missing_client_is_installed_from_the_uploaded_pip_and_client_wheels_before_any_fetch():
    ok, sent, fake, row = fetching({**DONE, "survey": survey(client=False), "install": INSTALLED})
    assert ok is True and row is None
    assert sent == ["survey", *CLIENT_UPLOADS, "fetch target", "fetch draft", "check"]
    assert fake.uploads == {dest: local for local, dest in UPLOADS}
    # pip from the uploaded wheel, the client from the uploaded ones (no index)
    (install,) = [c for c in fake.commands() if Named()(c) == "install"]
    assert install == rules.client_install_command(HUB, PIP_ON_HOST)
    assert f"--find-links {layout.hub_client_wheels(CLIENT)}" in install and "--no-index" in install
    assert fake.logged[0] == f"hub client huggingface_hub==2.4.0 installed at {layout.hub_client_dir(CLIENT)}"


def test_a_revision_fetched_since_preflight_is_not_fetched_again_nor_logged_as_fetched():
    ok, sent, fake, row = fetching({**DONE, "fetch target": ALREADY, "fetch draft": ALREADY})
    assert ok is True and row is None and sent == ["survey", "fetch target", "fetch draft", "check"]
    assert not any(line.startswith("fetched ") for line in fake.logged)


def test_a_fetch_without_sizes_logs_no_figure_rather_than_a_wrong_one():
    # the fetched record alone (its sizes record lost to the host's output): the log says what it lacks
    ok, _, fake, _ = fetching({**DONE, "fetch target": answer(record("fetched", value=str(2 * MIB)))})
    assert ok and fake.logged[1].startswith(f"fetched {T_NAME}: ") and fake.logged[1].endswith(
        ", 2.0 MiB, (no figure) downloaded in 0.0s")


@pytest.mark.parametrize("upload, said", [
    (False, "'the transfer failed'"),  # put_file said no, and nothing else
    (OSError("Failure: No space left on device"), "'Failure: No space left on device'"),
    (EOFError("the SFTP channel closed"), "'the SFTP channel closed'"),
    (SSHException("Channel closed."), "'Channel closed.'"),
])
@pytest.mark.parametrize("which", [0, 2])  # pip's wheel, a client's wheel
def test_an_upload_that_fails_refuses_the_host_naming_the_client_and_uploads_no_more(upload, said, which):
    local, dest = UPLOADS[which]
    ok, sent, _, row = fetching({**DONE, "survey": survey(client=False), "install": INSTALLED}, upload={dest: upload})
    assert ok is False and sent == ["survey", "mkdirs", *(f"upload {d}" for _, d in UPLOADS[:which + 1])]
    assert refusal_of(row) == (f"h: hub client huggingface_hub==2.4.0: expected {local} uploaded to {dest}, found "
                               f"{said}; nothing was stopped")


def test_upload_directories_that_cannot_be_made_refuse_the_host_with_no_upload():
    said = f"mkdir: cannot create directory '{layout.ENGINE_PIP_DIR}': Read-only file system"
    ok, sent, _, row = fetching({**DONE, "survey": survey(client=False), "mkdirs": (False, said)})
    assert ok is False and sent == ["survey", "mkdirs"]
    assert refusal_of(row) == (f"h: hub client huggingface_hub==2.4.0: expected the uploads' directories made, found "
                               f"{said!r}; nothing was stopped")


PIP_NO_MATCH = ("Looking in links: /var/cache/sglang-fleet/wheels/x\n"
                "ERROR: Could not find a version that satisfies the requirement pyyaml>=5.1 (from huggingface-hub) "
                "(from versions: none)\nERROR: No matching distribution found for pyyaml>=5.1\n")


@pytest.mark.parametrize("said, found", [
    (answer(record("pip", PIP_NO_MATCH, "1")),
     "expected pip to install it from the uploaded wheels, found 'exit 1: ERROR: Could not find a version that "
     "satisfies the requirement pyyaml>=5.1 (from huggingface-hub) (from versions: none) ERROR: No matching "
     "distribution found for pyyaml>=5.1'"),
    (answer("@@busy"),
     "expected no other install of it on the host, found one holding /opt/sglang-fleet/hub/.install.lock for 600 s: "
     "run again once it is done"),
    ((False, "sh: 1: cannot create /opt/sglang-fleet/hub/.install.lock: Read-only file system\n"),
     "expected the install's records, found 'sh: 1: cannot create /opt/sglang-fleet/hub/.install.lock: Read-only "
     "file system'"),
])
def test_a_client_install_that_fails_refuses_the_host_with_its_reason_before_any_fetch(said, found):
    ok, sent, _, row = fetching({**DONE, "survey": survey(client=False), "install": said})
    assert ok is False and sent == ["survey", *CLIENT_UPLOADS]
    assert refusal_of(row) == f"h: hub client huggingface_hub==2.4.0: {found}; nothing was stopped"


# --- a fetch that stops: refused, nothing after it ---------------------------------------------------

HF_401 = ("HfHubHTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/api/models/Qwen/Qwen3.6-27B/"
          "revision/6f1c2d3e4b5a69788796a5b4c3d2e1f00f1e2d3c\n\nInvalid credentials in Authorization header\n"
          "Request ID: Root=1-6760a0b1-0d2c\n")


@pytest.mark.parametrize("said, found", [
    (answer(record("busy")),
     "another fetch of it still running after 14400s (it holds its lock): run again once it is done"),
    (answer(record("client", "ModuleNotFoundError: No module named 'huggingface_hub'\n", "broken"), record("exit", value="0")),
     "the hub client not importable (\"ModuleNotFoundError: No module named 'huggingface_hub'\")"),
    (answer(record("unsafe", "../../etc/passwd"), record("exit", value="0")),
     "a file name that is no relative path inside the revision: '../../etc/passwd'"),
    (answer(SIZES, record("integrity", "model-00003-of-00011.safetensors: sha256 differs\n", "1"), record("exit", value="0")),
     "files that differ from what the endpoint says after fetching them twice: 'model-00003-of-00011.safetensors: "
     "sha256 differs' (kept at its .partial; not served)"),
    (answer(SIZES, record("disk", value=f"{20480 * MIB} {51200 * MIB}"), record("exit", value="0")),
     f"20480.0 MiB free at {layout.MODELS_DIR}, 51200.0 MiB needed (what is left to fetch of the revision's 51200.0 MiB, "
     "and hub.disk_margin_mib 10240)"),
    (answer(record("error", HF_401, "metadata"), record("exit", value="0")),
     "the client's metadata request failed: 'HfHubHTTPError: 401 Client Error: Unauthorized for url: "
     "https://huggingface.co/api/models/Qwen/Qwen3.6-27B/revision/6f1c2d3e4b5a69788796a5b4c3d2e1f00f1e2d3c Invalid "
     "credentials in Authorization header'"),
    (answer(record("error", "the endpoint answered commit 1111111111111111111111111111111111111111", "revision"),
            record("exit", value="0")),
     "the client's revision request failed: 'the endpoint answered commit 1111111111111111111111111111111111111111'"),
    (answer(SIZES, record("error", "", "download"), record("exit", value="0")),
     "the client's download request failed: '(no message)'"),
    (answer(SIZES, record("exit", value="124")),
     f"the client ended without a result (exit 124; its log: {layout.revision_log(TPATH)}); a partial fetch is resumed by "
     "the next run"),
    ((False, f"sh: 1: cannot create {TPATH.rsplit('/', 1)[0]}/.lock: Read-only file system"),
     f"no records from the fetch ('sh: 1: cannot create {TPATH.rsplit('/', 1)[0]}/.lock: Read-only file system')"),
], ids=["busy", "client", "unsafe", "integrity", "disk", "error", "revision", "download", "killed", "no answer"])
def test_a_fetch_that_stops_refuses_the_host_naming_the_revision_and_endpoint_and_sends_nothing_more(said, found):
    ok, sent, fake, row = fetching({**DONE, "fetch target": said})
    assert ok is False and sent == ["survey", "fetch target"]  # no draft, no check, no removal
    assert refusal_of(row) == fetch_refusal(found)
    assert not any(line.startswith("fetched ") for line in fake.logged)


def test_a_draft_that_fails_after_the_target_was_fetched_names_the_draft_and_its_directory():
    ok, sent, fake, row = fetching({**DONE, "fetch draft": answer(record("busy"))})
    assert ok is False and sent == ["survey", "fetch target", "fetch draft"]
    assert refusal_of(row) == fetch_refusal("another fetch of it still running after 14400s (it holds its lock): run "
                                            "again once it is done", D_NAME, DPATH)
    assert fake.logged[1].startswith(f"fetched {T_NAME}: ")


def test_a_mirror_endpoint_is_the_one_fetched_from_and_named_in_the_refusal():
    spec = hub_spec({"endpoint": "http://10.0.0.5:8090/", "fetch_timeout_s": 600})
    _, _, fake, row = fetching({**DONE, "fetch target": answer(record("busy"))}, pf=preflight_of(spec, missing(spec)))
    assert refusal_of(row) == fetch_refusal("another fetch of it still running after 600s (it holds its lock): run "
                                            "again once it is done", endpoint="http://10.0.0.5:8090/")
    (first, *_) = [c for c in fake.commands() if "HF_ENDPOINT=" in c]
    assert "HF_ENDPOINT=http://10.0.0.5:8090 " in first  # its final / taken off for the client


# --- the token ---------------------------------------------------------------------------------------

def with_token(spec: ClassSpec = NEW):
    pf = preflight_of(spec, missing(spec))
    return preflight.Preflight(pf.group, pf.spec, pf.facts, type(pf.secrets)(pf.secrets.server, pf.secrets.environment,
                                                                               TOKEN), pf.plan, pf.stamp)


def nowhere_but_the_upload(fake, *rows):
    """The token's value is on no command sent, in no log line and no reason of the `rows` given: only in the file
    uploaded."""
    assert not [c.command for c in fake.calls if TOKEN in c.command]
    assert not [line for line in fake.logged if TOKEN in line]
    assert not [r for row in rows for r in row.reasons if TOKEN in r]
    assert [dest for dest, content in fake.uploads.items() if TOKEN in content] == [TOKEN_FILE]


TOKENED = {"survey": survey(client=False), "install": INSTALLED, "fetch target": fetched(), "fetch draft": fetched(),
           "check": configs()}


def test_the_token_goes_into_a_0600_file_made_first_named_by_hf_token_path_and_removed_after():
    ok, sent, fake, row = fetching(TOKENED, pf=with_token(), token=TOKEN_FILE)
    assert ok is True and row is None
    assert sent == ["survey", *CLIENT_UPLOADS, "token file", "upload token", "fetch target", "fetch draft", "rm token",
                    "check"]
    (made,) = [c for c in fake.commands() if Named(token=TOKEN_FILE)(c) == "token file"]
    assert made.startswith("umask 077 && ") and made.endswith(f": > {shlex.quote(TOKEN_FILE)}")  # made 0600, empty
    assert fake.uploads[TOKEN_FILE] == TOKEN and TOKEN_FILE == f"{layout.CONFIG_DIR}/.{NEW.service.unit}.hub-token{layout.STAGED_SUFFIX}"
    fetches = [c for c in fake.commands() if Named(token=TOKEN_FILE)(c).startswith("fetch ")]
    assert fetches == [rules.fetch_command(NEW, p, m, TOKEN_FILE) for p, m in NEW.hub_models.items()]
    assert all(f"HF_TOKEN_PATH={TOKEN_FILE} " in c and "env -u HF_TOKEN " in c for c in fetches)
    nowhere_but_the_upload(fake)


def test_without_a_token_no_file_is_made_and_the_fetch_names_none():
    ok, sent, fake, _ = fetching(DONE)
    assert ok and "token file" not in sent and not any("HF_TOKEN_PATH" in c for c in fake.commands())


@pytest.mark.parametrize("broken", ["fetch target", "fetch draft"])
def test_the_tokens_file_is_removed_even_when_a_fetch_fails(broken):
    failing = answer(record("error", "HfHubHTTPError: 403 Client Error: Forbidden (gated repository)", "download"))
    ok, sent, fake, row = fetching({**TOKENED, broken: failing}, pf=with_token(), token=TOKEN_FILE)
    assert ok is False and sent[-1] == "rm token" and sent[-2] == broken and "check" not in sent
    assert "'HfHubHTTPError: 403 Client Error: Forbidden (gated repository)'" in refusal_of(row)
    nowhere_but_the_upload(fake, row)


def test_a_tokens_file_that_cannot_be_made_refuses_the_host_before_any_upload_of_it():
    cannot = (False, f"sh: 1: cannot create {TOKEN_FILE}: Read-only file system")
    ok, sent, _, row = fetching({**TOKENED, "survey": survey(), "token file": cannot}, pf=with_token(), token=TOKEN_FILE)
    assert ok is False and sent == ["survey", "token file", "rm token"]  # whatever the attempt left, removed
    assert refusal_of(row) == (f"h: hub.token: expected it uploaded to {TOKEN_FILE} (0600), found the upload failed; "
                               "nothing was stopped")


def test_a_token_upload_that_fails_refuses_the_host_and_fetches_nothing():
    ok, sent, fake, row = fetching({**TOKENED, "survey": survey()}, pf=with_token(), token=TOKEN_FILE,
                                   upload={TOKEN_FILE: OSError("Failure")})
    assert ok is False and sent == ["survey", "token file", "upload token", "rm token"]
    assert refusal_of(row) == (f"h: hub.token: expected it uploaded to {TOKEN_FILE} (0600), found the upload failed; "
                               "nothing was stopped")
    assert not [c.command for c in fake.calls if TOKEN in c.command] and not [m for m in fake.logged if TOKEN in m]


def test_a_token_under_sudo_crosses_through_the_private_drop_and_is_still_on_no_command_line():
    named = Named(token=TOKEN_FILE)
    home = "/home/deploy/.sglang-fleet-upload"

    def key(command: str) -> str:
        return "drop" if command.startswith("mkdir -p -m 700 ") else named(command)

    fake = fake_host(Script({**TOKENED, "survey": survey(), "drop": home}, key=key), _sudo=True)
    uploading(fake, {})
    assert hub._fetch_or_lost(None, fake.host, with_token(), UPLOADS) is True
    drop = f"{home}/{Path(layout.hub_token_file(NEW.service.unit)).name}"
    assert fake.uploads == {drop: TOKEN}  # as the login, into its private directory, then moved as root
    assert any(c.startswith(f"cat {drop} > {TOKEN_FILE}") for c in fake.commands())
    assert not [c.command for c in fake.calls if TOKEN in c.command] and not [m for m in fake.logged if TOKEN in m]
    assert [key(c) for c in fake.commands()][-2:] == ["rm token", "check"]


# --- the fan-out: at most hub.max_parallel hosts fetching from one endpoint -----------------------------

def fan_out(specs: dict[str, ClassSpec], blocks: float = 0.02):
    """_fetch_or_lost on each host (name -> its class) at once, each fetch taking `blocks` s (gevent):
    (their results, the most fetches in flight at once per endpoint and in all, the hosts' logs)."""
    flight: dict[str, int] = {}
    peak: dict[str, int] = {}

    def answering(spec: ClassSpec):
        named = Named(spec)
        script = Script({**DONE, "check": configs(spec)}, key=named)

        def answer_(command):
            if named(command).startswith("fetch "):
                for key in (spec.hub.endpoint, "all"):
                    flight[key] = flight.get(key, 0) + 1
                    peak[key] = max(peak.get(key, 0), flight[key])
                gevent.sleep(blocks)
                for key in (spec.hub.endpoint, "all"):
                    flight[key] -= 1
            return script(command)
        return answer_

    fakes = fake_hosts({name: answering(spec) for name, spec in specs.items()})
    for fake in fakes.values():
        uploading(fake, {})
    greenlets = [gevent.spawn(hub._fetch_or_lost, None, fakes[n].host, preflight_of(s, missing(s)), UPLOADS)
                 for n, s in specs.items()]
    gevent.joinall(greenlets, raise_error=True)
    return [g.value for g in greenlets], peak, {n: f.logged for n, f in fakes.items()}


def test_six_hosts_with_max_parallel_2_fetch_at_most_two_at_once_and_the_others_say_they_wait(slots):
    spec = hub_spec({"max_parallel": 2}, draft_model=False)
    done, peak, logs = fan_out({f"h{i}": spec for i in range(6)})
    assert done == [True] * 6 and peak == {HUB.endpoint: 2, "all": 2}
    waiting = "waiting for a fetch slot: 2 hosts at once from https://huggingface.co (hub.max_parallel)"
    assert sum(waiting in lines for lines in logs.values()) == 4  # the two that started first never waited
    assert all(lines[-2].startswith("fetching ") and lines[-1].startswith("fetched ") for lines in logs.values())
    assert list(slots) == [(HUB.endpoint, 2)] and not slots[(HUB.endpoint, 2)].locked()  # every slot given back


def test_a_host_that_waited_for_its_slot_logs_the_wait_before_its_fetch():
    done, _, logs = fan_out({f"h{i}": hub_spec({"max_parallel": 1}, draft_model=False) for i in range(2)})
    assert done == [True, True] and logs["h1"][0].startswith("waiting for a fetch slot: 1 hosts at once from ")
    assert logs["h1"][1].startswith("fetching ") and not logs["h0"][0].startswith("waiting")


def test_a_host_holds_one_slot_for_all_its_revisions_so_its_fetches_are_not_interleaved_with_anothers():
    spec = hub_spec({"max_parallel": 1})  # target and draft by repository: two fetches a host
    order = []
    named = Named(spec)

    def answering(name):
        script = Script(DONE, key=named)

        def answer_(command):
            if named(command).startswith("fetch "):
                order.append(f"{name} {named(command)}")
                gevent.sleep(0.01)
            return script(command)
        return answer_

    fakes = fake_hosts({n: answering(n) for n in ("h0", "h1")})
    greenlets = [gevent.spawn(hub._fetch_or_lost, None, f.host, preflight_of(spec, missing(spec)), UPLOADS)
                 for f in fakes.values()]
    gevent.joinall(greenlets, raise_error=True)
    assert [g.value for g in greenlets] == [True, True]
    assert order == ["h0 fetch target", "h0 fetch draft", "h1 fetch target", "h1 fetch draft"]
    assert [line for line in fakes["h1"].logged if line.startswith("waiting")] == [
        "waiting for a fetch slot: 1 hosts at once from https://huggingface.co (hub.max_parallel)"]  # once, not a fetch


def test_two_endpoints_do_not_share_their_bound_but_two_classes_of_one_endpoint_do(slots):
    public = hub_spec({"max_parallel": 1}, draft_model=False)
    mirror = hub_spec({"max_parallel": 1, "endpoint": "http://10.0.0.5:8090"}, draft_model=False)
    other_class = hub_spec({"max_parallel": 1}, draft_model=False, served_model_name="qwen-b")
    done, peak, _ = fan_out({"a0": public, "a1": public, "b0": mirror, "b1": mirror})
    assert done == [True] * 4 and peak == {public.hub.endpoint: 1, mirror.hub.endpoint: 1, "all": 2}
    slots.clear()
    done, peak, _ = fan_out({"a0": public, "a1": other_class, "a2": public, "a3": other_class})
    assert done == [True] * 4 and peak == {public.hub.endpoint: 1, "all": 1}  # across every class of the run


def test_a_host_lost_while_it_fetches_gives_its_slot_back(slots):
    spec = hub_spec({"max_parallel": 1}, draft_model=False)
    named = Named(spec)
    fake = fake_host(Script({"survey": survey(), "fetch target": TimeoutError()}, key=named))
    assert hub._fetch_or_lost(None, fake.host, preflight_of(spec, missing(spec)), UPLOADS) is False
    assert not slots[(spec.hub.endpoint, 1)].locked()


# --- the checks, on the fetched config.json -----------------------------------------------------------

def test_the_checks_run_on_the_fetched_revisions_with_their_manifests():
    ok, sent, fake, _ = fetching(DONE)
    assert ok and sent[-1] == "check"
    assert fake.commands()[-1] == ModelDirs().command([TPATH, DPATH], [TPATH, DPATH])
    assert f"{TPATH}/{rules.MANIFEST}" in fake.commands()[-1]


def test_a_fetched_dflash_draft_whose_vocabulary_differs_refuses_the_host_with_the_guards_words():
    bad = {**DRAFT_CONFIG, "vocab_size": 151936}
    removable = f"100 Qwen/Qwen3.6-27B/{'e' * 40}\n90 Qwen/Qwen3.6-27B/{'d' * 40}\n"
    ok, sent, _, row = fetching({**DONE, "survey": survey(revisions=removable), "check": configs(draft_config=bad)},
                                pf=preflight_of(hub_spec({"keep": 0}), missing(hub_spec({"keep": 0}))))
    assert ok is False and sent == ["survey", "fetch target", "fetch draft", "check"]  # and nothing removed
    assert row.verdict == "REFUSED" and row.reasons == [
        f"h: draft vocabulary: expected vocab_size 248320 (the target's), found 151936 in {DPATH}; nothing was stopped"]


def test_a_fetched_revision_found_without_its_manifest_refuses_the_host():
    checked = answer(record("path", value=TPATH), record("missing", value="manifest"),
                     record("path", value=DPATH), record("config", json.dumps(DRAFT_CONFIG), "0"))
    ok, _, _, row = fetching({**DONE, "check": checked})
    assert ok is False and row.verdict == "REFUSED"
    assert row.reasons and all(r.endswith("; nothing was stopped") and TPATH in r for r in row.reasons)


def test_a_hand_placed_draft_is_checked_with_the_fetched_target_and_not_fetched():
    spec = hub_spec(draft_model=False)
    assert spec.draft_path == DRAFT and list(spec.hub_models) == [spec.target_path]
    pf = preflight_of(spec, missing(spec, DRAFT))
    ok, sent, fake, _ = fetching({**DONE, "check": configs(spec)}, pf=pf)
    assert ok and sent == ["survey", "fetch target", "check"]
    assert fake.commands()[-1] == ModelDirs().command([spec.target_path, DRAFT], [spec.target_path])


def complete_revision(root: Path, files: dict[str, bytes]) -> str:
    """A revision directory as FETCH leaves it: its files, then its manifest (`SIZE DIGEST NAME` a line)."""
    path = root / "Qwen" / "Qwen3.6-27B" / TARGET_MODEL["revision"]
    path.mkdir(parents=True)
    for name, content in files.items():
        (path / name).write_bytes(content)
    (path / rules.MANIFEST).write_text("".join(f"{len(c)} - {n}\n" for n, c in sorted(files.items())))
    return str(path)


def model_dir_on_this_machine(path: str) -> ModelDir:
    """The models fact (with the manifest's checks) run under the real dash over `path`."""
    out = subprocess.run(["/bin/sh", "-c", ModelDirs().command([path], [path])], capture_output=True, text=True,
                         timeout=30, check=False).stdout
    return ModelDirs().process(out.splitlines())[path]


def test_a_complete_revision_passes_the_manifests_size_checks(tmp_path):
    path = complete_revision(tmp_path, {"config.json": json.dumps(TARGET_CONFIG).encode(), "a b.txt": b"12345"})
    found = model_dir_on_this_machine(path)
    assert (found.status, found.vocab_size) == ("ok", 248320)
    (tmp_path / path / "a b.txt").write_bytes(b"1234")  # one byte short: damaged, named
    found = model_dir_on_this_machine(path)
    assert found.status == "damaged" and found.message == "size differs from its manifest: a b.txt"


# A file name with its own blanks (FETCH accepts one ending in a space): the manifest's lines are read
# whole, so the complete revision is not taken for damaged.
def test_a_complete_revision_with_a_file_name_ending_in_a_space_is_not_damaged(tmp_path):
    path = complete_revision(tmp_path, {"config.json": json.dumps(TARGET_CONFIG).encode(), "notes ": b"12345"})
    assert model_dir_on_this_machine(path).status == "ok"


# --- garbage collection: the unused revisions beyond hub.keep -------------------------------------------

OLD = {name: f"Qwen/Qwen3.6-27B/{c * 40}" for name, c in
       (("live", "1"), ("backup", "2"), ("newest", "3"), ("middle", "4"), ("oldest", "5"))}


def gc(keep: int, removed: list[str]):
    """A host with the target's five older revisions (the live unit's, a kept backup's, three unused)
    and the declared ones: what _fetch removes with hub.keep `keep`, the host answering `removed`."""
    spec = hub_spec({"keep": keep})
    listed = "".join(f"{t} {OLD[n]}\n" for t, n in ((50, "live"), (40, "backup"), (30, "newest"), (20, "middle"),
                                                     (10, "oldest")))
    listed += f"5 {spec.target_path[len(spec.hub.models_dir) + 1:]}\n7 {spec.draft_path[len(spec.hub.models_dir) + 1:]}\n"
    listed += f"60 Qwen/Qwen3.6-27B/not-a-commit\n3 Other/Repo/{'6' * 40}\n"  # never named: not removed
    uses = f"{spec.hub.models_dir}/{OLD['live']}\n{spec.hub.models_dir}/{OLD['backup']}\n/elsewhere/{OLD['newest']}\n"
    gone = answer(*(record("removed", value=r) for r in removed))
    return fetching({**DONE, "survey": survey(revisions=listed, uses=uses), "remove": gone},
                    pf=preflight_of(spec, missing(spec))), spec


def test_revisions_no_unit_names_beyond_hub_keep_are_removed_oldest_first_and_logged():
    (ok, sent, fake, row), spec = gc(1, [OLD["middle"], OLD["oldest"]])
    assert ok is True and row is None and sent == ["survey", "fetch target", "fetch draft", "check", "remove"]
    assert fake.commands()[-1] == rules.remove_command(spec.hub.models_dir, [OLD["middle"], OLD["oldest"]])
    assert fake.logged[-2:] == [f"removed revision {OLD['middle']} (no unit names it; hub.keep 1)",
                                f"removed revision {OLD['oldest']} (no unit names it; hub.keep 1)"]


def test_with_hub_keep_0_every_unused_revision_goes_but_never_a_used_or_declared_one():
    (ok, _, fake, _), spec = gc(0, [OLD["newest"], OLD["middle"], OLD["oldest"]])
    removal = fake.commands()[-1]
    assert ok and removal == rules.remove_command(spec.hub.models_dir, [OLD["newest"], OLD["middle"], OLD["oldest"]])
    for kept in (OLD["live"], OLD["backup"], spec.target_path, spec.draft_path, "not-a-commit", "Other/Repo"):
        assert kept not in removal
    assert len([line for line in fake.logged if line.startswith("removed revision ")]) == 3


def test_a_removal_the_host_does_not_confirm_is_not_logged_as_done():
    (ok, sent, fake, _), _ = gc(1, [OLD["middle"]])  # the oldest's rm failed: no record of it
    assert ok and sent[-1] == "remove"
    assert [line for line in fake.logged if line.startswith("removed ")] == [
        f"removed revision {OLD['middle']} (no unit names it; hub.keep 1)"]


def test_nothing_to_remove_sends_no_removal():
    ok, sent, _, _ = fetching({**DONE, "survey": survey(revisions=f"50 {OLD['live']}\n", uses="")})
    assert ok and sent == ["survey", "fetch target", "fetch draft", "check"]  # the one unused is within hub.keep 1


# A models_dir with a bracket or a star (AbsPath takes any text): the survey's grep pattern escapes it,
# so the revisions the unit and the backups name are found and never collected.
@pytest.mark.parametrize("models_dir", ["/srv/models[1]", "/srv/models*"])
def test_the_survey_finds_the_revisions_a_unit_names_whatever_characters_models_dir_has(tmp_path, models_dir):
    spec = hub_spec({"models_dir": models_dir})
    unit = tmp_path / "unit"
    unit.write_text(f"ExecStart=/opt/sglang/bin/python -m sglang.launch_server --model-path {models_dir}/{OLD['live']}\n")
    command = rules.survey_command(spec).replace(shlex.quote(spec.unit_file), shlex.quote(str(unit))).replace(
        shlex.quote(spec.backups_dir), shlex.quote(str(tmp_path / "backups")))
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30, check=False).stdout
    assert rules.read_survey(out, models_dir).uses == {OLD["live"]}


def test_the_survey_finds_the_revisions_a_unit_names_under_the_default_models_dir(tmp_path):
    # the same reading as above, with a models_dir the pattern takes as it is: what the bug test expects
    unit = tmp_path / "unit"
    unit.write_text(f"ExecStart=/x --model-path {layout.MODELS_DIR}/{OLD['live']} --y {layout.MODELS_DIR}/x/y/z\n")
    (tmp_path / "backups" / "20260101T000000Z").mkdir(parents=True)
    (tmp_path / "backups" / "20260101T000000Z" / "unit").write_text(f"{layout.MODELS_DIR}/{OLD['backup']}\n")
    command = rules.survey_command(NEW).replace(shlex.quote(NEW.unit_file), shlex.quote(str(unit))).replace(
        shlex.quote(NEW.backups_dir), shlex.quote(str(tmp_path / "backups")))
    out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30, check=False).stdout
    assert rules.read_survey(out, layout.MODELS_DIR).uses == {OLD["live"], OLD["backup"]}


# The client's install lock not taken within 600 s: busy, and nothing of the other install removed.
def test_a_client_install_whose_lock_is_not_taken_removes_nothing(tmp_path):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    for program, status in (("flock", 1), ("rm", 0), ("mkdir", 0), ("timeout", 0), ("tail", 0), ("base64", 0),
                            ("touch", 0), ("mv", 0)):
        (bin_ / program).write_text(f"#!/bin/sh\necho {program} \"$@\" >> {tmp_path}/ran\nexit {status}\n")
        (bin_ / program).chmod(0o755)
    root = tmp_path / "hub"
    root.mkdir()
    command = rules.client_install_command(HUB, PIP_ON_HOST).replace(layout.HUB_CLIENT_ROOT, str(root))
    subprocess.run(["/bin/sh", "-c", command], env={"PATH": str(bin_)}, capture_output=True, timeout=30, check=False)
    ran = (tmp_path / "ran").read_text().splitlines()
    assert ran[0].startswith("mkdir ") and ran[1].startswith("flock ")
    assert not [r for r in ran if r.startswith("rm ")], ran


# --- a host that stops answering --------------------------------------------------------------------------

@pytest.mark.parametrize("at, raised, what, bound", [
    ("fetch target", TimeoutError(), bounds.fetch(NEW).what, bounds.fetch(NEW)),
    ("survey", EOFError("the link went down"), "the survey of the fetched revisions", bounds.reading(NEW, "")),
    ("check", TimeoutError(), "the fetched revisions' config.json", bounds.reading(NEW, "")),
])
def test_a_command_without_an_answer_leaves_the_host_lost_and_sends_nothing_more(at, raised, what, bound):
    ok, sent, _, row = fetching({**DONE, at: raised})
    order = ["survey", "fetch target", "fetch draft", "check"]
    assert ok is False and sent == order[:order.index(at) + 1]
    assert row.verdict == "LOST" and row.reasons == [
        this_run().lost["h"], "h: models: nothing live changed; the next run resumes a partial fetch"]
    assert this_run().lost["h"].startswith(f"h: {what}: expected an answer within {bound.seconds:g}s ({bound.basis}), found ")


def test_a_host_lost_in_its_fetch_with_a_token_sends_nothing_more_not_even_the_removal():
    # its link is gone: the 0600 file stays until the next run, which makes it anew and removes it
    ok, sent, fake, row = fetching({**TOKENED, "survey": survey(), "fetch target": TimeoutError()}, pf=with_token(),
                                   token=TOKEN_FILE)
    assert ok is False and sent == ["survey", "token file", "upload token", "fetch target"]
    assert row.verdict == "LOST" and row.reasons[-1] == "h: models: nothing live changed; the next run resumes a partial fetch"
    nowhere_but_the_upload(fake, row)


# --- beside a long fetch: progress, and a link found lost ----------------------------------------------

def watched(answers: list[str | None]):
    """hub.watch over a host whose progress checks get `answers` in turn (None: no answer in time)."""
    clock, logged, closed, asked_for = [0.0], [], [], []

    def ask(command, within):
        asked_for.append((command, within))
        clock[0] += 1
        return answers.pop(0) if answers else None

    def sleep(seconds):
        if not answers and asked_for:  # nothing more scripted: the run ends the watch (its fetch done)
            this_run().lost.setdefault("w", "done")
        clock[0] += seconds

    host = SimpleNamespace(name="w", state=None, log=logged.append, log_styled=lambda m, **k: logged.append(m),
                           connector=SimpleNamespace(client=SimpleNamespace(close=lambda: closed.append(True))))
    this_run().lost.pop("w", None)
    try:
        hub.watch(host, SPEC, "/m/o/n/.abc.partial", "o/n@abc", ask=ask, now=lambda: clock[0], sleep=sleep)
        return logged, closed, asked_for, this_run().lost.get("w")
    finally:
        this_run().lost.pop("w", None)


def test_a_long_fetch_says_how_far_it_got():
    logged, closed, asked_for, _ = watched(["", "2048\n", "garbage"])
    assert logged == ["fetching o/n@abc: 2.0 MiB so far"] and closed == []
    assert asked_for[0][0] == "du -sk -- /m/o/n/.abc.partial 2>/dev/null | cut -f1"


def test_a_fetch_whose_link_is_lost_is_given_up_and_its_connection_closed():
    every, lost_after = SPEC.readiness.progress_every_s, SPEC.readiness.link_timeout_s
    answers = ["1"] + [None] * int(lost_after // every + 2)
    logged, closed, _, why = watched(answers)
    assert closed == [True] and why == (f"w: link lost: expected an answer to the fetch's progress check every "
                                        f"{every:g}s, found none for {lost_after:g}s (readiness.link_timeout_s)")
