"""Parse SGLang command lines with the REAL SGLang 0.5.23, in batches.

Runs inside the real venv (tools/sglang-venv.sh), never in the project venv:

    echo '[{"id": "a", "argv": ["--model-path", "/m"]}]' | $(tools/sglang-venv.sh) sglang_parse_helper.py

stdin: a JSON list of cases {"id": str, "argv": [flags after `-m sglang.launch_server`],
       "platform": {fact: value} (optional; default: an H200, see DEFAULT_PLATFORM),
       "environment": {name: value} (optional: the unit's environment, set for that case only),
       "check": true (optional: also run `check_server_args()`, the start-up check the server
       runs after resolving and before it loads anything: entrypoints/engine.py)}.
stdout: one line `SGLANG-PARSE-RESULT <json list>`, one result per case, in order:
  {"id", "ok": true, "resolved": {field: value}}  or
  {"id", "ok": false, "stage": "parse"|"resolve"|"check", "error_type", "error", "stderr"}.

Each case does what `python -m sglang.launch_server ARGV` does before it loads
anything: `prepare_server_args(argv)` (argparse: flags, types, choices) and then
`ServerArgs.resolve_once()` (the resolution pipeline, where
srt/arg_groups/speculative_hook.py's checks run: unknown algorithm, DFLASH rules, EAGLE
step/topk rules, ...). It reads the model's and the draft's config.json as the real
server does, so the paths in argv must be directories with a config.json.

NO GPU HERE. Three stand-ins, all outside argument parsing and validation:
- `get_device()` (the auto-detection used when --device is not given) raises
  "No accelerator" without a GPU. We replace the name serving_hook imported with one
  that answers "cuda", i.e. what a GPU host's detection answers. Every check after it
  (DFLASH's "CUDA/NPU/XPU only" included) then runs unchanged, as on a CUDA host.
- The machine's facts (is_cuda, compute capability, ...) are declared with SGLang's own
  `runtime_context.override_platform(...)`, the scoped override its tests use, so the
  checks that ask "is this CUDA?" (e.g. the Mamba extra-buffer check hybrid models such
  as Qwen3.5/3.6 meet) answer as on the GPU named by the case's "platform".
  has_flashinfer stays as probed (False: no flashinfer here), so default backends can
  differ from a GPU host's; the flags and speculative checks do not depend on it.
- torchvision's C ops cannot load against CPU torch; the venv defines their schemas
  before torchvision is imported (tools/sglang-venv.sh, _sglang_fleet_torchvision_ops).
HF_HUB_OFFLINE=1: a path that is not a local directory fails as on an offline host
instead of reaching the Hub.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
warnings.filterwarnings("ignore")

MARKER = "SGLANG-PARSE-RESULT "

# Platform facts of common GPUs (SGLang's PlatformContext names).
PLATFORMS = {
    "h200": {"is_cuda": True, "is_sm90": True, "is_hopper_with_cuda_12_3": True,
             "device_capability": (9, 0), "device_sm": 90},
    "rtx-pro-6000": {"is_cuda": True, "is_sm120": True, "is_blackwell": True,
                     "device_capability": (12, 0), "device_sm": 120},
    "a6000": {"is_cuda": True, "device_capability": (8, 6), "device_sm": 86},
}
DEFAULT_PLATFORM = "h200"

# The resolved fields the contract compares (never the API key).
FIELDS = (
    "model_path",
    "served_model_name",
    "tokenizer_path",
    "host",
    "port",
    "tp_size",
    "pp_size",
    "mem_fraction_static",
    "context_length",
    "trust_remote_code",
    "enable_metrics",
    "device",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "speculative_dflash_block_size",
    "speculative_ngram_max_bfs_breadth",
    "max_running_requests",
)


def _setup():
    try:
        import sglang.srt.arg_groups.serving_hook as serving_hook
    except ImportError:
        # The lab's SGLang double (lab/doubles/sglang) runs the same cases through this
        # helper; it has no such module and detects "cuda" by itself.
        serving_hook = None
    if serving_hook is not None:
        # GPU stand-in 1 (see the module docstring): device auto-detection answers "cuda".
        serving_hook.get_device = lambda *args, **kwargs: "cuda"

    from sglang.srt.server_args import prepare_server_args

    return prepare_server_args


def _platform(facts):
    """GPU stand-in 2: SGLang's own scoped platform override (a no-op for the double)."""
    try:
        from sglang.srt.runtime_context import override_platform
    except ImportError:
        return contextlib.nullcontext()
    if isinstance(facts, str) or facts is None:
        facts = PLATFORMS[facts or DEFAULT_PLATFORM]
    return override_platform(**{k: tuple(v) if isinstance(v, list) else v for k, v in facts.items()})


def _json_safe(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


@contextlib.contextmanager
def _environment(variables):
    """The unit's environment for one case (SGLang reads its switches from os.environ when it checks)."""
    before = {k: os.environ.get(k) for k in variables or {}}
    os.environ.update(variables or {})
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_case(prepare_server_args, argv: list[str], platform=None, secrets=None, environment=None,
             check=False) -> dict:
    """secrets: {field: expected value}; the result says which the server got, never the values."""
    err = io.StringIO()
    stage = "parse"
    try:
        with contextlib.redirect_stderr(err), _platform(platform), _environment(environment):
            server_args = prepare_server_args(list(argv))
            stage = "resolve"
            server_args.resolve_once()
            if check:
                stage = "check"
                server_args.check_server_args()
            resolved = server_args.resolved_dict()
    except SystemExit as e:  # argparse: usage + "error: ..." on stderr, exit 2
        return {
            "ok": False,
            "stage": stage,
            "error_type": "SystemExit",
            "exit_code": e.code,
            "error": (err.getvalue().strip().splitlines() or [""])[-1],
            "stderr": err.getvalue()[-4000:],
        }
    except BaseException as e:  # noqa: BLE001 - report whatever the real code raised
        return {
            "ok": False,
            "stage": stage,
            "error_type": type(e).__name__,
            "error": str(e),
            "traceback_tail": traceback.format_exc().strip().splitlines()[-1],
            "stderr": err.getvalue()[-4000:],
        }
    return {
        "ok": True,
        "resolved": {k: _json_safe(resolved.get(k)) for k in FIELDS},
        "secrets_received": {k: resolved.get(k) == v for k, v in (secrets or {}).items()},
        "stderr": err.getvalue()[-4000:],
    }


def main() -> int:
    cases = json.load(sys.stdin)
    prepare_server_args = _setup()
    results = []
    for case in cases:
        result = run_case(prepare_server_args, case["argv"], case.get("platform"), case.get("secrets"),
                          case.get("environment"), case.get("check", False))
        result["id"] = case.get("id")
        results.append(result)
    sys.stdout.write(MARKER + json.dumps(results) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
