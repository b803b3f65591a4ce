"""LAB DOUBLE of sglang.srt.server_args (not SGLang): the argument parser and the
start-up checks of SGLang 0.5.23, as far as a deploy can meet them.

The parser is rebuilt from flags.json, which lab/doubles/gen_sglang_flags.py GENERATES
from the real parser: same option strings (aliases too), dests, nargs, defaults,
choices, help texts; abbreviations are accepted as argparse accepts them; anything else
is "unrecognized arguments" (exit 2). Host differences (host.json):
- the --speculative-algorithm help lists the host's `sglang_algorithms`;
- `--speculative-ddtree-budget` exists only if the host's algorithms include DDTREE
  (upstream PR 29907; the real 0.5.23 parser has no such flag).

`ServerArgs.resolve_once()` mirrors the real resolution's checks that matter to a
deploy (srt/arg_groups/speculative_hook.py, model config loading): same exception types
and messages, raised at the same point (before anything is loaded).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from decimal import Decimal
import re

from sglang import _lab

logger = logging.getLogger(__name__)

FLAGS_JSON = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "flags.json")

# Architectures whose checkpoints carry their own MTP draft layers: EAGLE/NEXTN
# without a draft path use the target itself (as in the real _handle_eagle_family).
_BUILTIN_DRAFT_ARCHS = {
    "DeepseekV32ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV4ForCausalLM",
    "Glm4MoeForCausalLM",
    "Glm4MoeLiteForCausalLM",
    "GlmMoeDsaForCausalLM",
    "BailingMoeForCausalLM",
    "BailingMoeV2ForCausalLM",
    "BailingMoeV2_5ForCausalLM",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "HYV3ForCausalLM",
    "HYV4ForCausalLM",
    "Qwen4ExpForConditionalGeneration",
}


# --------------------------------------------------------------------------------------
# argparse types named as the real ones (argparse's "invalid <name> value" uses the name)
# --------------------------------------------------------------------------------------


def human_readable_int(value: str) -> int:
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if m:
        number, suffix = m.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        )


def json_list_type(value):
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        raise argparse.ArgumentTypeError(f"Invalid JSON list: {value}. Please provide a valid JSON list.")


def nullable_str(val: str):
    if not val or val == "None":
        return None
    return val


def parse_cuda_graph_backend_arg(raw: str) -> str:
    if raw == "tc_piecewise":
        raise argparse.ArgumentTypeError("tc_piecewise was removed; select breakable, full, or disabled")
    return raw


def parse_cuda_graph_config_arg(raw: str):
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be JSON: {e}")
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"--cuda-graph-config must be a JSON object, got {type(parsed).__name__}")
    return parsed


def loads(s):  # json.loads, named as argparse reports it ("invalid loads value")
    return json.loads(s)


_TYPES = {
    None: None,
    "str": str,
    "int": int,
    "float": float,
    "json.loads": loads,
    "sglang.srt.utils.common.human_readable_int": human_readable_int,
    "sglang.srt.utils.common.json_list_type": json_list_type,
    "sglang.srt.utils.common.nullable_str": nullable_str,
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "sglang.srt.model_executor.cuda_graph_config.parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}


def _deprecated_warning(message: str) -> None:
    # The real one logs through a logger configured later: Python's last-resort handler
    # prints the bare message to stderr.
    print(f"\033[1;33m{message}\033[0m", file=sys.stderr)


class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=nargs, const=const, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _deprecated_warning(f"'{option_string}' is deprecated and will be removed in a future release.{replacement}")
        setattr(namespace, self.dest, True)


class DeprecatedStoreConstAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, const_value=None, nargs=0, default=None, **kwargs):
        self.new_flag = new_flag
        self.const_value = const_value
        super().__init__(option_strings, dest, nargs=nargs, default=default, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        replacement = f" Use '{self.new_flag}' instead." if self.new_flag else ""
        _deprecated_warning(
            f"'{option_string}' is deprecated and will be removed in a future release.{replacement}"
        )
        setattr(namespace, self.dest, self.const_value)


def _value(v):
    if v == argparse.SUPPRESS:
        return argparse.SUPPRESS  # argparse tests it by identity
    if isinstance(v, dict) and set(v) == {"__repr__"}:
        try:
            return float(v["__repr__"])
        except ValueError:
            return v["__repr__"]
    return v


def _metavar(v):
    return tuple(v) if isinstance(v, list) else v


def load_flags() -> dict:
    with open(FLAGS_JSON, encoding="utf-8") as f:
        return json.load(f)


_BUILTINS_RE = re.compile(r"Builtins: [^.]*\.")


def _algorithm_help(text: str) -> str:
    return _BUILTINS_RE.sub("Builtins: " + ", ".join(_lab.algorithms()) + ".", text, count=1)


DDTREE_BUDGET_HELP = (
    "DDTree: the number of draft-tree nodes verified in one target pass "
    "(the tree is built from one DFlash draft pass)."
)


def build_parser() -> argparse.ArgumentParser:
    data = load_flags()
    p = data["parser"]
    parser = argparse.ArgumentParser(prog=p["prog"], allow_abbrev=p["allow_abbrev"], prefix_chars=p["prefix_chars"])
    has_ddtree = "DDTREE" in _lab.algorithms()
    for a in data["actions"]:
        kind = a["kind"]
        if kind == "help":
            continue  # ArgumentParser adds its own -h/--help, as the real one does
        opts = a["option_strings"]
        kw: dict = {"dest": a["dest"], "help": _value(a["help"])}
        if a["dest"] == "speculative_algorithm" and a["help"]:
            kw["help"] = _algorithm_help(a["help"])
        if a["metavar"] is not None:
            kw["metavar"] = _metavar(a["metavar"])
        if a["required"]:
            kw["required"] = True
        default = _value(a["default"])
        cls = a["action_class"].rsplit(".", 1)[-1]
        if kind == "store" or (kind == "custom" and cls not in ("DeprecatedStoreTrueAction", "DeprecatedStoreConstAction")):
            kw.update(default=default, type=_TYPES.get(a["type"], str))
            if a["nargs"] is not None:
                kw["nargs"] = a["nargs"]
            if a["const"] is not None:
                kw["const"] = _value(a["const"])
            if a["choices"] is not None:
                kw["choices"] = a["choices"]
            action = parser.add_argument(*opts, **kw)
        elif kind in ("store_true", "store_false"):
            action = parser.add_argument(*opts, action=kind, default=default, **kw)
        elif kind in ("store_const", "append_const"):
            action = parser.add_argument(*opts, action=kind, const=_value(a["const"]), default=default, **kw)
        elif kind in ("append", "extend"):
            if a["nargs"] is not None:
                kw["nargs"] = a["nargs"]
            if a["choices"] is not None:
                kw["choices"] = a["choices"]
            action = parser.add_argument(*opts, action=kind, default=default, type=_TYPES.get(a["type"], str), **kw)
        elif kind == "count":
            action = parser.add_argument(*opts, action="count", default=default, **kw)
        elif kind == "boolean_optional":
            # The recorded strings include the "--no-X" ones BooleanOptionalAction adds.
            opts = [o for o in opts if not (o.startswith("--no-") and "--" + o[5:] in opts)]
            action = parser.add_argument(*opts, action=argparse.BooleanOptionalAction, default=default, **kw)
            action.help = kw["help"]  # recorded text already carries "(default: ...)"
        elif cls == "DeprecatedStoreTrueAction":
            action = parser.add_argument(
                *opts, action=DeprecatedStoreTrueAction, new_flag=a["extra"].get("new_flag"), default=default, **kw
            )
        elif cls == "DeprecatedStoreConstAction":
            extra = {"choices": a["choices"]} if a["choices"] is not None else {}
            action = parser.add_argument(
                *opts,
                action=DeprecatedStoreConstAction,
                new_flag=a["extra"].get("new_flag"),
                const_value=_value(a["extra"].get("const_value")),
                nargs=a["nargs"],
                default=default,
                **extra,
                **kw,
            )
        else:  # pragma: no cover - a kind flags.json never had
            raise RuntimeError(f"lab double: unknown action kind {kind!r} for {opts}")
        del action
        if a["dest"] == "speculative_dflash_block_size" and has_ddtree:
            parser.add_argument(
                "--speculative-ddtree-budget", type=int, default=None, help=DDTREE_BUDGET_HELP
            )
    return parser


# --------------------------------------------------------------------------------------
# ServerArgs and resolution
# --------------------------------------------------------------------------------------


class ServerArgs:
    """The parsed arguments; `resolve_once()` applies the real start-up decisions."""

    def __init__(self, **fields):
        self.__dict__.update(fields)
        self._resolution_finished = False
        self._launch_command = None
        self._hf_config = {}
        self._context_len = None

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "ServerArgs":
        return cls(**vars(args))

    @property
    def launch_command(self):
        return self._launch_command

    def resolve_once(self) -> None:
        if self._resolution_finished:
            return
        run_resolution_pipeline(self)
        self._resolution_finished = True

    def resolved_dict(self) -> dict:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def url(self) -> str:
        host = self.host
        if not host or host == "0.0.0.0":
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def __repr__(self) -> str:
        return "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in self.resolved_dict().items()) + ")"


def _config_keys(action: argparse.Action) -> set[str]:
    # a YAML key may be any long spelling of a flag, dashes or underscores
    return {action.dest} | {o[2:].replace("-", "_") for o in action.option_strings if o.startswith("--")}


def merge_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`--config FILE.yaml`, as 0.5.23's ConfigArgumentMerger reads it: the file's keys become
    flags placed BEFORE the command line's (the command line wins). Only the exact token
    `--config` is seen (`--config=F` is not merged: argparse then just stores it); one file only;
    .yaml/.yml only; booleans of store_true flags become the bare flag, others `--k true|false`;
    lists repeat values after one flag; dicts become JSON; the rest str(); a flag of another kind
    (--enable-x/--no-enable-x, a deprecated switch) is refused. Errors are ValueError with the real
    messages, raised before parsing (a traceback, exit 1)."""
    if "--config" not in argv:
        return argv
    at = [i for i, a in enumerate(argv) if a == "--config"]
    if len(at) > 1:
        raise ValueError("Multiple config files specified! Only one allowed.")
    if at[0] == len(argv) - 1:
        raise ValueError("No config file specified after --config flag!")
    path = argv[at[0] + 1]
    if os.path.splitext(path)[1].lower() not in (".yaml", ".yml"):
        raise ValueError(f"Config file must be YAML format, got: {os.path.splitext(path)[1]}")
    if not os.path.exists(path):
        raise ValueError(f"Config file not found: {path}")
    import yaml  # as the real one: PyYAML, imported only when a config is given

    try:
        with open(path) as f:
            config = yaml.safe_load(f)
    except Exception as e:
        logger.error(f"Failed to read config file {path}: {e}")
        raise
    config = {} if config is None else config
    if not isinstance(config, dict):
        raise ValueError("Config file must contain a dictionary at root level")
    store_true = {k for a in parser._actions if isinstance(a, argparse._StoreTrueAction) for k in _config_keys(a)}
    # as the real one: only store_true and single-value flags may be set from the file
    supported = [a for a in parser._actions
                 if isinstance(a, (argparse._StoreTrueAction, argparse._StoreAction)) or a.nargs is None]
    supported_keys = {k for a in supported for k in _config_keys(a)}
    unsupported = {k: a for a in parser._actions if a.option_strings and a not in supported
                   and not {"--config", "--help", "-h"} & set(a.option_strings)
                   for k in _config_keys(a) if k not in supported_keys}
    merged: list[str] = []
    for key, value in config.items():
        if key.replace("-", "_") in unsupported:
            action = unsupported[key.replace("-", "_")]
            raise ValueError(f"Unsupported config option '{key.replace('-', '_')}' with action "
                             f"'{action.__class__.__name__}'")
        if isinstance(value, bool):
            if key.replace("-", "_") in store_true:
                merged += [f"--{key}"] if value else []
            else:
                merged += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            merged += [f"--{key}", *map(str, value)] if value else []
        elif isinstance(value, dict):
            merged += [f"--{key}", json.dumps(value)]
        else:
            merged += [f"--{key}", str(value)]
    return merged + argv[: at[0]] + argv[at[0] + 2 :]


def prepare_server_args(argv: list[str]) -> ServerArgs:
    parser = build_parser()
    command = " ".join(shlex.quote(a) for a in argv)
    raw_args = parser.parse_args(merge_config(parser, list(argv)))
    logging.basicConfig(
        level=getattr(logging, str(raw_args.log_level).upper(), logging.INFO),
        format="[%(asctime)s] %(message)s",
        datefmt="%Y-%m-%d %H:%M:%S",
        force=True,
    )
    server_args = ServerArgs.from_cli_args(raw_args)
    server_args._launch_command = command
    return server_args


class StrictDataclassClassValidationError(ValueError):
    """Named as huggingface_hub's, which transformers raises for an invalid config."""


def _validate_config(config: dict) -> None:
    # transformers' LlamaConfig.validate_architecture (Llama-style heads, EAGLE3 drafts too)
    if config.get("model_type") == "llama":
        hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
        if isinstance(hidden, int) and isinstance(heads, int) and heads and hidden % heads:
            raise StrictDataclassClassValidationError(
                "Class validation error for validator 'validate_architecture':\n"
                f"    ValueError: The hidden size ({hidden}) is not a multiple of the number of attention "
                f"heads ({heads})."
            )


def get_context_length(config: dict) -> int:
    """As SGLang derives it from the (text) config: first known key, times a rope factor."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    rope = text.get("rope_scaling") or None
    factor = 1
    if rope:
        factor = rope.get("factor", 1)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"):
        if text.get(key) is not None:
            return int(factor * text[key])
    return 2048


def get_config(path: str, **_kwargs) -> dict:
    """What the HF config loader would answer for a local path (no Hub in the lab)."""
    if not os.path.isdir(path):
        if path.startswith(("/", ".", "~")) or path.count("/") > 1:
            raise OSError(
                f"Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{path}'. "
                "Use `repo_type` argument if needed."
            )
        raise OSError(
            "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find "
            "them in the cached files.\nCheck your internet connection or see how to run the "
            "library in offline mode at 'https://huggingface.co/docs/transformers/installation#offline-mode'."
        )
    config_file = os.path.join(path, "config.json")
    if not os.path.isfile(config_file):
        raise ValueError(f"Unrecognized model in {path}. Should have a `model_type` key in its config.json.")
    try:
        with open(config_file, encoding="utf-8") as f:
            config = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise OSError(f"It looks like the config file at '{config_file}' is not a valid JSON file.")
    if not isinstance(config, dict) or "model_type" not in config:
        raise ValueError(f"Unrecognized model in {path}. Should have a `model_type` key in its config.json.")
    _validate_config(config)
    return config


def run_resolution_pipeline(server_args: ServerArgs) -> None:
    handle_model_config(server_args)
    handle_missing_default_values(server_args)
    handle_memory(server_args)
    handle_speculative_decoding(server_args)


def handle_model_config(a: ServerArgs) -> None:
    a._hf_config = get_config(a.model_path, trust_remote_code=a.trust_remote_code)
    context = get_context_length(a._hf_config)
    if a.context_length is not None:
        if a.context_length > context:
            msg = (
                f"Warning: User-specified context_length ({a.context_length}) is greater than the derived "
                f"context_length ({context}). This may lead to incorrect model outputs or CUDA errors. "
                "Note that the derived context_length may differ from max_position_embeddings in the "
                "model's config."
            )
            if os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "").lower() in ("true", "1", "yes", "y"):
                logger.warning(msg)
            else:
                raise ValueError(
                    f"{msg} To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
                )
        context = a.context_length
    a._context_len = int(context)


def handle_missing_default_values(a: ServerArgs) -> None:
    if a.tokenizer_path is None:
        a.tokenizer_path = a.model_path
    if a.served_model_name is None:
        a.served_model_name = a.model_path
    if a.device is None:
        a.device = "cuda"
    a.device = a.device.split(":")[0]
    if a.random_seed is None:
        a.random_seed = 42 + (os.getpid() % 1000000)


def handle_memory(a: ServerArgs) -> None:
    if a.mem_fraction_static is None:
        # The real default comes from the GPU's memory (a reserve for activations and CUDA
        # graphs); this approximation gives the same order on the lab's GPU sizes.
        gpu_gib = float(_lab.host_config().get("gpu_memory_mib", 81920)) / 1024
        reserve = 6 + (2 if a.tp_size > 1 else 0) + (2 if a.speculative_algorithm else 0)
        a.mem_fraction_static = round(max(0.5, min(0.92, (gpu_gib - reserve) / gpu_gib)), 3)


class SpeculativeAlgorithm:
    """The host's engine knows `sglang_algorithms` (host.json); NEXTN aliases EAGLE."""

    @staticmethod
    def from_string(name):
        if name is None:
            return None
        upper = name.upper()
        known = set(_lab.algorithms())
        if upper in known:
            return upper
        if upper == "NEXTN" and "EAGLE" in known:
            return "EAGLE"
        raise ValueError(f"Unknown speculative algorithm name: {name}")


def _resolve_speculative_algorithm_alias(speculative_algorithm, speculative_draft_model_path, trust_remote_code=False):
    if speculative_draft_model_path:
        get_config(speculative_draft_model_path, trust_remote_code=trust_remote_code)
    if speculative_algorithm in ("NEXTN", "EAGLE"):
        return "EAGLE"
    return speculative_algorithm


def handle_speculative_decoding(a: ServerArgs) -> None:
    if a.speculative_draft_model_path is not None and a.speculative_draft_model_revision is None:
        a.speculative_draft_model_revision = "main"
    if a.speculative_algorithm is not None:
        a.speculative_algorithm = a.speculative_algorithm.upper()
    a.speculative_algorithm = _resolve_speculative_algorithm_alias(
        a.speculative_algorithm, a.speculative_draft_model_path, trust_remote_code=a.trust_remote_code
    )
    if a.speculative_draft_window_size is not None:
        if int(a.speculative_draft_window_size) <= 0:
            raise ValueError(
                f"--speculative-draft-window-size must be positive, got {int(a.speculative_draft_window_size)}."
            )
    if a.speculative_algorithm is None:
        if getattr(a, "speculative_ddtree_budget", None) is not None:
            logger.warning("--speculative-ddtree-budget has no effect without --speculative-algorithm DDTREE.")
        return
    algo = SpeculativeAlgorithm.from_string(a.speculative_algorithm)
    if algo == "DFLASH":
        _handle_dflash(a)
    elif algo == "DDTREE":
        _handle_ddtree(a)
    elif algo in ("EAGLE", "EAGLE3", "STANDALONE"):
        _handle_eagle_family(a)
    elif algo == "NGRAM":
        _handle_ngram(a)
    else:
        _handle_max_running_requests(a, "speculative decoding")


def _handle_max_running_requests(a: ServerArgs, what: str) -> None:
    if a.max_running_requests is None:
        a.max_running_requests = 48
        logger.warning(
            "Max running requests is reset to 48 for speculative decoding. You can override this by "
            "explicitly setting --max-running-requests."
        )


def _dflash_block_size_from_draft(path: str):
    try:
        cfg = get_config(path)
    except Exception as e:  # noqa: BLE001 - the real one warns and defaults
        logger.warning(
            "Failed to infer DFLASH block_size from draft model config; defaulting "
            "speculative_num_draft_tokens to 16. Error: %s",
            e,
        )
        return None
    block = (cfg.get("dflash_config") or {}).get("block_size") or cfg.get("block_size")
    return int(block) if block else None


def _handle_dflash(a: ServerArgs, algorithm: str = "DFLASH") -> None:
    if not (a.device.startswith("cuda") or a.device in ("npu", "xpu")):
        raise ValueError(
            f"{algorithm} speculative decoding is not supported by CudaPlatform on device {a.device!r}."
        )
    if a.pp_size != 1:
        raise ValueError(f"Currently {algorithm} speculative decoding only supports pp_size == 1.")
    if a.speculative_draft_model_path is None:
        raise ValueError(f"{algorithm} speculative decoding requires setting --speculative-draft-model-path.")
    if a.speculative_num_steps is None:
        a.speculative_num_steps = 1
    elif int(a.speculative_num_steps) != 1:
        logger.warning(
            "DFLASH only supports speculative_num_steps == 1; overriding speculative_num_steps=%s to 1.",
            a.speculative_num_steps,
        )
        a.speculative_num_steps = 1
    if a.speculative_eagle_topk is None:
        a.speculative_eagle_topk = 1
    elif int(a.speculative_eagle_topk) != 1:
        logger.warning(
            "DFLASH only supports speculative_eagle_topk == 1; overriding speculative_eagle_topk=%s to 1.",
            a.speculative_eagle_topk,
        )
        a.speculative_eagle_topk = 1
    if a.speculative_dflash_block_size is not None:
        if int(a.speculative_dflash_block_size) <= 0:
            raise ValueError(
                "DFLASH requires --speculative-dflash-block-size to be positive, "
                f"got {a.speculative_dflash_block_size}."
            )
        if a.speculative_num_draft_tokens is not None and int(a.speculative_num_draft_tokens) != int(
            a.speculative_dflash_block_size
        ):
            raise ValueError(
                "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set "
                "but they differ. For DFLASH they must match. "
                f"speculative_num_draft_tokens={a.speculative_num_draft_tokens}, "
                f"speculative_dflash_block_size={a.speculative_dflash_block_size}."
            )
        a.speculative_num_draft_tokens = int(a.speculative_dflash_block_size)
    if a.speculative_num_draft_tokens is None:
        inferred = _dflash_block_size_from_draft(a.speculative_draft_model_path)
        if inferred is None:
            inferred = 16
            logger.warning("speculative_num_draft_tokens is not set; defaulting to %d for DFLASH.", inferred)
        a.speculative_num_draft_tokens = inferred
    if a.speculative_draft_window_size is not None:
        if a.speculative_draft_window_size < int(a.speculative_num_draft_tokens):
            raise ValueError(
                "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). "
                f"window_size={a.speculative_draft_window_size}, block_size={a.speculative_num_draft_tokens}."
            )
    _handle_max_running_requests(a, "DFLASH")


def _handle_ddtree(a: ServerArgs) -> None:
    # Only on hosts whose engine has DDTree (host.json); PR 29907's shape: a DFlash
    # draft, a block size, and a verify budget.
    _handle_dflash(a, algorithm="DDTREE")
    budget = getattr(a, "speculative_ddtree_budget", None)
    if budget is not None and int(budget) <= 0:
        raise ValueError(f"DDTREE requires --speculative-ddtree-budget to be positive, got {budget}.")


def _auto_choose_speculative_params(a: ServerArgs, model_arch: str):
    if a.speculative_algorithm == "STANDALONE":
        return (3, 1, 4)
    if model_arch in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"):
        return (5, 4, 8)
    return (3, 1, 4)


def _handle_eagle_family(a: ServerArgs) -> None:
    _handle_max_running_requests(a, "EAGLE")
    archs = a._hf_config.get("architectures") or ["UnknownForCausalLM"]
    model_arch = archs[0]
    if model_arch in _BUILTIN_DRAFT_ARCHS and a.speculative_draft_model_path is None:
        a.speculative_draft_model_path = a.model_path
        a.speculative_draft_model_revision = a.revision
    if not a.speculative_adaptive and a.speculative_num_steps is None:
        assert a.speculative_eagle_topk is None and a.speculative_num_draft_tokens is None
        (
            a.speculative_num_steps,
            a.speculative_eagle_topk,
            a.speculative_num_draft_tokens,
        ) = _auto_choose_speculative_params(a, model_arch)
    if a.speculative_eagle_topk == 1 and a.speculative_num_draft_tokens != a.speculative_num_steps + 1:
        logger.warning(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        )
        a.speculative_num_draft_tokens = a.speculative_num_steps + 1
    if a.speculative_eagle_topk > 1 and a.page_size is not None and a.page_size > 1:
        if a.attention_backend not in ("flashinfer", "fa3", "triton"):
            raise ValueError(
                "speculative_eagle_topk > 1 with page_size > 1 is only supported on "
                f"('flashinfer', 'fa3', 'triton'); got attention_backend={a.attention_backend!r}. "
                "Use page_size == 1 or one of those backends."
            )


def _handle_ngram(a: ServerArgs) -> None:
    _handle_max_running_requests(a, "NGRAM")
    a.enable_mixed_chunk = False
    a.speculative_eagle_topk = a.speculative_ngram_max_bfs_breadth
    if a.speculative_num_draft_tokens is None:
        a.speculative_num_draft_tokens = 12
        logger.warning(
            "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. "
            "You can override this by explicitly setting --speculative-num-draft-tokens."
        )
    if a.speculative_num_steps is None:
        a.speculative_num_steps = a.speculative_num_draft_tokens // a.speculative_eagle_topk
    logger.warning("The mixed chunked prefill are disabled because of using ngram speculative decoding.")
