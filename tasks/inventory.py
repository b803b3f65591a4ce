"""The footer of an inventory file (pyinfra side):

    from tasks.inventory import checked
    checked(globals())

Validates group_data and the inventory before pyinfra connects anywhere (a problem exits 2,
no host contacted), has the rollout summary give a row to every host pyinfra cannot
reach, with pyinfra's reason (deploy.py never runs for those), and turns SSH keepalive on for
every connection (Keepalive): a deploy's, make status's, make verify's.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from pyinfra.api.state import BaseStateCallback
from pyinfra.context import ctx_state

from fleet.groupdata import SpecError, check_or_exit, class_files, validate_host
from fleet.outcome import HostVerdict
from fleet.spec import Readiness
from tasks import run as runs


class UnreachableInSummary(BaseStateCallback):
    group_dir = Path("group_data")

    @classmethod
    def host_connect_error(cls, state, host, error) -> None:
        report = runs.of(host.state).report.host(host.name)
        report.gpu_class = ",".join(g for g in host.groups if g in class_files(cls.group_dir)) or "-"
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
    classes = [g for g in host.groups if g in class_files(group_dir)]
    if len(classes) == 1:
        try:
            return validate_host(str(group_dir / f"{classes[0]}.py"), host.data.dict()).readiness.link_timeout_s
        except SpecError:
            pass
    return Readiness.model_fields["link_timeout_s"].default


def checked(namespace: dict[str, Any], group_dir: Path = Path("group_data")) -> None:
    check_or_exit(namespace, group_dir)
    state = ctx_state.get()
    if state is None:  # loaded by make check, not by pyinfra
        return
    runs.on_inventory_loaded(state, UnreachableInSummary(), Keepalive())
