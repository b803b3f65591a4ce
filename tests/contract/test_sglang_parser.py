"""The ExecStart fleet/rollout/render.py writes is what the REAL SGLang 0.5.23 accepts and means.

For every GPU class of group_data (group_data/*.py but all.py and cpu_real) and every algorithm variant,
`fleet.rollout.render.server_argv(spec)[3:]` (the flags after `-m sglang.launch_server`, its
`--config` pointing at the 0600 YAML fleet.rollout.render.render_config writes, with dummy keys) is
parsed AND resolved by the real `prepare_server_args` + `ServerArgs.resolve_once()`
(tests/contract/sglang_parse_helper.py, one process for all cases; how it runs without a
GPU is said there). The resolved values must be the spec's, and the keys must reach the server from the file.

Model directories: each path the spec names is re-rooted under a tmp dir holding a
config.json shaped like the real model's (the real server reads them at start-up).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from fleet.spec.load import load_group_data, spec_data
from fleet.rollout.render import render_config, server_argv
from fleet.spec.secrets import Secrets
from fleet.spec import ClassSpec
from fleet.spec.combinations import KNOWN_BAD

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).resolve().parent / "sglang_parse_helper.py"
MARKER = "SGLANG-PARSE-RESULT "
GROUP_DIR = ROOT / "group_data"
# The GPU classes: cpu_real (the lab's real server on a CPU, no speculation possible there) is proven by starting
# the real server with its flags (tests/lab/test_real_sglang_e2e.py), not by resolving them for a GPU platform.
GROUPS = sorted(g for g in load_group_data(GROUP_DIR) if g != "cpu_real")
DUMMY_KEY, DUMMY_ADMIN = "contract-dummy-key", "contract-dummy-admin-key"
SECRETS = Secrets({"api-key": DUMMY_KEY, "admin-api-key": DUMMY_ADMIN})
EXPECTED_SECRETS = {"api_key": DUMMY_KEY, "admin_api_key": DUMMY_ADMIN}

# Every algorithm SGLang 0.5.23 has that a spec can name, with its parameters set and
# (second entries) left to SGLang's defaults. "own" is the group's own speculative table.
VARIANTS: dict[str, dict | None] = {
    "own": None,
    "none": {"algorithm": "none"},
    "EAGLE": {"algorithm": "EAGLE", "draft_model_path": "{draft}/eagle", "num_steps": 3, "topk": 1,
              "num_draft_tokens": 4},
    "EAGLE-auto": {"algorithm": "EAGLE", "draft_model_path": "{draft}/eagle"},
    "EAGLE3": {"algorithm": "EAGLE3", "draft_model_path": "{draft}/eagle3", "num_steps": 3, "topk": 4,
               "num_draft_tokens": 8},
    "EAGLE3-auto": {"algorithm": "EAGLE3", "draft_model_path": "{draft}/eagle3"},
    "NEXTN": {"algorithm": "NEXTN", "num_steps": 3, "topk": 1, "num_draft_tokens": 4},
    "STANDALONE": {"algorithm": "STANDALONE", "draft_model_path": "{draft}/small", "num_steps": 4, "topk": 1,
                   "num_draft_tokens": 5},
    "NGRAM": {"algorithm": "NGRAM", "num_draft_tokens": 8, "max_bfs_breadth": 4},
    "NGRAM-defaults": {"algorithm": "NGRAM"},
    "DFLASH": {"algorithm": "DFLASH", "draft_model_path": "{draft}/dflash", "block_size": 16},
    "DFLASH-8": {"algorithm": "DFLASH", "draft_model_path": "{draft}/dflash", "block_size": 8},
}


def platform_of(spec: ClassSpec) -> str:
    model = spec.gpu_class.accepted_models[0]
    if "PRO 6000" in model:
        return "rtx-pro-6000"
    if "A6000" in model:
        return "a6000"
    return "h200"


# --------------------------------------------------------------------------- model dirs


def _target_config(path: str) -> dict:
    name = Path(path).name.lower()
    if "qwen3.6" in name or "qwen3.5" in name:  # hybrid, multimodal wrapper, 262k context
        text = {"model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 5120,
                "intermediate_size": 17408, "num_hidden_layers": 64, "num_attention_heads": 24,
                "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 262144,
                "full_attention_interval": 4, "torch_dtype": "bfloat16"}
        return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                "text_config": text, "torch_dtype": "bfloat16"}
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936,
            "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "max_position_embeddings": 40960, "torch_dtype": "bfloat16"}


def _draft_config(kind: str) -> dict:
    if kind == "dflash":
        return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "vocab_size": 151936,
                "hidden_size": 4096, "num_hidden_layers": 5, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 128, "block_size": 16, "num_target_layers": 36,
                "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]}}
    if kind in ("eagle", "eagle3"):
        return {"architectures": ["LlamaForCausalLMEagle3" if kind == "eagle3" else "LlamaForCausalLMEagle"],
                "model_type": "llama", "vocab_size": 151936, "draft_vocab_size": 32000, "hidden_size": 4096,
                "num_hidden_layers": 1, "num_attention_heads": 32, "num_key_value_heads": 8,
                "intermediate_size": 12288, "max_position_embeddings": 262144, "torch_dtype": "bfloat16"}
    return dict(_target_config("small"), num_hidden_layers=4, max_position_embeddings=262144)  # small


def _write(path: Path, config: dict) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config, indent=1) + "\n")


def build_spec(group: str, variant: str, root: Path, table: dict | None = None) -> ClassSpec:
    data = copy.deepcopy(spec_data(load_group_data(GROUP_DIR)[group]))
    svc = data["service"]
    svc["model_path"] = f"{root}{svc['model_path']}"
    _write(Path(svc["model_path"]), _target_config(svc["model_path"]))
    svc["api_key"], svc["admin_api_key"] = {"env": "CONTRACT_KEY"}, {"env": "CONTRACT_ADMIN_KEY"}
    spec_table = table if table is not None else VARIANTS[variant]
    if spec_table is None:
        spec_table = copy.deepcopy(data.get("speculative", {"algorithm": "none"}))
        if spec_table.get("draft_model_path"):
            kind = {"DFLASH": "dflash", "DDTREE": "dflash", "EAGLE3": "eagle3"}.get(spec_table["algorithm"], "eagle")
            spec_table["draft_model_path"] = f"{root}{spec_table['draft_model_path']}"
            _write(Path(spec_table["draft_model_path"]), _draft_config(kind))
    else:
        spec_table = copy.deepcopy(spec_table)
        if "draft_model_path" in spec_table:
            kind = spec_table["draft_model_path"].rsplit("/", 1)[1]
            spec_table["draft_model_path"] = f"{root}/drafts/{group}/{kind}"
            _write(Path(spec_table["draft_model_path"]), _draft_config(kind))
    data["speculative"] = spec_table
    return ClassSpec.model_validate(data)


def flags(spec: ClassSpec, config: Path) -> list[str]:
    """The flags, --config moved to `config`, where the secret file the deploy writes is put."""
    argv = server_argv(spec)
    assert argv[1:3] == ["-m", "sglang.launch_server"]
    config.write_text(render_config(spec, SECRETS))
    return [str(config) if a == spec.config_file else a for a in argv[3:]]


# --------------------------------------------------------------------------- one real run


def parse_with_real_sglang(python: str, cases: list[dict]) -> dict[str, dict]:
    """Run cases ({"id", "argv", "platform"?}) through the real parser, in one process."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COLUMNS", "LINES")}
    proc = subprocess.run(
        [python, str(HELPER)], input=json.dumps(cases), capture_output=True, text=True, cwd="/",
        env=env, timeout=1800,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(MARKER):
            return {r["id"]: r for r in json.loads(line[len(MARKER):])}
    raise AssertionError(f"sglang_parse_helper.py failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")



@pytest.fixture(scope="session")
def contract(real_sglang_python, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    config = root / "sglang.yaml"
    specs, cases = {}, []
    for group in GROUPS:
        for variant in VARIANTS:
            cid = f"{group}/{variant}"
            spec = build_spec(group, variant, root)
            specs[cid] = spec
            cases.append({"id": cid, "argv": flags(spec, config), "platform": platform_of(spec),
                          "secrets": EXPECTED_SECRETS})
    # refusals: a misspelt flag; DDTree's provisional flag and algorithm
    dflash = specs[f"{GROUPS[0]}/DFLASH"]
    argv = flags(dflash, config)
    cases.append({"id": "misspelt", "argv": [a.replace("--speculative-dflash-block-size",
                                                       "--speculative-dflash-blocksize") for a in argv]})
    ddtree = build_spec(GROUPS[0], "DDTREE", root, table={
        "algorithm": "DDTREE", "draft_model_path": "{draft}/dflash", "block_size": 16, "tree_budget": 64})
    argv = flags(ddtree, config)
    cases.append({"id": "ddtree", "argv": argv})
    cases.append({"id": "ddtree-no-budget", "argv": argv[: argv.index("--speculative-ddtree-budget")]})
    return specs, parse_with_real_sglang(real_sglang_python, cases)


CASE_IDS = [f"{g}/{v}" for g in GROUPS for v in VARIANTS]


@pytest.mark.parametrize("cid", CASE_IDS)
def test_real_sglang_accepts_and_means_the_rendered_flags(contract, cid):
    specs, results = contract
    spec, r = specs[cid], results[cid]
    assert r["ok"], f"{cid}: real SGLang refused: {r.get('error_type')}: {r.get('error')}"
    assert r["secrets_received"] == {"api_key": True, "admin_api_key": True}  # from the --config file
    got = r["resolved"]
    svc, s = spec.service, spec.speculative
    assert got["model_path"] == svc.model_path
    assert got["served_model_name"] == svc.served_model_name
    assert (got["host"], got["port"], got["tp_size"]) == (svc.host, svc.port, svc.tp_size)
    assert got["mem_fraction_static"] == svc.mem_fraction
    assert got["context_length"] == svc.context_length
    assert got["trust_remote_code"] == svc.trust_remote_code
    assert got["enable_metrics"] == svc.enable_metrics
    assert got["device"] == "cuda"

    if s.algorithm == "none":
        assert got["speculative_algorithm"] is None
        return
    # NEXTN is an alias: SGLang runs it as EAGLE
    assert got["speculative_algorithm"] == ("EAGLE" if s.algorithm == "NEXTN" else s.algorithm)
    assert got["speculative_draft_model_path"] == getattr(s, "draft_model_path", None)
    if s.algorithm in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"):
        if s.num_steps is not None:
            assert (got["speculative_num_steps"], got["speculative_eagle_topk"]) == (s.num_steps, s.topk)
            assert got["speculative_num_draft_tokens"] == s.num_draft_tokens
        else:  # SGLang's defaults
            assert got["speculative_num_steps"] >= 1 and got["speculative_eagle_topk"] >= 1
    elif s.algorithm == "NGRAM":
        assert got["speculative_num_draft_tokens"] == (s.num_draft_tokens or 12)
        # the BFS breadth is what SGLang uses as topk for NGRAM (--speculative-eagle-topk is ignored)
        assert got["speculative_eagle_topk"] == (s.max_bfs_breadth or 10)
        assert got["speculative_ngram_max_bfs_breadth"] == (s.max_bfs_breadth or 10)
    elif s.algorithm == "DFLASH":
        assert got["speculative_dflash_block_size"] == s.block_size
        assert got["speculative_num_draft_tokens"] == s.block_size
        assert (got["speculative_num_steps"], got["speculative_eagle_topk"]) == (1, 1)  # linear


def test_a_misspelt_flag_is_refused(contract):
    r = contract[1]["misspelt"]
    assert not r["ok"] and r["error_type"] == "SystemExit" and r["exit_code"] == 2
    assert r["error"] == "sglang serve: error: unrecognized arguments: --speculative-dflash-blocksize 16"


def test_sglang_0523_has_no_ddtree(contract):
    """Why preflight refuses DDTREE on 0.5.23: its parser has no --speculative-ddtree-budget,
    and without the flag the algorithm itself is unknown (never silently linear DFLASH)."""
    r = contract[1]["ddtree"]
    assert not r["ok"] and r["error_type"] == "SystemExit"
    assert r["error"] == "sglang serve: error: unrecognized arguments: --speculative-ddtree-budget 64"
    r = contract[1]["ddtree-no-budget"]
    assert not r["ok"] and r["stage"] == "resolve"
    assert (r["error_type"], r["error"]) == ("ValueError", "Unknown speculative algorithm name: DDTREE")


# --------------------------------------------------------------------------- known-bad combinations

# fleet/spec/combinations.py's refusals the real SGLang 0.5.23 makes itself, each beside the same settings where
# both accept them: (variant, service.extra_args, service.environment). A two-GPU class (tp 2) so that data-parallel
# attention has GPUs to split.
COMBINATION_GROUP = "a6000"
PP2, DP_ATTENTION = ["--pp-size", "2"], ["--attn-dp-size", "2"]
COMBINATIONS: dict[str, tuple[str, list[str], dict[str, str]]] = {
    "DFLASH pp": ("DFLASH", PP2, {}),
    "EAGLE3 pp": ("EAGLE3", ["--pipeline-parallel-size=2"], {}),
    "STANDALONE pp": ("STANDALONE", PP2, {}),
    "NGRAM pp": ("NGRAM", PP2, {}),
    "EAGLE pp": ("EAGLE", PP2, {}),
    "NEXTN pp": ("NEXTN", PP2, {}),
    "EAGLE pp multi-layer on prefill": ("EAGLE", PP2 + ["--enable-multi-layer-eagle", "--disaggregation-mode",
                                                      "prefill"], {}),
    "DFLASH dp attention": ("DFLASH", DP_ATTENTION, {}),
    "DFLASH deprecated dp attention": ("DFLASH", ["--enable-dp-attention", "--dp-size", "2"], {}),
    "STANDALONE dp attention": ("STANDALONE", DP_ATTENTION, {}),
    "NGRAM dp attention": ("NGRAM", ["--enable-dp-attention", "--dp-size=2"], {}),
    "DFLASH window under block": ("DFLASH", ["--speculative-draft-window-size", "8"], {}),
    "EAGLE3 flex attention": ("EAGLE3", ["--attention-backend", "flex_attention"], {}),
    "DFLASH flex attention": ("DFLASH", ["--attention-backend", "flex_attention"], {}),
    "NGRAM flex attention": ("NGRAM", ["--attention-backend", "flex_attention"], {}),
    "STANDALONE rejection sampling": ("STANDALONE", ["--speculative-use-rejection-sampling"], {}),
    "EAGLE3 tree rejection sampling": ("EAGLE3", ["--speculative-use-rejection-sampling"], {}),
    # allowed
    "EAGLE pp on prefill": ("EAGLE", PP2 + ["--disaggregation-mode", "prefill"], {}),
    "EAGLE pp with SGLANG_ENABLE_PP_SPEC": ("EAGLE", PP2, {"SGLANG_ENABLE_PP_SPEC": "1"}),
    "DFLASH dp attention with dp lm head": ("DFLASH", DP_ATTENTION + ["--enable-dp-lm-head"], {}),
    "EAGLE3 dp attention": ("EAGLE3", DP_ATTENTION, {}),
    "NGRAM dp replicas": ("NGRAM", ["--dp-size", "2"], {}),
    "DFLASH dp attention flag alone": ("DFLASH", ["--enable-dp-attention"], {}),
    "DFLASH window of the block": ("DFLASH", ["--speculative-draft-window-size", "16"], {}),
    "EAGLE rejection sampling": ("EAGLE", ["--speculative-use-rejection-sampling"], {}),
    "DFLASH rejection sampling": ("DFLASH", ["--speculative-use-rejection-sampling"], {}),
    "none pp": ("none", PP2, {}),
}


def ours(spec: ClassSpec, extra_args: list[str], environment: dict[str, str]) -> list[str]:
    """What the spec says of the class with these settings: its refusals (none: it validates)."""
    data = spec.model_dump()
    data["service"].update(extra_args=extra_args, environment=environment)
    try:
        ClassSpec.model_validate(data)
    except ValidationError as e:
        return [err["msg"].removeprefix("Value error, ") for err in e.errors()]
    return []


@pytest.fixture(scope="session")
def combinations(real_sglang_python, tmp_path_factory):
    root = tmp_path_factory.mktemp("combination-models")
    config = root / "sglang.yaml"
    specs, cases = {}, []
    for cid, (variant, extra_args, environment) in COMBINATIONS.items():
        spec = build_spec(COMBINATION_GROUP, variant, root)
        specs[cid] = spec
        cases.append({"id": cid, "argv": flags(spec, config) + extra_args, "platform": platform_of(spec),
                      "environment": environment, "check": True})
    return specs, parse_with_real_sglang(real_sglang_python, cases)


@pytest.mark.parametrize("cid", sorted(COMBINATIONS))
def test_make_check_refuses_what_the_real_sglang_refuses_and_no_more(combinations, cid):
    specs, results = combinations
    _, extra_args, environment = COMBINATIONS[cid]
    refused, real = ours(specs[cid], extra_args, environment), results[cid]
    if real["ok"]:
        assert refused == [], f"{cid}: the real SGLang accepts it, the spec refuses: {refused}"
        return
    assert real["stage"] in ("resolve", "check"), real
    assert len(refused) == 1, f"{cid}: the real SGLang refuses ({real['error']}), the spec: {refused}"
    (reason,) = [b.reason for b in KNOWN_BAD if f'"{b.reason}"' in refused[0]]
    assert real["error"].startswith(reason), (real["error"], refused[0])


def test_make_check_names_the_reason_sglang_0523_gives_for_ddtree(contract):
    r = contract[1]["ddtree"]
    (bad,) = [b for b in KNOWN_BAD if b.fields == "engine.sglang"]
    assert bad.reason in r["error"]
    assert "Unknown speculative algorithm name: DDTREE" in bad.source
    assert contract[1]["ddtree-no-budget"]["error"] == "Unknown speculative algorithm name: DDTREE"
