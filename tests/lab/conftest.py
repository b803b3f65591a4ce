"""Fixtures that bring lab hosts up (real systemd-nspawn hosts; see lab/lab.py).

- `lab_manager.ensure(path_or_toml_text, fresh=False)`: that lab up (a lab of the same name from another file or
  content is taken down first; fresh=True boots it again from scratch) and returns its `lab.lab.Lab`. `lab_up` is
  the same as a per-test factory.

Labs of different names run side by side (each has its own state directory, lock and network). `make test` runs
these tests in pytest-xdist workers: MODULES below lists the labs each module brings up, no two labs on one subnet,
so any two modules run at once. A lab is one module's, or shared by the modules of one group (one topology, one
boot): a group's modules run in one worker, one after the other (pytest_xdist_make_scheduler), and a module that
needs the hosts as they booted resets them (`ensure(..., clean=True)`: lab/reset.py) instead of booting them again.
A module's labs go down when it ends, but those a later module of its group brings up.

Every test under tests/lab/ is marked `lab`; they need root, systemd-nspawn and the
cached base image of each Debian release a lab uses (each built on first use, about 80 s).
Without root they are skipped.
"""

from __future__ import annotations

import hashlib
import ipaddress
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

# module -> (its group, the labs it brings up: [lab] name -> subnet), the groups in the order they are handed to the
# workers: the longest first, so that the workers end together; a group's modules in the order they run.
MODULES = {
    "test_real_sglang_e2e": ("real", {"reallab": "10.225.0.0/24"}),
    "test_gateway_pair_e2e": ("gateway-pair", {"sglpair": "10.205.0.0/24"}),
    "test_gateway_e2e": ("gateway", {"sglgw": "10.204.0.0/24"}),
    "test_meet_e2e": ("meet", {"meetlab": "10.209.0.0/24"}),
    "test_deploy_e2e": ("default", {"sgllab": "10.203.0.0/24"}),
    "test_operator_e2e": ("operator", {"opslab": "10.215.0.0/24"}),
    "test_monitoring_e2e": ("monitoring", {"sglmon": "10.210.0.0/24"}),
    "test_silence_e2e": ("silence", {"silab": "10.224.0.0/24"}),
    "test_drift_e2e": ("drift", {"drlab": "10.211.0.0/24"}),
    "test_engine_e2e": ("engine", {"englab": "10.206.0.0/24"}),
    "test_hub_e2e": ("hub", {"hublab": "10.207.0.0/24"}),
    "test_recovery_e2e": ("recovery", {"rclab": "10.218.0.0/24"}),
    "test_turns_e2e": ("pro3", {"pro3lab": "10.221.0.0/24"}),
    "test_lost_link_e2e": ("pro3", {"pro3lab": "10.221.0.0/24"}),
    "test_canary_e2e": ("pro3", {"pro3lab": "10.221.0.0/24"}),
    "test_preflight_e2e": ("preflight", {"pflab": "10.216.0.0/24", "sglseed": "10.203.1.0/24"}),
    "test_journal_e2e": ("journal", {"jrnlab": "10.213.0.0/24"}),
    "test_real_boxes_e2e": ("boxes", {"boxlab": "10.217.0.0/24"}),
    "test_secret_e2e": ("secret", {"keylab": "10.220.0.0/24"}),
    "test_rollout_e2e": ("rollout", {"rolab": "10.219.0.0/24"}),
    "test_lab": ("lab", {"sgltest": "10.203.7.0/24", "sgldown": "10.203.8.0/24", "sglleft": "10.203.9.0/24",
                         "sglkill": "10.203.10.0/24", "sgltwin": "10.223.0.0/24"}),
    "test_hostile_e2e": ("hostile", {"hostlab": "10.212.0.0/24"}),
    "test_workloads_e2e": ("workloads", {"heldlab": "10.222.0.0/24"}),
}
GROUP = {module: group for module, (group, _) in MODULES.items()}


def _one_group_a_lab_one_subnet_a_lab() -> None:
    owner: dict[str, str] = {}
    subnets: dict[str, ipaddress.IPv4Network] = {}
    for module, (group, labs) in MODULES.items():
        for name, subnet in labs.items():
            if owner.setdefault(name, group) != group:
                raise pytest.UsageError(f"tests/lab/conftest.py: lab {name!r} is brought up by groups {owner[name]!r} "
                                        f"and {group!r}: two workers would share it; put {module} in {owner[name]!r}")
            if subnets.setdefault(name, ipaddress.ip_network(subnet)) != ipaddress.ip_network(subnet):
                raise pytest.UsageError(f"tests/lab/conftest.py: lab {name!r} has subnets {subnets[name]} and {subnet}")
    clashes = sorted((a, b) for a in subnets for b in subnets if a < b and subnets[a].overlaps(subnets[b]))
    if clashes:
        raise pytest.UsageError(f"tests/lab/conftest.py: labs {clashes} have overlapping subnets: two labs up at once "
                                "would refuse each other")


def later_in_group(module: str) -> list[str]:
    """The modules of `module`'s group that run after it."""
    group = [m for m in MODULES if GROUP[m] == GROUP[module]]
    return group[group.index(module) + 1:]


def pytest_xdist_make_scheduler(config, log):
    """xdist's load-by-scope, a scope being a module's group: a group's modules go to one worker, in order."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = Path(nodeid.split("::", 1)[0]).stem
            return GROUP.get(module, module)

    return ByGroup(config, log)


def pytest_configure(config):
    config.addinivalue_line("markers", "lab: needs lab hosts (root, systemd-nspawn); run with -m lab")
    _one_group_a_lab_one_subnet_a_lab()


def pytest_collection_modifyitems(config, items):
    # the groups and their modules as MODULES lists them (the order xdist hands them out with
    # --no-loadscope-reorder), each module's tests in their own order (a module's tests build on each other)
    groups = list(dict.fromkeys(GROUP.values()))
    position = {id(item): i for i, item in enumerate(items)}

    def key(item):
        path = Path(str(item.fspath)).resolve()
        if HERE not in path.parents:
            return (-1, 0, position[id(item)])
        item.add_marker(pytest.mark.lab)
        module = path.stem
        rank = groups.index(GROUP[module]) if module in GROUP else len(groups)
        return (rank, list(MODULES).index(module) if module in MODULES else 0, position[id(item)])

    items.sort(key=key)


def _can_run_lab() -> str | None:
    if os.geteuid() != 0:
        return "lab tests need root"
    for tool in ("systemd-nspawn", "debootstrap", "ip", "ssh"):
        if not shutil.which(tool):
            return f"lab tests need {tool}"
    return None


class LabManager:
    """The labs this test process has up, each claimed for it (labmod.Session: another process wanting a lab of
    that name waits) until it takes the lab down."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.module = ""  # the module whose tests run now (MODULES)
        self.sessions: dict[str, labmod.Session] = {}

    def ensure(self, spec: str | Path, fresh: bool = False, clean: bool = False) -> labmod.Lab:
        """That lab up; fresh=True boots it again from scratch even if it runs (undoes deploys), clean=True resets
        its hosts if it runs (an earlier module of the group deployed there): either way, its hosts as booted."""
        path = self._path(spec)
        name = labmod.lab_name(path)
        declared = MODULES.get(self.module, ("", {}))[1]
        assert name in declared, (f"{self.module} brings up lab {name!r}, which tests/lab/conftest.py's MODULES does "
                                  f"not list for it ({', '.join(declared) or 'none'}): two workers could share it")
        subnet = str(labmod.load_lab(path).subnet)
        assert subnet == declared[name], (f"lab {name!r} ({path}) has subnet {subnet}, MODULES says "
                                          f"{declared[name]}: its subnet must be the one no other lab has")
        if name not in self.sessions:
            session = labmod.Session(name)
            session.acquire(wait_s=600)
            self.sessions[name] = session
        st = labmod._read_state(name)
        if st and (fresh or st["lab_file"] != str(path) or st["lab_sha256"] != labmod._sha(path)):
            labmod.down(name)
            st = None
        lab = labmod.up(path)
        if clean and st:
            lab.reset()
        return lab

    def module_done(self, module: str) -> None:
        """Module `module` ended: its labs go down, but those a later module of its group brings up."""
        keep = {name for later in later_in_group(module) for name in MODULES[later][1]}
        for name in MODULES.get(module, ("", {}))[1]:
            if name in self.sessions and name not in keep:
                self.done(name)

    def done(self, name: str) -> None:
        """Take lab `name` down now (its hosts' memory and CPU back before the next module's lab) and let it go."""
        labmod.down(name)
        session = self.sessions.pop(name, None)
        if session:
            session.release()

    def _path(self, spec: str | Path) -> Path:
        if isinstance(spec, Path) or ("\n" not in str(spec) and str(spec).endswith(".toml")):
            return Path(spec).resolve()
        text = str(spec)
        p = self.tmp / f"lab-{hashlib.sha256(text.encode()).hexdigest()[:12]}.toml"
        p.write_text(text)
        return p

    def close(self) -> None:
        for name in list(self.sessions):
            self.done(name)


@pytest.fixture(scope="session")
def lab_manager(tmp_path_factory):
    reason = _can_run_lab()
    if reason:
        pytest.skip(reason)  # allowed: not root / no nspawn; CI and make test run as root with host-packages
    mgr = LabManager(tmp_path_factory.mktemp("labs"))
    try:
        yield mgr
    finally:
        mgr.close()


@pytest.fixture(scope="module", autouse=True)
def _module_labs(request):
    """Which module's tests run (the labs it may bring up); its labs down once it ends."""
    module = Path(str(request.fspath)).stem
    if os.geteuid() != 0 or module not in MODULES:
        yield
        return
    mgr = request.getfixturevalue("lab_manager")
    mgr.module = module
    yield
    mgr.module_done(module)


@pytest.fixture
def lab_up(lab_manager):
    """Factory: lab_up(path or TOML text, fresh=False) -> Lab. A lab of another name goes on beside it."""
    return lab_manager.ensure
