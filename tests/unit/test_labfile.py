"""lab/labfile.py's mirror host (role = "mirror"), engines_disk_kib and models_disk_kib; what the lab makes of them
without a lab: a mirror host's files (its index and its Hugging Face mirror), the engines' and the models' mount
units, the models it leaves to the deploy, the inventory that leaves the mirror out, index_url, hf_endpoint, throttle."""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from fleet.spec.load import gateway_files, load_class_specs, load_group_data, spec_data
from fleet.spec import ClassSpec
from lab import hf, labfile, mirror, provision, realsglang, wheels
from lab import lab as labmod

ROOT = Path(__file__).resolve().parents[2]
GROUPS = sorted(load_class_specs(ROOT / "group_data"))
GATEWAYS = sorted(gateway_files(ROOT / "group_data"))
PRO6000 = {"name": "pro6000-1", "group": "pro6000", "gpu_model": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
           "gpu_count": 1, "gpu_memory_mib": 97887}


def toml(value) -> str:
    return json.dumps(value)  # a TOML basic string, integer, boolean or array of them


def lab_file(tmp_path: Path, *hosts: dict) -> Path:
    text = '[lab]\nname = "sglmir"\nsubnet = "10.209.0.0/24"\n'
    for h in hosts:
        text += "\n[[hosts]]\n" + "".join(f"{k} = {toml(v)}\n" for k, v in h.items())
    path = tmp_path / "lab.toml"
    path.write_text(text)
    return path


def parse(tmp_path: Path, *hosts: dict) -> labfile.LabFile:
    return labfile.parse(lab_file(tmp_path, *hosts), GROUPS, GATEWAYS)


def problems(tmp_path: Path, *hosts: dict) -> list[str]:
    with pytest.raises(labfile.LabFileError) as e:
        parse(tmp_path, *hosts)
    return e.value.problems


def test_a_mirror_host_has_no_group_and_only_its_keys(tmp_path):
    lab = parse(tmp_path, {"name": "mirror-1", "role": "mirror"}, PRO6000)
    m, gpu = lab.hosts
    assert (m.name, m.ip, m.group) == ("mirror-1", "10.209.0.11", None)
    assert m.entry == {"name": "mirror-1", "role": "mirror", "ssh_user": "root", "debian": "bookworm"}
    assert (gpu.ip, gpu.group, gpu.entry["engines_disk_kib"]) == ("10.209.0.12", "pro6000", None)


def test_a_mirror_host_with_a_group_is_told_it_has_none(tmp_path):
    [p] = problems(tmp_path, {"name": "mirror-1", "role": "mirror", "group": "pro6000"})
    assert p.endswith("host 'mirror-1': group = 'pro6000': a mirror host has no group: it is the lab's package "
                      "index, no part of the fleet (the inventory leaves it out, so that no deploy touches it); "
                      "remove the key; allowed keys for a mirror host: name, role, ssh_user, debian")


def test_a_mirror_host_refuses_a_gpu_hosts_keys(tmp_path):
    found = problems(tmp_path, {"name": "mirror-1", "role": "mirror", "gpu_count": 1, "engines_disk_kib": 256})
    assert [p.split(": ", 1)[1] for p in found] == [
        f"host 'mirror-1': {k} = {v}: a GPU host's key; role = 'mirror' (the lab's package index) has no GPU and "
        "runs no SGLang; allowed keys for a mirror host: name, role, ssh_user, debian"
        for k, v in (("gpu_count", 1), ("engines_disk_kib", 256))]


def test_a_gateway_host_is_told_as_before(tmp_path):
    [p] = problems(tmp_path, {"name": "gw-1", "group": GATEWAYS[0], "role": "gateway", "engines_disk_kib": 256})
    assert p.endswith("host 'gw-1': engines_disk_kib = 256: a GPU host's key; role = 'gateway' has no GPU and runs "
                      "no SGLang; allowed keys for a gateway host: name, group, role, ssh_user, debian")


def test_a_role_that_is_not_a_string_is_a_problem_not_a_crash(tmp_path):
    found = problems(tmp_path, {**PRO6000, "role": ["mirror"]})
    assert any("role = ['mirror']: not allowed; allowed: 'gpu' | 'gateway' | 'monitoring' | 'mirror'" in p for p in found)


@pytest.mark.parametrize("key", ["engines_disk_kib", "models_disk_kib"])
@pytest.mark.parametrize("value, why", [(63, "out of range"), ("256", "not an integer"), (True, "not an integer"),
                                        (256.0, "not an integer")])
def test_a_disk_kib_is_an_integer_of_64_or_more(tmp_path, key, value, why):
    [p] = problems(tmp_path, {**PRO6000, key: value})
    assert p.endswith(f"host 'pro6000-1': {key} = {value!r}: {why}; allowed: an integer >= 64")


def test_models_disk_kib_is_a_gpu_hosts_key(tmp_path):
    [p] = problems(tmp_path, {"name": "mirror-1", "role": "mirror", "models_disk_kib": 256})
    assert "models_disk_kib = 256: a GPU host's key; role = 'mirror'" in p
    [h] = parse(tmp_path, PRO6000).hosts
    assert h.entry["models_disk_kib"] is None


def test_mount_unit_name_is_systemd_escapes():
    paths = [provision.ENGINES_DIR, "/", "//a//b/", "/.hidden/x-y", "/a:b_c.d/é e"]
    expected = ["opt-sglang\\x2dfleet-engines.mount", "-.mount", "a-b.mount", "\\x2ehidden-x\\x2dy.mount",
                "a:b_c.d-\\xc3\\xa9\\x20e.mount"]
    assert [provision.mount_unit_name(p) for p in paths] == expected
    if shutil.which("systemd-escape"):
        out = subprocess.run(["systemd-escape", "--path", "--suffix=mount", *paths], capture_output=True, text=True)
        assert out.stdout.split() == expected


def _provision(tmp_path: Path, entry: dict) -> Path:
    root = tmp_path / "root"
    specs, data = load_class_specs(ROOT / "group_data"), load_group_data(ROOT / "group_data")
    group = entry.get("group")
    provision.provision(root, entry, specs.get(group), data.get(group), "ssh-ed25519 AAAA lab", "10.209.0.12", "sglmir")
    return root


def test_engines_disk_kib_is_a_tmpfs_mount_unit_enabled_for_local_fs(tmp_path):
    [h] = parse(tmp_path, {**PRO6000, "engines_disk_kib": 256}).hosts
    root = _provision(tmp_path, h.entry)
    unit = "opt-sglang\\x2dfleet-engines.mount"
    text = (root / "etc/systemd/system" / unit).read_text()
    assert "What=tmpfs\nWhere=/opt/sglang-fleet/engines\nType=tmpfs\nOptions=size=256k,mode=0755\n" in text
    assert "WantedBy=local-fs.target" in text
    assert (root / "etc/systemd/system/local-fs.target.wants" / unit).readlink() == Path("/etc/systemd/system") / unit
    assert json.loads((root / "etc/lab/host.json").read_text())["engines_disk_kib"] == 256


def test_models_disk_kib_is_a_tmpfs_at_the_models_dir_beside_the_engines_one(tmp_path):
    [h] = parse(tmp_path, {**PRO6000, "engines_disk_kib": 256, "models_disk_kib": 20480}).hosts
    root = _provision(tmp_path, h.entry)
    assert provision.MODELS_DIR == "/opt/sglang-fleet/models"
    unit = "opt-sglang\\x2dfleet-models.mount"
    text = (root / "etc/systemd/system" / unit).read_text()
    assert "What=tmpfs\nWhere=/opt/sglang-fleet/models\nType=tmpfs\nOptions=size=20480k,mode=0755\n" in text
    assert "(the lab entry's models_disk_kib)" in text and "WantedBy=local-fs.target" in text
    wants = root / "etc/systemd/system/local-fs.target.wants"
    assert sorted(p.name for p in wants.iterdir()) == ["opt-sglang\\x2dfleet-engines.mount", unit]
    host = json.loads((root / "etc/lab/host.json").read_text())
    assert (host["engines_disk_kib"], host["models_disk_kib"]) == (256, 20480)


def test_without_engines_disk_kib_no_mount_unit(tmp_path):
    [h] = parse(tmp_path, PRO6000).hosts
    root = _provision(tmp_path, h.entry)
    assert not list((root / "etc/systemd/system").rglob("*.mount"))


REVISIONS = {"lab/Qwen3-8B": ["1" * 40], "lab/Qwen3-8B-DFlash": ["2" * 40, "3" * 40, "4" * 40]}


def test_a_mirror_host_gets_the_index_its_wheels_and_unit(tmp_path, monkeypatch):
    installed = []
    monkeypatch.setattr(mirror, "install_pypiserver", lambda root, python: installed.append((root, python)))
    monkeypatch.setattr(mirror, "install_olah", lambda root, python: installed.append(("olah", python)))
    monkeypatch.setattr(hf, "install", lambda root, where: installed.append(("repos", where)) or REVISIONS)
    [h] = parse(tmp_path, {"name": "mirror-1", "role": "mirror"}).hosts
    root = _provision(tmp_path, h.entry)
    assert installed == [(root, "3.11"), ("olah", "3.11"), ("repos", "/srv/hf-mirrors")]
    served = sorted(p.name for p in (root / "srv/pypi").iterdir())
    assert served == sorted([b.filename for b in wheels.BUILDS] + ["lab_ddtree_plugin-1.0-py3-none-any.whl"]
                            + [w.name for w in mirror.cached_dependencies()])
    unit = (root / "etc/systemd/system/lab-pypi.service").read_text()
    assert ("ExecStart=/usr/bin/python3 -m pypiserver run --interface 0.0.0.0 --port 8080 --disable-fallback -v "
            "/srv/pypi") in unit and "Environment=PYTHONPATH=/opt/pypiserver" in unit
    assert (root / "etc/systemd/system/multi-user.target.wants/lab-pypi.service").is_symlink()
    host = json.loads((root / "etc/lab/host.json").read_text())
    assert (host["role"], host["group"], host["index"]["port"]) == ("mirror", None, 8080)
    assert not (root / "usr/bin/nvidia-smi").exists() and not (root / "usr/local/lib/sglang-double").exists()


def test_a_mirror_host_gets_olah_offline_on_its_repositories(tmp_path, monkeypatch):
    monkeypatch.setattr(mirror, "install_pypiserver", lambda root, python: None)
    monkeypatch.setattr(mirror, "install_olah", lambda root, python: None)
    monkeypatch.setattr(hf, "install", lambda root, where: REVISIONS)
    [h] = parse(tmp_path, {"name": "mirror-1", "role": "mirror"}).hosts
    root = _provision(tmp_path, h.entry)
    unit = (root / "etc/systemd/system/lab-olah.service").read_text()
    assert ("ExecStart=/usr/bin/python3 -m olah.server --config /etc/olah/olah.toml --log-path /var/lib/olah/logs"
            in unit and "Environment=PYTHONPATH=/opt/olah" in unit and "Environment=PYTHONUNBUFFERED=1" in unit)
    assert (root / "etc/systemd/system/multi-user.target.wants/lab-olah.service").is_symlink()
    assert (root / "var/lib/olah/repos").is_dir()
    config = tomllib.loads((root / "etc/olah/olah.toml").read_text())
    assert config == {"basic": {"host": "0.0.0.0", "port": 8090, "mirror-netloc": "10.209.0.12:8090",
                                "mirror-lfs-netloc": "10.209.0.12:8090", "repos-path": "/var/lib/olah/repos",
                                "mirrors-path": ["/srv/hf-mirrors"]},
                      "accessibility": {"offline": True}}
    host = json.loads((root / "etc/lab/host.json").read_text())
    assert host["hf"] == {"port": 8090, "dir": "/srv/hf-mirrors", "olah": "0.5.4", "repos": REVISIONS}


def _hub_spec(target_by_repo: bool):
    """pro6000's spec with its target (or else its DFlash draft) declared by Hugging Face repository."""
    data = load_group_data(ROOT / "group_data")["pro6000"]
    spec = provision.deep_merge(spec_data(data), {})  # a deep copy
    if target_by_repo:
        del spec["service"]["model_path"]
        spec["service"]["model"] = {"repo": "lab/Qwen3-8B", "revision": "1" * 40}
    else:
        del spec["speculative"]["draft_model_path"]
        spec["speculative"]["draft_model"] = {"repo": "lab/Qwen3-8B-DFlash", "revision": "2" * 40}
    return ClassSpec.model_validate(spec), data


@pytest.mark.parametrize("target_by_repo", [True, False])
def test_a_model_declared_by_repository_is_left_to_the_deploy(tmp_path, target_by_repo):
    spec, data = _hub_spec(target_by_repo)
    [h] = parse(tmp_path, PRO6000).hosts
    root = tmp_path / "root"
    provision.provision(root, h.entry, spec, data, "ssh-ed25519 AAAA lab", "10.209.0.12", "sglmir")
    written = sorted(str(p.parent.relative_to(root)) for p in root.rglob("config.json"))
    by_path = "root/models/Qwen3.6-27B-DFlash" if target_by_repo else "root/models/Qwen3.6-27B"
    assert written == [by_path]
    assert not (root / "opt/sglang-fleet/models").exists()
    if not target_by_repo:  # the draft's config still follows the target's (a Qwen3.6 one here)
        assert json.loads((root / "root/models/Qwen3.6-27B/config.json").read_text())["model_type"] == "qwen3_5"


def test_the_pypiserver_requirements_follow_the_hosts_python():
    assert mirror._requirements("3.11") == ["pypiserver==2.4.2", "importlib-resources>=6.5.2"]
    assert mirror._requirements("3.13") == ["pypiserver==2.4.2", "legacy-cgi>=2.6.4"]


def _state(tmp_path: Path) -> dict:
    lab = parse(tmp_path, {"name": "mirror-1", "role": "mirror"}, PRO6000,
                {"name": "gw-1", "group": GATEWAYS[0], "role": "gateway"})
    return {"lab_file": str(lab.path), "lab_name": lab.name, "subnet": str(lab.subnet),
            "hosts": [{"name": h.name, "ip": h.ip, "group": h.group, "entry": h.entry} for h in lab.hosts]}


def test_the_inventory_leaves_the_mirror_host_out(tmp_path, monkeypatch):
    monkeypatch.setattr(labmod, "STATE", tmp_path / ".lab")
    written = labmod.write_inventory(_state(tmp_path))
    assert written == tmp_path / ".lab" / "sglmir" / "inventory.py"  # the lab's own: another lab's runs beside it
    text = written.read_text()
    assert "('pro6000-1', {'ssh_hostname': '10.209.0.12'" in text and "('gw-1', {'ssh_hostname': '10.209.0.13'" in text
    assert "mirror" not in text and "10.209.0.11" not in text and "None = [" not in text


def test_index_url_is_the_mirror_hosts_and_only_a_mirror_hosts(tmp_path):
    lab = labmod._lab_from_state(_state(tmp_path))
    assert lab.index_url() == lab.index_url("mirror-1") == "http://10.209.0.11:8080/simple/"
    with pytest.raises(labmod.LabError, match=r"pro6000-1 is a gpu host of lab 'sglmir', not a mirror host: it "
                                              r"serves no package index \(mirror hosts: mirror-1\)"):
        lab.index_url("pro6000-1")
    with pytest.raises(labmod.LabError, match="mirror-2 is no host of lab 'sglmir', not a mirror host"):
        lab.index_url("mirror-2")


def test_hf_endpoint_and_revisions_are_the_mirror_hosts(tmp_path, monkeypatch):
    lab = labmod._lab_from_state(_state(tmp_path))
    assert lab.hf_endpoint() == lab.hf_endpoint("mirror-1") == "http://10.209.0.11:8090"
    with pytest.raises(labmod.LabError, match=r"pro6000-1 is a gpu host of lab 'sglmir', not a mirror host: it "
                                              r"serves no Hugging Face mirror \(mirror hosts: mirror-1\)"):
        lab.hf_endpoint("pro6000-1")
    monkeypatch.setattr(hf, "revisions", lambda: REVISIONS)
    assert lab.hf_revisions("lab/Qwen3-8B-DFlash") == ["2" * 40, "3" * 40, "4" * 40]
    with pytest.raises(labmod.LabError, match="has no repository 'lab/Nope'; it has lab/Qwen3-8B, lab/Qwen3-8B-DFlash"):
        lab.hf_revisions("lab/Nope")


def test_throttle_is_a_token_bucket_on_the_hosts_own_eth0(tmp_path, monkeypatch):
    st = _state(tmp_path)
    for i, h in enumerate(st["hosts"]):
        h["netns"] = f"sglmir-h{i}"
    ran = []
    monkeypatch.setattr(labmod, "_states", lambda: [st])
    monkeypatch.setattr(labmod, "run", lambda *argv, check=True: ran.append(argv) or subprocess.CompletedProcess(
        argv, 2 if "del" in argv else 0, "", "Error: Cannot delete qdisc with handle of zero."))
    lab = labmod._lab_from_state(st)
    lab.throttle("mirror-1", 40000)
    lab.throttle("mirror-1", None)  # none there: not an error
    assert ran == [("tc", "-n", "sglmir-h0", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", "40000kbit",
                    "burst", "100000", "latency", "200ms"),
                   ("tc", "-n", "sglmir-h0", "qdisc", "del", "dev", "eth0", "root")]
    for kbit in (0, 7, True, 1.5):
        with pytest.raises(labmod.LabError, match=f"kbit = {kbit!r}: allowed: an integer >= 8"):
            lab.throttle("mirror-1", kbit)
    with pytest.raises(labmod.LabError, match="no host 'mirror-2' in lab 'sglmir'"):
        lab.throttle("mirror-2", 100)


SPECULATION = {"step_ms": 5.0, "per_request": 0.2, "per_draft_token": 0.05, "per_draft_token_sq": 0.01,
               "acceptance": 0.9}


def _speculation_lab(tmp_path: Path, inline: str) -> Path:
    """A lab file with PRO6000 and `speculation = <inline>` (a TOML inline table or another value)."""
    path = lab_file(tmp_path, PRO6000)
    path.write_text(path.read_text() + f"speculation = {inline}\n")
    return path


def _inline(table: dict) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in table.items()) + " }"


def test_speculation_is_the_sglang_doubles_speed_model_in_host_json(tmp_path):
    table = dict(SPECULATION, step_ms=5)  # an integer is a number too
    [h] = labfile.parse(_speculation_lab(tmp_path, _inline(table)), GROUPS, GATEWAYS).hosts
    assert h.entry["speculation"] == SPECULATION and isinstance(h.entry["speculation"]["step_ms"], float)
    root = _provision(tmp_path, h.entry)
    assert json.loads((root / "etc/lab/host.json").read_text())["speculation"] == SPECULATION


def test_without_speculation_host_json_says_none(tmp_path):
    [h] = parse(tmp_path, PRO6000).hosts
    assert h.entry["speculation"] is None
    root = _provision(tmp_path, h.entry)
    assert json.loads((root / "etc/lab/host.json").read_text())["speculation"] is None


@pytest.mark.parametrize("inline, why", [
    ("5.0", "not a table"),
    (_inline({k: v for k, v in SPECULATION.items() if k != "acceptance"}), "missing key(s) ['acceptance']"),
    (_inline(dict(SPECULATION, per_token=1.0)), "unknown key(s) ['per_token']"),
    (_inline(dict(SPECULATION, step_ms="5")), "not a number: step_ms"),
    (_inline(dict(SPECULATION, per_request=True)), "not a number: per_request"),
    (_inline(dict(SPECULATION, step_ms=0)), "step_ms must be > 0"),
    (_inline(dict(SPECULATION, per_draft_token_sq=-0.01)), "per_draft_token_sq must be >= 0"),
    (_inline(dict(SPECULATION, acceptance=0)), "acceptance must be > 0 and <= 1"),
    (_inline(dict(SPECULATION, acceptance=1.5)), "acceptance must be > 0 and <= 1"),
])
def test_a_bad_speculation_is_refused_naming_host_and_key(tmp_path, inline, why):
    with pytest.raises(labfile.LabFileError) as e:
        labfile.parse(_speculation_lab(tmp_path, inline), GROUPS, GATEWAYS)
    [p] = e.value.problems
    assert "host 'pro6000-1': speculation = " in p and f": {why}; allowed: {labfile.SPECULATION_ALLOWED}" in p, p


def test_a_gateway_host_has_no_speculation(tmp_path):
    path = lab_file(tmp_path, {"name": "gw-1", "group": GATEWAYS[0], "role": "gateway"})
    path.write_text(path.read_text() + f"speculation = {_inline(SPECULATION)}\n")
    with pytest.raises(labfile.LabFileError) as e:
        labfile.parse(path, GROUPS, GATEWAYS)
    [p] = e.value.problems
    assert "host 'gw-1': speculation = " in p and "a GPU host's key; role = 'gateway'" in p


def test_the_gateway_lab_gives_its_replicas_the_speed_model():
    lab = labfile.parse(ROOT / "lab" / "gateway.toml", GROUPS, GATEWAYS)
    assert [h.entry["speculation"] for h in lab.hosts if h.entry["role"] == "gpu"] == [SPECULATION] * 3


DECLARED = {"/root/models/Qwen3.6-27B-DFlash-v2": {"/root/models/Qwen3.6-27B": 0.2, "*": 0.7},
            "/root/models/Qwen3.6-27B-DFlash": {"lab/Qwen3-8B": 0.9}}


def _declaring_lab(tmp_path: Path, inline: str) -> Path:
    path = lab_file(tmp_path, PRO6000)
    path.write_text(path.read_text() + f"draft_acceptance = {inline}\n")
    return path


def _nested(table: dict) -> str:
    return "{ " + ", ".join(f"{json.dumps(k)} = {_inline({json.dumps(t): a for t, a in v.items()})}"
                            for k, v in table.items()) + " }"


def test_a_draft_directory_declares_its_acceptance_in_its_config(tmp_path):
    """draft_acceptance: a draft the group's spec names gets the key in its config.json; another directory is
    one more draft of the group's (its config the same but for the key): a new drafter to deploy."""
    [h] = labfile.parse(_declaring_lab(tmp_path, _nested(DECLARED)), GROUPS, GATEWAYS).hosts
    assert h.entry["draft_acceptance"] == DECLARED
    root = _provision(tmp_path, h.entry)
    configs = {p: json.loads((root / p.lstrip("/") / "config.json").read_text()) for p in DECLARED}
    for path, targets in DECLARED.items():
        assert configs[path]["lab_acceptance"] == targets
    assert ({k: v for k, v in configs["/root/models/Qwen3.6-27B-DFlash-v2"].items() if k != "lab_acceptance"}
            == {k: v for k, v in configs["/root/models/Qwen3.6-27B-DFlash"].items() if k != "lab_acceptance"})
    assert configs["/root/models/Qwen3.6-27B-DFlash"]["architectures"] == ["DFlashDraftModel"]
    # what the SGLang double reads of it: the acceptance for the target it serves
    draft = configs["/root/models/Qwen3.6-27B-DFlash-v2"]
    assert wheels.DOUBLE_LAB.declared_acceptance(draft, "/d", "/root/models/Qwen3.6-27B") == 0.2
    assert wheels.DOUBLE_LAB.declared_acceptance(draft, "/d", "/root/models/Qwen3-8B") == 0.7


def test_without_draft_acceptance_no_draft_declares_one(tmp_path):
    [h] = parse(tmp_path, PRO6000).hosts
    root = _provision(tmp_path, h.entry)
    assert "lab_acceptance" not in json.loads((root / "root/models/Qwen3.6-27B-DFlash/config.json").read_text())


@pytest.mark.parametrize("inline, why", [
    ("0.2", "not a non-empty table"),
    ("{}", "not a non-empty table"),
    (_nested({"models/x": {"*": 0.2}}), "draft directory not absolute: ['models/x']"),
    (_nested({"/root/models/x": {"*": 0}}), "/root/models/x: acceptance must be a number > 0 and <= 1: ['* = 0']"),
    (_nested({"/root/models/x": {"Qwen3-8B": 0.2}}),
     "/root/models/x: not '*', an absolute path or a repository id ORG/NAME: ['Qwen3-8B']"),
])
def test_a_bad_draft_acceptance_is_refused_naming_host_key_and_draft(tmp_path, inline, why):
    with pytest.raises(labfile.LabFileError) as e:
        labfile.parse(_declaring_lab(tmp_path, inline), GROUPS, GATEWAYS)
    [p] = e.value.problems
    assert "host 'pro6000-1': draft_acceptance = " in p and f": {why}; allowed: {labfile.DRAFT_ACCEPTANCE_ALLOWED}" in p, p


REAL = {"name": "real-1", "group": "cpu_real", "gpu_model": "NVIDIA L4", "gpu_count": 1, "gpu_memory_mib": 23034}


def test_real_sglang_is_a_gpu_hosts_true_or_false(tmp_path):
    [p] = problems(tmp_path, {**REAL, "real_sglang": "yes"})
    assert p.endswith("host 'real-1': real_sglang = 'yes': not true or false; allowed: true (the real SGLang 0.5.23 "
                      "server on this machine's CPU, lab/realsglang.py) or false")
    [p] = problems(tmp_path, {"name": "gw-1", "group": "gateway", "role": "gateway", "real_sglang": True})
    assert "real_sglang = True: a GPU host's key" in p
    [h] = parse(tmp_path, REAL).hosts
    assert h.entry["real_sglang"] is False


def test_a_real_sglang_host_gets_the_tiny_model_and_no_double_at_its_launcher(tmp_path):
    """Its launcher is the bound venv's python (nothing written there), its model the tiny one; its twin without
    the key gets the double's wrapper at the same launcher and a stub model; both keep the nvidia-smi double."""
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen3"}\n')
    (model / "complete").write_text("recipe\n")
    specs, data = load_class_specs(ROOT / "group_data"), load_group_data(ROOT / "group_data")
    spec = specs["cpu_real"]
    for real in (True, False):
        [h] = parse(tmp_path, {**REAL, "real_sglang": real}).hosts
        root = tmp_path / f"root-{real}"
        provision.provision(root, h.entry, spec, data["cpu_real"], "ssh-ed25519 AAAA lab", "10.209.0.12", "sglmir",
                            model if real else None)
        target = root / spec.service.model_path.lstrip("/")
        launcher = root / spec.launcher.lstrip("/")
        assert (root / "usr/bin/nvidia-smi").is_file()
        assert json.loads((root / "etc/lab/host.json").read_text())["real_sglang"] is real
        if real:
            assert spec.launcher == realsglang.LAUNCHER and not launcher.exists()
            assert sorted(p.name for p in target.iterdir()) == ["config.json"]  # the model, not its cache's mark
            assert sorted(p.name for p in (root / "opt/sglang-real").iterdir()) == [
                "sglang-0.5.23", "sglang-0.5.23-serve"]  # the binds' mount points
        else:
            assert "sglang-double" in launcher.read_text() and (target / "model.safetensors.index.json").is_file()
    assert realsglang.binds() == [f"--bind-ro={d}:/opt/sglang-real/{d.name}" for d in realsglang.venv_dirs()]
