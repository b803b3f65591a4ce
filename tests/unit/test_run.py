"""adapter/run.py: one pyinfra run as one value (two runs in one process share nothing), and the
pyinfra touchpoints it arms; and, over the product's source, that nothing else holds a run's
state at module level or reaches into pyinfra's private names."""

from __future__ import annotations

import ast
import json
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleet.core.outcome import HostVerdict
from adapter import run as runs

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = sorted(p for d in ("adapter", "fleet", "tasks", "ops", "facts") for p in (ROOT / d).rglob("*.py")) + [ROOT / "deploy.py"]


def test_each_state_has_its_own_run_and_its_summary_prints_at_exit(monkeypatch):
    at_exit = []
    monkeypatch.setattr(runs.atexit, "register", lambda f, *a: at_exit.append((f, a)))
    one, two = SimpleNamespace(failed_hosts=[SimpleNamespace(name="h1")]), SimpleNamespace(failed_hosts=[])
    a, b = runs.of(one), runs.of(two)
    assert a is runs.of(one) and a is not b
    a.lost["h1"], a.begun["h1"] = "given up", object()
    assert b.lost == {} and b.begun == {} and b.rolls == {} and b.gateways == {} and b.slots == {} and b.resolved == {}
    assert at_exit == [(a.ended, ()), (b.ended, ())]
    assert a.report.failed_hosts() == {"h1"} and b.report.failed_hosts() == set()


def test_a_run_asked_for_its_outcome_writes_each_hosts_as_data_when_it_ends(tmp_path, capsys):
    run = runs.of(SimpleNamespace(failed_hosts=[SimpleNamespace(name="h2")]))
    run.report.host("h1").verdict = HostVerdict.ROLLED_BACK
    run.report.host("h1").reasons.append("smoke test failed: HTTP 500")
    run.report.host("h2").verdict = HostVerdict.PASSED_PREFLIGHT
    run.ended()
    assert not list(tmp_path.iterdir())  # not asked: nothing written
    run.outcome = str(tmp_path / "outcome.json")
    run.ended()
    said = json.loads((tmp_path / "outcome.json").read_text())
    assert said["h1"] == {"verdict": "FAILED (rolled back)", "ok": False, "action": "-", "ready_s": None,
                          "smoke": "", "reasons": ["smoke test failed: HTTP 500"], "notes": []}
    assert said["h2"]["verdict"] == "FAILED" and said["h2"]["reasons"] == ["h2: an operation failed: see its error above"]
    assert "SGLang fleet rollout summary" in capsys.readouterr().err


def test_arm_hooks_the_run_in_once(monkeypatch, capsys):
    added, signals, at_exit, exits, failed, unfinished = [], {}, [], [], [], []
    state = SimpleNamespace(add_callback_handler=added.append, failed_hosts=set(),
                            get_op_meta=lambda op: SimpleNamespace(names={"Upload sglang.env"}))
    monkeypatch.setattr(runs.signal, "signal", signals.__setitem__)
    monkeypatch.setattr(runs.atexit, "register", lambda f, *a: at_exit.append((f, a)))
    monkeypatch.setattr(runs.os, "_exit", exits.append)
    for _ in range(2):
        runs.arm(state, lambda state, host, what: failed.append((host, what)),
                 lambda run, how: unfinished.append((run, how)))
    run = runs.of(state)
    assert len(added) == 1 and set(signals) == {signal.SIGINT, signal.SIGTERM}
    assert at_exit[-1][1] == (run, "the run ended (see its error above)")
    added[0].operation_host_error(state, "h", "op")
    assert failed == [("h", "'Upload sglang.env' failed")]
    run.report.host("h").verdict = HostVerdict.INTERRUPTED
    signals[signal.SIGTERM](signal.SIGTERM, None)
    assert unfinished == [(run, "interrupted")] and exits == [runs.INTERRUPTED_EXIT]
    err = capsys.readouterr().err
    assert "Interrupted (SIGTERM): no further command runs on any host." in err and "INTERRUPTED" in err


def test_the_inventorys_callbacks_go_in_after_pyinfra_initialises_its_state():
    calls = []
    state = SimpleNamespace(init=lambda *a: calls.append(("init", a)), add_callback_handler=lambda h: calls.append(h))
    runs.on_inventory_loaded(state, "unreachable", "keepalive")
    assert calls == []
    state.init("inventory", "config")
    assert calls == [("init", ("inventory", "config")), "unreachable", "keepalive"]


# --- over the source -----------------------------------------------------------------------

MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "deque", "WeakKeyDictionary",
                 "WeakValueDictionary", "Semaphore", "BoundedSemaphore", "Event", "Lock"}
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "clear", "remove",
            "discard", "acquire", "release", "set"}


def module_level_mutables(tree: ast.Module) -> set[str]:
    """Names bound at module level to a mutable container or a synchronisation object (a constant table
    is one too, until something changes it: module_state)."""
    found = set()
    for node in tree.body:
        targets, value = ([node.target], node.value) if isinstance(node, ast.AnnAssign) else \
            (node.targets, node.value) if isinstance(node, ast.Assign) else ([], None)
        if value is None:
            continue
        if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
                isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) in MUTABLE_CALLS):
            found |= {t.id for t in targets if isinstance(t, ast.Name)}
    return found


def changed_names(tree: ast.AST) -> set[str]:
    """Names (or attributes: module.NAME) that the code changes in place or rebinds with `global`."""
    def name(n: ast.AST) -> str | None:
        return n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None

    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Global):
            out |= set(n.names)
        elif isinstance(n, (ast.Assign, ast.AugAssign, ast.Delete)):
            for t in (n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target]):
                if isinstance(t, ast.Subscript) and name(t.value):
                    out.add(name(t.value))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MUTATORS:
            if name(n.func.value):
                out.add(name(n.func.value))
    return out


def module_state(trees: dict[Path, ast.Module]) -> dict[str, set[str]]:
    """Per module, its module-level mutables that some module of the product changes."""
    changed = set().union(*(changed_names(t) for t in trees.values()))
    return {str(p.relative_to(ROOT)): module_level_mutables(t) & changed for p, t in trees.items()}


def pyinfra_private_names(tree: ast.Module) -> list[str]:
    """`x._name` where x is a name imported from pyinfra (or pyinfra itself)."""
    from_pyinfra = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    and (n.module or "").startswith("pyinfra") for a in n.names}
    from_pyinfra |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                     for a in n.names if a.name.startswith("pyinfra")}
    return [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
            and not n.attr.startswith("__") and isinstance(n.value, ast.Name) and n.value.id in from_pyinfra]


def test_no_module_holds_run_state():
    state = {module: names for module, names in module_state({p: ast.parse(p.read_text()) for p in PRODUCT}).items()
             if names}
    assert state == {}, "a run's state belongs to adapter.run.Run, not to a module"


@pytest.mark.parametrize("path", PRODUCT, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pyinfra_private_name(path):
    assert pyinfra_private_names(ast.parse(path.read_text())) == []


def test_the_source_checks_find_what_they_look_for():
    tree = ast.parse("from pyinfra import state\nA: dict[str, int] = {}\nB = set()\nC = (1, 2)\nTABLE = {1: 2}\n"
                     "def f(h):\n    A[h] = 1\n    B.add(h)\n    return state._get_module(), TABLE[h]\n")
    assert module_level_mutables(tree) == {"A", "B", "TABLE"} and pyinfra_private_names(tree) == ["state._get_module"]
    assert module_state({ROOT / "m.py": tree}) == {"m.py": {"A", "B"}}
    other = ast.parse("import m\ndef g():\n    m.TABLE.clear()\n")
    assert module_state({ROOT / "m.py": tree, ROOT / "n.py": other})["m.py"] == {"A", "B", "TABLE"}
