"""tasks/inventory: an unreachable host's row, the link timeout a connection's keepalive is set from
(its class's, else the declared default), and the inventory footer: group_data checked before anything
connects, then the two handlers armed once pyinfra has initialised its state."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from builders import SPEC
from fakehost import fresh_run, this_run  # noqa: F401
from pyinfra.context import ctx_state

from fleet.spec import Readiness
from adapter import connection
from tasks import inventory

DATA = SPEC.model_dump(mode="json", exclude_defaults=True)
DEFAULT = Readiness.model_fields["link_timeout_s"].default


@pytest.fixture
def group_dir(tmp_path):
    for cls in ("pro6000", "a6000"):
        (tmp_path / f"{cls}.py").write_text("".join(f"{k} = {v!r}\n" for k, v in DATA.items()))
    (tmp_path / "ssh.py").write_text("ssh_user = 'ubuntu'\n")  # connection data, no class
    return tmp_path


def test_an_unreachable_host_has_a_row_with_pyinfras_reason(group_dir, monkeypatch):
    monkeypatch.setattr(connection.UnreachableInSummary, "group_dir", group_dir)
    host = SimpleNamespace(name="gpu-3", groups=["ssh", "pro6000"], state=None)
    connection.UnreachableInSummary.host_connect_error(None, host, OSError("No route to host"))
    connection.UnreachableInSummary.host_connect_error(None, SimpleNamespace(name="gw", groups=[], state=None), OSError())
    row = this_run().report.hosts["gpu-3"]
    assert (row.gpu_class, row.verdict, row.action, row.reasons) == ("pro6000", "UNREACHABLE", "none",
                                                                      ["gpu-3: No route to host"])
    assert this_run().report.hosts["gw"].gpu_class == "-" and this_run().report.hosts["gw"].reasons == ["gw: "]


@pytest.mark.parametrize("groups, data, timeout", [
    (["pro6000"], {**DATA, "readiness": {"link_timeout_s": 20}}, 20),
    (["ssh"], {}, DEFAULT),  # the gateway: no class
    (["pro6000", "a6000"], DATA, DEFAULT),  # preflight refuses it
    (["pro6000"], {**DATA, "readiness": {"link_timeout_s": "soon"}}, DEFAULT),  # does not validate
])
def test_the_link_timeout_is_the_hosts_class_or_the_default(group_dir, groups, data, timeout):
    host = SimpleNamespace(groups=groups, data=SimpleNamespace(dict=lambda: data))
    assert connection.link_timeout_s(host, group_dir) == timeout


def test_the_footer_checks_group_data_and_arms_the_handlers_after_pyinfras_init(group_dir):
    inventory.checked({"pro6000": ["gpu-1"]}, group_dir)  # loaded by make check: no state, nothing armed
    added, initialised = [], []
    state = SimpleNamespace(init=lambda *a, **k: initialised.append(a), add_callback_handler=added.append)
    with ctx_state.use(state):
        inventory.checked({"pro6000": ["gpu-1"]}, group_dir)
    assert added == []  # not before pyinfra initialises its state (which would drop them)
    state.init("inventory", "config")
    assert initialised == [("inventory", "config")]
    assert [type(h) for h in added] == [inventory.UnreachableInSummary, inventory.Keepalive]


def test_a_footer_over_bad_group_data_exits_before_anything_connects(group_dir):
    (group_dir / "a6000.py").write_text("gpu_class = {'gpu_count': 'two'}\n")
    with pytest.raises(SystemExit) as e:
        inventory.checked({"a6000": ["gpu-1"]}, group_dir)
    assert e.value.code == 2
