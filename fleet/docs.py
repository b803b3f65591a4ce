"""The README's spec reference, generated from the pydantic models (one source of truth).

    python -m fleet.docs          # print it
    python -m fleet.docs --write  # rewrite README.md between the markers
tests/unit/test_docs.py fails when README.md is out of date.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from fleet.gateway import Gateway, GatewayRolling
from fleet.spec import (
    ClassSpec,
    DDTree,
    DFlash,
    EagleFamily,
    EngineSpec,
    GpuClass,
    Kind,
    Ngram,
    NoSpeculation,
    ProcessWorkload,
    Readiness,
    Rolling,
    ScopeWorkload,
    SecretSource,
    Service,
    Smoke,
    Tune,
)

START, END = "<!-- spec-reference:start -->", "<!-- spec-reference:end -->"
SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("gpu_class", GpuClass),
    ("service", Service),
    ("secret source (service.api_key, service.admin_api_key, each of service.secret_environment)", SecretSource),
    ("speculative (algorithm = none)", NoSpeculation),
    ("speculative (algorithm = EAGLE | EAGLE3 | NEXTN | STANDALONE)", EagleFamily),
    ("speculative (algorithm = NGRAM)", Ngram),
    ("speculative (algorithm = DFLASH)", DFlash),
    ("speculative (algorithm = DDTREE, provisional)", DDTree),
    ("readiness", Readiness),
    ("smoke", Smoke),
    ("rolling", Rolling),
    ("engine", EngineSpec),
    ("tune (read by make tune only)", Tune),
    ("a scope workload (an element of workloads)", ScopeWorkload),
    ("a process workload (an element of workloads)", ProcessWorkload),
    ("gateway (in a gateway file such as group_data/gateway.py, not a class file)", Gateway),
    ("gateway.rolling", GatewayRolling),
]


def _name(annotation) -> str:
    """A type as the reference names it: a constrained one by its Kind (fleet.spec), others as written."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        kinds = [m for m in annotation.__metadata__ if isinstance(m, Kind)]
        return kinds[-1].name if kinds else _name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_name(a) for a in args)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(_name(a) for a in args)}]"
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))


def _type(field) -> str:
    # pydantic moves a field's own Annotated metadata into field.metadata
    kinds = [m for m in field.metadata if isinstance(m, Kind)]
    return kinds[-1].name if kinds else _name(field.annotation)


def _default(field) -> str:
    if field.default is not PydanticUndefined:
        return f"`{field.default!r}`" if field.default is not None else "unset"
    if field.default_factory is not None:
        value = field.default_factory()
        return "`[]`" if value == [] else "`{}`" if value == {} else "see its table"
    return "**required**"


def reference() -> str:
    out = [
        "Each group_data file defines these top-level names (all.py gives defaults; a class file's name "
        f"replaces all.py's whole): {', '.join(f'`{k}`' for k in ClassSpec.model_fields)}. "
        "Unknown keys are errors.",
        "",
        "Types: *text* is a string without control characters (newline, CR, tab, NUL, U+0085 ...), "
        "line or paragraph separators (U+2028, U+2029) or lone surrogates, at most the characters its "
        "row says; an *absolute path* is text that starts with `/` and has no empty, `.` or `..` segment "
        "(no `//`, no trailing `/`); a *unit name* follows systemd's rules (below); numbers are finite "
        "(no inf or nan) and within the bounds their row gives.",
        "",
        "| top-level name | default | meaning |",
        "|---|---|---|",
    ]
    for name, field in ClassSpec.model_fields.items():
        out.append(f"| `{name}` | {_default(field)} | {field.description or ''} |")
    for title, model in SECTIONS:
        out += ["", f"#### `{title}`", "", "| key | type | default | meaning |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            desc = (field.description or (model.__doc__ or "").strip().splitlines()[0]).replace("|", "\\|")
            kind = _type(field).replace(" | ", " \\| ")
            out.append(f"| `{name}` | {kind} | {_default(field)} | {desc} |")
    return "\n".join(out) + "\n"


def rewrite(readme: Path) -> bool:
    text = readme.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    new = f"{head}{START}\n{reference()}{END}{tail}"
    changed = new != text
    readme.write_text(new)
    return changed


if __name__ == "__main__":
    if "--write" in sys.argv:
        rewrite(Path(__file__).resolve().parent.parent / "README.md")
    else:
        print(reference())
