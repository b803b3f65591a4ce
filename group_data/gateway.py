"""SGLang's model gateway (smg 1.13.0) in front of the RTX PRO 6000 replicas.

Clients talk to the gateway; a spec change of a class it routes is rolled one replica at a
time (canary first), each drained out of the gateway before it restarts, so no request fails.
Every key: docs/spec.md (gateway).
"""

gateway = {
    "routes": ["pro6000"],
    "port": 8000,
    "policy": "round_robin",
    "api_key": {"env": "SGLANG_FLEET_GATEWAY_KEY"},
}
