"""A gateway group behind a floating address (gateway.floating): keepalived runs on each gateway, exactly one
holds the address, the address answers from every gateway of the group, and no deploy's turn was left
unfinished there (held out of the election, a handoff's route or loopback hold). With smg's mesh over mTLS,
each gateway's certificate is valid now, chains to the mesh's CA, names its address and goes with its key."""

from __future__ import annotations

import re
import shlex

from fleet.core import hosts
from fleet.gateway import floating
from fleet.rollout.gate import CURL
from fleet.gateway.smg import mesh_file


def test_keepalived_enabled_and_running_on_each(floating_nodes):
    down = {name: (svc.is_enabled, svc.is_running) for name, node in floating_nodes
            for svc in [node.service(floating.UNIT.removesuffix(".service"))] if not (svc.is_enabled and svc.is_running)}
    assert not down, f"{floating.UNIT}: expected enabled and running on each gateway, found (enabled, running) {down}"


def test_exactly_one_gateway_holds_the_address(floating_group, floating_nodes):
    address = floating_group.gw.floating.address
    held = [name for name, node in floating_nodes
            if any(dev != "lo" for dev in node.check_output(
                f"ip -o -4 addr show to {address}/32 | awk '{{print $2}}'").split())]
    assert len(held) == 1, f"{address}: expected held by exactly one gateway of {floating_group.group}, found {held or 'none'}"


def test_the_address_answers_from_every_gateway(floating_group, floating_nodes):
    gw = floating_group.gw
    url = f"http://{gw.floating.address}:{gw.port}/readiness"
    codes = {name: node.check_output(f"{CURL} -s -o /dev/null --max-time 5 -w '%{{http_code}}' {shlex.quote(url)} "
                                     "|| true") for name, node in floating_nodes}
    assert set(codes.values()) == {"200"}, f"{url}: expected 200 asked from each gateway, found {codes}"


def test_no_turn_was_left_unfinished(floating_group, floating_nodes):
    gw = floating_group.gw
    left = {}
    for name, node in floating_nodes:
        held = node.check_output(f"cat {floating.handoff_file(gw.unit)} 2>/dev/null || true").strip() == "1"
        route = node.check_output(f"ip -4 route show table {floating.ROUTES} 2>/dev/null || true").strip()
        loop = node.check_output(f"ip -o -4 addr show dev lo to {gw.floating.address}/32").strip()
        found = [w for w, yes in (("held out of the election", held), ("a handoff's route", route),
                                  ("the address on its loopback", loop)) if yes]
        if found:
            left[name] = found
    assert not left, f"a deploy's turn left unfinished (the next make deploy finishes it): {left}"


def test_the_mesh_certificate_chains_to_its_ca_names_its_address_and_goes_with_its_key(mesh_gateway, mesh_node):
    """What smg's mesh listener and dials need of the files the deploy wrote (the key never leaves the host: only
    its public half is compared)."""
    gw, address = mesh_gateway.gw, hosts.address(mesh_gateway.host)
    ca, crt, key = (shlex.quote(mesh_file(gw, which)) for which in ("ca.pem", "crt", "key"))
    checks = {
        "chains to the mesh's CA": f"openssl verify -CAfile {ca} {crt}",
        "valid now (not expired)": f"openssl x509 -noout -checkend 0 -in {crt}",
        f"names {address} (subjectAltName)": f"openssl x509 -noout -ext subjectAltName -in {crt} | "
                                             "grep -Eq " + shlex.quote(f"(IP Address|DNS):{re.escape(address)}(,|$)"),
        "goes with its key": f'[ "$(openssl x509 -noout -pubkey -in {crt})" = "$(openssl pkey -pubout -in {key})" ]',
    }
    failed = {what: (r.stdout + r.stderr).strip()[-200:] for what, command in checks.items()
              for r in [mesh_node.run(command)] if r.rc != 0}
    assert not failed, f"{mesh_gateway.name}: {mesh_file(gw, 'crt')}: expected {', '.join(checks)}; not: {failed}"
