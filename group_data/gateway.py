"""SGLang's model gateway (smg 1.13.0) in front of the RTX PRO 6000 replicas.

Clients talk to the gateway; a spec change of a class it routes is rolled one replica at a
time (canary first), each drained out of the gateway before it restarts, so no request fails.
Every key: docs/spec.md (gateway).

Two or more hosts in the gateway group need the address clients use in front of them, which keepalived moves
to a ready gateway when the one holding it fails (docs/operations.md, "The gateway without a single point of
failure"), e.g.:
    "floating": {"address": "10.0.0.100", "router_id": 51, "password": {"env": "SGLANG_FLEET_VRRP_PASSWORD"}},
"""

gateway = {
    "routes": ["pro6000"],
    "port": 8000,
    "policy": "round_robin",
    "api_key": {"env": "SGLANG_FLEET_GATEWAY_KEY"},
}
