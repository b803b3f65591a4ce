"""All preflight facts in one SSH round trip: the individual facts' commands, one section each."""

from __future__ import annotations

from pyinfra.api import FactBase

from facts.deploy import DeployedFiles
from facts.gpu import GpuInventory, GpuProcesses
from facts.models import ModelDirs
from facts.programs import HostPrograms
from facts.service import RunningService
from facts.sglang import SglangEngine
from facts.systemd import SystemdVersion, UnitStates
from fleet.core import layout
from fleet.rollout import commands as rollout
from fleet.rollout.prerequisites import replica_programs
from fleet.rollout.gate import base_url
from fleet.rollout.parse import HostFacts
from fleet.core.wire import mark, sections
from fleet.spec import ClassSpec

# HostFacts field -> the fact that fills it (its section of the output).
SECTIONS = {
    "gpus": GpuInventory,
    "gpu_processes": GpuProcesses,
    "engine": SglangEngine,
    "models": ModelDirs,
    "units": UnitStates,
    "deployed": DeployedFiles,
    "runtime": RunningService,
    "systemd_version": SystemdVersion,
    "programs": HostPrograms,
}


def snapshot_args(spec: ClassSpec) -> dict:
    """HostSnapshot's arguments for a host that is to run `spec`."""
    return {
        "engine": [spec.launcher, spec.service.environment, layout.ENGINE_CACHE_DIR],
        "models": [spec.model_paths, list(spec.hub_models)],
        "units": [spec.watched_units],
        "deployed": [rollout.watched_files(spec), rollout.managed_dirs(spec), [spec.unit_file, spec.env_file],
                     spec.lock_file, spec.pending_file, spec.tune_file],
        "runtime": [spec.service_unit, f"{base_url(spec)}/health"],
        "programs": [p.name for p in replica_programs(spec)],
        "timeout_s": spec.readiness.command_timeout_s,
    }


class HostSnapshot(FactBase[HostFacts]):
    def command(self, engine: list, models: list, units: list, deployed: list, runtime: list, programs: list,
                timeout_s: float = 0) -> str:
        """Each argument: the arguments of that section's fact command; timeout_s bounds the
        commands that can hang (nvidia-smi, the engine's import)."""
        launcher, *engine_rest = engine
        args = {"gpus": [timeout_s], "gpu_processes": [timeout_s], "engine": [launcher, timeout_s, *engine_rest],
                "models": models, "units": units, "deployed": deployed, "runtime": runtime,
                "programs": [programs]}
        return "; ".join(
            f"{mark('section', name)}; {fact().command(*args.get(name, ()))}" for name, fact in SECTIONS.items()
        )

    def process(self, output: list[str]) -> HostFacts:
        # A section the host never printed parses as "no answer", never as a pass.
        lines = sections(output)
        return HostFacts(**{name: fact().process(lines.get(name, [])) for name, fact in SECTIONS.items()})
