"""The spec reference (docs/spec.md), generated from the pydantic models (one source of truth).

    python -m fleet.spec.docs          # print it
    python -m fleet.spec.docs --write  # rewrite docs/spec.md between the markers (the file is made if missing)
    python -m fleet.spec.docs --check  # exit 1 if docs/spec.md is out of date
tests/unit/test_docs.py fails when docs/spec.md is out of date.
"""

from __future__ import annotations

import re
import sys
import textwrap
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from fleet.gateway.floating import Floating
from fleet.gateway.models import Gateway, GatewayRolling, Mesh, MeshTls
from fleet.monitoring.models import AlertBounds, Monitoring, Receiver
from fleet.spec.combinations import KNOWN_BAD
from fleet.spec import (
    Canary,
    ClassSpec,
    DDTree,
    DFlash,
    EagleFamily,
    EngineSpec,
    GpuClass,
    HubModel,
    HubSpec,
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

KNOWN_BAD_TITLE = "Known-bad speculative combinations (refused with SGLang's reason)"
SPEC_MD = Path(__file__).resolve().parent.parent.parent / "docs" / "spec.md"
START, END = "<!-- spec-reference:start -->", "<!-- spec-reference:end -->"
WIDTH = 110  # prose is wrapped here: no line of the reference comes near the README's limit of 300 characters
HEADER = """# Spec reference

Every key a group_data file may set, generated from `fleet/spec/` by `python -m fleet.spec.docs --write`
(`tests/unit/test_docs.py` fails when this file is out of date). Edit the models, not this file.

"""
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
    ("gateway.floating (a gateway group of two or more hosts)", Floating),
    ("gateway.mesh", Mesh),
    ("gateway.mesh.tls", MeshTls),
    ("monitoring (in a monitoring file such as group_data/monitoring.py, not a class file)", Monitoring),
    ("monitoring.receivers (each)", Receiver),
    ("monitoring.alerts", AlertBounds),
]
# Rendered after SECTIONS, kept out of it: tests/unit/test_spec.py walks SECTIONS for its own checks (hub.token is
# a secret source, as service.api_key is, and that test lists the secret fields it expects).
MORE_SECTIONS: list[tuple[str, type[BaseModel]]] = [
    ("hub", HubSpec),
    ("canary (the canary analysis: read by the deploy only, it changes no host)", Canary),
    ("a model by repository (service.model, speculative.draft_model)", HubModel),
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
    if isinstance(field.default, BaseModel):  # as group_data spells it
        return f"default `{field.default.model_dump(mode='json', exclude_none=True)!r}`"
    if field.default is not PydanticUndefined:
        return f"default `{field.default!r}`" if field.default is not None else "default unset"
    if field.default_factory is not None:
        value = field.default_factory()
        return "default `[]`" if value == [] else "default `{}`" if value == {} else "its own section below"
    return "**required**"


# A wrapped line must not start with what Markdown reads as a new block: a list marker, an ordered list's
# number, a heading, a quote, a table row.
_OPENS_A_BLOCK = re.compile(r"^([-+*>#|]|\d+[.)])")
_GLUE = "\x00"


def _wrap(text: str, first: str = "", rest: str = "") -> list[str]:
    words = " ".join(text.split()).split(" ")
    glued = [words[0]]
    for word in words[1:]:
        if _OPENS_A_BLOCK.match(word):
            glued[-1] += _GLUE + word
        else:
            glued.append(word)
    lines = textwrap.wrap(" ".join(glued), WIDTH, initial_indent=first, subsequent_indent=rest,
                          break_long_words=False, break_on_hyphens=False)
    return [line.replace(_GLUE, " ") for line in lines]


def _doc(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").strip().split("\n\n")[0].split())


def _item(name: str, what: str, description: str) -> list[str]:
    return _wrap(f"`{name}` ({what}): {description}", first="- ", rest="  ")


def reference() -> str:
    out = _wrap(
        "Each group_data file defines these top-level names (all.py gives defaults; a class file's name "
        f"replaces all.py's whole): {', '.join(f'`{k}`' for k in ClassSpec.model_fields)}. "
        "Unknown keys are errors.")
    out += [""] + _wrap(
        "Types: *text* is a string without control characters (newline, CR, tab, NUL, U+0085 ...), "
        "line or paragraph separators (U+2028, U+2029) or lone surrogates, at most the characters its "
        "entry says; an *absolute path* is text that starts with `/` and has no empty, `.` or `..` segment "
        "(no `//`, no trailing `/`); a *unit name* follows systemd's rules (below); numbers are finite "
        "(no inf or nan) and within the bounds their entry gives.")
    out += ["", "### Top-level names", ""]
    for name, field in ClassSpec.model_fields.items():
        out += _item(name, _default(field), field.description or "")
    for title, model in SECTIONS + MORE_SECTIONS:
        out += ["", f"### `{title}`", ""]
        for name, field in model.model_fields.items():
            out += _item(name, f"{_type(field)}; {_default(field)}", field.description or _doc(model))
    return "\n".join(out + known_bad()) + "\n"


def known_bad() -> list[str]:
    """The speculative combinations the spec refuses (fleet/spec/combinations.py), each with SGLang's reason."""
    out = ["", f"### {KNOWN_BAD_TITLE}", ""] + _wrap(
        "`make check` (and every deploy, before it connects) refuses these, reading service.extra_args as SGLang's "
        "parser does (aliases, `=value`, the `_` spelling, abbreviations, the last value given) and "
        "service.environment. Each refusal names the class file, the fields, what was found, SGLang's reason and "
        "where SGLang says so; tests/contract/test_sglang_parser.py proves the real SGLang 0.5.23 refuses each of "
        "its own and accepts the same settings where they are allowed.")
    out.append("")
    for bad in KNOWN_BAD:
        text = f"{' | '.join(bad.algorithms)} with {bad.combination}: \"{bad.reason}\" ({bad.source})" + (
            f"; {bad.remedy}" if bad.remedy else "")
        out += _wrap(text, first="- ", rest="  ")
    return out


def rewrite(path: Path = SPEC_MD) -> bool:
    """Put the reference between the markers of `path` (made, with its header, if missing); True if it changed."""
    text = path.read_text() if path.exists() else f"{HEADER}{START}\n{END}\n"
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    new = f"{head}{START}\n{reference()}{END}{tail}"
    if new != text or not path.exists():
        path.write_text(new)
    return new != text


def is_current(path: Path = SPEC_MD) -> bool:
    if not path.exists() or START not in (text := path.read_text()) or END not in text:
        return False
    return text.split(START, 1)[1].split(END, 1)[0] == "\n" + reference()


if __name__ == "__main__":
    if "--write" in sys.argv:
        print(f"{SPEC_MD}: {'rewritten' if rewrite() else 'up to date'}")
    elif "--check" in sys.argv:
        if not is_current():
            sys.exit(f"{SPEC_MD} is out of date: run python -m fleet.spec.docs --write")
    else:
        print(reference(), end="")
