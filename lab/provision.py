"""What a lab host holds before it boots (docs/ARCHITECTURE.md, "Lab host contract").

Everything is written into the host's merged overlay root (so it lands in its upper dir).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

from fleet.core import layout
from fleet.spec.load import spec_data
from fleet.rollout.render import JOURNAL_FILTER_SYSTEMD, server_argv
from fleet.rollout.commands import desired_files, service_files
from fleet.spec.secrets import resolve
from fleet.spec import ClassSpec, DDTree, DFlash, EagleFamily
from lab import hf, mirror, realsglang, wheels
from lab.base import IMAGES

DOUBLES = Path(__file__).resolve().parent / "doubles"
SGLANG_DOUBLE_DIR = "/usr/local/lib/sglang-double"
WORKLOAD_MEMORY_SHARE = 0.9
ENGINES_DIR = layout.ENGINES_DIR  # where the deploy installs each declared engine's venv
MODELS_DIR = layout.MODELS_DIR  # where the deploy fetches models declared by Hugging Face repository (hub.models_dir's default)

LAUNCHER = """#!/bin/sh
# lab double of the SGLang environment's interpreter: the SGLang double's package
# (/usr/local/lib/sglang-double/sglang) on the path, then the system python.
PYTHONPATH={pkg}${{PYTHONPATH:+:$PYTHONPATH}}
export PYTHONPATH
exec /usr/bin/python3 "$@"
"""

WORKLOAD_UNIT = """[Unit]
Description=lab training job {name} (holds GPU memory, like the real one)
After=network.target

[Service]
ExecStart=/usr/local/bin/lab-gpu-job --name {name} --memory-mib {mib} --gpus all
Restart=no

[Install]
WantedBy=multi-user.target
"""

# A training job in a scope of its own, as a container runtime runs one (docker-<id>.scope): the
# oneshot starts it with systemd-run --scope and ends once the scope runs, leaving it outside its
# own cgroup; `systemctl start lab-scope-NAME` starts it again (a give-back command, as `docker start`).
SCOPE_START = """#!/bin/sh
# lab: lab-gpu-job NAME in the transient scope NAME.scope; returns once the scope runs
name=$1 mib=$2
systemd-run --scope --collect --unit="$name" --description="lab training job $name (a scope, like a container)" \\
    /usr/local/bin/lab-gpu-job --name "$name" --memory-mib "$mib" --gpus all </dev/null >/dev/null 2>&1 &
i=0
until systemctl is-active --quiet "$name.scope"; do
    i=$((i + 1)); [ $i -le 100 ] || exit 1; sleep 0.1
done
"""

SCOPE_UNIT = """[Unit]
Description=lab: starts the training job {name} in the scope {name}.scope (as a container runtime does)
After=network.target

[Service]
Type=oneshot
ExecStart=/usr/local/bin/lab-scope-start {name} {mib}

[Install]
WantedBy=multi-user.target
"""

# A bare process: the oneshot's KillMode=process leaves the job running in its cgroup when it ends, a
# process no unit runs (as one started by hand in tmux or with nohup).
PROCESS_UNIT = """[Unit]
Description=lab: leaves the training job {name} running as a bare process
After=network.target

[Service]
Type=oneshot
KillMode=process
ExecStart=/bin/sh -c 'setsid /usr/local/bin/lab-gpu-job --name {name} --memory-mib {mib} --gpus all </dev/null >/dev/null 2>&1 &'

[Install]
WantedBy=multi-user.target
"""


# engines_disk_kib, models_disk_kib: the engines' or the models' directory on a disk of its own, small
# enough for a test to fill
DISK_MOUNT = """[Unit]
Description=lab: {kib} KiB disk for {what} (the lab entry's {key})

[Mount]
What=tmpfs
Where={path}
Type=tmpfs
Options=size={kib}k,mode=0755

[Install]
WantedBy=local-fs.target
"""


def mount_unit_name(path: str) -> str:
    """The .mount unit of `path`, named as `systemd-escape --path --suffix=mount` names it: '/' between
    components is '-'; a byte outside [A-Za-z0-9:_.], and a leading '.', is \\xNN."""
    text = "/".join(part for part in path.split("/") if part)
    out = []
    for i, byte in enumerate(text.encode()):
        c = chr(byte)
        if c == "/":
            out.append("-")
        elif (c.isascii() and c.isalnum()) or c in ":_" or (c == "." and i > 0):
            out.append(c)
        else:
            out.append(f"\\x{byte:02x}")
    return ("".join(out) or "-") + ".mount"


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def preinstalled_spec(group_data: dict[str, Any], overrides: dict[str, Any]) -> ClassSpec:
    """The host group's spec data with the lab's overrides laid over it, validated.

    A `speculative` override that names a different algorithm replaces the table whole
    (fields of the group's algorithm would not fit the old one)."""
    base = spec_data(group_data)
    over = dict(overrides)
    spec_over = over.get("speculative")
    if isinstance(spec_over, dict) and spec_over.get("algorithm") not in (
        None, (base.get("speculative") or {}).get("algorithm")
    ):
        base = {**base, "speculative": {}}
    return ClassSpec.model_validate(deep_merge(base, over))


# --- files -------------------------------------------------------------------------------

def _inside(root: Path, path: str) -> Path:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


def write(root: Path, path: str, text: str | bytes, mode: int = 0o644) -> None:
    p = _inside(root, path)
    if p.is_symlink() or p.exists():
        p.unlink()
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    os.chmod(p, mode)


def enable(root: Path, unit: str, target: str = "multi-user.target") -> None:
    link = _inside(root, f"/etc/systemd/system/{target}.wants/{unit}")
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(f"/etc/systemd/system/{unit}")


def copy_tree(src: Path, root: Path, dest: str) -> None:
    d = _inside(root, dest)
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(src, d, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "tests"))
    for dirpath, dirnames, filenames in os.walk(d):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            p = Path(dirpath) / f
            os.chmod(p, 0o755 if os.access(src / p.relative_to(d), os.X_OK) else 0o644)


# --- model directories -------------------------------------------------------------------

def _target_config(path: str) -> dict[str, Any]:
    name = Path(path).name.lower()
    if "qwen3.6" in name or "qwen3.5" in name:
        # Qwen3.6-27B: Qwen3.5 hybrid decoder (Gated DeltaNet x3 + gated attention) x16, MTP trained.
        text = {
            "model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 5120,
            "intermediate_size": 17408, "num_hidden_layers": 64, "num_attention_heads": 24,
            "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 262144,
            "rope_theta": 10000000, "full_attention_interval": 4, "mtp_num_hidden_layers": 1,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        }
        return {
            "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
            "vocab_size": 248320, "hidden_size": 5120, "num_hidden_layers": 64,
            "num_attention_heads": 24, "num_key_value_heads": 4, "max_position_embeddings": 262144,
            "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16", "text_config": text,
            "transformers_version": "4.57.0",
        }
    # Qwen3 dense (Qwen3-8B shape).
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
        "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "max_position_embeddings": 40960, "rope_theta": 1000000, "tie_word_embeddings": False,
        "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    }


def _draft_config(kind: str, target: dict[str, Any], vocab_size: int | None) -> dict[str, Any]:
    vocab = vocab_size or target["vocab_size"]
    layers = target["num_hidden_layers"]
    if kind == "dflash":
        n = 5
        ids = [1 + round(i * (layers - 3) / (n - 1)) for i in range(n)]
        return {
            "architectures": ["DFlashDraftModel"], "model_type": target["model_type"],
            "vocab_size": vocab, "hidden_size": target["hidden_size"], "num_hidden_layers": n,
            "num_attention_heads": target["num_attention_heads"],
            "num_key_value_heads": target["num_key_value_heads"],
            "block_size": 16, "num_target_layers": layers,
            "dflash_config": {"mask_token_id": vocab - 1 if vocab_size else target["vocab_size"] - 1,
                              "target_layer_ids": ids},
            "torch_dtype": "bfloat16",
        }
    # EAGLE3-style draft head: a Llama layer, so its heads must divide the hidden size (128-wide heads)
    return {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "vocab_size": vocab,
        "draft_vocab_size": 32000, "hidden_size": target["hidden_size"], "num_hidden_layers": 1,
        "num_attention_heads": target["hidden_size"] // 128,
        "num_key_value_heads": 8, "target_model_type": target["model_type"],
        "torch_dtype": "bfloat16",
    }


def _safetensors_stub() -> bytes:
    header = json.dumps({"__metadata__": {"format": "pt", "lab": "stub: no weights"}}).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header


SUDO_UID = 1000


def add_sudo_user(root: Path, user: str, pubkey: str) -> None:
    """A login user with passwordless sudo, as cloud images have (ubuntu, ec2-user...): the deploy
    logs in as them and becomes root with sudo."""
    home = f"/home/{user}"
    for path, line in (("/etc/passwd", f"{user}:x:{SUDO_UID}:{SUDO_UID}::{home}:/bin/bash"),
                       ("/etc/shadow", f"{user}:*:20000:0:99999:7:::"),  # no password; keys only
                       ("/etc/group", f"{user}:x:{SUDO_UID}:")):
        p = _inside(root, path)
        p.write_text(p.read_text() + line + "\n")
    write(root, f"/etc/sudoers.d/{user}", f"{user} ALL=(ALL) NOPASSWD:ALL\n", 0o440)
    write(root, f"{home}/.ssh/authorized_keys", pubkey.strip() + "\n", 0o600)
    for path in (home, f"{home}/.ssh", f"{home}/.ssh/authorized_keys"):
        os.chown(_inside(root, path), SUDO_UID, SUDO_UID)
    os.chmod(_inside(root, f"{home}/.ssh"), 0o700)


def write_dist_info(root: Path, version: str) -> None:
    """The double's installed-package record, as pip leaves one (METADATA, RECORD): what
    identifies an installed SGLang, and what the deploy's engine cache is keyed by."""
    site = _inside(root, SGLANG_DOUBLE_DIR)
    for old in site.glob("sglang-*.dist-info"):
        shutil.rmtree(old)
    info = site / f"sglang-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    lines = []
    for f in sorted((site / "sglang").rglob("*")):
        if f.is_file():
            digest = base64.urlsafe_b64encode(hashlib.sha256(f.read_bytes()).digest()).rstrip(b"=").decode()
            lines.append(f"{f.relative_to(site)},sha256={digest},{f.stat().st_size}")
    lines += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(lines) + "\n")


def write_model(root: Path, path: str, config: dict[str, Any]) -> None:
    write(root, f"{path}/config.json", json.dumps(config, indent=2) + "\n")
    write(root, f"{path}/generation_config.json", json.dumps({"do_sample": True, "temperature": 0.6}) + "\n")
    shard = "model-00001-of-00001.safetensors"
    write(root, f"{path}/{shard}", _safetensors_stub())
    write(root, f"{path}/model.safetensors.index.json",
          json.dumps({"metadata": {"total_size": 0}, "weight_map": {"lm_head.weight": shard}}) + "\n")
    if config.get("architectures", [""])[0] not in ("DFlashDraftModel", "LlamaForCausalLMEagle3"):
        write(root, f"{path}/tokenizer_config.json", json.dumps({"model_max_length": 131072}) + "\n")


def models_of(spec: ClassSpec) -> list[tuple[str | None, str, str | None, str]]:
    """(target path, draft kind, draft path, the target's name) of the models the lab writes: those the spec
    names by path. One it declares by Hugging Face repository (service.model, speculative.draft_model) is
    None: the deploy fetches that one (from a mirror host's olah, lab/hf.py)."""
    s, hub_target = spec.service, getattr(spec.service, "model", None)
    target = s.model_path if hub_target is None else None
    draft, kind = None, "dflash" if isinstance(spec.speculative, (DFlash, DDTree)) else "eagle"
    if isinstance(spec.speculative, (DFlash, DDTree, EagleFamily)) and getattr(spec.speculative, "draft_model", None) is None:
        draft = spec.speculative.draft_model_path
    return [(target, kind, draft, target or hub_target.repo)]


# --- the host ----------------------------------------------------------------------------

def provision(root: Path, entry: dict[str, Any], group_spec: ClassSpec | None, group_data: dict[str, Any] | None,
              pubkey: str, ip: str, lab_name: str, real_model: Path | None = None) -> list[str]:
    """Write one host's files into its (mounted) root. Returns warnings.

    real_model: the tiny model a `real_sglang` host serves (lab/realsglang.py's ensure()).
    A gateway host (no class: group_spec and group_data None) gets only what every host needs;
    its smg comes with the deploy. A mirror host (no class either) gets the lab's package index."""
    name = entry["name"]
    write(root, "/etc/hostname", name + "\n")
    write(root, "/etc/hosts", f"127.0.0.1\tlocalhost\n127.0.1.1\t{name}\n{ip}\t{name}.{lab_name} {name}\n"
          "::1\tlocalhost ip6-localhost ip6-loopback\n")
    (root / "root/.ssh").mkdir(parents=True, exist_ok=True)
    os.chmod(root / "root/.ssh", 0o700)
    write(root, "/root/.ssh/authorized_keys", pubkey.strip() + "\n", 0o600)
    if entry["ssh_user"] != "root":
        add_sudo_user(root, entry["ssh_user"], pubkey)
    warnings, extra = [], {}
    if entry["role"] == "gpu":
        warnings, extra = _provision_gpu(root, entry, group_spec, group_data, real_model)
    elif entry["role"] == "mirror":
        extra = _provision_mirror(root, entry, ip)
    elif entry["role"] == "monitoring":
        extra = _provision_monitoring(root)
    if entry["role"] in APT_ROLES:
        _lab_apt(root)
    for program in entry.get("missing_programs", []):  # a minimal install: removed from the base image's view
        for d in PATH_DIRS:
            (root / d.lstrip("/") / program).unlink(missing_ok=True)
    host_json = {"name": name, "group": entry.get("group"), "role": entry["role"], **extra,
                 "ssh_user": entry["ssh_user"], "ip": ip, "lab": lab_name}
    write(root, "/etc/lab/host.json", json.dumps(host_json, indent=2) + "\n")
    return warnings


LAB_DEBS = "/srv/lab-debs"  # a monitoring or gateway host's apt repository: tools/debs.sh's directory, read-only
APT_ROLES = ("monitoring", "gateway")  # hosts the deploy installs Debian's packages on (Prometheus; keepalived)
WEBHOOK_PORT = 9099
WEBHOOK_LOG = "/var/lib/lab-webhook/received.jsonl"
WEBHOOK_UNIT = f"""[Unit]
Description=LAB stand-in for an alert receiver (lab/doubles/lab-webhook)
After=network.target

[Service]
StateDirectory=lab-webhook
ExecStart=/usr/local/bin/lab-webhook --port {WEBHOOK_PORT} --out {WEBHOOK_LOG}
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""


def debs_dir() -> Path:
    """Debian's packages of the hosts without a GPU and their dependencies, downloaded once (tools/debs.sh)."""
    script = Path(__file__).resolve().parents[1] / "tools/debs.sh"
    return Path(subprocess.run(["bash", str(script)], check=True, capture_output=True, text=True,
                               timeout=900).stdout.strip().splitlines()[-1])


def _lab_apt(root: Path) -> None:
    """The lab's Debian repository as the host's only apt source: the host reaches no other."""
    write(root, "/etc/apt/sources.list", f"deb [trusted=yes] file:{LAB_DEBS} ./\n")
    for f in _inside(root, "/etc/apt/sources.list.d").glob("*"):
        f.unlink()


def _provision_monitoring(root: Path) -> dict[str, Any]:
    """The webhook receiver Alertmanager is pointed at. Prometheus and Alertmanager come with the deploy."""
    write(root, "/usr/local/bin/lab-webhook", (DOUBLES / "lab-webhook").read_bytes(), 0o755)
    write(root, "/etc/systemd/system/lab-webhook.service", WEBHOOK_UNIT)
    enable(root, "lab-webhook.service")
    return {"webhook": {"port": WEBHOOK_PORT, "log": WEBHOOK_LOG}}


def _provision_mirror(root: Path, entry: dict[str, Any], ip: str) -> dict[str, Any]:
    """pypiserver (from the controller's cache, for the host's Python), the SGLang double's wheels
    in its directory, and its unit, enabled; olah, the lab's Hugging Face repositories (lab/hf.py), its
    config and unit, enabled. Returns its part of host.json."""
    python = IMAGES[entry["debian"]].python
    mirror.install_pypiserver(root, python)
    built = wheels.build_wheels(root / mirror.INDEX_DIR.lstrip("/"))
    for dependency in mirror.cached_dependencies():
        shutil.copy(dependency, root / mirror.INDEX_DIR.lstrip("/") / dependency.name)
    write(root, f"/etc/systemd/system/{mirror.UNIT}", mirror.UNIT_TEXT)
    enable(root, mirror.UNIT)
    mirror.install_olah(root, python)
    revisions = hf.install(root, mirror.HF_MIRRORS_DIR)
    write(root, mirror.OLAH_CONFIG, mirror.olah_config(ip))
    _inside(root, f"{mirror.OLAH_STATE_DIR}/repos").mkdir(parents=True, exist_ok=True)
    write(root, f"/etc/systemd/system/{mirror.HF_UNIT}", mirror.HF_UNIT_TEXT)
    enable(root, mirror.HF_UNIT)
    return {"index": {"port": mirror.INDEX_PORT, "dir": mirror.INDEX_DIR, "pypiserver": mirror.PYPISERVER_VERSION,
                      "wheels": [w.name for w in built]},
            "hf": {"port": mirror.HF_PORT, "dir": mirror.HF_MIRRORS_DIR, "olah": mirror.OLAH_VERSION,
                   "repos": revisions}}


PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def _provision_gpu(root: Path, entry: dict[str, Any], group_spec: ClassSpec, group_data: dict[str, Any],
                   real_model: Path | None) -> tuple[list[str], dict[str, Any]]:
    """A GPU host's doubles, workloads, models and preinstalled service. Returns (warnings, its
    part of host.json). A `real_sglang` host: the real server's venvs (bound at boot) at its class's
    launcher and the tiny model at its model path instead of the SGLang double and stub models."""
    warnings: list[str] = []
    name = entry["name"]
    pre_spec = None
    if entry.get("preinstalled") is not None:
        pre_spec = preinstalled_spec(group_data, entry["preinstalled"])

    # doubles
    smi = DOUBLES / "nvidia-smi"
    if entry["nvidia_smi"] != "missing":
        if smi.is_file():
            write(root, "/usr/bin/nvidia-smi", smi.read_bytes(), 0o755)
        else:
            warnings.append(f"{name}: lab/doubles/nvidia-smi not there yet; host has no nvidia-smi")
    pkg = DOUBLES / "sglang"
    if pkg.is_dir():
        copy_tree(pkg, root, f"{SGLANG_DOUBLE_DIR}/sglang")
        write_dist_info(root, entry["sglang_version"])
    else:
        warnings.append(f"{name}: lab/doubles/sglang/ not there yet; the launcher has no sglang to run")
    # a hand-made environment's launcher (a declared engine's venv is the deploy's to install); the real server's is
    # its bound venv's
    launchers = {s.launcher for s in (group_spec, pre_spec) if s is not None and s.engine is None}
    if entry["real_sglang"]:
        realsglang.install(root, group_spec.service.model_path, real_model)
        launchers.discard(realsglang.LAUNCHER)
    for launcher in sorted(launchers):
        write(root, launcher, LAUNCHER.format(pkg=SGLANG_DOUBLE_DIR), 0o755)
    job = DOUBLES / "lab-gpu-job"
    if job.is_file():
        write(root, "/usr/local/bin/lab-gpu-job", job.read_bytes(), 0o755)
    elif entry["workloads"] or entry["scope_workloads"] or entry["process_workloads"]:
        warnings.append(f"{name}: lab/doubles/lab-gpu-job not there yet; workload units will fail")

    # workloads: services, jobs in scopes, bare processes
    mib = int(entry["gpu_memory_mib"] * WORKLOAD_MEMORY_SHARE)
    for w in entry["workloads"]:
        write(root, f"/etc/systemd/system/{w}.service", WORKLOAD_UNIT.format(name=w, mib=mib))
        enable(root, f"{w}.service")
    if entry["scope_workloads"]:
        write(root, "/usr/local/bin/lab-scope-start", SCOPE_START, 0o755)
    for unit, text, names in (("lab-scope-{}.service", SCOPE_UNIT, entry["scope_workloads"]),
                              ("lab-proc-{}.service", PROCESS_UNIT, entry["process_workloads"])):
        for w in names:
            write(root, f"/etc/systemd/system/{unit.format(w)}", text.format(name=w, mib=mib))
            enable(root, unit.format(w))

    for key, path, what in (("engines_disk_kib", ENGINES_DIR, "the SGLang engines"),
                            ("models_disk_kib", MODELS_DIR, "the models fetched from Hugging Face")):
        if entry.get(key) is not None:
            unit = mount_unit_name(path)
            write(root, f"/etc/systemd/system/{unit}", DISK_MOUNT.format(kib=entry[key], path=path, what=what, key=key))
            enable(root, unit, "local-fs.target")

    # models; a draft directory of draft_acceptance is one more draft of the group's, declaring its acceptance
    missing = set(p.rstrip("/") for p in entry["missing_models"])
    declared = entry.get("draft_acceptance") or {}
    drafts: dict[str, dict[str, Any]] = {}
    for spec in [group_spec] + ([pre_spec] if pre_spec else []):
        for target, kind, draft, name in models_of(spec):
            tconf = _target_config(name)
            real_model_there = entry["real_sglang"] and target == group_spec.service.model_path
            if target and target not in missing and not real_model_there:
                write_model(root, target, tconf)
            config = _draft_config(kind, tconf, entry.get("draft_vocab_size"))
            if draft:
                drafts[draft] = config
            for path in declared:
                drafts.setdefault(path, config)
    for path, config in drafts.items():
        if path not in missing:
            acceptance = declared.get(path)
            write_model(root, path, {**config, **({wheels.DOUBLE_LAB.DRAFT_ACCEPTANCE_KEY: acceptance} if acceptance else {})})

    # the preinstalled (old) service, enabled so it serves at boot
    preinstalled_argv = None
    if pre_spec is not None:
        # its secrets from lab-up's environment; the journal filter where the host's systemd has it, as a deploy renders
        journal_filter = IMAGES[entry["debian"]].systemd >= JOURNAL_FILTER_SYSTEMD
        files = desired_files(pre_spec, entry["group"], resolve(pre_spec, f"host {name}: preinstalled"), journal_filter)
        for f in files:
            if f.path in service_files(pre_spec) and f.content is not None:
                write(root, f.path, f.content, int(f.mode, 8))
        enable(root, f"{pre_spec.service.unit}.service")
        preinstalled_argv = server_argv(pre_spec)[3:]

    return warnings, {
        "gpu_model": entry["gpu_model"],
        "gpu_count": entry["gpu_count"],
        "gpu_memory_mib": entry["gpu_memory_mib"],
        "driver_version": entry["driver_version"],
        "nvidia_smi": entry["nvidia_smi"],
        "mig": entry["mig"],
        "sglang_version": entry["sglang_version"],
        "sglang_algorithms": list(entry["sglang_algorithms"]),
        "load": entry["load"],
        "load_seconds": float(entry["load_seconds"]),
        "preinstalled_argv": preinstalled_argv,
        "decode_tokens_per_s": float(entry["decode_tokens_per_s"]),
        "speculation": entry.get("speculation"),  # the SGLang double's speed model, or None: the fixed rate
        "reasoning_model": entry["reasoning_model"],
        "real_sglang": entry["real_sglang"],  # the real server at the class's launcher, not the SGLang double
        "engine_import_seconds": float(entry["engine_import_seconds"]),
        "engines_disk_kib": entry.get("engines_disk_kib"),
        "models_disk_kib": entry.get("models_disk_kib"),
        # beyond the contract: the rest of the lab entry, resolved
        "workloads": list(entry["workloads"]),
        "scope_workloads": list(entry["scope_workloads"]),
        "process_workloads": list(entry["process_workloads"]),
        "missing_models": list(entry["missing_models"]),
        "draft_vocab_size": entry.get("draft_vocab_size"),
        "preinstalled": entry.get("preinstalled"),
    }
