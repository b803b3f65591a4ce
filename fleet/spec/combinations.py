"""Speculative decoding combined with server settings SGLang refuses at start-up or documents as
unsupported: refused by the spec (`make check`) before any host is touched, each naming the fields,
what was found, SGLang's reason and where it says so.

The settings come from service.extra_args (read as SGLang's parser reads them: the last value given,
aliases, `=value`, the `_` spelling, abbreviations) and service.environment; the engine from `engine`.
tests/contract/test_sglang_parser.py runs each refusal SGLang 0.5.23 makes itself through the real
parser and resolver, and its acceptance of the same settings where they are allowed.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from packaging.version import Version

from fleet.spec.flags import read_as

# SGLang 0.5.23's option strings (aliases too) of the settings read here -> its field name
# (tests/unit/test_spec.py checks them against the real parser's, lab/doubles/sglang/flags.json).
SETTING_FLAGS = {
    "--pp-size": "pp_size",
    "--pipeline-parallel-size": "pp_size",
    "--dp-size": "dp_size",
    "--data-parallel-size": "dp_size",
    "--attn-dp-size": "attn_dp_size",
    "--attention-data-parallel-size": "attn_dp_size",
    "--enable-dp-attention": "enable_dp_attention",
    "--enable-dp-lm-head": "enable_dp_lm_head",
    "--enable-multi-layer-eagle": "enable_multi_layer_eagle",
    "--speculative-use-rejection-sampling": "speculative_use_rejection_sampling",
    "--disaggregation-mode": "disaggregation_mode",
    "--page-size": "page_size",
    "--attention-backend": "attention_backend",
    "--speculative-draft-window-size": "speculative_draft_window_size",
}
SWITCHES = ("enable_dp_attention", "enable_dp_lm_head", "enable_multi_layer_eagle",
            "speculative_use_rejection_sampling")  # flags without a value
PP_SPEC_ENV = "SGLANG_ENABLE_PP_SPEC"  # SGLang's switch for pipeline-parallel EAGLE outside PD prefill

SPECULATIVE_HOOK = "sglang 0.5.23 srt/arg_groups/speculative_hook.py"
CHECK_SERVER_ARGS = ("sglang 0.5.23 srt/arg_groups/validation_hook.py check_pipeline_parallel_compat (run by "
                     "check_server_args at start-up, before the model loads)")
PR_29907 = "sglang PR 29907 (DDTree), speculative_hook.py"


@dataclass(frozen=True)
class Settings:
    """The server settings the refusals read: SGLang's field -> (value, the flag as written)."""

    given: dict[str, tuple[object, str]]
    environment: dict[str, str]

    def value(self, field: str, default=None):
        return self.given[field][0] if field in self.given else default

    def shown(self, *fields: str) -> str:
        """How the message names what was found: the flags as service.extra_args gives them."""
        return ", ".join(self.given[f][1] for f in fields if f in self.given)

    @property
    def attention_dp(self) -> int:
        """The attention data-parallel width: --attn-dp-size, or --dp-size with the deprecated
        --enable-dp-attention (SGLang's handle_deprecated_dp_attention)."""
        width = self.value("attn_dp_size", 1)
        if width == 1 and self.value("enable_dp_attention", False):
            return self.value("dp_size", 1)
        return width

    def attention_dp_shown(self) -> str:
        if self.value("attn_dp_size", 1) > 1:
            return self.shown("attn_dp_size")
        return self.shown("enable_dp_attention", "dp_size")

    @property
    def pp_spec(self) -> bool:
        return self.environment.get(PP_SPEC_ENV, "").lower() in ("true", "1", "yes", "y")  # SGLang's EnvBool


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None  # SGLang's parser refuses it, naming the flag


def settings(extra_args: typing.Sequence[str], environment: dict[str, str]) -> Settings:
    """What service.extra_args sets of SETTING_FLAGS, as SGLang's parser reads it (the last one given
    wins; a value it cannot read is left to its own refusal)."""
    given: dict[str, tuple[object, str]] = {}
    for i, token in enumerate(extra_args):
        options = read_as(token, SETTING_FLAGS)
        if len({SETTING_FLAGS[o] for o in options}) != 1:
            continue
        field = SETTING_FLAGS[options[0]]
        if field in SWITCHES:
            given[field] = (True, token)
            continue
        flag, eq, text = token.partition("=")
        if not eq:
            if i + 1 >= len(extra_args):
                continue
            text = extra_args[i + 1]
        value = text if field in ("disaggregation_mode", "attention_backend") else _int(text)
        if value is not None:
            given[field] = (value, f"{flag} {text}")
    return Settings(given, dict(environment))


@dataclass(frozen=True)
class KnownBad:
    """One combination refused: the algorithms it concerns, the settings in the operator's words,
    SGLang's reason in its own words, where SGLang says so, and the test of the settings (what was
    found, or None)."""

    algorithms: tuple[str, ...]
    combination: str
    reason: str
    source: str
    found: typing.Callable[[typing.Any, Settings, typing.Any], str | None]
    remedy: str = ""
    fields: str = "service.extra_args"  # where what was found is declared


def _pp(speculative, s: Settings, engine) -> str | None:
    return s.shown("pp_size") if s.value("pp_size", 1) > 1 else None


def _pp_not_single_layer_eagle(speculative, s: Settings, engine) -> str | None:
    if s.value("pp_size", 1) <= 1:
        return None
    if speculative.algorithm not in ("EAGLE", "NEXTN"):
        return s.shown("pp_size")
    return s.shown("pp_size", "enable_multi_layer_eagle") if s.value("enable_multi_layer_eagle", False) else None


def _pp_eagle_off_prefill(speculative, s: Settings, engine) -> str | None:
    if s.value("pp_size", 1) <= 1 or s.value("enable_multi_layer_eagle", False):
        return None
    if s.value("disaggregation_mode") == "prefill" or s.pp_spec:
        return None
    return s.shown("pp_size") + f", neither --disaggregation-mode prefill nor {PP_SPEC_ENV}=1 in service.environment"


def _dp_attention(speculative, s: Settings, engine) -> str | None:
    return s.attention_dp_shown() if s.attention_dp > 1 else None


def _dp_attention_without_lm_head(speculative, s: Settings, engine) -> str | None:
    if s.attention_dp > 1 and not s.value("enable_dp_lm_head", False):
        return s.attention_dp_shown() + ", no --enable-dp-lm-head"
    return None


def _window_under_block(speculative, s: Settings, engine) -> str | None:
    window = s.value("speculative_draft_window_size")
    if window is not None and window < speculative.block_size:
        return f"{s.shown('speculative_draft_window_size')} under speculative.block_size {speculative.block_size}"
    return None


def _flex(speculative, s: Settings, engine) -> str | None:
    return s.shown("attention_backend") if s.value("attention_backend") == "flex_attention" else None


def _rejection_sampling(speculative, s: Settings, engine) -> str | None:
    return s.shown("speculative_use_rejection_sampling") if s.value("speculative_use_rejection_sampling") else None


def _rejection_sampling_tree(speculative, s: Settings, engine) -> str | None:
    if s.value("speculative_use_rejection_sampling") and speculative.topk is not None and speculative.topk != 1:
        return f"{s.shown('speculative_use_rejection_sampling')} with speculative.topk {speculative.topk}"
    return None


def _page_size(speculative, s: Settings, engine) -> str | None:
    page = s.value("page_size")
    return s.shown("page_size") if page is not None and page != 1 else None


def _no_ddtree_engine(speculative, s: Settings, engine) -> str | None:
    # A release up to 0.5.23 has none (PR 29907 is unmerged); a dev or local build may be PR 29907's, and
    # a later release may have it: preflight asks those engines what they offer.
    if engine is None:
        return None
    v = Version(engine.version)
    return engine.sglang if v.release <= (0, 5, 23) and v.dev is None and v.local is None else None


KNOWN_BAD: tuple[KnownBad, ...] = (
    KnownBad(("DFLASH",), "pipeline parallelism (--pp-size above 1)",
             "Currently DFLASH speculative decoding only supports pp_size == 1.",
             f"{SPECULATIVE_HOOK} _handle_dflash", _pp),
    KnownBad(("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DDTREE"),
             "pipeline parallelism (--pp-size above 1), unless single-layer EAGLE (no --enable-multi-layer-eagle)",
             "Pipeline parallelism currently only supports EAGLE (non-multi-layer) speculative decoding",
             CHECK_SERVER_ARGS, _pp_not_single_layer_eagle),
    KnownBad(("EAGLE", "NEXTN"), "pipeline parallelism (--pp-size above 1) outside a PD prefill server "
             f"(--disaggregation-mode prefill) without {PP_SPEC_ENV}=1",
             "PP + speculative decoding (MTP) is only supported on prefill nodes (disaggregation-mode=prefill)",
             CHECK_SERVER_ARGS, _pp_eagle_off_prefill),
    KnownBad(("DFLASH",), "data-parallel attention (--attn-dp-size above 1, or --enable-dp-attention with "
             "--dp-size above 1) without --enable-dp-lm-head",
             "DFLASH with dp attention requires --enable-dp-lm-head.",
             f"{SPECULATIVE_HOOK} _handle_dflash", _dp_attention_without_lm_head),
    KnownBad(("STANDALONE",), "data-parallel attention (--attn-dp-size above 1, or --enable-dp-attention with "
             "--dp-size above 1)",
             "Currently standalone speculative decoding does not support dp attention.",
             f"{SPECULATIVE_HOOK} _handle_eagle_family", _dp_attention),
    KnownBad(("NGRAM",), "data-parallel attention (--attn-dp-size above 1, or --enable-dp-attention with "
             "--dp-size above 1)",
             "Currently ngram speculative decoding does not support dp attention.",
             f"{SPECULATIVE_HOOK} _handle_ngram", _dp_attention),
    KnownBad(("DFLASH",), "--speculative-draft-window-size under speculative.block_size",
             "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size).",
             f"{SPECULATIVE_HOOK} _handle_dflash", _window_under_block),
    KnownBad(("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DDTREE"),
             "--attention-backend flex_attention",
             "Speculative decoding is currently not supported with Flex Attention backend",
             "sglang 0.5.23 srt/arg_groups/attention_hook.py _handle_attention_backend_compatibility", _flex),
    KnownBad(("STANDALONE",), "--speculative-use-rejection-sampling",
             "--speculative-use-rejection-sampling is only supported for EAGLE / EAGLE3 / NEXTN",
             f"{SPECULATIVE_HOOK} _handle_eagle_family", _rejection_sampling),
    KnownBad(("EAGLE", "EAGLE3", "NEXTN"), "--speculative-use-rejection-sampling with speculative.topk above 1",
             "--speculative-use-rejection-sampling requires --speculative-eagle-topk=1.",
             f"{SPECULATIVE_HOOK} _handle_eagle_family", _rejection_sampling_tree),
    KnownBad(("DDTREE",), "a released SGLang up to 0.5.23, none of which has DDTree (0.5.23: no DDTREE algorithm, no "
             "--speculative-ddtree-budget; its DFLASH is linear DFlash)",
             "unrecognized arguments: --speculative-ddtree-budget",
             "sglang 0.5.23's parser, then \"Unknown speculative algorithm name: DDTREE\" from its resolver; DDTree "
             "is the open sglang PR 29907 (issue 22887)",
             _no_ddtree_engine,
             remedy="declare an engine built with PR 29907 (engine.sglang its version, engine.wheels its wheel), "
             "or algorithm DFLASH to serve linear DFlash", fields="engine.sglang"),
    KnownBad(("DDTREE",), "--page-size other than 1", "DDTREE currently supports only page_size == 1.",
             PR_29907, _page_size),
    KnownBad(("DDTREE",), "--speculative-use-rejection-sampling",
             "DDTREE does not support --speculative-use-rejection-sampling yet.", PR_29907, _rejection_sampling),
)


def refused(speculative, service, engine) -> list[str]:
    """The known-bad combinations this class declares, one message each (empty: none)."""
    s = settings(service.extra_args, service.environment)
    problems = []
    for bad in KNOWN_BAD:
        if speculative.algorithm not in bad.algorithms:
            continue
        found = bad.found(speculative, s, engine)
        if found is None:
            continue
        problems.append(f"speculative.algorithm {speculative.algorithm} with {bad.fields} {found}: "
                        f"{speculative.algorithm} with {bad.combination} is refused: \"{bad.reason}\" ({bad.source})"
                        + (f"; {bad.remedy}" if bad.remedy else ""))
    return problems
