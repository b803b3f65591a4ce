"""Fixtures that bring lab hosts up (real systemd-nspawn hosts; see lab/lab.py).

- `lab` (session): lab/default.toml up once per session, down at the end.
- `lab_up` (factory): `lab_up(path_or_toml_text, fresh=False)` brings that lab up
  (tearing down whatever other lab runs; fresh=True reboots even the same one from
  scratch, undoing earlier deploys) and returns its `lab.lab.Lab`. If the session's default lab was
  in use, it is brought back after the test (a few seconds).

Every test under tests/lab/ is marked `lab`; they need root, systemd-nspawn and the
cached base image of each Debian release a lab uses (each built on first use, about 80 s).
Without root they are skipped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
if str(REPO) not in sys.path:  # `lab` is not an installed package
    sys.path.insert(0, str(REPO))

from lab import lab as labmod  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "lab: needs lab hosts (root, systemd-nspawn); run with -m lab")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.lab)


def _can_run_lab() -> str | None:
    if os.geteuid() != 0:
        return "lab tests need root"
    for tool in ("systemd-nspawn", "debootstrap", "ip", "ssh"):
        if not shutil.which(tool):
            return f"lab tests need {tool}"
    return None


class LabManager:
    """Which lab is up; switches labs only when asked for another file or content."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.current: labmod.Lab | None = None
        self.default_in_use = False

    def ensure(self, spec: str | Path, fresh: bool = False) -> labmod.Lab:
        """That lab up; fresh=True reboots it from scratch even if it runs (undoes deploys)."""
        path = self._path(spec)
        st = labmod._read_state()
        if st and (fresh or st["lab_file"] != str(path) or st["lab_sha256"] != labmod._sha(path)):
            labmod.down()
        self.current = labmod.up(path)
        return self.current

    def _path(self, spec: str | Path) -> Path:
        if isinstance(spec, Path) or ("\n" not in str(spec) and str(spec).endswith(".toml")):
            return Path(spec).resolve()
        text = str(spec)
        p = self.tmp / f"lab-{hashlib.sha256(text.encode()).hexdigest()[:12]}.toml"
        p.write_text(text)
        return p

    def close(self) -> None:
        labmod.down()


@pytest.fixture(scope="session")
def lab_manager(tmp_path_factory):
    reason = _can_run_lab()
    if reason:
        pytest.skip(reason)  # allowed: not root / no nspawn; CI and make test run as root with host-packages
    session = labmod.Session()
    session.acquire()  # a second pytest session on this checkout waits here
    try:
        mgr = LabManager(tmp_path_factory.mktemp("labs"))
        yield mgr
        mgr.close()
    finally:
        session.release()


@pytest.fixture(scope="session")
def lab(lab_manager) -> labmod.Lab:
    """The default lab (lab/default.toml), up for the whole session."""
    lab_manager.default_in_use = True
    return lab_manager.ensure(labmod.DEFAULT_LAB)


@pytest.fixture
def lab_up(lab_manager):
    """Factory: lab_up(path or TOML text, fresh=False) -> Lab, tearing down the lab that runs.
    The same lab (file and content) is reused unless fresh=True."""

    def bring_up(spec: str | Path, fresh: bool = False) -> labmod.Lab:
        return lab_manager.ensure(spec, fresh=fresh)

    yield bring_up
    if lab_manager.default_in_use:
        lab_manager.ensure(labmod.DEFAULT_LAB)
