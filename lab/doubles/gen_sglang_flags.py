"""Dump the REAL SGLang server argument parser to lab/doubles/sglang/flags.json.

Run it with the real SGLang venv's python (tools/sglang-venv.sh prints it):

    $(tools/sglang-venv.sh) lab/doubles/gen_sglang_flags.py            # writes the file
    $(tools/sglang-venv.sh) lab/doubles/gen_sglang_flags.py --stdout   # prints it

It builds the parser exactly as `sglang.srt.server_args.prepare_server_args` does
(`argparse.ArgumentParser(prog="sglang serve")` + `ServerArgs.add_cli_args`) and writes
every action in parser order (the order `--help` prints), with sorted keys. The lab
double (lab/doubles/sglang/) rebuilds its argparse parser from this file, so the double
accepts exactly the real flags. Never edit flags.json by hand: regenerate it.

Determinism: actions keep the parser's (stable) order; a choices SET (the real parser
builds --sampling-backend's choices from a set, so its order changes with
PYTHONHASHSEED) is written sorted, with "choices_unordered": true.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "sglang", "flags.json")

# This file sits next to the DOUBLE's `sglang` package: never let it shadow the real one.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
# SGLANG_* variables change some defaults and choices (e.g. --sampling-backend's): dump
# the parser as an unconfigured host has it.
for _name in [n for n in os.environ if n.startswith("SGLANG_")]:
    del os.environ[_name]

# argparse's own action classes and the kind each one is.
_KINDS = {
    "_StoreAction": "store",
    "_StoreConstAction": "store_const",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_HelpAction": "help",
    "_VersionAction": "version",
    "_ExtendAction": "extend",
    "BooleanOptionalAction": "boolean_optional",
}

# The attributes argparse.Action itself has; anything else on a custom action is "extra".
_BASE_ATTRS = {
    "option_strings", "dest", "nargs", "const", "default", "type", "choices",
    "required", "help", "metavar", "container", "deprecated",
}


def json_safe(value):
    """A JSON value that stands for `value` (strict JSON: no NaN/Infinity)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__repr__": repr(value)}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_safe(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    return {"__repr__": repr(value)}


def type_name(t) -> str | None:
    if t is None:
        return None
    if isinstance(t, type) and t.__module__ == "builtins":
        return t.__name__
    return f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', repr(t))}"


def dump_action(action: argparse.Action) -> dict:
    cls = type(action)
    kind = _KINDS.get(cls.__name__) if cls.__module__ == "argparse" else None
    extra = {
        k: json_safe(v)
        for k, v in sorted(vars(action).items())
        if k not in _BASE_ATTRS and not k.startswith("_")
    }
    entry = {
        "option_strings": list(action.option_strings),
        "dest": action.dest,
        "kind": kind or "custom",
        "action_class": f"{cls.__module__}.{cls.__qualname__}",
        "nargs": action.nargs,  # None, int, "?", "*", "+"
        "const": json_safe(action.const),
        "default": json_safe(action.default),
        "type": type_name(action.type),
        "choices": json_safe(action.choices) if action.choices is not None else None,
        "choices_unordered": isinstance(action.choices, (set, frozenset)),
        "required": bool(action.required),
        "help": action.help,
        "metavar": json_safe(action.metavar),
        "extra": extra,
    }
    return entry


def build_parser() -> argparse.ArgumentParser:
    # Exactly what prepare_server_args does (sglang/srt/server_args.py).
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def dump() -> dict:
    warnings.filterwarnings("ignore")
    import sglang

    if not os.path.dirname(sglang.__file__).startswith(sys.prefix):
        raise SystemExit(f"not the real sglang: {sglang.__file__} (run with the real venv's python)")
    parser = build_parser()
    groups = []
    for group in parser._action_groups:
        groups.append(
            {
                "title": group.title,
                "description": group.description,
                "dests": [a.dest for a in group._group_actions],
            }
        )
    mutex = [[a.dest for a in g._group_actions] for g in parser._mutually_exclusive_groups]
    return {
        "comment": "GENERATED by lab/doubles/gen_sglang_flags.py from the real SGLang parser; "
        "do not edit.",
        "sglang_version": sglang.__version__,
        "parser": {
            "prog": parser.prog,
            "usage": parser.usage,
            "description": parser.description,
            "epilog": parser.epilog,
            "allow_abbrev": parser.allow_abbrev,
            "prefix_chars": parser.prefix_chars,
            "formatter_class": f"{parser.formatter_class.__module__}.{parser.formatter_class.__qualname__}",
            "groups": groups,
            "mutually_exclusive_groups": mutex,
        },
        "actions": [dump_action(a) for a in parser._actions],
    }


def render(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stdout", action="store_true", help="print instead of writing " + OUT)
    ap.add_argument("--out", default=OUT, help="file to write (default: %(default)s)")
    args = ap.parse_args(argv)
    text = render(dump())
    if args.stdout:
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
