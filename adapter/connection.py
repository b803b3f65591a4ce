"""The controller's links to its hosts, as pyinfra holds them: the connector settings a command is
run with, SSH keepalive on every connection, and a summary row for a host pyinfra cannot reach."""

from __future__ import annotations

import socket
from pathlib import Path

from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.api.state import BaseStateCallback

from adapter import run as runs
from fleet.core import hosts
from fleet.spec.load import SpecError, validate_host
from fleet.core.outcome import HostVerdict
from fleet.spec import Readiness


def connector_arguments(host, **given) -> dict:
    """The host's connector settings (_sudo, _su_user, _doas ... from its data, as pyinfra's own
    operations and facts take them) with `given` over them."""
    arguments, _ = pop_global_arguments(host.state, host, dict(given))
    return {k: v for k, v in arguments.items() if k in CONNECTOR_ARGUMENT_KEYS}


class UnreachableInSummary(BaseStateCallback):
    group_dir = Path("group_data")

    @classmethod
    def host_connect_error(cls, state, host, error) -> None:
        report = runs.of(host.state).report.host(host.name)
        report.gpu_class = ",".join(hosts.gpu_classes(host, cls.group_dir)) or "-"
        report.verdict, report.action = HostVerdict.UNREACHABLE, "none"
        report.reasons.append(f"{host.name}: {error.args[0] if error.args else error}")


class Keepalive(BaseStateCallback):
    """pyinfra's SSH connector sets no keepalive, and a link that drops silently would block its
    commands for good. Every connection sends an SSH keepalive each quarter of its class's
    readiness.link_timeout_s, and (Linux: TCP_USER_TIMEOUT) the kernel drops it once what was
    sent stays unacknowledged that long: a lost link fails the command waiting on it."""

    group_dir = Path("group_data")

    @classmethod
    def host_connect(cls, state, host) -> None:
        client = getattr(host.connector, "client", None)  # the SSH connector's paramiko client
        transport = client.get_transport() if client is not None else None
        if transport is None:
            return
        timeout = link_timeout_s(host, cls.group_dir)
        transport.set_keepalive(timeout / 4)
        if hasattr(socket, "TCP_USER_TIMEOUT") and hasattr(transport.sock, "setsockopt"):  # not a ProxyCommand
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(timeout * 1000))


def link_timeout_s(host, group_dir: Path) -> float:
    """The host's class's readiness.link_timeout_s; the declared default for a host of no class (the
    gateway) or of a spec that does not validate (preflight refuses it)."""
    classes = hosts.gpu_classes(host, group_dir)
    if len(classes) == 1:
        try:
            return validate_host(str(group_dir / f"{classes[0]}.py"), host.data.dict()).readiness.link_timeout_s
        except SpecError:
            pass
    return Readiness.model_fields["link_timeout_s"].default


def watched(state, summary: bool) -> None:
    """Every connection of `state` kept alive (Keepalive), whatever the inventory's footer did; with
    summary False (make status, make verify: no rollout), no rollout summary row for an unreachable host."""
    state.callback_handlers = [h for h in state.callback_handlers if summary or not isinstance(h, UnreachableInSummary)]
    if not any(isinstance(h, Keepalive) for h in state.callback_handlers):
        state.add_callback_handler(Keepalive())
