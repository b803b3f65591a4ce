"""The footer of an inventory file (pyinfra side):

    from tasks.inventory import checked
    checked(globals())

Validates group_data and the inventory before pyinfra connects anywhere (a problem exits 2,
no host contacted), has the rollout summary give a row to every host pyinfra cannot
reach, with pyinfra's reason (deploy.py never runs for those), and turns SSH keepalive on for
every connection (adapter.connection.Keepalive): a deploy's, make status's, make verify's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyinfra.context import ctx_state

from adapter import run as runs
from adapter.connection import Keepalive, UnreachableInSummary
from fleet.spec.inventory import check_or_exit


def checked(namespace: dict[str, Any], group_dir: Path = Path("group_data")) -> None:
    check_or_exit(namespace, group_dir)
    state = ctx_state.get()
    if state is None:  # loaded by make check, not by pyinfra
        return
    runs.on_inventory_loaded(state, UnreachableInSummary(), Keepalive())
