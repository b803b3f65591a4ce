"""Record what the REAL SGLang 0.5.23 answers, into tests/fixtures/sglang-0.5.23-*.txt.

    .venv/bin/python lab/doubles/record_sglang_fixtures.py       # builds/uses the real venv

Files (the lab doubles are tested against them, tests/unit/test_doubles.py):
- sglang-0.5.23-help.txt      `python -m sglang.launch_server --help` (stdout; COLUMNS
                              unset, PYTHONHASHSEED=0: --sampling-backend's choices come
                              from a set, so their order depends on the hash seed)
- sglang-0.5.23-bad-flag.txt  stderr of a launch with a misspelt flag (exit status 2); the
                              venv path in the first warning line reads <venv>
- sglang-0.5.23-resolve.txt   one JSON object a line: for each case in CASES, what
                              prepare_server_args + ServerArgs.resolve_once() answer
                              (tests/contract/sglang_parse_helper.py: no GPU, see there);
                              model paths read {models}

The same CASES run against the SGLang double (same helper, the double's package on
PYTHONPATH) must give the same answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
HELPER = ROOT / "tests" / "contract" / "sglang_parse_helper.py"
VENV_SCRIPT = ROOT / "tools" / "sglang-venv.sh"
BAD_FLAG_ARGV = ["--model-path", "/nonexistent/model", "--speculative-dflash-blocksize", "8"]

# The resolved fields compared between the real engine and the double.
COMPARED = (
    "model_path",
    "served_model_name",
    "tokenizer_path",
    "host",
    "port",
    "tp_size",
    "context_length",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_dflash_block_size",
    "max_running_requests",
)

_QWEN = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 151936,
    "hidden_size": 1024,
    "intermediate_size": 3072,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}


def make_models(root: str | os.PathLike) -> Path:
    """Model directories with the config.json files the real loader reads."""
    root = Path(root)
    llama = dict(_QWEN, architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256)
    eagle3 = dict(_QWEN, architectures=["LlamaForCausalLMEagle3"], model_type="llama", num_hidden_layers=1)
    dflash = dict(
        _QWEN,
        architectures=["DFlashDraftModel"],
        num_hidden_layers=1,
        num_target_layers=4,
        block_size=16,
        dflash_config={"mask_token_id": 151669, "target_layer_ids": [1, 2]},
    )
    dflash8 = dict(dflash, block_size=8)
    # A hybrid (Gated DeltaNet + attention) multimodal target, Qwen3.5/3.6 style: the
    # context length lives in text_config.
    hybrid_text = dict(_QWEN, model_type="qwen3_5_text", hidden_size=2048, num_attention_heads=16,
                       num_key_value_heads=4, head_dim=256, max_position_embeddings=262144,
                       full_attention_interval=4)
    hybrid = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
              "text_config": hybrid_text, "torch_dtype": "bfloat16"}
    # An EAGLE3 head whose attention heads do not divide its hidden size: transformers'
    # LlamaConfig refuses it when the draft config is read.
    eagle3_bad = dict(eagle3, hidden_size=5120, num_attention_heads=24)
    for name, cfg in {
        "target": _QWEN,
        "llama": llama,
        "hybrid": hybrid,
        "eagle3": eagle3,
        "eagle3-bad-heads": eagle3_bad,
        "dflash": dflash,
        "dflash8": dflash8,
    }.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    (root / "noconfig").mkdir(exist_ok=True)
    return root


M = "{models}"
T = ["--model-path", f"{M}/target"]
CASES: list[tuple[str, list[str]]] = [
    ("none", T),
    ("serving", T + ["--served-model-name", "qwen", "--host", "0.0.0.0", "--port", "30001", "--tp-size", "2",
                     "--mem-fraction-static", "0.85", "--context-length", "32768", "--enable-metrics",
                     "--api-key", "k", "--trust-remote-code"]),
    ("context-suffix", T + ["--context-length", "32k"]),
    ("context-too-long", T + ["--context-length", "65536"]),
    ("hybrid-dflash-long-context", ["--model-path", f"{M}/hybrid", "--context-length", "65536",
                                    "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                                    f"{M}/dflash"]),
    ("eagle3-draft-bad-heads", T + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                                    f"{M}/eagle3-bad-heads"]),
    ("eagle3", T + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", f"{M}/eagle3"]),
    ("eagle3-tree", T + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", f"{M}/eagle3",
                         "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
                         "--speculative-num-draft-tokens", "8"]),
    ("eagle-topk1-adjusted", T + ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
                                  f"{M}/eagle3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                  "--speculative-num-draft-tokens", "6"]),
    ("eagle-steps-only", T + ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", f"{M}/eagle3",
                              "--speculative-num-steps", "3"]),
    ("eagle-topk-without-steps", T + ["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "2"]),
    ("eagle3-tokens-without-steps", T + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                                         f"{M}/eagle3", "--speculative-num-draft-tokens", "4"]),
    ("nextn", T + ["--speculative-algorithm", "NEXTN"]),
    ("nextn-params", T + ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]),
    ("standalone", T + ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", f"{M}/target"]),
    ("llama-eagle-auto", ["--model-path", f"{M}/llama", "--speculative-algorithm", "EAGLE",
                          "--speculative-draft-model-path", f"{M}/eagle3"]),
    ("ngram", T + ["--speculative-algorithm", "NGRAM"]),
    ("ngram-params", T + ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "8",
                          "--speculative-ngram-max-bfs-breadth", "4"]),
    ("dflash", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", f"{M}/dflash"]),
    ("dflash-block-from-draft", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                                     f"{M}/dflash8"]),
    ("dflash-block8", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", f"{M}/dflash",
                           "--speculative-dflash-block-size", "8"]),
    ("dflash-block-equals-tokens", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                                        f"{M}/dflash", "--speculative-dflash-block-size", "8",
                                        "--speculative-num-draft-tokens", "8"]),
    ("dflash-block-differs", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                                  f"{M}/dflash", "--speculative-dflash-block-size", "8",
                                  "--speculative-num-draft-tokens", "4"]),
    ("dflash-block0", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", f"{M}/dflash",
                           "--speculative-dflash-block-size", "0"]),
    ("dflash-no-draft", T + ["--speculative-algorithm", "DFLASH"]),
    ("dflash-steps-forced", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                                 f"{M}/dflash", "--speculative-num-steps", "3", "--speculative-eagle-topk", "4"]),
    ("dflash-pp2", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", f"{M}/dflash",
                        "--pp-size", "2"]),
    ("dflash-window-too-small", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                                     f"{M}/dflash", "--speculative-draft-window-size", "8"]),
    ("dflash-lowercase", T + ["--speculative-algorithm", "dflash", "--speculative-draft-model-path",
                              f"{M}/dflash"]),
    ("dflash-abbreviated-flag", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model",
                                     f"{M}/dflash", "--speculative-dflash-block", "8"]),
    ("unknown-algorithm", T + ["--speculative-algorithm", "FOO"]),
    ("ddtree-algorithm", T + ["--speculative-algorithm", "DDTREE", "--speculative-draft-model-path",
                              f"{M}/dflash"]),
    ("ddtree-budget-flag", T + ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                                f"{M}/dflash", "--speculative-ddtree-budget", "64"]),
    ("misspelt-flag", T + ["--speculative-dflash-blocksize", "8"]),
    ("bad-int", T + ["--tp-size", "two"]),
    ("bad-choice", T + ["--dtype", "float8"]),
    ("no-model-path", ["--port", "30000"]),
    ("missing-model", ["--model-path", f"{M}/does-not-exist"]),
    ("model-without-config", ["--model-path", f"{M}/noconfig"]),
    ("missing-draft", T + ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                           f"{M}/does-not-exist"]),
]


def expand(argv: list[str], models: Path) -> list[str]:
    return [a.replace(M, str(models)) for a in argv]


def run_helper(python: str, models: Path, env: dict | None = None, cases=None) -> list[dict]:
    """Run CASES through tests/contract/sglang_parse_helper.py with `python`."""
    cases = CASES if cases is None else cases
    payload = json.dumps([{"id": cid, "argv": expand(argv, models)} for cid, argv in cases])
    proc = subprocess.run(
        [python, str(HELPER)],
        input=payload,
        capture_output=True,
        text=True,
        cwd="/",
        env=env,
        timeout=900,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("SGLANG-PARSE-RESULT "):
            return json.loads(line[len("SGLANG-PARSE-RESULT "):])
    raise RuntimeError(f"helper failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")


def summarize(result: dict, models: Path) -> dict:
    """The comparable part of one helper result, model root replaced by {models}."""

    def norm(v):
        return v.replace(str(models), M) if isinstance(v, str) else v

    out = {"id": result["id"], "ok": result["ok"]}
    if result["ok"]:
        out["resolved"] = {k: norm(result["resolved"].get(k)) for k in COMPARED}
    else:
        out["error_type"] = result["error_type"]
        out["error"] = norm(result["error"])
    return out


def real_python() -> str:
    out = subprocess.run(["bash", str(VENV_SCRIPT)], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def real_env() -> dict:
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("COLUMNS", "LINES", "PYTHONPATH") and not k.startswith("SGLANG_")
    }
    env["PYTHONHASHSEED"] = "0"
    return env


def record_help(python: str) -> str:
    return subprocess.run(
        [python, "-m", "sglang.launch_server", "--help"],
        capture_output=True, text=True, cwd="/", env=real_env(), check=True,
    ).stdout


def record_bad_flag(python: str) -> tuple[int, str]:
    proc = subprocess.run(
        [python, "-m", "sglang.launch_server", *BAD_FLAG_ARGV],
        capture_output=True, text=True, cwd="/", env=real_env(),
    )
    venv = str(Path(python).parent.parent)
    return proc.returncode, proc.stderr.replace(venv, "<venv>")


def record_resolve(python: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        models = make_models(tmp)
        results = run_helper(python, models, env=real_env())
        return "".join(json.dumps(summarize(r, models), sort_keys=True) + "\n" for r in results)


def main() -> int:
    python = sys.argv[1] if len(sys.argv) > 1 else real_python()
    FIXTURES.mkdir(parents=True, exist_ok=True)
    (FIXTURES / "sglang-0.5.23-help.txt").write_text(record_help(python))
    code, text = record_bad_flag(python)
    assert code == 2, code
    (FIXTURES / "sglang-0.5.23-bad-flag.txt").write_text(text)
    (FIXTURES / "sglang-0.5.23-resolve.txt").write_text(record_resolve(python))
    print(f"recorded with {python} into {FIXTURES}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
