"""The footer of an inventory file (pyinfra side):

    from tasks.inventory import checked
    checked(globals())

Validates group_data and the inventory before pyinfra connects anywhere (a problem exits 2,
no host contacted), and has the rollout summary give a row to every host pyinfra cannot
reach, with pyinfra's reason: deploy.py never runs for those.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyinfra.api.state import BaseStateCallback
from pyinfra.context import ctx_state

from fleet.groupdata import check_or_exit, class_files
from fleet.report import RUN


class UnreachableInSummary(BaseStateCallback):
    group_dir = Path("group_data")

    @classmethod
    def host_connect_error(cls, state, host, error) -> None:
        report = RUN.host(host.name)
        report.gpu_class = ",".join(g for g in host.groups if g in class_files(cls.group_dir)) or "-"
        report.verdict, report.action = "UNREACHABLE", "none"
        report.reasons.append(f"{host.name}: {error.args[0] if error.args else error}")


def checked(namespace: dict[str, Any], group_dir: Path = Path("group_data")) -> None:
    check_or_exit(namespace, group_dir)
    state = ctx_state.get()
    if state is None:  # loaded by make check, not by pyinfra
        return
    # pyinfra initialises its state (callbacks included) after loading the inventory, then
    # connects: the handler goes in right after that initialisation.
    init = state.init

    def init_then_watch(*args, **kwargs):
        init(*args, **kwargs)
        state.add_callback_handler(UnreachableInSummary())

    state.init = init_then_watch
