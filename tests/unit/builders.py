"""HostFacts and specs built by hand, for the tests of guards and plans (no hosts)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fleet.rollout.lock import LockFacts
from fleet.rollout.parse import DeployState, FileState, HostFacts, ServiceRuntime, UnitState
from fleet.engine.parse import Engine, parse_algorithms, parse_flags
from fleet.rollout.gpus import Gpu, GpuList, GpuProcess, GpuProcessList
from fleet.weights.parse import ModelDir
from fleet.rollout.plan import masked_argv
from fleet.rollout.prerequisites import replica_programs
from fleet.rollout.render import server_argv
from fleet.rollout.commands import DIR_MODE, OWNER, ManagedFile, desired_files, managed_dirs, sha1
from fleet.spec.secrets import Secrets
from fleet.spec import ClassSpec

HELP_0523 = (Path(__file__).resolve().parents[1] / "fixtures/sglang-0.5.23-help.txt").read_text()
SGLANG_0523 = Engine("ok", "0.5.23", parse_algorithms(HELP_0523), parse_flags(HELP_0523))
# An engine with upstream PR 29907 (DDTree) merged: 0.5.23 plus the algorithm and its flag.
SGLANG_DDTREE = replace(
    SGLANG_0523,
    version="0.6.0",
    algorithms=SGLANG_0523.algorithms + ("DDTREE",),
    flags=SGLANG_0523.flags | {"--speculative-ddtree-budget"},
)

PRO = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
TARGET, DRAFT = "/root/models/Qwen3.6-27B", "/root/models/Qwen3.6-27B-DFlash"
LAUNCHER = "/opt/sglang/bin/python"
NO_DRIVER = (
    "exit 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def make_spec(speculative=None, workloads=("dflash-train.service",), service=None, **gpu_class) -> ClassSpec:
    return ClassSpec.model_validate(
        {
            "gpu_class": {"accepted_models": [PRO], "gpu_count": 1, "min_memory_mib": 95000, **gpu_class},
            "service": {"model_path": TARGET, "served_model_name": "qwen3.6-27b", "launcher": LAUNCHER,
                        **(service or {})},
            "speculative": speculative or {"algorithm": "DFLASH", "draft_model_path": DRAFT, "block_size": 16},
            "workloads": list(workloads),
        }
    )


SPEC = make_spec()
KEYED = {"api_key": {"env": "SGLANG_API_KEY_TEST"}}  # service fields of a class with an API key


def secrets_of(spec: ClassSpec, key: str = "sk-Fleet0123456789abcdef") -> Secrets:
    """Values for every secret the spec declares, as preflight would have read them."""
    return Secrets({flag: key for flag in spec.service.server_secrets},
                   {name: f"value-of-{name}" for name in spec.service.secret_environment})


def wanted(spec: ClassSpec, group: str = "pro6000", secrets: Secrets | None = None,
           systemd_version: int = 252) -> list[ManagedFile]:
    return desired_files(spec, group, secrets or secrets_of(spec), journal_filter=systemd_version >= 253)


def gpu(index=0, name=PRO, memory=97887) -> Gpu:
    return Gpu(index, name, f"GPU-{index}", memory, "580.159.03", f"00000000:{0x18 + index:02X}:00.0", "Disabled")


def target(**fields) -> ModelDir:
    return ModelDir(TARGET, "ok", architectures=("Qwen3_5ForConditionalGeneration",), model_type="qwen3_5",
                    vocab_size=248320, hidden_size=5120, num_hidden_layers=64, **fields)


def draft(path=DRAFT, **fields) -> ModelDir:
    base = dict(architectures=("DFlashDraftModel",), model_type="qwen3", vocab_size=248320, hidden_size=5120,
                num_hidden_layers=5, block_size=16, dflash_config={"mask_token_id": 248077})
    return ModelDir(path, "ok", **{**base, **fields})


def process(pid, unit, memory=30512, name="python") -> GpuProcess:
    return GpuProcess(pid, name, memory, "GPU-0", unit)


def unit(name, **fields) -> UnitState:
    return UnitState(name, **{"id": name, "load_state": "loaded", **fields})


def good_facts(**changes) -> HostFacts:
    facts = HostFacts(
        gpus=GpuList("ok", (gpu(),)),
        gpu_processes=GpuProcessList("ok", (process(4242, "dflash-train.service"), process(77, "sglang.service"))),
        engine=SGLANG_0523,
        models={TARGET: target(), DRAFT: draft()},
        units={"sglang.service": unit("sglang.service", active_state="active"),
               "dflash-train.service": unit("dflash-train.service", active_state="active")},
        deployed=DeployState({}, {}, {}, LockFacts(), None),
        runtime=ServiceRuntime(None, {}, 200),
        systemd_version=252,  # Debian 12's
        programs={p.name: True for p in replica_programs(SPEC)} | {"python3": True, "/usr/bin/python3": True},
    )
    return replace(facts, **changes)


def converged(spec: ClassSpec = SPEC, group: str = "pro6000", secrets: Secrets | None = None, **changes) -> HostFacts:
    """A host that runs exactly what `spec` declares: files, modes, dirs, unit, process, /health 200."""
    files = {f.path: (FileState(f.mode, OWNER, sha1(f.content)) if f.content is not None else None)
             for f in wanted(spec, group, secrets)}
    dirs = {d: FileState(DIR_MODE, OWNER) for d in managed_dirs(spec)}
    units = {spec.service_unit: unit(spec.service_unit, active_state="active", sub_state="running",
                                     unit_file_state="enabled", main_pid=4242, need_daemon_reload="no")}
    units.update({w: unit(w, active_state="inactive", sub_state="dead", unit_file_state="disabled")
                  for w in spec.workloads})
    argv = ["/usr/bin/python3", *masked_argv(server_argv(spec))]
    facts = replace(
        good_facts(units=units),
        gpu_processes=GpuProcessList("ok", (process(4242, spec.service_unit),)),
        deployed=DeployState(files, dirs, {}, LockFacts(), None),
        runtime=ServiceRuntime(tuple(argv), {}, 200),
    )
    return replace(facts, **changes)
