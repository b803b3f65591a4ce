"""Preflight guards: a host's facts and its class's spec in, violations out. No I/O here.

Every check names what the spec expects and what the host has, in nvidia-smi's,
SGLang's or systemd's own words, so an operator can act without rerunning anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.weights.hub import to_fetch
from fleet.engine.parse import Engine, EngineStatus
from fleet.rollout.gpus import GpuList, GpuProcess, GpuProcessList, NvidiaSmiStatus
from fleet.rollout.parse import HostFacts, UnitState
from fleet.weights.parse import ModelDir, ModelStatus
from fleet.core.wire import NO_ANSWER
from fleet.rollout.pending import read_pending
from fleet.rollout.plan import workload_of
from fleet.rollout.prerequisites import Program, missing, replica_programs
from fleet.rollout.render import MODULE, server_argv
from fleet.spec import ClassSpec, DDTree, DFlash, EagleFamily, HeldWorkload, ScopeWorkload

DFLASH_ARCHITECTURE = "DFlashDraftModel"


@dataclass(frozen=True)
class Violation:
    host: str
    check: str
    expected: str
    found: str

    def __str__(self) -> str:
        return f"{self.host}: {self.check}: expected {self.expected}, found {self.found}"


def gpu_violations(host: str, spec: ClassSpec, gpus: GpuList) -> list[Violation]:
    want = spec.gpu_class
    models = " or ".join(want.accepted_models)
    if gpus.status is NvidiaSmiStatus.MISSING:
        return [Violation(host, "nvidia-smi", "nvidia-smi installed", f"none ({gpus.message})")]
    if gpus.status is NvidiaSmiStatus.HUNG:
        return [Violation(host, "nvidia-smi", f"an answer within readiness.command_timeout_s = "
                          f"{spec.readiness.command_timeout_s:g}s", "none: `nvidia-smi --query-gpu` hung and was "
                          "killed (a GPU fallen off the bus does that; see dmesg for Xid errors)")]
    if gpus.status is not NvidiaSmiStatus.OK:
        return [Violation(host, "nvidia-smi", "nvidia-smi to list the GPUs", gpus.message)]
    if not gpus.gpus:
        return [Violation(host, "GPU count", f"{want.gpu_count} x {models}", "no GPU (nvidia-smi lists none)")]
    found = []
    if any(g.name not in want.accepted_models for g in gpus.gpus):  # exact names: an RTX 6000 Ada is no RTX PRO 6000
        found.append(
            Violation(host, "GPU model", models, ", ".join(f"GPU {g.index}: {g.name}" for g in gpus.gpus))
        )
    mig = [g for g in gpus.gpus if (g.mig == "Enabled") != want.mig]
    if mig:
        expected = "MIG enabled (gpu_class.mig is true)" if want.mig else "MIG disabled (gpu_class.mig is false)"
        found.append(Violation(host, "MIG mode", expected, ", ".join(f"GPU {g.index}: MIG {g.mig}" for g in mig)))
    if len(gpus.gpus) < want.gpu_count:
        found.append(Violation(host, "GPU count", f"at least {want.gpu_count} GPUs", str(len(gpus.gpus))))
    small = [g for g in gpus.gpus if g.memory_mib is None or g.memory_mib < want.min_memory_mib]
    if small:
        found.append(
            Violation(
                host,
                "GPU memory",
                f"at least {want.min_memory_mib} MiB per GPU",
                ", ".join(f"GPU {g.index}: {_mib(g.memory_mib)}" for g in small),
            )
        )
    return found


def rendered_flags(spec: ClassSpec) -> list[str]:
    """The flags the deploy would pass the server, in order, once each (`--x=1` counts as `--x`)."""
    tokens = server_argv(spec)[1 + len(MODULE) :]  # after the launcher and -m sglang.launch_server
    return list(dict.fromkeys(t.split("=", 1)[0] for t in tokens if t.startswith("--")))


def engine_violations(host: str, spec: ClassSpec, engine: Engine) -> list[Violation]:
    launcher = spec.launcher
    if engine.status is EngineStatus.NO_LAUNCHER and spec.engine is not None:
        return []  # the deploy installs it, and checks it then (tasks/engine.py), before anything stops
    if engine.status is EngineStatus.NO_LAUNCHER:
        return [Violation(host, "SGLang engine", f"an SGLang environment at {launcher}", "no executable there")]
    if engine.status is not EngineStatus.OK:
        return [Violation(host, "SGLang engine", f"sglang to load with {launcher}", engine.message)]
    found = []
    algorithm = spec.speculative.algorithm
    if algorithm != "none" and algorithm not in engine.algorithms:
        offers = ", ".join(engine.algorithms) or "no speculative algorithm"
        what = f"SGLang {engine.version} at {launcher}, which offers {offers}"
        if algorithm == "DDTREE" and "DFLASH" in engine.algorithms:
            # Never serve linear DFlash in DDTree's name: the operator must choose it.
            what += (
                "; this engine only does linear DFlash, not DDTree: to serve that, "
                "the spec must say `algorithm: DFLASH`"
            )
        found.append(Violation(host, "speculative algorithm", f"an engine with {algorithm}", what))
    unknown = [f for f in rendered_flags(spec) if f not in engine.flags]
    if unknown:
        found.append(
            Violation(host, "SGLang flags", f"flags SGLang {engine.version} knows", "unknown " + ", ".join(unknown))
        )
    return found


def _readable(
    host: str, role: str, path: str, models: dict[str, ModelDir]
) -> tuple[ModelDir | None, list[Violation]]:
    """The model if its config.json was read, else why not."""
    model = models.get(path)
    if model is None:
        return None, [Violation(host, role, f"{path} inspected", NO_ANSWER)]
    if model.status is not ModelStatus.OK:
        detail = f"{model.status}: {model.message}" if model.message else model.status
        return None, [Violation(host, role, f"a model directory with a readable config.json at {path}", detail)]
    return model, []


def trained_block_size(draft: ModelDir) -> int | None:
    """The block size a DFlash draft was trained for, where SGLang looks: dflash_config, then top level."""
    nested = (draft.dflash_config or {}).get("block_size")
    return nested if isinstance(nested, int) and not isinstance(nested, bool) else draft.block_size


def model_violations(host: str, spec: ClassSpec, models: dict[str, ModelDir]) -> list[Violation]:
    s = spec.speculative
    target_path, draft_path = spec.target_path, spec.draft_path
    target, found = _readable(host, "target model", target_path, models)
    draft, problems = _readable(host, "draft model", draft_path, models) if draft_path else (None, [])
    found += problems

    if draft is not None and isinstance(s, (DFlash, DDTree)):
        has_block_size = draft.dflash_config is not None or draft.block_size is not None
        if DFLASH_ARCHITECTURE not in draft.architectures or not has_block_size:
            found.append(
                Violation(
                    host,
                    "draft model",
                    f"a DFlash draft at {draft_path} ({DFLASH_ARCHITECTURE}, with dflash_config or block_size)",
                    f"architectures {list(draft.architectures)}"
                    + ("" if has_block_size else ", neither dflash_config nor block_size"),
                )
            )
        trained = trained_block_size(draft)
        if trained is not None and s.block_size > trained:
            found.append(
                Violation(
                    host,
                    "draft block size",
                    f"block_size at most {trained} (what {draft_path} was trained for)",
                    str(s.block_size),
                )
            )
    if target is not None and draft is not None and None not in (target.vocab_size, draft.vocab_size):
        if target.vocab_size != draft.vocab_size:
            found.append(
                Violation(
                    host,
                    "draft vocabulary",
                    f"vocab_size {target.vocab_size} (the target's)",
                    f"{draft.vocab_size} in {draft_path}",
                )
            )
    # EAGLE3 and STANDALONE always have a draft (the spec demands it); EAGLE and NEXTN may use the target's MTP layers.
    if isinstance(s, EagleFamily) and not draft_path and target is not None and not target.mtp_layers:
        found.append(
            Violation(
                host,
                "draft model",
                f"a draft_model_path, or a target with built-in draft (MTP) layers for {s.algorithm}",
                f"no draft_model_path, and {target_path}/config.json has no num_nextn_predict_layers "
                "nor mtp_num_hidden_layers",
            )
        )
    return found


def preflight_model_violations(host: str, spec: ClassSpec, models: dict[str, ModelDir]) -> list[Violation]:
    """model_violations, but where a declared revision is still to fetch (fleet.weights.hub.to_fetch): the
    fetch checks them all once it is done, before anything stops; a directory placed by hand must be
    readable already."""
    if not to_fetch(spec, models):
        return model_violations(host, spec, models)
    roles = {spec.target_path: "target model", spec.draft_path: "draft model"}
    return [v for path in spec.model_paths if path not in spec.hub_models
            for v in _readable(host, roles[path], path, models)[1]]


def _mib(value: int | None) -> str:
    return f"{value} MiB" if value is not None else "memory unknown"


def _describe(p: GpuProcess) -> str:
    return f"pid {p.pid} {p.name} ({_mib(p.used_memory_mib)} on {p.gpu_uuid}) in {p.unit or 'no systemd unit'}"


def describe_workload(w: str | HeldWorkload) -> str:
    """A workload as a message names it, with what its processes are known by."""
    if isinstance(w, str):
        return w
    if isinstance(w, ScopeWorkload):
        return f"{w.name} (scopes {w.scope})"
    by = f"name {w.process_name!r}" if w.process_name is not None else f"command line {w.command_line!r}"
    return f"{w.name} (processes of {by})"


def busy_gpus(host: str, spec: ClassSpec, processes: GpuProcessList, workloads: bool = True) -> list[Violation]:
    """GPU processes that are neither the service's own nor, with `workloads`, a declared workload's
    (preflight: those are stopped next; after their stop, none may be left). A shared class allows any."""
    if spec.gpu_class.shared:
        return []
    if processes.status is not NvidiaSmiStatus.OK:
        return [Violation(host, "GPU processes", "nvidia-smi to list the GPU processes", processes.message)]
    own = spec.service_unit
    allowed = [describe_workload(w) for w in spec.workloads] if workloads else []
    expected = f"GPUs free of processes outside {own}" + (f" and {', '.join(allowed)}" if allowed else "")
    return [Violation(host, "GPUs busy", expected, _describe(p)) for p in processes.processes
            if p.unit != own and not (workloads and workload_of(spec, p))]


def unit_violations(host: str, spec: ClassSpec, units: dict[str, UnitState]) -> list[Violation]:
    """The service's and the workloads' states must be readable: the rollout acts on them."""
    found = []
    for name in spec.watched_units:
        unit = units.get(name)
        if unit is None or unit.message:
            found.append(Violation(host, "systemd unit", f"the state of {name}", unit.message if unit else NO_ANSWER))
    return found


# Drop-in settings that would make the service run something other than the declared spec.
OVERRIDING_KEYS = ("ExecStart", "Environment", "EnvironmentFile", "UnsetEnvironment", "PassEnvironment")


def _dropin_settings(text: str) -> dict[str, str]:
    """A drop-in's settings (the last of a repeated key), comments left out."""
    return {k.strip(): v.strip() for k, _, v in (line.partition("=") for line in text.splitlines())
            if _ and not k.lstrip().startswith(("#", ";"))}


def drain_warnings(host: str, spec: ClassSpec, facts: HostFacts) -> list[str]:
    """A drop-in that changes KillMode: with anything but mixed, a stop sends SIGTERM to SGLang's
    schedulers too, and they die at once with the requests in flight (the drain breaks). Not a
    refusal: the service still runs what group_data declares."""
    return [f"{host}: {path} sets KillMode={kill_mode}: every stop of {spec.service_unit} cuts the requests in "
            "flight (SGLang's schedulers die with the server); the unit's KillMode=mixed lets SGLang drain them"
            for path, text in sorted(facts.runtime.dropins.items())
            if (kill_mode := _dropin_settings(text).get("KillMode", "mixed")) != "mixed"]


def drift_violations(host: str, spec: ClassSpec, facts: HostFacts) -> list[Violation]:
    """Local changes a deploy must not paper over: drop-ins that replace what the spec
    declares, a masked unit, a pending-rollout record nobody can read."""
    found = []
    for path, text in sorted(facts.runtime.dropins.items()):
        keys = sorted(set(_dropin_settings(text)) & set(OVERRIDING_KEYS))
        if keys:
            found.append(Violation(
                host, "drop-in", f"no local override of {spec.service_unit}'s {' or '.join(OVERRIDING_KEYS[:2])}",
                f"{path} sets {', '.join(keys)} (move it into group_data, or remove it)",
            ))
    unit = facts.units.get(spec.service_unit)
    if unit is not None and unit.unit_file_state.startswith("masked"):
        found.append(Violation(host, "systemd unit", f"{spec.service_unit} not masked",
                               f"masked (someone wants it off: `systemctl unmask {spec.service_unit}` to deploy)"))
    for problem in facts.deployed.unreadable:
        found.append(Violation(host, "managed files", "each managed file's mode, owner and sha1", problem))
    if facts.deployed.pending is not None:
        try:
            read_pending(facts.deployed.pending, spec)
        except ValueError as e:
            found.append(Violation(host, "pending rollout", f"a readable record at {spec.pending_file}",
                                   f"{e}: inspect it, then remove it"))
    return found


def program_violations(host: str, programs: list[Program], found: dict[str, bool]) -> list[Violation]:
    return [Violation(host, f"host program {p.name}", f"{p.describe()} installed", said)
            for p, said in missing(programs, found)]


def preflight(host: str, spec: ClassSpec, facts: HostFacts) -> list[Violation]:
    """Every read-only check before anything on the host is touched."""
    return [
        *program_violations(host, replica_programs(spec), facts.programs),
        *gpu_violations(host, spec, facts.gpus),
        *engine_violations(host, spec, facts.engine),
        *preflight_model_violations(host, spec, facts.models),
        # the declared workloads are stopped next; a failed nvidia-smi is reported once, above
        *(busy_gpus(host, spec, facts.gpu_processes) if facts.gpus.status is NvidiaSmiStatus.OK else []),
        *unit_violations(host, spec, facts.units),
        *drift_violations(host, spec, facts),
    ]
