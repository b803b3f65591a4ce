"""tasks/engine over a pyinfra Host whose commands the test answers (fakehost): the declared engine
surveyed, pip's wheel (and engine.wheels) uploaded, installed beside the live one (the unused
engines beyond engine.keep removed first) and checked from its own venv, before anything stops;
every answer that stops it refuses the host with nothing stopped and nothing more sent; a host that
stops answering is LOST; and the generation-time step that downloads pip's wheel into the
controller's cache and finds engine.wheels there, or refuses the host. Each command is named by comparing it with what fleet/ builds for the spec; the
clock is scripted."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from answers import answer, record
from builders import HELP_0523, SGLANG_0523, SPEC, converged
from fakehost import Call, Clock, Script, fake_host, fresh_run, this_run, preflight_of  # noqa: F401
from pyinfra.context import ctx_host, ctx_state

from facts.sglang import SglangEngine
from fleet.core import bounds, layout
from fleet.engine import install as rules
from fleet.engine.parse import Engine, parse_algorithms
from fleet.spec import ClassSpec
from tasks import engine, preflight
from tasks.common import CACHE, WheelError

ENGINE = {"sglang": "sglang==0.5.24.dev29907", "index_url": "http://10.0.0.5:8080/simple/"}
DDTREE = {"algorithm": "DDTREE", "draft_model_path": "/root/models/Qwen3.6-27B-DFlash", "block_size": 8,
          "tree_budget": 64}


def engine_spec(speculative=None, **fields) -> ClassSpec:
    """builders.SPEC with a declared engine (ENGINE, `fields` over it) instead of a hand-made launcher."""
    data = SPEC.model_dump(mode="json")
    data["service"].pop("launcher")
    if speculative is not None:
        data["speculative"] = speculative
    return ClassSpec.model_validate({**data, "engine": {**ENGINE, **fields}})


NEW = engine_spec(DDTREE)  # DDTree, which the live 0.5.23 cannot serve: hence the new engine
NAME = NEW.engine.name
# the host serves SPEC from its hand-made venv; the declared engine is not there yet
HOST = converged(SPEC, engine=Engine("no launcher"))
PF = preflight_of(NEW, HOST)
WHEEL = str(CACHE / "wheels" / "pip-24.3.1" / "pip-24.3.1-py3-none-any.whl")  # as install(pf) passes it
ON_HOST = rules.pip_wheel_path("pip-24.3.1-py3-none-any.whl")
UPLOADS = [(WHEEL, ON_HOST)]  # pip's wheel first, then engine.wheels (none here)

# --- what the host answers, framed as fleet/engine/install.py's commands and the engine fact print it --------

# 0.5.23's --help with upstream PR 29907 (DDTree): the algorithm among the builtins, and its flag
HELP_DDTREE = HELP_0523.replace("DFLASH, DSPARK, UNO.", "DFLASH, DSPARK, UNO, DDTREE.").replace(
    "  --speculative-dflash-block-size SPECULATIVE_DFLASH_BLOCK_SIZE\n",
    "  --speculative-ddtree-budget SPECULATIVE_DDTREE_BUDGET\n"
    "                        DDTREE only. Nodes of the draft tree verified per step.\n"
    "  --speculative-dflash-block-size SPECULATIVE_DFLASH_BLOCK_SIZE\n")
DDTREE_ENGINE = answer(record("version", "0.5.24.dev29907\n", "0"), record("help", HELP_DDTREE, "0"))
ENGINE_0523 = answer(record("version", "0.5.23\n", "0"), record("help", HELP_0523, "0"))

NOTHING_INSTALLED = answer(record("engines", ""), record("uses", ""))
FREE_KIB = "52428800"
PIP_OK = ("Looking in indexes: http://10.0.0.5:8080/simple/\nCollecting sglang==0.5.24.dev29907\n"
          "Installing collected packages: sglang\nSuccessfully installed sglang-0.5.24.dev29907\n")
INSTALLED = answer(record("disk", value=FREE_KIB), record("pip", PIP_OK, "0"), record("installed", value="new"))
ALREADY = answer(record("installed", value="already"))
PARSES = answer(record("args", "", "0"))
# the new engine's checks are one command: its fact's records, then its parser's
CHECKED = {"survey": NOTHING_INSTALLED, "install": INSTALLED, "check": DDTREE_ENGINE + PARSES}
TAKES = {"install": 95.0, "check": 11.0}  # seconds each command takes on the scripted clock


class Named:
    """A command _install sends for `spec`, by name: each compared with what fleet/ builds for it."""

    def __init__(self, spec: ClassSpec):
        timeout = spec.readiness.command_timeout_s
        wheels = layout.engine_wheels(spec.engine.name)
        self.exact = {rules.survey_command(spec): "survey",
                      f"mkdir -p {layout.ENGINE_PIP_DIR} && rm -rf {wheels} && mkdir -p {wheels}": "mkdirs",
                      rules.check_command(spec, timeout, SglangEngine().command(
                          spec.launcher, timeout, spec.service.environment, layout.ENGINE_CACHE_DIR)): "check"}
        # the install's first step (its lock), whatever it removes after it
        self.install = rules.install_command(spec, ON_HOST, []).split("; ", 1)[0] + "; "

    def __call__(self, call: Call | str) -> str:
        if isinstance(call, Call) and call.kind == "upload":
            return f"upload {call.command}"
        command = call.command if isinstance(call, Call) else call
        if command in self.exact:
            return self.exact[command]
        return "install" if command.startswith(self.install) else f"unknown: {command[:80]}"


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(engine, "time", clock)
    return clock


def uploading(fake, results: dict[str, bool | BaseException]):
    """The uploads as the task makes them: fakehost's put_file reads a file object, and tasks/engine
    uploads a local path (a cached wheel), so it is replaced here: recorded, then what `results`
    says for its destination (else True)."""
    def put_file(src, dest, **kwargs):
        fake.calls.append(Call(dest, bool(kwargs.get("_sudo")), "upload"))
        result = results.get(dest, True)
        if isinstance(result, BaseException):
            raise result
        fake.uploads[dest] = src
        return result

    fake.host.put_file = put_file


def installing(answers: dict, pf=PF, uploads=UPLOADS, upload: dict | None = None, clock=None):
    """_install_or_lost on a host answering `answers` (name -> answer(s)) and `upload` (destination ->
    put_file's result); (ok, what it was sent by name, the fake, the host's row or None)."""
    named = Named(pf.spec)
    script = Script(answers, key=named)

    def answering(command):
        if clock is not None:
            clock.sleep(TAKES.get(named(command), 0))
        return script(command)

    fake = fake_host(answering)
    uploading(fake, upload or {})
    ok = engine._install_or_lost(None, fake.host, pf, uploads)
    return ok, [named(c) for c in fake.calls], fake, this_run().report.hosts.get("h")


UP_TO_INSTALL = ["survey", "mkdirs", f"upload {ON_HOST}", "install"]


def the_install(fake) -> str:
    (command,) = [c for c in fake.commands() if Named(NEW)(c) == "install"]
    return command


def refusal_of(row, spec: ClassSpec = NEW) -> str:
    """The one reason of a host refused by the install or its check: it names the host and the engine,
    says what was expected, and that nothing was stopped."""
    assert row.verdict == "REFUSED" and len(row.reasons) == 1, row.reasons
    (reason,) = row.reasons
    assert reason.startswith(f"h: engine {spec.engine.name}: expected ") and reason.endswith("; nothing was stopped")
    return reason


# --- an install that completes ---------------------------------------------------------------

def test_a_new_engine_is_installed_from_the_uploaded_pip_wheel_then_checked_from_its_own_venv(clock):
    ok, sent, fake, row = installing(CHECKED, clock=clock)
    assert ok is True and row is None  # nothing failed: the host's row is the plan's
    assert sent == [*UP_TO_INSTALL, "check"]
    assert fake.uploads == {ON_HOST: WHEEL} and ON_HOST.startswith(layout.ENGINE_PIP_DIR + "/")
    assert the_install(fake) == rules.install_command(NEW, ON_HOST, [])  # pip run from the uploaded wheel
    assert fake.logged == [
        f"installing engine {NAME} (sglang==0.5.24.dev29907 from http://10.0.0.5:8080/simple/)",
        f"engine {NAME} installed in 95.0s at {layout.engine_dir(NAME)}",
        f"engine {NAME} checked in 11.0s: SGLang 0.5.24.dev29907, offers {', '.join(parse_algorithms(HELP_DDTREE))}; "
        "the command line parses"]
    assert "DDTREE" in fake.logged[-1]


@pytest.mark.parametrize("survey, uploaded", [
    (answer(record("engines", f"1796039000 {NAME}\n"), record("uses", "")), []),  # installed since preflight
    (NOTHING_INSTALLED, ["mkdirs", f"upload {ON_HOST}"]),  # since the survey
])
def test_an_engine_already_installed_is_not_installed_again_but_still_checked(survey, uploaded):
    ok, sent, fake, row = installing({**CHECKED, "survey": survey, "install": ALREADY})
    assert ok is True and row is None and sent == ["survey", *uploaded, "install", "check"]
    assert the_install(fake) == rules.install_command(NEW, ON_HOST, [])
    assert not any(" installed in " in line for line in fake.logged)
    assert fake.logged[-1].startswith(f"engine {NAME} checked in ")


def test_the_engines_removed_first_are_the_unused_ones_beyond_engine_keep_oldest_first():
    live, backup, newest, middle, oldest = (engine_spec(sglang=f"sglang=={v}").engine.name
                                            for v in ("0.5.23", "0.5.22", "0.5.21", "0.5.20", "0.5.19"))
    installed = f"50 {live}\n40 {backup}\n30 {newest}\n20 {middle}\n10 {oldest}\n5 not-an-engine\n"
    uses = f"{layout.engine_launcher(live)}\n{layout.engine_launcher(backup)}\n"
    removed = answer(record("removed", value=oldest), record("disk", value=FREE_KIB), record("pip", PIP_OK, "0"),
                     record("installed", value="new"))
    spec = engine_spec(DDTREE, keep=2)
    ok, sent, fake, _ = installing({**CHECKED, "survey": answer(record("engines", installed), record("uses", uses)),
                                    "install": removed}, pf=preflight_of(spec, HOST))
    # neither what a unit runs (the live one, a kept backup's) nor the 2 newest unused
    assert ok and sent == [*UP_TO_INSTALL, "check"] and the_install(fake) == rules.install_command(spec, ON_HOST, [oldest])
    assert f"removed engine {oldest} (no unit runs it; engine.keep 2)" in fake.logged


def test_with_engine_keep_0_every_unused_engine_is_removed_newest_first_but_never_the_declared_one():
    others = [engine_spec(sglang=f"sglang=={v}").engine.name for v in ("0.5.21", "0.5.20")]
    spec = engine_spec(DDTREE, keep=0)
    listed = f"10 {others[1]}\n30 {others[0]}\n5 {spec.engine.name}\n"
    ok, _, fake, _ = installing({**CHECKED, "survey": answer(record("engines", listed), record("uses", ""))},
                                pf=preflight_of(spec, HOST))
    assert ok and the_install(fake) == rules.install_command(spec, ON_HOST, others)


# --- an install that stops: refused, nothing after it --------------------------------------------

PIP_NO_MATCH = (
    "Looking in indexes: http://10.0.0.5:8080/simple/, https://pypi.org/simple/\n"
    "ERROR: Could not find a version that satisfies the requirement sglang==9.9.9 (from versions: 0.5.22, "
    "0.5.23, 0.5.24.dev29907)\n"
    "ERROR: No matching distribution found for sglang==9.9.9\n")


def test_another_install_running_refuses_the_host_naming_its_lock():
    ok, sent, _, row = installing({**CHECKED, "install": answer(record("busy"))})
    assert ok is False and sent == UP_TO_INSTALL
    assert refusal_of(row) == (f"h: engine {NAME}: expected no other install on the host, found one running (it holds "
                            f"{layout.ENGINE_INSTALL_LOCK}): run again once it is done; nothing was stopped")


def test_too_little_disk_refuses_the_host_with_the_free_space_in_mib():
    ok, sent, _, row = installing({**CHECKED, "install": answer(record("disk", value="1536000"))})
    assert ok is False and sent == UP_TO_INSTALL
    assert refusal_of(row) == (f"h: engine {NAME}: expected 20480 MiB free at {layout.ENGINES_DIR} (engine.disk_mib), "
                            "found 1500.0 MiB; nothing was stopped")


def test_a_failed_pip_refuses_the_host_with_pips_reason_its_indexes_and_its_log():
    spec = engine_spec(DDTREE, sglang="sglang==9.9.9", extra_index_urls=["https://pypi.org/simple/"])
    failed = answer(record("disk", value=FREE_KIB), record("pip", PIP_NO_MATCH, "1"))
    ok, sent, _, row = installing({**CHECKED, "install": failed}, pf=preflight_of(spec, HOST))
    assert ok is False and sent == UP_TO_INSTALL
    name = spec.engine.name
    assert row.verdict == "REFUSED" and row.reasons == [
        f"h: engine {name}: expected pip to install sglang==9.9.9 from http://10.0.0.5:8080/simple/, "
        "https://pypi.org/simple/, found pip exit 1: 'ERROR: Could not find a version that satisfies the requirement "
        "sglang==9.9.9 (from versions: 0.5.22, 0.5.23, 0.5.24.dev29907) ERROR: No matching distribution found for "
        f"sglang==9.9.9' (the partial venv is removed; pip's log: {rules.failed_log(name)}); nothing was stopped"]


def test_a_venv_that_pip_built_but_could_not_be_put_in_place_refuses_the_host():
    finished = answer(record("disk", value=FREE_KIB), record("pip", PIP_OK, "0"), record("finish", value="1"))
    ok, sent, _, row = installing({**CHECKED, "install": finished})
    assert ok is False and sent == UP_TO_INSTALL
    assert refusal_of(row) == (f"h: engine {NAME}: expected its freeze written and the venv renamed into place once pip "
                               "was done, found exit 1 (the partial venv is removed); nothing was stopped")


def test_an_install_that_answers_no_records_refuses_the_host_quoting_what_it_said():
    said = "sh: 1: cannot create /opt/sglang-fleet/engines/.install.lock: Read-only file system\n"
    ok, sent, _, row = installing({**CHECKED, "install": (False, said)})
    assert ok is False and sent == UP_TO_INSTALL
    assert refusal_of(row) == (f"h: engine {NAME}: expected the install's records, found "
                            f"{said.rstrip()!r}; nothing was stopped")


@pytest.mark.parametrize("upload, said", [
    (False, "'the transfer failed'"),  # put_file said no, and nothing else
    (OSError("Failure: No space left on device"), "'Failure: No space left on device'"),
])
def test_an_upload_of_pips_wheel_that_fails_refuses_the_host_before_the_install(upload, said):
    ok, sent, _, row = installing(CHECKED, upload={ON_HOST: upload})
    assert ok is False and sent == ["survey", "mkdirs", f"upload {ON_HOST}"]
    assert row.verdict == "REFUSED" and row.reasons == [
        f"h: engine {NAME}: expected {WHEEL} uploaded to {ON_HOST}, found {said}; nothing was stopped"]


def test_upload_directories_that_cannot_be_made_refuse_the_host_with_no_upload():
    said = f"mkdir: cannot create directory '{layout.ENGINE_PIP_DIR}': Read-only file system"
    ok, sent, _, row = installing({**CHECKED, "mkdirs": (False, said)})
    assert ok is False and sent == ["survey", "mkdirs"]
    assert row.verdict == "REFUSED" and row.reasons == [
        f"h: engine {NAME}: expected the uploads' directories made, found {said!r}; nothing was stopped"]


# --- engine.wheels: files of the controller's, uploaded beside pip's ------------------------------

BUILT = ["/home/alice/wheelhouse/sglang-0.5.24.dev29907-py3-none-any.whl",
         "/home/alice/wheelhouse/sglang_ddtree_kernels-0.1.0-cp311-cp311-linux_x86_64.whl"]


def with_wheels(**fields):
    """A spec that installs BUILT beside its index (or, index_url None, from them alone), and its uploads."""
    spec = engine_spec(DDTREE, wheels=BUILT, **fields)
    there = layout.engine_wheels(spec.engine.name)
    return spec, [*UPLOADS, *((w, f"{there}/{w.rsplit('/', 1)[-1]}") for w in BUILT)]


def test_declared_wheels_are_uploaded_after_pips_into_the_engines_own_directory_then_installed():
    spec, uploads = with_wheels()
    ok, sent, fake, _ = installing(CHECKED, pf=preflight_of(spec, HOST), uploads=uploads)
    assert ok and sent == ["survey", "mkdirs", *(f"upload {dest}" for _, dest in uploads), "install", "check"]
    assert fake.uploads == {dest: local for local, dest in uploads}
    assert all(dest.startswith(layout.ENGINE_WHEELS_DIR + f"/{spec.engine.name}/") for _, dest in uploads[1:])
    assert the_install(fake) == rules.install_command(spec, ON_HOST, [])
    assert fake.logged[0] == (f"installing engine {spec.engine.name} (sglang==0.5.24.dev29907 from "
                              f"http://10.0.0.5:8080/simple/, 2 wheel(s) uploaded to {layout.engine_wheels(spec.engine.name)})")


def test_a_declared_wheel_that_fails_to_upload_refuses_the_host_and_uploads_no_more():
    spec, uploads = with_wheels()
    (first, at), _ = uploads[1:]
    ok, sent, _, row = installing(CHECKED, pf=preflight_of(spec, HOST), uploads=uploads,
                                  upload={at: EOFError("the SFTP channel closed")})
    assert ok is False and sent == ["survey", "mkdirs", f"upload {ON_HOST}", f"upload {at}"]
    assert row.verdict == "REFUSED" and row.reasons == [
        f"h: engine {spec.engine.name}: expected {first} uploaded to {at}, found 'the SFTP channel closed'; nothing "
        "was stopped"]


def test_a_failed_pip_from_uploaded_wheels_alone_names_them_as_where_it_looked():
    spec, uploads = with_wheels(index_url=None)
    failed = answer(record("disk", value=FREE_KIB), record("pip", PIP_NO_MATCH, "1"))
    ok, sent, fake, row = installing({**CHECKED, "install": failed}, pf=preflight_of(spec, HOST), uploads=uploads)
    there = layout.engine_wheels(spec.engine.name)
    assert ok is False and sent[-1] == "install" and fake.logged[0].endswith(f" 2 wheel(s) uploaded to {there} (no index))")
    assert (f"expected pip to install sglang==0.5.24.dev29907 from 2 wheel(s) uploaded to {there} (no index), found "
            "pip exit 1: ") in refusal_of(row, spec)


# --- the new engine's check ------------------------------------------------------------------

def test_a_new_engine_without_its_launcher_refuses_the_host_naming_the_venv():
    ok, sent, _, row = installing({**CHECKED, "check": answer(record("launcher", value="missing")) + PARSES})
    assert ok is False and sent == [*UP_TO_INSTALL, "check"]
    assert refusal_of(row) == (f"h: engine {NAME}: expected its venv at {layout.engine_launcher(NAME)}, found no "
                            "executable there; nothing was stopped")


def test_a_new_engine_that_lacks_the_specs_algorithm_refuses_the_host_with_the_guards_words():
    ok, sent, _, row = installing({**CHECKED, "check": ENGINE_0523 + PARSES})
    assert ok is False and sent == [*UP_TO_INSTALL, "check"]
    launcher = layout.engine_launcher(NAME)
    assert row.verdict == "REFUSED" and row.reasons == [
        f"h: speculative algorithm: expected an engine with DDTREE, found SGLang 0.5.23 at {launcher}, which offers "
        f"{', '.join(SGLANG_0523.algorithms)}; this engine only does linear DFlash, not DDTree: to serve that, the "
        "spec must say `algorithm: DFLASH`; nothing was stopped",
        "h: SGLang flags: expected flags SGLang 0.5.23 knows, found unknown --speculative-ddtree-budget; nothing was "
        "stopped"]


def test_a_parser_that_rejects_the_units_command_line_refuses_the_host_quoting_it():
    # its --help lists the flag, its parser does not take it (a plugin's, a renamed dest): the check runs the parser
    rejected = answer(record("args", "usage: launch_server.py [-h] --model-path MODEL_PATH ...\n"
                                     "launch_server.py: error: unrecognized arguments: --speculative-ddtree-budget "
                                     "64\n", "2"))
    ok, sent, _, row = installing({**CHECKED, "check": DDTREE_ENGINE + rejected})
    assert ok is False and sent == [*UP_TO_INSTALL, "check"]
    assert refusal_of(row) == (
        f"h: engine {NAME}: expected SGLang 0.5.24.dev29907's parser (prepare_server_args) to take the unit's command "
        "line, found 'exit 2: launch_server.py: error: unrecognized arguments: --speculative-ddtree-budget 64'; "
        "nothing was stopped")


# --- a host that stops answering ---------------------------------------------------------------

@pytest.mark.parametrize("at, raised, found", [
    ("install", TimeoutError(), f"expected an answer within {bounds.install(NEW).seconds:g}s "
                                f"({bounds.install(NEW).basis}), found none"),
    ("survey", EOFError("the link went down"),
     f"expected an answer within {bounds.reading(NEW, '').seconds:g}s (readiness.command_timeout_s "
     f"{NEW.readiness.command_timeout_s:g} + {bounds.MARGIN_S}), found the connection broken (EOFError: "
     "'the link went down')"),
])
def test_a_command_without_an_answer_leaves_the_host_lost_and_sends_nothing_more(at, raised, found):
    ok, sent, _, row = installing({**CHECKED, at: raised})
    assert ok is False and sent == UP_TO_INSTALL[:UP_TO_INSTALL.index(at) + 1]
    what = {"install": bounds.install(NEW).what, "survey": "the survey of the installed engines"}[at]
    assert row.verdict == "LOST" and row.reasons == [
        this_run().lost["h"], f"h: engine {NAME}: nothing live changed; the next run keeps a complete install and removes a "
                   "partial one"]
    assert this_run().lost["h"] == f"h: {what}: {found}"


# --- at generation time: pip's wheel into the controller's cache, engine.wheels found ------------------

def generating(monkeypatch, pf, downloaded):
    """install(pf) for host `h`: (the operations it queued, its row or None)."""
    queued = []
    queue = SimpleNamespace(call=lambda **kwargs: queued.append(kwargs))
    monkeypatch.setattr(engine, "python", queue)
    monkeypatch.setattr(preflight, "python", queue)
    monkeypatch.setattr(engine, "downloaded", downloaded)
    fake = fake_host(Script({}))
    with ctx_state.use(fake.host.state), ctx_host.use(fake.host):
        engine.install(pf)
    assert fake.calls == []  # nothing runs on the host while operations are generated
    return queued, this_run().report.hosts.get("h")


def cached(*args):
    return [Path(WHEEL)]


def test_a_plan_that_installs_an_engine_downloads_pips_wheel_once_and_queues_the_install(monkeypatch):
    asked = []

    def downloaded(where, pip_args, what):
        asked.append((where, pip_args, what))
        return [Path(WHEEL)]

    assert PF.plan.install_engine == NAME
    queued, row = generating(monkeypatch, PF, downloaded)
    assert asked == [(CACHE / "wheels" / "pip-24.3.1", ["--no-deps", "--only-binary=:all:", "pip==24.3.1"],
                      "pip==24.3.1")]
    assert queued == [{"name": "Install the declared engine beside the live one, and check it (nothing stops)",
                       "function": engine._install_or_lost, "pf": PF, "uploads": UPLOADS}]
    assert row is None


def test_declared_wheels_are_found_where_the_deploy_runs_and_uploaded_after_pips(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dist").mkdir()
    for w in BUILT:
        (tmp_path / "dist" / w.rsplit("/", 1)[-1]).write_bytes(b"PK")
    relative = [f"dist/{w.rsplit('/', 1)[-1]}" for w in BUILT]
    spec = engine_spec(DDTREE, wheels=relative)
    pf = preflight_of(spec, HOST)
    (queued,), row = generating(monkeypatch, pf, cached)
    there = layout.engine_wheels(spec.engine.name)
    assert queued["uploads"] == [*UPLOADS, *((w, f"{there}/{w[len('dist/'):]}") for w in relative)] and row is None


@pytest.mark.parametrize("make, found", [(None, "none"), ("mkdir", "a directory")])
def test_a_declared_wheel_that_is_not_a_file_refuses_the_host_at_generation_time(monkeypatch, tmp_path, make, found):
    monkeypatch.chdir(tmp_path)
    if make:
        (tmp_path / "dist" / "sglang-0.5.24.dev29907-py3-none-any.whl").mkdir(parents=True)
    spec = engine_spec(DDTREE, wheels=["dist/sglang-0.5.24.dev29907-py3-none-any.whl"])
    queued, row = generating(monkeypatch, preflight_of(spec, HOST), cached)
    assert [q["name"] for q in queued] == ["Refuse host (preflight failed)"]
    assert (row.verdict, row.action, row.reasons) == ("REFUSED", "none", [
        f"h: engine {spec.engine.name}: engine.wheels: expected a readable wheel file at "
        f"dist/sglang-0.5.24.dev29907-py3-none-any.whl (from {tmp_path}), found {found}"])


def test_a_plan_without_an_engine_to_install_queues_nothing_and_downloads_nothing(monkeypatch):
    spec = engine_spec(DDTREE, wheels=["/nowhere/sglang-0.5.24.dev29907-py3-none-any.whl"])  # not looked for either
    pf = preflight_of(spec, converged(spec))  # the declared engine is the one the host has
    assert pf.plan.install_engine is None
    queued, row = generating(monkeypatch, pf, lambda *a: pytest.fail("downloaded pip's wheel for nothing"))
    assert queued == [] and row is None


@pytest.mark.parametrize("downloaded, said", [
    (WheelError("could not download pip==24.3.1: ERROR: No matching distribution found for pip==24.3.1"),
     "could not download pip==24.3.1: ERROR: No matching distribution found for pip==24.3.1"),
    (WheelError("downloading pip==24.3.1 took more than 600 s"), "downloading pip==24.3.1 took more than 600 s"),
])
def test_a_pip_wheel_that_cannot_be_downloaded_refuses_the_host_at_generation_time(monkeypatch, downloaded, said):
    def failing(*args):
        raise downloaded

    queued, row = generating(monkeypatch, PF, failing)
    assert [q["name"] for q in queued] == ["Refuse host (preflight failed)"]
    assert (row.verdict, row.action, row.reasons) == ("REFUSED", "none", [f"h: engine {NAME}: {said}"])


def test_a_cache_that_lists_other_than_one_wheel_refuses_the_host_at_generation_time(monkeypatch):
    two = [Path(WHEEL), Path(WHEEL).with_name("pip-24.3-py3-none-any.whl")]
    queued, row = generating(monkeypatch, PF, lambda *a: two)
    assert [q["name"] for q in queued] == ["Refuse host (preflight failed)"]
    assert row.verdict == "REFUSED" and row.reasons[0].startswith(f"h: engine {NAME}: ")

