"""ClassSpec: the sections of one GPU class together, their cross-checks, and the paths on a host."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from fleet.core import layout
from fleet.spec.combinations import refused
from fleet.spec.engine import EngineSpec
from fleet.spec.hub import HubModel, HubSpec
from fleet.spec.names import UNIT_RULE
from fleet.spec.operations import Canary, GpuClass, Readiness, Rolling, Smoke, Tune
from fleet.spec.service import DEFAULT_LAUNCHER, Service
from fleet.spec.speculative import NoSpeculation, Speculative
from fleet.spec.text import Strict
from fleet.spec.workloads import GLOB_RULE, HeldWorkload, Workload, workload_name


class ClassSpec(Strict):
    """Everything declared for one GPU class (one group_data file over all.py)."""

    gpu_class: GpuClass = Field(description="Which GPUs a host of this class must have (preflight refuses others).")
    service: Service = Field(description="The SGLang server unit.")
    speculative: Speculative = Field(
        default_factory=lambda: NoSpeculation(algorithm="none"),
        description="Discriminated on `algorithm`: none, EAGLE/EAGLE3/NEXTN/STANDALONE, NGRAM, DFLASH, DDTREE.",
    )
    workloads: list[Workload] = Field(
        default_factory=list,
        description="What else holds the GPUs (the training): stopped in the host's turn, just before its restart, "
        "until none of its processes holds GPU memory (readiness.workload_release_timeout_s), and given back if "
        "the host rolls back. Each one is a service, a scope or processes. A service is its unit name (e.g. "
        "'dflash-train'; a name without `.service` gets it; " + UNIT_RULE + ", `@` only as in name@instance): "
        "stopped and disabled, given back enabled and started as it was. A scope (a container, a Slurm step) is a "
        "table `{'name': 'trainer', 'scope': 'docker-*.scope', 'give_back': ...}`: stopped with `systemctl stop`; "
        "processes are `{'name': 'torchrun', 'command_line': '*torchrun*', 'give_back': False}` or match "
        "`process_name` (nvidia-smi's) instead: sent SIGTERM, SIGKILL after `kill_after_s` (default 30, 1..600). "
        "`name`: how the summary calls it (letters, digits, - and _); patterns: " + GLOB_RULE + "; the command line "
        "is /proc's, its arguments joined by spaces. `give_back`, required: `False` (not given back: the summary "
        "says `<name> was not restarted (declared so)`) or the command that starts it again, an argv list from an "
        "absolute path (`['/usr/bin/docker', 'start', 'trainer']`), run as root only after this run stopped it, "
        "each element quoted, no shell, bounded by readiness.workload_release_timeout_s (ScopeWorkload and "
        "ProcessWorkload in fleet/spec/workloads.py say all). A GPU process is the first workload's that matches it, "
        "services first; the service's own are never a workload's, nor one nvidia-smi lists without a pid ([N/A] "
        "where it runs in a container): it keeps its host refused as GPUs busy.",
    )
    readiness: Readiness = Field(default_factory=Readiness, description="The rollout's wait for /health.")
    smoke: Smoke = Field(default_factory=Smoke, description="The chat completion that ends the readiness gate.")
    rolling: Rolling = Field(default_factory=Rolling, description="How many of its hosts restart at once, after the "
                             "canary.")
    engine: EngineSpec | None = Field(None, description="The SGLang to install and run (its venv is the launcher); "
                                      "unset: a hand-made environment at service.launcher.")
    hub: HubSpec = Field(default_factory=HubSpec, description="Where models declared by repository (service.model, "
                         "speculative.draft_model) are fetched from and kept.")
    tune: Tune = Field(default_factory=Tune, description="What make tune sweeps and how it picks.")
    canary: Canary = Field(default_factory=Canary, description="How the canary is judged before the rest of its class "
                           "follows: a measured load against the class's baseline.")

    @field_validator("workloads")
    @classmethod
    def _each_once(cls, workloads: list) -> list:
        names = [workload_name(w) for w in workloads]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"each workload once; found {', '.join(twice)} more than once")
        return workloads

    @model_validator(mode="after")
    def _cross_checks(self) -> ClassSpec:
        if self.gpu_class.gpu_count % self.service.tp_size:
            raise ValueError(
                f"service.tp_size {self.service.tp_size} does not divide gpu_class.gpu_count "
                f"{self.gpu_class.gpu_count}"
            )
        if self.engine is not None and self.service.launcher is not None:
            raise ValueError("engine and service.launcher are exclusive: the deploy installs the declared engine and "
                             "runs its venv; remove service.launcher, or engine to run a hand-made environment")
        if self.service_unit in self.service_workloads:
            raise ValueError(f"workloads lists the service's own unit {self.service_unit}")
        known_bad = refused(self.speculative, self.service, self.engine)
        if known_bad:
            raise ValueError("; ".join(known_bad))
        return self

    @property
    def service_unit(self) -> str:
        """The systemd unit's full name, e.g. sglang.service."""
        return f"{self.service.unit}.service"

    @property
    def launcher(self) -> str:
        """The interpreter the unit runs: the declared engine's venv, else service.launcher."""
        if self.engine is not None:
            return layout.engine_launcher(self.engine.name)
        return self.service.launcher or DEFAULT_LAUNCHER

    @property
    def service_workloads(self) -> list[str]:
        """The workloads that are services: their units."""
        return [w for w in self.workloads if isinstance(w, str)]

    @property
    def held_workloads(self) -> list[HeldWorkload]:
        """The workloads that are scopes or processes, known by what holds the GPUs."""
        return [w for w in self.workloads if not isinstance(w, str)]

    def workload(self, name: str) -> str | HeldWorkload:
        """The declared workload of that name (KeyError if none)."""
        return {workload_name(w): w for w in self.workloads}[name]

    @property
    def watched_units(self) -> list[str]:
        """The service's unit and the service workloads', whose states preflight reads."""
        return [self.service_unit, *self.service_workloads]

    @property
    def target_path(self) -> str:
        """The target's directory on the host: service.model_path, or its revision's."""
        return self.service.model_path or self.hub.revision_dir(self.service.model)

    @property
    def draft_path(self) -> str | None:
        """The draft's directory on the host, if the algorithm has one."""
        s = self.speculative
        model = getattr(s, "draft_model", None)
        return getattr(s, "draft_model_path", None) or (self.hub.revision_dir(model) if model else None)

    @property
    def model_paths(self) -> list[str]:
        """Target first, then the draft if the algorithm has one."""
        return [self.target_path] + ([self.draft_path] if self.draft_path else [])

    @property
    def by_repository(self) -> list[HubModel]:
        """The models declared by repository (target, then draft), resolved or not."""
        return [m for m in (self.service.model, getattr(self.speculative, "draft_model", None)) if m is not None]

    @property
    def branches(self) -> list[HubModel]:
        """The models declared by branch alone, not yet resolved to a commit."""
        return [m for m in self.by_repository if m.revision is None]

    def with_commits(self, commits: dict[tuple[str, str], str]) -> ClassSpec:
        """This spec with each model declared by branch at its commit ((repo, branch) -> commit)."""
        def pinned(m: HubModel | None) -> HubModel | None:
            if m is None or m.revision is not None:
                return m
            return m.model_copy(update={"revision": commits[(m.repo, m.branch)]})
        service = self.service.model_copy(update={"model": pinned(self.service.model)})
        if not hasattr(self.speculative, "draft_model"):
            return self.model_copy(update={"service": service})
        draft = self.speculative.model_copy(update={"draft_model": pinned(self.speculative.draft_model)})
        return self.model_copy(update={"service": service, "speculative": draft})

    @property
    def hub_models(self) -> dict[str, HubModel]:
        """The models declared by repository: their directory on the host -> the model."""
        models = {self.target_path: self.service.model, self.draft_path: getattr(self.speculative, "draft_model", None)}
        return {path: m for path, m in models.items() if m is not None}

    # Where the service's files and the deploy's state live on a host (fleet/core/layout.py)
    @property
    def unit_file(self) -> str:
        return layout.unit_file(self.service.unit)

    @property
    def env_file(self) -> str:
        return layout.env_file(self.service.unit)

    @property
    def secret_file(self) -> str:
        """The 0600 environment file of service.secret_environment."""
        return layout.secret_file(self.service.unit)

    @property
    def config_file(self) -> str:
        """The 0600 YAML the server reads its secret arguments from (--config)."""
        return layout.config_file(self.service.unit)

    @property
    def auth_header_file(self) -> str:
        """The 0600 `Authorization:` header requests made on the host send (curl -H @file)."""
        return layout.auth_header_file(self.service.unit)

    @property
    def state_dir(self) -> str:
        return layout.state_dir(self.service.unit)

    @property
    def backups_dir(self) -> str:
        return layout.backups_dir(self.service.unit)

    @property
    def deployed_spec_file(self) -> str:
        return layout.deployed_spec_file(self.service.unit)

    @property
    def pending_file(self) -> str:
        return layout.pending_file(self.service.unit)

    @property
    def tune_file(self) -> str:
        return layout.tune_file(self.service.unit)

    @property
    def records_file(self) -> str:
        return layout.records_file(self.service.unit)

    @property
    def lock_file(self) -> str:
        return layout.lock_file(self.service.unit)

    def give_back_log(self, workload: str) -> str:
        """Where a workload's give-back command's output goes (kept: a child it leaves may write on)."""
        return layout.give_back_log(self.service.unit, workload)

# The top-level names a group_data file may define (pyinfra merges them per host).
SPEC_KEYS = tuple(ClassSpec.model_fields)
