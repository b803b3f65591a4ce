"""The layers, as the imports say them: fleet/ (decisions over plain data) imports none of the
others; facts/ (thin pyinfra facts) only fleet; adapter/ (the way into pyinfra) only fleet; tasks/
(the deploy's steps) and ops/ (the operator's tools) sit on those, and ops imports no tasks; and no
module imports itself back through others. Imports under `if TYPE_CHECKING:` count too: a type a module names is an
arrow all the same (a change to it is a change to the module)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("adapter", "facts", "fleet", "ops", "tasks")
MAY_IMPORT = {
    "fleet": set(),
    "facts": {"fleet"},
    "adapter": {"fleet"},
    "tasks": {"adapter", "facts", "fleet"},
    "ops": {"adapter", "facts", "fleet"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.Module) -> set[str]:
    """The modules a module imports, when it runs or only for its types (under `if TYPE_CHECKING:`)."""
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            out.add(n.module)
            out |= {f"{n.module}.{a.name}" for a in n.names}  # `from fleet import wire`: the module fleet.core.wire
    return out


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for d in PACKAGES for p in (ROOT / d).rglob("*.py")}
    return {name: {m for m in imports(ast.parse(path.read_text())) if m in modules and m != name}
            for name, path in modules.items()}


def layer_violations(g: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, deps in g.items() for b in deps
                  if b.split(".")[0] != a.split(".")[0] and b.split(".")[0] not in MAY_IMPORT[a.split(".")[0]])


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Import circles: one path through each strongly connected set of modules (Tarjan's)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_each_layer_imports_only_the_layers_below_it():
    assert layer_violations(graph()) == []


def test_no_import_circle():
    assert circles(graph()) == []


def test_the_checks_find_what_they_look_for():
    g = {"fleet.a": {"tasks.b"}, "tasks.b": {"fleet.a"}, "ops.c": {"tasks.b"}, "fleet.d": set()}
    assert layer_violations(g) == ["fleet.a -> tasks.b", "ops.c -> tasks.b"]
    assert circles(g) == [["fleet.a", "tasks.b"]]
    typed = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tasks import x\nimport fleet.y\n")
    assert imports(typed) == {"typing", "typing.TYPE_CHECKING", "tasks", "tasks.x", "fleet.y"}
