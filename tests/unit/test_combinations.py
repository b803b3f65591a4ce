"""Known-bad speculative combinations (fleet/spec/combinations.py): each refused by the spec, so by `make check`
before any host is touched, with the class file, the fields, what was found, SGLang's reason and where SGLang
says so. The real SGLang 0.5.23 refusing the same settings: tests/contract/test_sglang_parser.py."""

from __future__ import annotations

import pytest

from fleet.spec import ClassSpec
from fleet.spec.combinations import KNOWN_BAD, SETTING_FLAGS, SWITCHES, settings
from test_check import class_file, make_group_dir, run_check
from test_spec import DEST_OF, SRC, data, problems, svc

DFLASH = {"algorithm": "DFLASH", "draft_model_path": "/root/models/Qwen3-8B-DFlash", "block_size": 16}
EAGLE3 = {"algorithm": "EAGLE3", "draft_model_path": "/d/eagle3", "num_steps": 3, "topk": 4, "num_draft_tokens": 8}
EAGLE = {"algorithm": "EAGLE", "draft_model_path": "/d/eagle", "num_steps": 3, "topk": 1, "num_draft_tokens": 4}
NEXTN = {"algorithm": "NEXTN"}
STANDALONE = {"algorithm": "STANDALONE", "draft_model_path": "/d/small"}
NGRAM = {"algorithm": "NGRAM"}
DDTREE = {"algorithm": "DDTREE", "draft_model_path": "/d/dflash", "block_size": 16, "tree_budget": 64}
HOOK = "sglang 0.5.23 srt/arg_groups/speculative_hook.py"
PP_CHECK = ("sglang 0.5.23 srt/arg_groups/validation_hook.py check_pipeline_parallel_compat (run by check_server_args "
            "at start-up, before the model loads)")
ONLY_EAGLE = ('with pipeline parallelism (--pp-size above 1), unless single-layer EAGLE (no --enable-multi-layer-eagle) '
              'is refused: "Pipeline parallelism currently only supports EAGLE (non-multi-layer) speculative decoding" '
              f'({PP_CHECK})')
DP_ATTENTION = "data-parallel attention (--attn-dp-size above 1, or --enable-dp-attention with --dp-size above 1)"

# (speculative, service.extra_args, service.environment, engine) -> the whole message after the file's name
REFUSED = {
    "DFLASH with pipeline parallelism": (
        DFLASH, ["--pp-size", "2"], {}, None,
        'speculative.algorithm DFLASH with service.extra_args --pp-size 2: DFLASH with pipeline parallelism '
        '(--pp-size above 1) is refused: "Currently DFLASH speculative decoding only supports pp_size == 1." '
        f'({HOOK} _handle_dflash)'),
    "EAGLE3 with pipeline parallelism": (
        EAGLE3, ["--pipeline-parallel-size=4"], {}, None,
        f"speculative.algorithm EAGLE3 with service.extra_args --pipeline-parallel-size 4: EAGLE3 {ONLY_EAGLE}"),
    "STANDALONE with pipeline parallelism": (
        STANDALONE, ["--pp_size", "2"], {}, None,
        f"speculative.algorithm STANDALONE with service.extra_args --pp_size 2: STANDALONE {ONLY_EAGLE}"),
    "NGRAM with pipeline parallelism": (
        NGRAM, ["--pp-size", "2"], {}, None,
        f"speculative.algorithm NGRAM with service.extra_args --pp-size 2: NGRAM {ONLY_EAGLE}"),
    "DDTREE with pipeline parallelism": (
        DDTREE, ["--pp-size", "2"], {}, None,
        f"speculative.algorithm DDTREE with service.extra_args --pp-size 2: DDTREE {ONLY_EAGLE}"),
    "multi-layer EAGLE with pipeline parallelism": (
        EAGLE, ["--pp-size", "2", "--enable-multi-layer-eagle", "--disaggregation-mode", "prefill"], {}, None,
        "speculative.algorithm EAGLE with service.extra_args --pp-size 2, --enable-multi-layer-eagle: EAGLE "
        + ONLY_EAGLE),
    "EAGLE with pipeline parallelism off a prefill server": (
        EAGLE, ["--pp-size", "2"], {"SGLANG_ENABLE_PP_SPEC": "0"}, None,
        "speculative.algorithm EAGLE with service.extra_args --pp-size 2, neither --disaggregation-mode prefill nor "
        "SGLANG_ENABLE_PP_SPEC=1 in service.environment: EAGLE with pipeline parallelism (--pp-size above 1) outside "
        "a PD prefill server (--disaggregation-mode prefill) without SGLANG_ENABLE_PP_SPEC=1 is refused: \"PP + "
        "speculative decoding (MTP) is only supported on prefill nodes (disaggregation-mode=prefill)\" "
        f"({PP_CHECK})"),
    "DFLASH with data-parallel attention": (
        DFLASH, ["--attn-dp-size", "2"], {}, None,
        "speculative.algorithm DFLASH with service.extra_args --attn-dp-size 2, no --enable-dp-lm-head: DFLASH with "
        f"{DP_ATTENTION} without --enable-dp-lm-head is refused: \"DFLASH with dp attention requires "
        f"--enable-dp-lm-head.\" ({HOOK} _handle_dflash)"),
    "DFLASH with the deprecated data-parallel attention": (
        DFLASH, ["--enable-dp-attention", "--dp-size=2"], {}, None,
        "speculative.algorithm DFLASH with service.extra_args --enable-dp-attention, --dp-size 2, no "
        f"--enable-dp-lm-head: DFLASH with {DP_ATTENTION} without --enable-dp-lm-head is refused: \"DFLASH with dp "
        f"attention requires --enable-dp-lm-head.\" ({HOOK} _handle_dflash)"),
    "STANDALONE with data-parallel attention": (
        STANDALONE, ["--attention-data-parallel-size", "2"], {}, None,
        "speculative.algorithm STANDALONE with service.extra_args --attention-data-parallel-size 2: STANDALONE with "
        f"{DP_ATTENTION} is refused: \"Currently standalone speculative decoding does not support dp attention.\" "
        f"({HOOK} _handle_eagle_family)"),
    "NGRAM with data-parallel attention": (
        NGRAM, ["--enable-dp-attention", "--dp-size", "2", "--enable-dp-lm-head"], {}, None,
        "speculative.algorithm NGRAM with service.extra_args --enable-dp-attention, --dp-size 2: NGRAM with "
        f"{DP_ATTENTION} is refused: \"Currently ngram speculative decoding does not support dp attention.\" "
        f"({HOOK} _handle_ngram)"),
    "DFLASH with a draft window under its block": (
        DFLASH, ["--speculative-draft-window-size", "8"], {}, None,
        "speculative.algorithm DFLASH with service.extra_args --speculative-draft-window-size 8 under "
        "speculative.block_size 16: DFLASH with --speculative-draft-window-size under speculative.block_size is "
        "refused: \"--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size).\" "
        f"({HOOK} _handle_dflash)"),
    "EAGLE3 with flex attention": (
        EAGLE3, ["--attention-backend=flex_attention"], {}, None,
        "speculative.algorithm EAGLE3 with service.extra_args --attention-backend flex_attention: EAGLE3 with "
        "--attention-backend flex_attention is refused: \"Speculative decoding is currently not supported with Flex "
        "Attention backend\" (sglang 0.5.23 srt/arg_groups/attention_hook.py "
        "_handle_attention_backend_compatibility)"),
    "STANDALONE with rejection sampling": (
        STANDALONE, ["--speculative-use-rejection-sampling"], {}, None,
        "speculative.algorithm STANDALONE with service.extra_args --speculative-use-rejection-sampling: STANDALONE "
        "with --speculative-use-rejection-sampling is refused: \"--speculative-use-rejection-sampling is only "
        f"supported for EAGLE / EAGLE3 / NEXTN\" ({HOOK} _handle_eagle_family)"),
    "EAGLE3 tree with rejection sampling": (
        EAGLE3, ["--speculative-use-rejection-sampling"], {}, None,
        "speculative.algorithm EAGLE3 with service.extra_args --speculative-use-rejection-sampling with "
        "speculative.topk 4: EAGLE3 with --speculative-use-rejection-sampling with speculative.topk above 1 is "
        "refused: \"--speculative-use-rejection-sampling requires --speculative-eagle-topk=1.\" "
        f"({HOOK} _handle_eagle_family)"),
    "DDTREE on SGLang 0.5.23": (
        DDTREE, [], {}, {"sglang": "sglang[all]==0.5.23"},
        "speculative.algorithm DDTREE with engine.sglang sglang[all]==0.5.23: DDTREE with a released SGLang up to "
        "0.5.23, none of which has DDTree (0.5.23: no DDTREE algorithm, no --speculative-ddtree-budget; its DFLASH is "
        "linear DFlash) is refused: "
        "\"unrecognized arguments: --speculative-ddtree-budget\" (sglang 0.5.23's parser, then \"Unknown "
        "speculative algorithm name: DDTREE\" from its resolver; DDTree is the open sglang PR 29907 (issue 22887)); "
        "declare an engine built with PR 29907 (engine.sglang its version, engine.wheels its wheel), or algorithm "
        "DFLASH to serve linear DFlash"),
    "DDTREE with pages of more than one token": (
        DDTREE, ["--page-size", "16"], {}, None,
        "speculative.algorithm DDTREE with service.extra_args --page-size 16: DDTREE with --page-size other than 1 "
        "is refused: \"DDTREE currently supports only page_size == 1.\" (sglang PR 29907 (DDTree), "
        "speculative_hook.py)"),
    "DDTREE with rejection sampling": (
        DDTREE, ["--speculative-use-rejection-sampling"], {}, None,
        "speculative.algorithm DDTREE with service.extra_args --speculative-use-rejection-sampling: DDTREE with "
        "--speculative-use-rejection-sampling is refused: \"DDTREE does not support "
        "--speculative-use-rejection-sampling yet.\" (sglang PR 29907 (DDTree), speculative_hook.py)"),
}
REFUSED["DDTREE on an older SGLang"] = (
    DDTREE, [], {}, {"sglang": "sglang==0.4.10.post2"},
    REFUSED["DDTREE on SGLang 0.5.23"][-1].replace("sglang[all]==0.5.23:", "sglang==0.4.10.post2:"))

# The same settings where SGLang allows them (or, for DDTree, an engine that may have it)
ALLOWED = {
    "EAGLE with pipeline parallelism on a prefill server": (EAGLE, ["--pp-size", "2", "--disaggregation-mode",
                                                                    "prefill"], {}, None),
    "NEXTN with pipeline parallelism and SGLANG_ENABLE_PP_SPEC": (NEXTN, ["--pp-size", "2"],
                                                                  {"SGLANG_ENABLE_PP_SPEC": "true"}, None),
    "DFLASH with one pipeline stage": (DFLASH, ["--pp-size", "1"], {}, None),
    "DFLASH with data-parallel attention and its LM head": (DFLASH, ["--attn-dp-size", "2", "--enable-dp-lm-head"],
                                                            {}, None),
    "DFLASH with the dp-attention flag and one dp rank": (DFLASH, ["--enable-dp-attention"], {}, None),
    "NGRAM with data-parallel replicas": (NGRAM, ["--dp-size", "2"], {}, None),
    "EAGLE3 with data-parallel attention": (EAGLE3, ["--attn-dp-size", "2"], {}, None),
    "DFLASH with a draft window of its block": (DFLASH, ["--speculative-draft-window-size", "16"], {}, None),
    "EAGLE chain with rejection sampling": (EAGLE, ["--speculative-use-rejection-sampling"], {}, None),
    "plain decoding with pipeline parallelism and flex attention": (
        {"algorithm": "none"}, ["--pp-size", "2", "--attention-backend", "flex_attention"], {}, None),
    "DDTREE on a build of PR 29907 with pages of one token": (
        DDTREE, ["--page-size", "1"], {}, {"sglang": "sglang==0.5.24.dev29907", "wheels": [
            "wheels/sglang-0.5.24.dev29907-py3-none-any.whl"]}),
    "DDTREE on a hand-made environment": (DDTREE, [], {}, None),
    "DDTREE on a later release": (DDTREE, [], {}, {"sglang": "sglang==0.5.24"}),
    "DDTREE on a local build of 0.5.23": (DDTREE, [], {}, {"sglang": "sglang==0.5.23+ddtree"}),
}


def class_data(speculative: dict, extra_args: list[str], environment: dict[str, str], engine: dict | None) -> dict:
    d = data(service=svc(extra_args=extra_args, environment=environment), speculative=speculative)
    if engine is not None:
        d["engine"] = engine
    return d


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_each_known_bad_combination_is_refused_with_sglangs_reason(case):
    *declared, message = REFUSED[case]
    (p,) = problems(class_data(*declared))
    assert p.startswith(f"{SRC}: (top level) = "), p
    assert p.endswith(f": {message}"), p


def test_every_known_bad_combination_is_tested():
    said = " ".join(m for *_, m in REFUSED.values())
    for bad in KNOWN_BAD:
        assert f'"{bad.reason}" ({bad.source})' in said, bad.reason


@pytest.mark.parametrize("case", sorted(ALLOWED))
def test_the_same_settings_where_sglang_allows_them_pass(case):
    ClassSpec.model_validate(class_data(*ALLOWED[case]))


def test_several_refusals_are_said_together():
    (p,) = problems(class_data(DFLASH, ["--pp-size", "2", "--attn-dp-size", "2"], {}, None))
    assert "DFLASH with pipeline parallelism" in p and "; speculative.algorithm DFLASH with service.extra_args " \
        "--attn-dp-size 2, no --enable-dp-lm-head" in p


def test_the_settings_are_read_as_sglangs_parser_reads_them():
    s = settings(["--pp-size", "4", "--log-level", "info", "--pipeline-parallel=2", "--PAGE_SIZE", "8",
                  "--enable-dp-lm", "--attn-dp-size", "two", "--speculative-draft-window-size"], {})
    assert s.value("pp_size") == 2 and s.shown("pp_size") == "--pipeline-parallel 2"  # the last one given wins
    assert s.value("page_size") == 8 and s.value("enable_dp_lm_head") is True
    assert s.value("attn_dp_size", 1) == 1  # not a number: SGLang's parser refuses it, naming the flag
    assert s.value("speculative_draft_window_size") is None  # no value follows: the parser's refusal too
    assert settings(["--enable-dp-attention", "--dp-size", "3"], {}).attention_dp == 3
    assert settings(["--attn-dp-size", "2", "--enable-dp-attention", "--dp-size", "3"], {}).attention_dp == 2
    assert settings(["--dp-size", "3"], {}).attention_dp == 1  # replicas, not attention DP


def test_the_setting_flags_are_the_real_parsers_option_strings():
    for option, field in SETTING_FLAGS.items():
        assert DEST_OF[option] == field, option
    for field in set(SETTING_FLAGS.values()):
        assert {o for o, d in DEST_OF.items() if d == field and o.startswith("--")} == \
            {o for o, f in SETTING_FLAGS.items() if f == field}, field
    assert set(SWITCHES) < set(SETTING_FLAGS.values())


def test_make_check_says_it_before_any_host(tmp_path):
    text = class_file(service='"extra_args": ["--pp-size", "2"]')
    make_group_dir(tmp_path, {"a6000": text})
    r = run_check(tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    (problem,) = [line for line in r.stderr.splitlines() if line.startswith("  - ")]
    assert problem.startswith("  - group_data/a6000.py: (top level) = ")
    assert problem.endswith(": " + REFUSED["DFLASH with pipeline parallelism"][-1])
