"""The sections of how a class is run: gpu_class, readiness, smoke, rolling, and tune (make tune)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints, field_validator, model_validator

from fleet.spec.text import PROMPT_MAX, Bool, Int, Kind, Number, Strict, Text, text


class GpuClass(Strict):
    """What a host of this class must have, as nvidia-smi reports it."""

    accepted_models: list[Text] = Field(
        min_length=1,
        description="Exact nvidia-smi `name` values this class accepts. No substring match: "
        "'NVIDIA RTX 6000 Ada Generation' is not an RTX PRO 6000.",
    )
    gpu_count: Int = Field(ge=1, le=16, description="GPUs the host must have (at least), 1..16.")
    min_memory_mib: Int = Field(ge=1, le=4_194_304,
                                description="Memory each GPU must have, in MiB (memory.total), 1..4194304 (4 TiB).")
    mig: Bool = Field(
        False,
        description="True if the class runs on MIG-partitioned GPUs. A host whose GPUs' MIG mode differs "
        "is refused: with MIG on, SGLang sees slices (or nothing), not whole GPUs.",
    )
    shared: Bool = Field(
        False,
        description="True if other GPU processes may run beside the service; "
        "False refuses a host whose GPUs are held by anything undeclared.",
    )

    @field_validator("accepted_models")
    @classmethod
    def _no_blank_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if name != name.strip() or not name:
                raise ValueError(f"model name {name!r} must be an exact nvidia-smi name (no padding)")
        return names


class Readiness(Strict):
    """How long and how often the rollout waits for the new service."""

    load_timeout_s: Number = Field(
        1200, ge=1, le=14400, description="Give up (and roll back) if /health is not 200 by then, 1..14400 s. "
        "Sized for a 27B model load from local NVMe plus CUDA graph capture."
    )
    poll_interval_s: Number = Field(
        0.5, ge=0.05, le=2, description="Seconds between polls of the unit and /health, 0.05..2, made on the host "
        "itself (one SSH command per change of state, not per poll); a crash is seen within one."
    )
    progress_every_s: Number = Field(15, ge=1, le=3600,
                                     description="Print elapsed time and state this often while waiting, 1..3600 s.")
    workload_release_timeout_s: Number = Field(
        120, ge=1, le=3600, description="How long stopped workloads get to release GPU memory, 1..3600 s."
    )
    command_timeout_s: Number = Field(
        30, ge=1, le=600, description="How long one command reading the host (nvidia-smi, the engine's "
        "import) may run, 1..600 s: a GPU fallen off the bus makes nvidia-smi hang for good. Past it the host is "
        "refused, naming the command; the other hosts go on.",
    )
    link_timeout_s: Number = Field(
        60, ge=4, le=3600, description="How long a host may answer nothing (a link that drops silently: a "
        "switch, a VPN) before the rollout gives it up, 4..3600 s. While its rollout runs the deploy renews its "
        "lock's lease every quarter of this and gives the host up after half of it without an answer: its row "
        "says LOST, nothing more runs on it (no rollback over a dead link), it keeps its pending-rollout record, "
        "and its class stops as after any failure. A lease not renewed for this long (by the host's clock) is "
        "stale: the next run, from any machine, takes the lock over and finishes or rolls back that rollout. SSH "
        "keepalives go every quarter of it, and the controller's kernel drops a connection whose data stays "
        "unacknowledged this long (Linux), for make status and make verify too (a host of no class, the "
        "gateway: this default).",
    )


class Smoke(Strict):
    """The readiness gate's last step, after /health 200: a real chat completion that must return tokens
    and, for a speculative service, show that speculation ran (its meta_info's spec_verify_ct > 0, else
    sglang:spec_verify_calls_total grew): /health alone stays 200 through a hung scheduler."""

    prompt: text(PROMPT_MAX) = Field(
        "Say hello in one short sentence.", min_length=1,
        description=f"The user message, 1..{PROMPT_MAX} characters (any Unicode but control characters): "
        "the request travels JSON-escaped in one shell argument on the host.")
    max_tokens: Int = Field(16, ge=1, le=512, description="The reply's max_tokens, 1..512.")
    timeout_s: Number = Field(120, ge=1, le=3600, description="How long the request may take, 1..3600 s; "
                              "past it (a generation that hangs) the host is not ready and rolls back.")


Percent = Annotated[str, StringConstraints(pattern=r"^(100|[1-9][0-9]?)%$"), Kind("percentage")]  # pydantic's regex: $ ends the text


class Rolling(Strict):
    """How the hosts of a class restart: its first host in inventory order (the canary) alone, then
    at most max_unavailable at a time, each only after the one before passed its gate and smoke
    test; the first failure stops the class, and the hosts whose turn had not come stay as they are."""

    max_unavailable: Annotated[int, Field(strict=True, ge=1, le=1024)] | Percent = Field(
        1, description="Hosts restarting at once after the canary: a count, 1..1024, or a percentage of the "
        "class's hosts in the inventory ('25%': rounded down, at least 1).")

    def at_once(self, hosts: int) -> int:
        """How many hosts of a class of `hosts` may restart at once after the canary."""
        if isinstance(self.max_unavailable, int):
            return self.max_unavailable
        return max(1, hosts * int(self.max_unavailable.rstrip("%")) // 100)


# --- tune: what `make tune` measures (ops/tune.py); never part of a deployed service ------------

TUNE_BLOCK_SIZES = (4, 8, 12, 16)  # tune.block_sizes' default, cut at the declared block size
BlockSize = Annotated[int, Field(strict=True, ge=1, le=16)]
TreeBudget = Annotated[int, Field(strict=True, ge=1, le=1024)]
Concurrency = Annotated[int, Field(strict=True, ge=1, le=1024)]


def _said(v: str) -> str:
    if not v.strip():
        raise ValueError("a prompt with something to answer, not empty or only blanks (it measures nothing)")
    return v


Prompt = Annotated[Text, AfterValidator(_said)]


def _distinct_sorted(v: list | None) -> list | None:
    if v is not None and len(set(v)) != len(v):
        raise ValueError("each value once")
    return None if v is None else sorted(v)


class Tune(Strict):
    """`make tune`: the candidates swept on one host of the class, the fixed workload each is measured
    with, and the objective that picks the winner. Read by the tune only: a change here changes no host."""

    block_sizes: Annotated[list[BlockSize], Field(min_length=1, max_length=16), AfterValidator(_distinct_sorted)] | None = Field(
        None, description="The block sizes tried (DFLASH, DDTREE), 1..16 each; unset: 4, 8, 12, 16 up to the "
        "declared speculative.block_size (the operator's bound), and that one.")
    tree_budgets: Annotated[list[TreeBudget], Field(min_length=1, max_length=16), AfterValidator(_distinct_sorted)] | None = Field(
        None, description="DDTREE: the tree budgets tried with each block size, 1..1024; unset: half the declared "
        "one, it and twice it (within 1..1024).")
    concurrency: Annotated[list[Concurrency], Field(min_length=1, max_length=8), AfterValidator(_distinct_sorted)] = Field(
        [1, 8, 32], description="The concurrencies each candidate is measured at (streams in flight at once).")
    rounds: Int = Field(4, ge=1, le=100, description="Requests per concurrency: concurrency x rounds, at least "
                        "min_requests; 1..100.")
    min_requests: Int = Field(8, ge=1, le=10000, description="The fewest requests one concurrency is measured "
                              "with, 1..10000.")
    max_tokens: Int = Field(256, ge=1, le=8192, description="max_tokens of every request, 1..8192 (all run to it: "
                            "the figures compare like with like).")
    prompts: Annotated[list[Prompt], Field(min_length=1, max_length=256)] | None = Field(
        None, description="The prompts, sent in turn; unset: the shipped set (fleet/tune/search.py PROMPTS: prose, code, "
        "reasoning, chat; accept lengths differ by kind).")
    level_timeout_s: Number = Field(600, ge=1, le=7200, description="The most one concurrency's requests may take, "
                                    "1..7200 s; past it the rest count as failed.")
    objective_concurrency: Concurrency | None = Field(
        None, description="The overall winner is the candidate with the most output tokens/s at this concurrency "
        "(one of tune.concurrency); unset: the highest.")
    p99_latency_s: Number | None = Field(None, ge=0.001, le=3600, description="A latency bound, 0.001..3600 s: a "
                                         "candidate whose p99 request latency at the objective concurrency is above "
                                         "it cannot win.")

    @model_validator(mode="after")
    def _objective_measured(self) -> Tune:
        if self.objective_concurrency is not None and self.objective_concurrency not in self.concurrency:
            raise ValueError(f"objective_concurrency {self.objective_concurrency} is not one of concurrency "
                             f"{self.concurrency}")
        return self

    @property
    def objective(self) -> int:
        return self.objective_concurrency or max(self.concurrency)

    def requests(self, concurrency: int) -> int:
        return max(concurrency * self.rounds, self.min_requests)


# --- canary: the analysis of a class's first host before the rest follows -------------------------

class Canary(Strict):
    """The canary analysis: after the canary's smoke test, and before any other host of its class takes its
    turn, the canary serves a short measured load straight from its host (fleet/tune/measure.py: make tune's
    routine), out of its gateway where one routes the class. Its output tokens/s and accept length are held
    against the class's baseline: the make tune record (tuning/<class>.json) for the new spec's block size
    (and tree budget) at this concurrency, else the same load measured on the canary just before its turn
    (the old spec still serving, also out of its gateway). Below either fraction of the baseline the canary
    rolls back and the class stops. A spec without speculation is judged by tokens/s alone; the accept length
    of a speculative one comes from SGLang's /metrics counters (service.enable_metrics; without it, tokens/s
    alone). A class of one host, a rollout that takes over a host left mid-change, and make tune's runs have
    no canary to judge. Read by the deploy only: a change here changes no host. The defaults take seconds on
    a GPU (16 requests of 128 tokens, 4 at a time)."""

    analysis: Bool = Field(True, description="Judge the canary by a measured load before the rest of the class "
                           "follows; false: the smoke test alone.")
    requests: Int = Field(16, ge=1, le=1024, description="Requests of the load, 1..1024.")
    concurrency: Concurrency = Field(4, description="Requests in flight at once, 1..1024: the concurrency a make "
                                     "tune record is read at.")
    max_tokens: Int = Field(128, ge=1, le=8192, description="max_tokens of every request, 1..8192.")
    min_accept_length: Annotated[float, Field(strict=False, gt=0, le=1)] = Field(
        0.8, description="The fraction of the baseline's accept length below which the canary fails, (0, 1].")
    min_tokens_per_s: Annotated[float, Field(strict=False, gt=0, le=1)] = Field(
        0.7, description="The fraction of the baseline's output tokens/s below which the canary fails, (0, 1]: "
        "lower than the accept length's, tokens/s moving with whatever else the host does.")
    timeout_s: Number = Field(120, ge=1, le=3600, description="The most the load may take, 1..3600 s; a "
                              "request not done by then counts as failed (and a failed request fails the canary).")
