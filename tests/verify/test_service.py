"""Per host: the service is what group_data declares, and it really serves."""

from __future__ import annotations

import json

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from facts.gpu import GpuInventory, GpuProcesses
from facts.systemd import SystemdVersion
from fleet.core import layout
from fleet.rollout import guards
from fleet.engine.install import FREEZE
from fleet.weights.hub import MANIFEST, verify_command
from fleet.rollout.gate import CURL, auth_option, url
from fleet.rollout.gpus import parse_gpu_inventory, parse_gpu_processes
from fleet.rollout.parse import parse_systemd_version
from fleet.rollout.plan import workload_of
from fleet.rollout.render import JOURNAL_FILTER_SYSTEMD, render_env, render_unit, server_argv, service_secrets
from fleet.rollout.commands import OWNER, desired_files
from fleet.spec.secrets import unread
from fleet.spec import SECRET_FLAGS
from ops.verify_backend import secrets_shown


def _curl(node, target, path: str, key: bool = True) -> tuple[int, str]:
    """A request made on the host, with the API key from its 0600 header file (never an argument)."""
    spec = target.spec
    header = auth_option(spec) if key else ""
    out = node.check_output(f"{CURL} -s --max-time 10 {header}-w '\\n%{{http_code}}' {url(spec, path)} || true")
    body, _, code = out.rpartition("\n")
    return int(code) if code.isdigit() else 0, body


def _journal_filter(node) -> bool:
    return parse_systemd_version(node.check_output(SystemdVersion().command())) >= JOURNAL_FILTER_SYSTEMD


def _server_argv(node, spec) -> list[str]:
    pid = node.check_output(f"systemctl show -p MainPID --value {spec.service_unit}")
    return node.file(f"/proc/{pid}/cmdline").content_string.split("\0")[1:-1]


def test_gpus_match_the_class(node, target):
    out = node.run(GpuInventory().command(target.spec.readiness.command_timeout_s)).stdout
    violations = guards.gpu_violations(target.name, target.spec, parse_gpu_inventory(out))
    assert not violations, "\n".join(map(str, violations))


def test_unit_enabled_and_active(node, target):
    svc = node.service(target.spec.service.unit)
    assert svc.is_enabled, f"{target.spec.service_unit} is not enabled"
    assert svc.is_running, f"{target.spec.service_unit} is not active"


def test_port_listening_on_configured_address(node, target):
    s = target.spec.service
    assert node.socket(f"tcp://{s.host}:{s.port}").is_listening, f"nothing listens on {s.host}:{s.port}"


def test_health_is_200(node, target):
    code, body = _curl(node, target, "/health")
    assert code == 200, f"/health answered {code}: {body[:200]}"


def test_models_lists_served_model_name(node, target):
    code, body = _curl(node, target, "/v1/models")
    assert code == 200, f"/v1/models answered {code}"
    ids = [m["id"] for m in json.loads(body)["data"]]
    assert target.spec.service.served_model_name in ids


def test_api_key_is_enforced(node, target):
    if target.spec.service.api_key is None:
        return  # nothing declared, nothing to enforce
    code, _ = _curl(node, target, "/v1/models", key=False)
    assert code == 401, f"/v1/models without the API key answered {code}, want 401"


def test_deployed_unit_and_command_match_spec(node, target):
    spec = target.spec
    assert node.file(spec.unit_file).content_string == render_unit(spec, target.group, _journal_filter(node))
    assert node.file(spec.env_file).content_string == render_env(spec)
    # argv[0] is whatever the interpreter's symlink chain leaves; the flags must match exactly.
    assert _server_argv(node, spec) == server_argv(spec)[1:]


def test_no_secret_in_the_server_arguments(node, target):
    """Every local user can read them (ps, /proc/PID/cmdline): keys go through the 0600 --config file."""
    argv = _server_argv(node, target.spec)
    found = [a for a in argv if a.split("=", 1)[0] in SECRET_FLAGS]
    assert not found, f"the server's arguments carry {', '.join(found)}"


def test_no_secret_in_any_process_arguments(node, target):
    """Not the server's only: any process of the host (a hand-run curl with the key, a helper given a token)."""
    shown = secrets_shown(node, service_secrets(target.spec))
    assert not shown, "\n".join(shown)


def test_declared_workloads_stopped(node, target):
    spec = target.spec
    for unit in spec.service_workloads:
        assert not node.service(unit).is_running, f"workload {unit} is still running"
    if spec.held_workloads:  # scopes and processes: by the GPU processes that are theirs
        processes = parse_gpu_processes(node.run(GpuProcesses().command(spec.readiness.command_timeout_s)).stdout)
        held = [f"{workload_of(spec, p)} (pid {p.pid}, {p.used_memory_mib} MiB)" for p in processes.processes
                if workload_of(spec, p) in {w.name for w in spec.held_workloads}]
        assert not held, f"workloads still hold GPUs: {', '.join(held)}"


def test_files_have_their_modes_and_owners(node, target):
    """Every managed file exists exactly when the spec wants it, with its mode, owned by root
    (secret files 0600, and none when no secret is declared). Their content is the deploy's
    business: verify runs without the operator's secrets."""
    for want in desired_files(target.spec, target.group, unread(target.spec), _journal_filter(node)):
        f = node.file(want.path)
        if want.content is None:
            assert not f.exists, f"{want.path} exists but the spec does not want it"
        else:
            assert f.exists, f"{want.path} is missing"
            assert (f"{f.mode:o}", f"{f.user}:{f.group}") == (want.mode, OWNER), \
                f"{want.path} is {f.mode:o} {f.user}:{f.group}, want {want.mode} {OWNER}"


def test_no_unfinished_rollout(node, target):
    spec = target.spec
    pending = node.file(spec.pending_file)
    assert not pending.exists, (f"{spec.pending_file}: a rollout was interrupted and not finished; "
                                "make deploy finishes it or rolls it back")
    assert not node.file(spec.lock_file).exists, f"{spec.lock_file}: a deploy holds the lock"


def test_the_declared_engine_is_installed_as_declared(node, target):
    """Its venv complete (its freeze is written last, before the rename) and holding each pinned version."""
    engine = target.spec.engine
    if engine is None:
        return  # a hand-made environment at service.launcher: not the deploy's to install
    freeze = node.file(f"{layout.engine_dir(engine.name)}/{FREEZE}")
    assert freeze.exists, f"{layout.engine_dir(engine.name)}: no {FREEZE}, the engine's install is not complete"
    installed = dict(line.split("==", 1) for line in freeze.content_string.split() if "==" in line)
    installed = {canonicalize_name(name): version for name, version in installed.items()}
    for requirement in engine.requirements:
        r = Requirement(requirement)
        want = next(iter(r.specifier)).version
        assert installed.get(canonicalize_name(r.name)) == want, \
            f"{engine.name}: {r.name} {installed.get(canonicalize_name(r.name), 'not installed')}, want {want}"


def test_the_declared_revisions_are_complete_and_intact(node, target):
    """Each revision the deploy fetched: its manifest (written last), and every file it lists with
    its size and its digest (sha256 for LFS files, the git blob id for the others) as the endpoint gave."""
    for path, model in target.spec.hub_models.items():
        assert node.file(f"{path}/{MANIFEST}").exists, f"{model.describe()}: no {path}/{MANIFEST}, not fetched whole"
        differ = node.check_output(verify_command(path, target.spec.hub.python))
        assert not differ, f"{model.describe()} at {path}: files differ from the endpoint's: {differ}"
