"""Per host: the service is what group_data declares, and it really serves."""

from __future__ import annotations

import json
import shlex

from facts.gpu import GpuInventory
from fleet import guards
from fleet.gate import base_url
from fleet.lock import lock_file
from fleet.parse import parse_gpu_inventory
from fleet.render import API_KEY_REF, render_env, render_unit, server_argv
from fleet.rollout import OWNER, desired_files, pending_file


def _curl(node, target, path: str) -> tuple[int, str]:
    spec = target.spec
    auth = ""
    if spec.service.api_key is not None and path.startswith("/v1/"):
        auth = f'set -a; . {shlex.quote(spec.secret_file)}; set +a; '
        header = '-H "Authorization: Bearer $SGLANG_API_KEY" '
    else:
        header = ""
    out = node.check_output(
        f"{auth}curl -s --max-time 10 {header}-w '\\n%{{http_code}}' {base_url(spec)}{path} || true"
    )
    body, _, code = out.rpartition("\n")
    return int(code) if code.isdigit() else 0, body


def test_gpus_match_the_class(node, target):
    out = node.run(GpuInventory().command()).stdout
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


def test_deployed_unit_and_command_match_spec(node, target):
    spec = target.spec
    assert node.file(spec.unit_file).content_string == render_unit(spec, target.group)
    assert node.file(spec.env_file).content_string == render_env(spec)
    pid = node.check_output(f"systemctl show -p MainPID --value {spec.service_unit}")
    # argv[0] is whatever the interpreter's symlink chain leaves; the flags must match exactly.
    argv = node.file(f"/proc/{pid}/cmdline").content_string.split("\0")[1:-1]
    expected = server_argv(spec)[1:]
    masked = [("<api key>" if e == API_KEY_REF else a) for a, e in zip(argv, expected)]
    assert masked == [("<api key>" if e == API_KEY_REF else e) for e in expected]


def test_declared_workloads_stopped(node, target):
    for unit in target.spec.workloads:
        assert not node.service(unit).is_running, f"workload {unit} is still running"


def test_files_have_their_modes_and_owners(node, target):
    """Every managed file exists exactly when the spec wants it, with its mode, owned by root
    (the secret 0600; no secret file when no key is declared)."""
    for want in desired_files(target.spec, target.group):
        f = node.file(want.path)
        if want.content is None:
            assert not f.exists, f"{want.path} exists but the spec does not want it"
        else:
            assert f.exists, f"{want.path} is missing"
            assert (f"{f.mode:o}", f"{f.user}:{f.group}") == (want.mode, OWNER), \
                f"{want.path} is {f.mode:o} {f.user}:{f.group}, want {want.mode} {OWNER}"


def test_no_unfinished_rollout(node, target):
    spec = target.spec
    pending = node.file(pending_file(spec))
    assert not pending.exists, (f"{pending_file(spec)}: a rollout was interrupted and not finished; "
                                "make deploy finishes it or rolls it back")
    assert not node.file(lock_file(spec)).exists, f"{lock_file(spec)}: a deploy holds the lock"
