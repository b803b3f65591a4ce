"""lab.lab._wait_ready with nspawn and SSH faked: a host whose nspawn exits during boot is booted
once more, the reason printed; a second exit ends the lab's `up` with its console."""

from __future__ import annotations

import subprocess

import pytest

from lab import lab as labmod


@pytest.fixture
def host(tmp_path, monkeypatch):
    monkeypatch.setattr(labmod, "STATE", tmp_path)
    (tmp_path / "t" / "hosts" / "h1").mkdir(parents=True)
    (tmp_path / "t" / "hosts" / "h1" / "console.log").write_text(
        "Spawning container h1\n\nFailed to mount /run: Device busy\n")
    monkeypatch.setattr(labmod, "ssh", lambda ip, *cmd, timeout=15: subprocess.CompletedProcess(
        [], 0, "running\n" if "is-system-running" in cmd else "", ""))
    return labmod.Lab("t", tmp_path / "t.toml", "10.0.0.0/24", [labmod.LabHost("h1", "10.0.0.2", "g", {}, lab="t")])


def _nspawn_alive_after(monkeypatch, boots: list[str], dead_until: int) -> None:
    """nspawn reads as exited until it has been booted `dead_until` times more."""
    monkeypatch.setattr(labmod, "_alive_nspawn", lambda pid, name: len(boots) >= dead_until)


def test_a_host_whose_nspawn_exits_during_boot_is_booted_once_more_with_the_reason(host, monkeypatch, capsys):
    boots: list[str] = []
    _nspawn_alive_after(monkeypatch, boots, 1)
    labmod._wait_ready(host, boot_again=boots.append)
    assert boots == ["h1"]
    out = capsys.readouterr().out
    assert "h1: systemd-nspawn exited during boot (Spawning container h1 | Failed to mount /run: Device busy)" \
           "; booting it once more" in out
    assert "h1 (10.0.0.2): systemd running" in out


def test_a_second_exit_ends_the_boot_with_the_console(host, monkeypatch):
    boots: list[str] = []
    _nspawn_alive_after(monkeypatch, boots, 2)
    with pytest.raises(labmod.LabError, match="(?s)h1: systemd-nspawn exited during boot; console:\n.*Device busy"):
        labmod._wait_ready(host, boot_again=boots.append)
    assert boots == ["h1"]


def test_without_a_way_to_boot_again_the_first_exit_ends_it(host, monkeypatch):
    _nspawn_alive_after(monkeypatch, [], 1)
    with pytest.raises(labmod.LabError, match="exited during boot"):
        labmod._wait_ready(host)
