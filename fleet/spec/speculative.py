"""The speculative section: one model per algorithm, discriminated on `algorithm`."""

from __future__ import annotations

import typing
from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field, model_validator

from fleet.spec.hub import DRAFT_MODEL, HubModel, _one_of
from fleet.spec.text import AbsPath, Int, Strict

# SGLang 0.5.23's built-in speculative algorithms (its --help lists them); DDTREE is
# not among them: it is upstream PR 29907, provisional, and needs an engine that has it.
SGLANG_0523_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")


class NoSpeculation(Strict):
    """Plain decoding."""

    algorithm: Literal["none"]


class EagleFamily(Strict):
    """EAGLE, EAGLE3, NEXTN (alias of EAGLE) and STANDALONE draft-model speculation."""

    algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE"]
    draft_model_path: AbsPath | None = Field(
        None,
        description="Draft model directory (or draft_model). Required for EAGLE3 and STANDALONE: without it SGLang "
        "loads the target as its own draft and crashes later (sglang issue 36528). EAGLE/NEXTN "
        "may omit it only if the target has built-in draft (MTP) layers; preflight checks.",
    )
    draft_model: HubModel | None = Field(None, description=DRAFT_MODEL)
    num_steps: Int | None = Field(None, ge=1, le=64, description="--speculative-num-steps, 1..64.")
    topk: Int | None = Field(None, ge=1, le=64, description="--speculative-eagle-topk, 1..64.")
    num_draft_tokens: Int | None = Field(None, ge=1, le=256, description="--speculative-num-draft-tokens, 1..256.")

    @model_validator(mode="after")
    def _sglang_rules(self) -> EagleFamily:
        if self.draft_model_path is not None and self.draft_model is not None:
            _one_of(self.draft_model_path, self.draft_model, "draft_model_path", "draft_model")
        if self.algorithm in ("EAGLE3", "STANDALONE") and not self.draft_model_path and not self.draft_model:
            raise ValueError(
                f"{self.algorithm} needs draft_model_path: without it SGLang loads the target "
                "as its own draft (sglang issue 36528)"
            )
        if self.num_steps is None and (self.topk is not None or self.num_draft_tokens is not None):
            raise ValueError("topk and num_draft_tokens need num_steps (SGLang refuses them alone)")
        if self.num_steps is not None and self.topk is None:
            raise ValueError("num_steps needs topk too (SGLang 0.5.23 crashes at start without it)")
        if self.topk == 1 and self.num_steps is not None and self.num_draft_tokens is not None:
            if self.num_draft_tokens != self.num_steps + 1:
                raise ValueError("with topk 1, num_draft_tokens must be num_steps + 1")
        return self


class Ngram(Strict):
    """N-gram lookup speculation (no draft model)."""

    algorithm: Literal["NGRAM"]
    num_draft_tokens: Int | None = Field(None, ge=1, le=256, description="Draft tokens, 1..256; SGLang's default is 12.")
    max_bfs_breadth: Int | None = Field(
        None, ge=1, le=64, description="--speculative-ngram-max-bfs-breadth: widest level of the n-gram tree, 1..64."
    )


class DFlash(Strict):
    """Linear DFlash (block diffusion draft, z-lab/dflash): SGLang 0.5.23's DFLASH."""

    algorithm: Literal["DFLASH"]
    draft_model_path: AbsPath | None = Field(None, description="DFlash draft directory (SGLang requires a draft): "
                                             "exactly one of draft_model_path and draft_model.")
    draft_model: HubModel | None = Field(None, description=DRAFT_MODEL)
    block_size: Int = Field(16, ge=1, le=16, description="--speculative-dflash-block-size, 1..16.")

    @model_validator(mode="after")
    def _one_draft(self) -> DFlash:
        _one_of(self.draft_model_path, self.draft_model, "draft_model_path", "draft_model")
        return self


class DDTree(Strict):
    """DDTree: DFlash draft tree verified in one target pass. PROVISIONAL: rendered as
    sglang PR 29907 proposes; SGLang 0.5.23 has no DDTree: the spec refuses it with an engine
    pinned to 0.5.23 (fleet/spec/combinations.py), preflight on any engine without it.
    It is never served as linear DFLASH."""

    algorithm: Literal["DDTREE"]
    draft_model_path: AbsPath | None = Field(None, description="DFlash draft directory the tree is built from: "
                                             "exactly one of draft_model_path and draft_model.")
    draft_model: HubModel | None = Field(None, description=DRAFT_MODEL)
    block_size: Int = Field(16, ge=1, le=16, description="--speculative-dflash-block-size, 1..16.")
    tree_budget: Int = Field(ge=1, le=1024, description="--speculative-ddtree-budget: tree nodes verified per step, 1..1024.")

    @model_validator(mode="after")
    def _one_draft(self) -> DDTree:
        _one_of(self.draft_model_path, self.draft_model, "draft_model_path", "draft_model")
        return self


Speculative = Annotated[
    Union[NoSpeculation, EagleFamily, Ngram, DFlash, DDTree],
    Field(discriminator="algorithm"),
]

SPECULATIVE_MODELS: dict[str, type[BaseModel]] = {
    tag: model
    for model in (NoSpeculation, EagleFamily, Ngram, DFlash, DDTree)
    for tag in typing.get_args(model.model_fields["algorithm"].annotation)
}
ALGORITHM_TAGS = tuple(SPECULATIVE_MODELS)
