"""`make check` on broken group_data files and inventories, no hosts.

Each broken case goes both ways an operator meets it:
  - fleet.spec.load.load_class_specs(<tmp>/group_data), the library call deploy.py uses;
  - `python -m fleet.spec.check [inventory]` run in a tmp dir holding group_data/ (fleet.spec.check
    reads the relative path "group_data"), exit code 2 and the problem on stderr.
Every message must name the group FILE, the FIELD, the VALUE and what is allowed, and
never the API key.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fleet.spec.inventory import check_inventory, check_or_exit, inventory_groups
from fleet.spec.load import SpecError, class_files, load_gateways, load_class_specs, read_group_file, validate_host

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-Fleet0123456789abcdef"

GOOD = '''\
gpu_class = {"accepted_models": ["NVIDIA RTX A6000"], "gpu_count": 2, "min_memory_mib": 48000}
service = {"model_path": "/root/models/Qwen3-8B", "served_model_name": "qwen3-8b", "port": 30000}
speculative = {"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3-8B-DFlash", "block_size": 16}
workloads = ["dflash-train"]
'''


def class_file(service: str = "", speculative: str | None = None, gpu_count: int = 2, extra: str = "") -> str:
    """A class file: the good one with service fields added/overridden, speculative replaced, extra lines."""
    spec = speculative if speculative is not None else (
        '{"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3-8B-DFlash", "block_size": 16}'
    )
    return textwrap.dedent(f'''\
        import os  # modules are not spec names
        gpu_class = {{"accepted_models": ["NVIDIA RTX A6000"], "gpu_count": {gpu_count}, "min_memory_mib": 48000}}
        service = {{"model_path": "/root/models/Qwen3-8B", "served_model_name": "qwen3-8b", "port": 30000, {service}}}
        speculative = {spec}
        workloads = ["dflash-train.service"]
        ''') + extra


def make_group_dir(root: Path, files: dict[str, str]) -> Path:
    """root/group_data with the shipped all.py and the given class files."""
    g = root / "group_data"
    g.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "group_data" / "all.py", g / "all.py")
    for name, text in files.items():
        (g / f"{name}.py").write_text(text)
    return g


def run_check(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "fleet.spec.check", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


# (class file text, [substrings every message about it must hold: field, value, allowed])
BROKEN = {
    "unknown-algorithm": (
        class_file(speculative='{"algorithm": "MEDUSA", "draft_model_path": "/d"}'),
        ["speculative = ", "'algorithm': 'MEDUSA'", "expected tags: 'none', 'EAGLE', 'EAGLE3', 'NEXTN', "
         "'STANDALONE', 'NGRAM', 'DFLASH', 'DDTREE'"],
    ),
    "block-size-0": (
        class_file(speculative='{"algorithm": "DFLASH", "draft_model_path": "/d", "block_size": 0}'),
        ["speculative.block_size = 0", "greater than or equal to 1"],
    ),
    "block-size-17": (
        class_file(speculative='{"algorithm": "DFLASH", "draft_model_path": "/d", "block_size": 17}'),
        ["speculative.block_size = 17", "less than or equal to 16"],
    ),
    "dflash-without-draft": (
        class_file(speculative='{"algorithm": "DFLASH", "block_size": 16}'),
        ["speculative", "exactly one of draft_model_path", "and draft_model"],
    ),
    "port-0": (class_file(service='"port": 0'), ["service.port = 0", "greater than or equal to 1"]),
    "port-70000": (class_file(service='"port": 70000'), ["service.port = 70000", "less than or equal to 65535"]),
    "typo-top-level": (
        class_file(extra="prot = 30001\n"),
        ["prot: unknown key", "30001", "allowed keys: gpu_class, service, speculative, workloads, readiness, smoke"],
    ),
    "typo-nested": (
        class_file(service='"prot": 30001'),
        ["service.prot: unknown key", "30001", "allowed keys: unit, launcher, model_path", "port"],
    ),
    "tp-does-not-divide": (
        class_file(service='"tp_size": 3'),
        ["service.tp_size 3 does not divide gpu_class.gpu_count 2"],
    ),
    "eagle3-without-draft": (
        class_file(speculative='{"algorithm": "EAGLE3", "num_steps": 3}'),
        ["speculative = ", "'EAGLE3'", "EAGLE3 needs draft_model_path"],
    ),
    "topk-without-num-steps": (
        class_file(speculative='{"algorithm": "EAGLE", "topk": 4}'),
        ["speculative = ", "'topk': 4", "topk and num_draft_tokens need num_steps"],
    ),
    "ddtree-without-budget": (
        class_file(speculative='{"algorithm": "DDTREE", "draft_model_path": "/d"}'),
        ["speculative.tree_budget", "required, not given"],
    ),
    "relative-model-path": (
        class_file(service='"model_path": "models/Qwen3-8B"'),
        ["service.model_path = 'models/Qwen3-8B'", "an absolute path"],
    ),
    "relative-draft-path": (
        class_file(speculative='{"algorithm": "DFLASH", "draft_model_path": "Qwen3-8B-DFlash"}'),
        ["speculative.draft_model_path = 'Qwen3-8B-DFlash'", "an absolute path"],
    ),
    "api-key-value-in-group-data": (
        class_file(service='"api_key": "sk-written-here-123"'),
        ["service.api_key = '***'", "name where the secret comes from, not its value"],
    ),
    "unit-escapes-the-state-directory": (
        class_file(service='"unit": ".."'),
        ["service.unit = '..'", "a systemd unit name", "not starting with - or ."],
    ),
    "extra-args-override-tp": (
        class_file(service='"extra_args": ["--tensor-parallel-size", "2"]'),
        ["service.extra_args = ['--tensor-parallel-size', '2']", "--tensor-parallel-size is service.tp_size: "
         "set it there"],
    ),
    "api-key-in-extra-args": (
        class_file(service=f'"extra_args": ["--api-key", "{KEY}"]'),
        ["service.extra_args = ['--api-key', '***']", "declare it in service.api_key"],
    ),
    "misspelt-api-key": (
        class_file(service=f'"api-key": "{KEY}"'),
        ["service.api-key: unknown key (value '***')", "allowed keys: "],
    ),
    "token-in-environment": (
        class_file(service=f'"environment": {{"HF_TOKEN": "{KEY}"}}'),
        ["service.environment = {'HF_TOKEN': '***'}", "HF_TOKEN names a secret", "service.secret_environment"],
    ),
    "carriage-return-in-model-path": (
        class_file(service='"model_path": "/root/models/Qwen3-8B\\r"'),
        ["service.model_path = '/root/models/Qwen3-8B\\r'", "found a control character (U+000D)"],
    ),
    "infinite-load-timeout": (
        class_file(extra='readiness = {"load_timeout_s": float("inf")}\n'),
        ["readiness.load_timeout_s = inf", "finite number"],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_file_refused_by_load_class_specs(tmp_path, case):
    text, needles = BROKEN[case]
    g = make_group_dir(tmp_path, {"good": GOOD, case: text})
    with pytest.raises(SpecError) as e:
        load_class_specs(g)
    (problem,) = e.value.problems
    assert problem.startswith(f"{g / case}.py: "), problem
    for needle in needles:
        assert needle in problem, (needle, problem)
    assert "not a key!" not in problem and KEY not in problem


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_file_refused_by_make_check(tmp_path, case):
    text, needles = BROKEN[case]
    make_group_dir(tmp_path, {"good": GOOD, case: text})
    r = run_check(tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert lines[0] == "1 problem(s) in group_data/:"
    (problem,) = [line for line in lines if line.startswith("  - ")]
    assert problem.startswith(f"  - group_data/{case}.py: "), problem
    for needle in needles:
        assert needle in problem, (needle, problem)
    assert "not a key!" not in r.stderr and KEY not in r.stderr


def test_make_check_accepts_the_shipped_group_data(tmp_path):
    shutil.copytree(ROOT / "group_data", tmp_path / "group_data")
    r = run_check(tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ok  group_data/pro6000.py: qwen3.6-27b on 1x NVIDIA RTX PRO 6000" in r.stdout
    assert "speculative DFLASH" in r.stdout
    assert len(r.stdout.splitlines()) == len(list((ROOT / "group_data").glob("*.py"))) - 1


def test_make_check_accepts_a_good_tmp_file(tmp_path):
    make_group_dir(tmp_path, {"good": GOOD})
    r = run_check(tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ("ok  group_data/good.py: qwen3-8b on 2x NVIDIA RTX A6000, speculative DFLASH; the canary first, "
                        "then 1 host(s) at a time\n")


def test_problems_of_all_files_reported_together(tmp_path):
    make_group_dir(tmp_path, {
        "a": class_file(service='"port": 0'),
        "b": class_file(service='"prot": 1', speculative='{"algorithm": "DFLASH"}'),
        "good": GOOD,
    })
    with pytest.raises(SpecError) as e:
        load_class_specs(tmp_path / "group_data")
    assert len(e.value.problems) == 3
    r = run_check(tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith("3 problem(s) in group_data/:\n")
    assert "group_data/a.py: service.port = 0" in r.stderr
    assert "group_data/b.py: service.prot: unknown key" in r.stderr
    assert "group_data/b.py: speculative = {'algorithm': 'DFLASH'}: exactly one of draft_model_path" in r.stderr


def test_make_check_lists_the_gateway_files_problems_beside_the_classes(tmp_path):
    """A broken class must not hide a broken gateway file (its routes go unchecked then)."""
    make_group_dir(tmp_path, {"a": class_file(service='"unit": ".."'),
                              "gw": 'gateway = {"routes": ["a"], "version": "1.13.0\\nExecStartPre=/bin/sh", '
                                    '"host": "0.0.0.0; id"}\n'})
    r = run_check(tmp_path)
    assert r.returncode == 2
    problems = [line for line in r.stderr.splitlines() if line.startswith("  - ")]
    assert r.stderr.startswith("3 problem(s) in group_data/:\n")
    assert problems[0].startswith("  - group_data/a.py: service.unit = '..': a systemd unit name")
    assert "  - group_data/gw.py: gateway.version = '1.13.0\\nExecStartPre=/bin/sh': a PEP 440 version as pip " \
           "takes it, e.g. 1.13.0" in problems
    assert "  - group_data/gw.py: gateway.host = '0.0.0.0; id': an IP address (e.g. 0.0.0.0, 127.0.0.1, ::) or a " \
           "host name" in problems


def test_class_file_replaces_all_py_names_whole(tmp_path):
    # pyinfra merges by top-level name: a class's readiness replaces all.py's, the rest is default
    g = make_group_dir(tmp_path, {"good": GOOD + 'readiness = {"load_timeout_s": 60}\n'})
    spec = load_class_specs(g)["good"]
    assert spec.readiness.load_timeout_s == 60
    assert spec.readiness.workload_release_timeout_s == 120  # the model's default, not all.py's
    assert spec.smoke.max_tokens == 16  # from all.py


def test_all_py_names_reach_every_class(tmp_path):
    g = make_group_dir(tmp_path, {"a": GOOD, "b": GOOD})
    (g / "all.py").write_text('smoke = {"max_tokens": 48, "prompt": "Hi."}\nreadiness = {"load_timeout_s": 300}\n')
    specs = load_class_specs(g)
    for spec in specs.values():
        assert spec.smoke.max_tokens == 48 and spec.smoke.prompt == "Hi."
        assert spec.readiness.load_timeout_s == 300


def test_error_in_all_py_named_per_class(tmp_path):
    g = make_group_dir(tmp_path, {"good": GOOD})
    (g / "all.py").write_text('smoke = {"max_tokens": 0}\n')
    with pytest.raises(SpecError) as e:
        load_class_specs(g)
    (p,) = e.value.problems
    assert "smoke.max_tokens = 0" in p and "greater than or equal to 1" in p


def test_make_check_refuses_a_missing_group_data(tmp_path):
    r = run_check(tmp_path)  # the wrong cwd must not pass having validated nothing
    assert r.returncode == 2
    assert "no GPU class files in" in r.stderr and r.stdout == ""
    (tmp_path / "group_data").mkdir()
    shutil.copy(ROOT / "group_data" / "all.py", tmp_path / "group_data" / "all.py")
    assert run_check(tmp_path).returncode == 2  # all.py alone declares no class


# --- the inventory -----------------------------------------------------------------

PORTS = {"pro6000": 30000, "a6000": 30000, "h200": 30001}


@pytest.fixture
def fleet_dir(tmp_path) -> Path:
    files = {g: class_file(service=f'"port": {p}') for g, p in PORTS.items()}
    make_group_dir(tmp_path, files)
    return tmp_path


def test_good_inventory_passes(fleet_dir):
    specs = check_inventory(
        {"pro6000": ["a"], "a6000": ["b"], "h200": ["c"], "canary": ["a"]},
        {"a": {"ssh_user": "root"}, "b": {}, "c": {"ssh_port": 2222, "_sudo": True}},
        fleet_dir / "group_data",
    )
    assert set(specs) == set(PORTS)


def inventory_problems(fleet_dir, groups, hosts, groups_data=None) -> list[str]:
    with pytest.raises(SpecError) as e:
        check_inventory(groups, hosts, fleet_dir / "group_data", groups_data)
    return e.value.problems


def test_host_in_two_classes_sharing_a_port(fleet_dir):
    (p,) = inventory_problems(fleet_dir, {"pro6000": ["gpu-1"], "a6000": ["gpu-1"]}, {"gpu-1": {}})
    assert p.startswith("inventory: host gpu-1 is filed under 2 GPU classes: ")
    assert "pro6000 (service.port 30000)" in p and "a6000 (service.port 30000)" in p
    assert "expected exactly one" in p
    assert p.endswith("; two services on one port")


def test_host_in_two_classes_on_different_ports(fleet_dir):
    (p,) = inventory_problems(fleet_dir, {"pro6000": ["gpu-1"], "h200": ["gpu-1"]}, {"gpu-1": {}})
    assert "filed under 2 GPU classes" in p and "h200 (service.port 30001)" in p
    assert "one port" not in p


def test_host_in_no_class(fleet_dir):
    (p,) = inventory_problems(fleet_dir, {"pro6000": ["a"], "canary": ["stray"]}, {"a": {}, "stray": {}})
    assert p.startswith("inventory: host stray is in no GPU class group; expected one of ")
    for g in PORTS:
        assert g in p


@pytest.mark.parametrize("key", ["service", "speculative", "workloads", "readiness", "gpu_class", "smoke"])
def test_host_data_may_not_override_the_spec(fleet_dir, key):
    (p,) = inventory_problems(fleet_dir, {"pro6000": ["a"]}, {"a": {key: {}, "ssh_user": "root"}})
    assert p == (f"inventory: host a sets {key}; the service is declared per GPU class in group_data/, "
                 "not per host")


@pytest.mark.parametrize("key", ["readiness", "smoke", "service"])
def test_group_tuple_data_may_not_override_the_spec(fleet_dir, key):
    """pyinfra's `group = ([hosts], {data})`: its data sits over all.py's for those hosts, unchecked
    unless refused here like host data."""
    ns = {"pro6000": (["a", ("b", {"ssh_port": 22})], {key: {"load_timeout_s": 1}, "ssh_user": "root"})}
    groups, hosts, groups_data = inventory_groups(ns)
    assert (groups, hosts) == ({"pro6000": ["a", "b"]}, {"a": {}, "b": {"ssh_port": 22}})
    (p,) = inventory_problems(fleet_dir, groups, hosts, groups_data)
    assert p == (f"inventory: group pro6000 sets {key}; the service is declared per GPU class in group_data/, "
                 "not per group")


def test_group_tuple_connection_data_is_fine(fleet_dir, capsys):
    check_or_exit({"pro6000": (["gpu-1"], {"ssh_user": "root", "_sudo": True})}, fleet_dir / "group_data")
    assert capsys.readouterr().err == ""


def test_a_host_is_a_replica_or_a_gateway_not_both(fleet_dir):
    g = fleet_dir / "group_data"
    (g / "gw.py").write_text('gateway = {"routes": ["pro6000"]}\n')
    (g / "gw2.py").write_text('gateway = {"routes": ["a6000"], "port": 8001}\n')
    for cls in ("pro6000", "a6000"):  # routed classes bind an address smg reaches
        (g / f"{cls}.py").write_text(class_file(service='"host": "0.0.0.0"'))
    p = inventory_problems(fleet_dir, {"pro6000": ["a", "b"], "a6000": ["c"], "gw": ["b"], "gw2": ["d"],
                                       "more": ["d"]}, {"a": {}, "b": {}, "c": {}, "d": {}})
    assert p == ["inventory: host b is filed under GPU class pro6000 and gateway group gw; expected one or the "
                 "other: the rolling rollout restarts a replica while its gateway keeps routing to the others"]
    (p,) = inventory_problems(fleet_dir, {"pro6000": ["a"], "gw": ["g"], "gw2": ["g"]}, {"a": {}, "g": {}})
    assert p == ("inventory: host g is filed under 2 gateway or monitoring groups: gw, gw2; expected one (one smg, "
                 "or one Prometheus, per host)")


def test_two_gateway_hosts_need_a_floating_address_in_front_of_them(fleet_dir):
    g = fleet_dir / "group_data"
    (g / "pro6000.py").write_text(class_file(service='"host": "0.0.0.0"'))
    (g / "gw.py").write_text('gateway = {"routes": ["pro6000"]}\n')
    groups = {"pro6000": ["a"], "gw": ["g1", "g2"]}
    (p,) = inventory_problems(fleet_dir, groups, {"a": {}, "g1": {}, "g2": {}})
    assert p == ("inventory: gateway group gw has 2 hosts (g1, g2); expected one: clients would not know which to "
                 "use: declare gateway.floating in group_data/gw.py, the address in front of them")
    (g / "gw.py").write_text('gateway = {"routes": ["pro6000"], "floating": {"address": "10.0.0.100", '
                             '"router_id": 51, "password": {"env": "VRRP_PASSWORD"}}}\n')
    specs = check_inventory({**groups, "gw": ["g1", "g2", "g3"]}, {"a": {}, "g1": {}, "g2": {}, "g3": {}}, g)
    assert "pro6000" in specs


FLOATING = '"floating": {"address": "10.0.0.100", "router_id": 51, "password": {"env": "VRRP_PASSWORD"}}'


@pytest.mark.parametrize("hosts, said", [
    ({"a": {"ssh_hostname": "10.0.0.100"}}, "host a"),
    ({"10.0.0.100": {}}, "host 10.0.0.100"),
    ({"g2": {"ssh_hostname": "10.0.0.100"}}, "gw's gateway g2"),
])
def test_a_floating_address_that_is_a_hosts_own_is_refused(fleet_dir, hosts, said):
    g = fleet_dir / "group_data"
    (g / "pro6000.py").write_text(class_file(service='"host": "0.0.0.0"'))
    (g / "gw.py").write_text(f'gateway = {{"routes": ["pro6000"], {FLOATING}}}\n')
    hosts = {"a": {}, "g1": {}, "g2": {}, **hosts}
    groups = {"pro6000": [h for h in hosts if h not in ("g1", "g2")], "gw": ["g1", "g2"]}
    (p,) = inventory_problems(fleet_dir, groups, hosts)
    assert p == (f"group_data/gw.py: gateway.floating.address: 10.0.0.100 is the address of {said} in the inventory: "
                 "expected a free host address of its subnet (keepalived would claim that host's)")
    assert check_inventory({"pro6000": ["a"], "gw": ["g1", "g2"]},
                           {"a": {"ssh_hostname": "10.0.0.1"}, "g1": {}, "g2": {"ssh_hostname": "gw-2.example"}}, g)


def test_two_gateway_groups_with_one_router_id_are_refused(fleet_dir, capsys):
    g = fleet_dir / "group_data"
    for cls in ("pro6000", "a6000"):
        (g / f"{cls}.py").write_text(class_file(service='"host": "0.0.0.0"'))
    (g / "gw.py").write_text(f'gateway = {{"routes": ["pro6000"], {FLOATING}}}\n')
    (g / "gw2.py").write_text(f'gateway = {{"routes": ["a6000"], {FLOATING.replace(".100", ".101")}}}\n')
    with pytest.raises(SpecError) as e:
        load_gateways(g, load_class_specs(g))
    assert e.value.problems == [
        "group_data/gw.py: gateway.floating.router_id: 51 is also gateway group gw2's: expected one virtual router "
        "id per gateway group",
        "group_data/gw2.py: gateway.floating.router_id: 51 is also gateway group gw's: expected one virtual router "
        "id per gateway group"]


def test_inventory_problems_reported_together(fleet_dir):
    p = inventory_problems(
        fleet_dir,
        {"pro6000": ["a", "b"], "a6000": ["b"], "x": ["c"]},
        {"a": {"service": {}}, "b": {}, "c": {}},
    )
    assert len(p) == 3


def test_check_or_exit_exits_2_naming_the_problem(fleet_dir, capsys):
    ns = {"pro6000": [("gpu-1", {"ssh_user": "root"})], "a6000": ["gpu-1"], "_ssh": [1], "other": "x"}
    with pytest.raises(SystemExit) as e:
        check_or_exit(ns, fleet_dir / "group_data")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("group_data / inventory check failed; no host was contacted:\n")
    assert "host gpu-1 is filed under 2 GPU classes" in err and "two services on one port" in err


def test_check_or_exit_silent_when_good(fleet_dir, capsys):
    check_or_exit({"pro6000": [("gpu-1", {"ssh_user": "root"})], "h200": ["gpu-2"]}, fleet_dir / "group_data")
    assert capsys.readouterr().err == ""


INVENTORY_TWO_CLASSES = '''\
from fleet.spec.inventory import check_or_exit
pro6000 = [("gpu-1.fleet.example", {"ssh_user": "root"})]
a6000 = ["gpu-1.fleet.example"]
check_or_exit(globals())
'''

INVENTORY_NO_CLASS_AND_OVERRIDE = '''\
from fleet.spec.inventory import check_or_exit
pro6000 = [("gpu-1.fleet.example", {"service": {"port": 1}})]
canary = ["gpu-9.fleet.example"]
check_or_exit(globals())
'''


def test_make_check_with_inventory_two_services_on_one_port(fleet_dir):
    (fleet_dir / "inv.py").write_text(INVENTORY_TWO_CLASSES)
    r = run_check(fleet_dir, "inv.py")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "no host was contacted" in r.stderr
    assert "host gpu-1.fleet.example is filed under 2 GPU classes" in r.stderr
    assert "two services on one port" in r.stderr


def test_make_check_with_inventory_unfiled_host_and_override(fleet_dir):
    (fleet_dir / "inv.py").write_text(INVENTORY_NO_CLASS_AND_OVERRIDE)
    r = run_check(fleet_dir, "inv.py")
    assert r.returncode == 2
    assert "host gpu-9.fleet.example is in no GPU class group" in r.stderr
    assert "host gpu-1.fleet.example sets service; the service is declared per GPU class" in r.stderr


INVENTORY_GROUP_TUPLE = '''\
from fleet.spec.inventory import check_or_exit
pro6000 = (["gpu-1.fleet.example"], {"ssh_user": "root", "readiness": {"load_timeout_s": 1}})
check_or_exit(globals())
'''


def test_make_check_with_inventory_group_data_that_overrides_readiness(fleet_dir):
    (fleet_dir / "inv.py").write_text(INVENTORY_GROUP_TUPLE)
    r = run_check(fleet_dir, "inv.py")
    assert r.returncode == 2 and r.stdout == ""
    assert "  - inventory: group pro6000 sets readiness; the service is declared per GPU class" in r.stderr


def test_make_check_with_the_shipped_inventory(tmp_path):
    shutil.copytree(ROOT / "group_data", tmp_path / "group_data")
    shutil.copy(ROOT / "inventory.py", tmp_path / "inventory.py")
    r = run_check(tmp_path, "inventory.py")
    assert r.returncode == 0, r.stderr
    assert "ok  group_data/pro6000.py" in r.stdout


def test_a_group_file_without_gpu_class_is_ordinary_group_data(tmp_path):
    """The usual cloud setup: a group of boxes with connection data only, beside the classes."""
    g = make_group_dir(tmp_path, {"good": GOOD, "cloud_boxes": 'ssh_user = "ubuntu"\n_sudo = True\nrack = "eu-1"\n'})
    assert set(class_files(g)) == {"good"}
    assert set(load_class_specs(g)) == {"good"}
    assert check_inventory({"good": ["a"], "cloud_boxes": ["a"]}, {"a": {}}, g)
    r = run_check(tmp_path)
    assert r.returncode == 0, r.stderr


def test_a_host_spec_takes_the_spec_names_of_its_merged_data_only(tmp_path):
    g = make_group_dir(tmp_path, {"good": GOOD})
    data = {**read_group_file(g / "good.py"), "ssh_user": "ubuntu", "_sudo": True, "rack": "eu-1"}
    assert validate_host("group_data/good.py", data).service.served_model_name == "qwen3-8b"
