"""Property tests: no value from group_data or from a host runs a command of its own.

Every shell command the deploy builds (the preflight snapshot, make status's, the history, begin,
apply, restore, finish, the gate, the smoke test, the workloads' stop and give-back, the lock,
the gateway's install, facts, /workers and /health; the hub's survey, client install, fetch,
removal and the models fact over fetched revisions) is built from a spec whose paths, names,
environment, prompt and gateway fields hold generated hostile text that group_data validation
accepted (command substitution, backticks, quotes, semicolons, globs, leading dashes,
backslashes), and from a lock text a host could hold. Each runs under dash with a PATH of stub
programs that record their arguments: only the programs the deploy uses run (never the `touch`
the payloads ask for, never the canary file made), and every systemctl call names only the
spec's own units after `--`.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from builders import DRAFT, LAUNCHER, TARGET, secrets_of
from facts.gateway import GatewayFacts, GatewayStatus
from facts.gpu import GpuProcesses
from facts.history import DeployHistory
from facts.models import ModelDirs
from facts.preflight import HostSnapshot, snapshot_args
from facts.status import StatusSnapshot
from fleet.core import layout
from fleet.engine import install as engine
from fleet.rollout import commands as rollout, gate, lock
from fleet.weights import hub
from fleet.gateway.floating import UNIT, set_handoff
from fleet.gateway.models import Gateway
from fleet.gateway.smg import Replica, discovery_file, health_command, workers_command
from fleet.spec.load import SpecError, validate_class
from fleet.rollout.pending import Before, FoundProcess, Held, Pending, UnitBefore
from fleet.spec import ClassSpec, ScopeWorkload
from fleet.core.wire import printable
from tasks.gateway import install_command

CANARY = "/tmp/sglang-fleet-canary"  # what every payload tries to create
PAYLOADS = [f"$(touch {CANARY})", f"`touch {CANARY}`", f"; touch {CANARY}; ", f"' ; touch {CANARY} ; '",
            f'" ; touch {CANARY} ; "', f"&& touch {CANARY}", f"| touch {CANARY}", f"$(/usr/bin/touch {CANARY})",
            f"${{IFS}}touch${{IFS}}{CANARY}", "-H x", "--", "*", "?", "~root", "$HOME", "\\", "\\n", "'", '"', "%n%s",
            f"x\\$(touch {CANARY})", "a b", "\u00e9\u4e2d"]
PROGRAMS = ("systemctl", "journalctl", "curl", "nvidia-smi", "sha1sum", "stat", "cat", "cut", "sed", "tr", "head",
            "base64", "mktemp", "rm", "timeout", "env", "grep", "mkdir", "mv", "ls", "tail", "xargs", "flock",
            "install", "cp", "chown", "chmod", "rmdir", "sort", "date", "sleep", "basename", "uname", "awk",
            "kill", "df", "python3")  # kill too: a stub, so the workloads' stop never signals a process of this machine
PROFILE = settings(derandomize=True, database=None, deadline=None, max_examples=12,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                          HealthCheck.function_scoped_fixture])

hostile = st.one_of(st.sampled_from(PAYLOADS), st.tuples(st.sampled_from(PAYLOADS), st.text(max_size=6))
                    .map("".join), st.text(max_size=12))


# Each program the commands may run is a shell function that records its name and arguments
# (each after a \\1, the record ended by a \\2: no accepted value holds a control character) and
# prints nothing; `touch` is one too, to see an injection. PATH is empty: nothing else runs but by
# an absolute path, which the canary file would show. One write a record: pipeline stages run at once.
LOG = "r=$(printf '%s' \"$NAME\"; for a in \"$@\"; do printf '\\001%s' \"$a\"; done); printf '%s\\002' \"$r\" >> \"$STUB_LOG\""
STUBS = f"_log() {{ NAME=$1; shift; {LOG}; }}\n" + "".join(
    f"{p}() {{ _log {p} \"$@\"; }}\n" for p in (*PROGRAMS, "touch") if "-" not in p)


@pytest.fixture
def path(tmp_path) -> Path:
    """PATH: only the stubs a shell function cannot be (a name with a '-')."""
    d = tmp_path / "bin"
    d.mkdir()
    for p in (p for p in PROGRAMS if "-" in p):
        (d / p).write_text(f"#!/bin/sh\nNAME={p}\n{LOG}\n")
        (d / p).chmod(0o755)
    return d


def ran(commands: list[str], path: Path) -> list[tuple[int, list[str]]]:
    """(which command, [program, *args]) for every program the commands ran, one after the other,
    each in its own subshell under dash."""
    log = path.parent / "log"
    log.write_bytes(b"")
    script = STUBS + "".join(f"_log command {i}\n(\n{c}\n)\n" for i, c in enumerate(commands)) + \
        f"_log command {len(commands)}\n"
    done = subprocess.run(["/bin/sh", "-c", script], env={"PATH": str(path), "STUB_LOG": str(log),
                                                          "HOME": str(path.parent)},
                          cwd=path.parent, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert "Syntax error" not in done.stderr, done.stderr
    out, which = [], -1
    for r in log.read_text(errors="replace").split("\x02"):
        if r:
            program, *args = r.split("\x01")
            if program == "command":
                which = int(args[0])
            else:
                out.append((which, [program, *args]))
    assert which == len(commands), f"the script stopped in command {which}: {done.stderr[-300:]}"
    return out


DATA = {
    "gpu_class": {"accepted_models": ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"], "gpu_count": 1,
                  "min_memory_mib": 95000},
    "service": {"model_path": TARGET, "served_model_name": "qwen3.6-27b", "launcher": LAUNCHER, "host": "0.0.0.0",
                "api_key": {"env": "K"}},
    "speculative": {"algorithm": "DFLASH", "draft_model_path": DRAFT},
    "workloads": ["dflash-train.service"],
}
# Where a group_data value reaches a command, and how a hostile one is laid into it.
FIELDS = {
    "service.model_path": lambda v: f"/root/models/{v}", "speculative.draft_model_path": lambda v: f"/d/{v}x",
    "service.launcher": lambda v: f"/opt/{v}/bin/python", "service.served_model_name": lambda v: f"m{v}",
    "service.unit": lambda v: f"sglang{v}", "workloads": lambda v: [f"train{v}"],
    # a scope or process workload: its patterns and its give-back command (run as declared, token for token)
    "workloads:scope": lambda v: [{"name": "trainer", "scope": f"docker-{v}*.scope", "give_back": [f"/opt/{v}", v]}],
    "workloads:process": lambda v: [{"name": "torchrun", "command_line": f"*{v}*", "give_back": ["/bin/x", v, "-" + v]},
                                    {"name": "bare", "process_name": v, "give_back": False}],
    "service.environment": lambda v: {"CUDA_HOME": v, f"X{v}": "1"}, "smoke.prompt": lambda v: f"hi {v}",
    "gpu_class.accepted_models": lambda v: [f"NVIDIA {v}"],
    # a declared engine (its venv is the launcher then): what reaches pip's and the venv's command lines
    "engine.python": lambda v: f"/usr/{v}/python3", "engine.index_url": lambda v: f"https://mirror.lan/{v}",
    "engine.extra_index_urls": lambda v: [f"http://10.0.0.9:8080/{v}"],
}


def spec_with(field: str, value) -> ClassSpec:
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DATA.items()}
    top, _, key = field.split(":")[0].partition(".")
    if top == "engine":  # exclusive with a hand-made launcher
        data["service"] = {k: v for k, v in data["service"].items() if k != "launcher"}
        data["engine"] = {"sglang": "sglang==0.5.23"}
    if key:
        data[top] = {**data.get(top, {}), key: value}
    else:
        data[top] = value
    try:
        return validate_class("group_data/x.py", data)
    except SpecError:
        assume(False)


def commands(spec: ClassSpec, lock_text: str) -> list[str]:
    """Every command a rollout, a preflight and make status build for this spec."""
    seen = lock.LockFacts(True, lock_text, "")
    files = {p: None for p in rollout.managed_paths(spec)}
    # a host's text in what the record keeps of a process (its command line)
    held = {w.name: Held(processes=(FoundProcess(4242, 1, lock_text),)) for w in spec.held_workloads}
    before = Before(files, "20260101T000000Z", UnitBefore("enabled", "active"),
                    {**{w: UnitBefore("enabled", "active") for w in spec.service_workloads}, **held})
    pending = Pending("rolling-out", 1, lock_text, "a" * 40, True, lock_text, before).to_json()
    want = rollout.desired_files(spec, "pro6000", secrets_of(spec), journal_filter=True)
    services, commands = spec.service_workloads, [w.name for w in spec.held_workloads if w.give_back is not False]
    return [
        HostSnapshot().command(**snapshot_args(spec)),
        StatusSnapshot().command(snapshot_args(spec), spec.records_file, spec.backups_dir,
                                 f"{gate.base_url(spec)}/metrics"),
        DeployHistory().command(spec.records_file, spec.backups_dir),
        rollout.begin_command(spec, {"holder": lock_text, "pid": 1, "since": 1}, seen, files, "20260101T000000Z",
                              pending, [f.path for f in want if f.secret], {want[0].path: f"/x/{lock_text}"},
                              units=[rollout.UnitSeen(u, "enabled", "active", ("active",)) for u in spec.watched_units]),
        rollout.apply_command(spec, want, want, True, True, True),
        rollout.restore_command(spec, {**files, spec.unit_file: "a" * 40}, "20260101T000000Z", True, "enabled",
                                pending),
        rollout.finish_command(spec, {"by": lock_text, "reason": lock_text}),
        rollout.journal_command(spec), rollout.stop_and_disable_command(spec), rollout.restart_command(spec),
        rollout.give_back_command(spec, services, services, commands),
        rollout.stop_workloads_command(services, found_scopes(spec), [(4242, 1, 30)]),
        gate.observe_command(spec), gate.wait_command(spec, lock_text, 1), gate.smoke_command(spec),
        gate.metrics_command(spec), lock.take_command(spec, {"holder": lock_text, "pid": 1, "since": 1}, seen),
        lock.release_command(spec), lock.renew_command(spec), GpuProcesses().command(1),
        *([engine.survey_command(spec), engine.check_command(spec, 1, "true"),
           engine.install_command(spec, engine.pip_wheel_path("pip-24.3.1-py3-none-any.whl"), [spec.engine.name])]
          if spec.engine else []),
    ]


def found_scopes(spec: ClassSpec) -> list[str]:
    """A scope each scope workload's pattern matches, as a host's cgroup would name it."""
    return [w.scope.replace("*", "x").replace("?", "y") for w in spec.held_workloads if isinstance(w, ScopeWorkload)]


def units_of(spec: ClassSpec) -> set[str]:
    """The units a systemctl call may name: the service's, its service workloads', the scopes found."""
    return {spec.service_unit, *spec.service_workloads, *found_scopes(spec)}


def check(commands: list[str], path: Path, units: set[str]) -> None:
    for i, (program, *args) in ran(commands, path):
        assert program in PROGRAMS, f"{program} {args} ran from: {commands[i][:300]}"
        if program == "systemctl" and "--" in args:
            assert set(args[args.index("--") + 1:]) <= units, (args, commands[i][:300])
    assert not Path(CANARY).exists(), commands


@pytest.mark.parametrize("field", list(FIELDS))
@PROFILE
@given(value=hostile, lock_text=hostile.map(printable))  # a host's text arrives printable (fleet.core.wire)
def test_no_group_data_value_or_lock_text_runs_a_command(field, value, lock_text, path):
    spec = spec_with(field, FIELDS[field](value))
    check(commands(spec, lock_text), path, units_of(spec))


@pytest.mark.parametrize("payload", PAYLOADS)
def test_every_payload_in_every_field_it_may_stand_in_at_once(payload, path):
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DATA.items()}
    laid = []
    for field, lay in FIELDS.items():  # each field that takes it
        top, _, key = field.split(":")[0].partition(".")
        trial = {**data, top: {**data.get(top, {}), key: lay(payload)} if key else lay(payload)}
        try:
            validate_class("group_data/x.py", trial)
        except SpecError:
            continue
        data, laid = trial, laid + [field]
    spec = validate_class("group_data/x.py", data)
    check(commands(spec, payload), path, units_of(spec))
    assert laid, "no field takes this payload: it tests nothing"


@PROFILE
@given(value=hostile)
def test_a_give_back_command_runs_as_declared_token_for_token(value, path):
    """The declared argv reaches the program that runs it (timeout, which execs it) whole: no token split,
    globbed or expanded, none lost."""
    spec = spec_with("workloads:process", FIELDS["workloads:process"](value))
    log = Path(spec.give_back_log("torchrun"))
    (path.parent / log.parent.relative_to("/")).mkdir(parents=True, exist_ok=True)  # begin made it on a host
    command = rollout.give_back_command(spec, [], [], ["torchrun"]).replace(str(log), f"{path.parent}{log}")
    (timeout,) = [p for _, p in ran([command], path) if p[0] == "timeout"]
    assert timeout[1:] == ["-k", "5", "120", "/bin/x", value, "-" + value]


GATEWAY_FIELDS = {"install_dir": lambda v: f"/opt/{v}", "python": lambda v: f"/usr/{v}/python3",
                  "unit": lambda v: f"smg{v}", "host": lambda v: v}


@pytest.mark.parametrize("field", list(GATEWAY_FIELDS))
@PROFILE
@given(value=hostile, url=hostile)
def test_no_gateway_value_runs_a_command(field, value, url, path):
    python = path / "python3"  # a stub: the install's venv is never made on this machine (in /opt/<value>)
    python.write_text(f"#!/bin/sh\nNAME=python3\n{LOG}\n")
    python.chmod(0o755)
    try:
        gw = Gateway.model_validate({"routes": ["pro6000"], "api_key": {"env": "K"}, "python": str(python),
                                     field: GATEWAY_FIELDS[field](value),
                                     "floating": {"address": "10.0.0.100", "router_id": 1, "password": {"env": "P"}}})
    except ValueError:  # pydantic's ValidationError is one: refused, nothing to run
        assume(False)
    wheels = [Path(f"/c/pip-24.0-py3-none-any.whl"), Path(f"/c/smg-1.13.0-{value}.whl")]
    replicas = [Replica("h", "pro6000", value, f"http://{url}:1")]
    check([install_command(gw, wheels), GatewayFacts().command(gw, "gateway"), GatewayStatus().command(gw, "gateway"),
           workers_command(gw), health_command(gw), set_handoff(gw.unit, True),
           rollout.write_command(gw.discovery_file, discovery_file(replicas, set()))], path, {gw.service_unit, UNIT})


def test_the_stubs_would_see_an_injection(path):
    # the properties above hold only if an injected command would show: it does
    seen = ran(["true", f"touch {CANARY} | base64; systemctl restart -- other.service; nvidia-smi -L"], path)
    assert sorted(p[0] for _, p in seen) == ["base64", "nvidia-smi", "systemctl", "touch"]
    assert {i for i, _ in seen} == {1}
    with pytest.raises(AssertionError, match="touch"):
        check([f"echo $(touch {CANARY})"], path, set())
    with pytest.raises(AssertionError, match="other.service"):
        check(["systemctl restart -- other.service"], path, {"sglang.service"})


# --- models by repository (fleet/weights/hub.py): the survey, the client's install, the fetch, the removal,
# and the models fact over fetched revisions ---------------------------------------------------------

# Where a group_data value reaches fleet/weights/hub.py's commands (root: the test's directory, where the
# commands find the directories a host would have: they get past their locks then, and run whole).
HUB_FIELDS = {
    "hub.models_dir": lambda root, v: f"{root}/m/{v}", "hub.python": lambda root, v: f"/usr/{v}/python3",
    "hub.endpoint": lambda root, v: f"https://mirror.lan/{v}", "service.unit": lambda root, v: f"sglang{v}",
}
REPO_PART = st.from_regex(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,12}[A-Za-z0-9])?", fullmatch=True)
# repositories as the spec takes them: dots, dashes, underscores (never '..', '--' or a final .git)
repos = st.one_of(st.sampled_from(["z-lab/Qwen3.6-27B-DFlash", "A.b_c-D/e.F_g-h", "0/9", "a_/b"]),
                  st.tuples(REPO_PART, REPO_PART).map("/".join))
TARGET_REV, DRAFT_REV, OLD_REV = "a" * 40, "b" * 40, "c" * 40


def hub_spec_with(root: Path, field: str | None, value, target: str, draft: str) -> ClassSpec:
    """DATA with its target and draft by repository, models under root/m, `value` laid into `field`."""
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DATA.items()}
    data["service"] = {k: v for k, v in data["service"].items() if k != "model_path"}
    data["service"]["model"] = {"repo": target, "revision": TARGET_REV}
    data["speculative"] = {"algorithm": "DFLASH", "draft_model": {"repo": draft, "revision": DRAFT_REV}}
    data["hub"] = {"models_dir": f"{root}/m/models"}
    if field:
        top, _, key = field.partition(".")
        data[top] = {**data[top], key: HUB_FIELDS[field](root, value)}
    try:
        return validate_class("group_data/x.py", data)
    except SpecError:
        assume(False)


def hub_commands(spec: ClassSpec, root: Path, name: str) -> tuple[list[str], dict]:
    """fleet/weights/hub.py's commands for the spec, on a host (root) whose target revision is there with a
    manifest listing `name` (a host's text), whose draft's repository has no revision yet; and what
    each program they run must be given, token for token."""
    hub_, target_path = spec.hub, spec.target_path
    try:
        for p in spec.hub_models:
            Path(p).parent.mkdir(parents=True, exist_ok=True)
        Path(target_path).mkdir(exist_ok=True)
        (Path(target_path) / hub.MANIFEST).write_text(f"5 sha256:{'0' * 64} {name}\n3 - config.json\n")
        (root / "hub").mkdir(exist_ok=True)
    except OSError:  # a name this file system cannot hold: no host could have it either
        assume(False)
    client_root, client = str(root / "hub"), hub.client_name(hub_)
    pip_wheel = engine.pip_wheel_path("pip-24.3.1-py3-none-any.whl")
    token = layout.staged_path(layout.hub_token_file(spec.service.unit))
    old = [f"{m.repo}/{OLD_REV}" for m in spec.hub_models.values()]
    commands = [
        hub.survey_command(spec),
        hub.client_install_command(hub_, pip_wheel).replace(layout.HUB_CLIENT_ROOT, client_root),
        *(hub.fetch_command(spec, p, m, token) for p, m in spec.hub_models.items()),
        hub.remove_command(hub_.models_dir, old),
        ModelDirs().command(spec.model_paths, list(spec.hub_models)),
    ]
    expect = {
        "fetch": [[hub_.python, "-c", hub.FETCH, m.repo, m.revision, p, str(hub_.disk_margin_mib << 20),
                   layout.revision_partial(p)]
                  for p, m in spec.hub_models.items()],
        "env": [f"HF_ENDPOINT={hub_.endpoint.rstrip('/')}", f"HF_TOKEN_PATH={token}"],
        "rm": [["-rf", "--", f"{hub_.models_dir}/{r}"] for r in old],
        # the survey's of the revision there; the manifest checks' of its files, the host's name first
        "stat": [["-c", "%Y %n", "--", f"{spec.service.model.repo}/{TARGET_REV}"],
                 *(["-c", "%s", "--", f"{target_path}/{n}"] for n in (name, "config.json"))],
        "grep": [spec.unit_file, spec.backups_dir],
        "touch": [f"{client_root}/{client}.partial/.complete"],  # the install's own: the only touch
        "pip": [hub_.python, f"{pip_wheel}/pip", "install"],
    }
    return commands, expect


def check_hub(commands: list[str], path: Path, expect: dict) -> None:
    seen = ran(commands, path)
    for i, (program, *args) in seen:
        if program == "touch":
            assert args == expect["touch"], (args, commands[i][:300])
        else:
            assert program in PROGRAMS, f"{program} {args} ran from: {commands[i][:300]}"
    assert not Path(CANARY).exists(), commands
    # the client and each fetch got their arguments whole: no value split, globbed, expanded or lost
    envs = [args for _, (program, *args) in seen if program == "env"]
    assert [a[a.index("timeout") + 4:] for a in envs] == expect["fetch"]
    assert all(a[:2] == ["-u", "HF_TOKEN"] and set(expect["env"]) <= set(a[2:a.index("timeout")]) for a in envs)
    (install,) = [args for _, (program, *args) in seen if program == "timeout"]
    assert install[3:6] == expect["pip"]
    assert [args for _, (program, *args) in seen if program == "rm" and args[:2] == ["-rf", "--"]
            and args[2].endswith(OLD_REV)] == expect["rm"]
    # (a stub reads no stdin: the loop piped into head may end at its first file, never before)
    stats = [args for _, (program, *args) in seen if program == "stat"]
    assert expect["stat"][0] in stats and expect["stat"][1] in stats and all(s in expect["stat"] for s in stats)
    (grep,) = [args for _, (program, *args) in seen if program == "grep" and args[:2] == ["-rhoa", "--"]]
    assert grep[3:] == expect["grep"]


@pytest.mark.parametrize("field", [None, *HUB_FIELDS])
@PROFILE
@given(value=hostile, target=repos, draft=repos, name=hostile.map(printable))
def test_no_hub_value_repository_or_manifest_name_runs_a_command(field, value, target, draft, name, path):
    name = name.replace("\n", " ").strip(" \t") or "x"  # one manifest line; `read` trims the blanks around a name
    root = Path(tempfile.mkdtemp(dir=path.parent))  # each example's host: no revision of another's
    spec = hub_spec_with(root, field, value, target, draft)
    commands, expect = hub_commands(spec, root, name)
    check_hub(commands, path, expect)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_every_payload_in_every_hub_field_at_once(payload, path):
    root, laid = path.parent, []
    spec = hub_spec_with(root, None, "", "z-lab/Qwen3.6-27B-DFlash", "A.b_c-D/e.F_g-h")
    data = spec.model_dump(mode="json", exclude_defaults=True)
    for field, lay in HUB_FIELDS.items():  # each field that takes it
        top, _, key = field.partition(".")
        trial = {**data, top: {**data.get(top, {}), key: lay(root, payload)}}
        try:
            validate_class("group_data/x.py", trial)
        except SpecError:
            continue
        data, laid = trial, laid + [field]
    spec = validate_class("group_data/x.py", data)
    name = payload.replace("\n", " ").strip(" \t") or "x"
    commands, expect = hub_commands(spec, root, name)
    check_hub(commands, path, expect)
    assert laid, "no hub field takes this payload: it tests nothing"
