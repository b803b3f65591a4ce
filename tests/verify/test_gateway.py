"""The gateway host: smg serves, every declared replica is `ready` in it, and it routes a chat
completion with the clients' key and refuses one without it; no process there shows a secret in its arguments."""

from __future__ import annotations

import json
import shlex

from fleet.rollout.gate import CURL
from fleet.gateway.smg import READY, parse_workers
from fleet.rollout.render import gateway_secrets
from ops.verify_backend import secrets_shown


def _curl(node, gateway, path: str, key: bool = True, body: dict | None = None) -> tuple[int, str]:
    """A request made on the gateway host, the key from its 0600 header file (never an argument)."""
    gw = gateway.gw
    header = f"-H @{gw.auth_header_file} " if key and gw.api_key is not None else ""
    data = f"-H 'Content-Type: application/json' -d {shlex.quote(json.dumps(body))} " if body else ""
    out = node.check_output(f"{CURL} -s --max-time 60 {header}{data}-w '\\n%{{http_code}}' "
                            f"{shlex.quote(gw.url(path))} || true")
    text, _, code = out.rpartition("\n")
    return int(code) if code.isdigit() else 0, text


def _chat(gateway) -> dict:
    model = gateway.replicas[0].served_model if gateway.replicas else "default"
    return {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8}


def test_gateway_unit_enabled_and_active(gw_node, gateway):
    svc = gw_node.service(gateway.gw.unit)
    assert svc.is_enabled and svc.is_running, f"{gateway.gw.service_unit}: enabled {svc.is_enabled}, running {svc.is_running}"


def test_gateway_smg_version(gw_node, gateway):
    gw = gateway.gw
    got = gw_node.run(f"{gw.venv}/bin/python -c \"import importlib.metadata as m; print(m.version('smg'))\"").stdout.strip()
    assert got == gw.version, f"smg in {gw.venv}: expected {gw.version}, found {got or 'none'}"


def test_gateway_readiness_is_200(gw_node, gateway):
    code, body = _curl(gw_node, gateway, "/readiness")
    assert code == 200, f"/readiness answered {code}: {body[:200]}"


def test_every_declared_replica_is_ready(gw_node, gateway):
    code, body = _curl(gw_node, gateway, "/workers")
    assert code == 200, f"/workers answered {code}: {body[:200]}"
    statuses = parse_workers(body)
    not_ready = {r.host: statuses.get(r.url, "not registered") for r in gateway.replicas if statuses.get(r.url) != READY}
    assert not not_ready, f"expected every replica ready in the gateway, found {not_ready}"


def test_chat_completion_through_the_gateway(gw_node, gateway):
    code, text = _curl(gw_node, gateway, "/v1/chat/completions", body=_chat(gateway))
    assert code == 200, f"chat completion through the gateway answered {code}: {text[:200]}"
    message = json.loads(text)["choices"][0]["message"]
    assert message.get("content") or message.get("reasoning_content"), text[:200]


def test_without_the_key_as_declared(gw_node, gateway):
    """With gateway.api_key a request without it is refused; without one the gateway is open, as
    declared. A chat completion: smg 1.13.0 leaves /v1/models open whatever the key."""
    code, _ = _curl(gw_node, gateway, "/v1/chat/completions", key=False, body=_chat(gateway))
    expected = 401 if gateway.gw.api_key is not None else 200
    assert code == expected, f"a chat completion without the key: the gateway answered {code}, expected {expected}"


def test_no_secret_in_any_process_arguments(gw_node, gateway):
    """Every local user reads them (ps, /proc/PID/cmdline): smg's key and the VRRP password stay in 0600 files."""
    shown = secrets_shown(gw_node, gateway_secrets(gateway.gw))
    assert not shown, "\n".join(shown)
