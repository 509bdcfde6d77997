"""The layers of mrgrpo point one way, and no two modules import each other.

    foundation  errors, extras, yaml_numbers, keyvalue, command_errors, rollouts, examples, records, plotting
    core        estimators, diagnostics (and the package root, ``mrgrpo``, which re-exports them)
    rewards
    data, tasks (data sits beside tasks: it imports nothing of tasks)
    train, integrations
    experiments
    cli

A module may import its own layer and the layers below it, never one above. Every import
counts, the ones inside functions too: a lazy import is still an arrow. The direction is read
from the source (``ast``), so the test runs without the optional extras.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "mrgrpo"
ABOVE = ("mrgrpo.train", "mrgrpo.integrations", "mrgrpo.experiments", "mrgrpo.cli")
LAYERS = {
    **dict.fromkeys(("errors", "extras", "yaml_numbers", "keyvalue", "command_errors", "rollouts", "examples", "records", "plotting"), 0),
    **dict.fromkeys(("estimators", "diagnostics"), 1),
    "rewards": 2,
    **dict.fromkeys(("data", "tasks"), 3),
    **dict.fromkeys(("train", "integrations"), 4),
    "experiments": 5,
    "cli": 6,
}
# Known arrows being removed on other branches; delete each entry once its fix is merged.
ALLOWED_UPWARD: set[tuple[str, str]] = set()  # (importer, imported)
ALLOWED_PRIVATE: set[tuple[str, str, str]] = set()  # (importer, module, name)
ALLOWED_CIRCLES: set[frozenset[str]] = set()


def _module(path: Path) -> str:
    name = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


MODULES = {_module(p): p for p in sorted(SRC.rglob("*.py"))}


def _layer(module: str) -> int:
    if module == "mrgrpo":
        return LAYERS["estimators"]  # the root re-exports the core API
    return LAYERS[module.split(".")[1]]


def _imports(path: Path) -> set[str]:
    """The mrgrpo modules ``path`` imports (``from pkg import mod`` names ``pkg.mod``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names}
    return {n for n in names if n == "mrgrpo" or n.startswith("mrgrpo.")}


def test_every_package_has_a_layer():
    tops = {m.split(".")[1] for m in MODULES if m != "mrgrpo"}
    assert tops <= set(LAYERS), f"give {sorted(tops - set(LAYERS))} a layer in LAYERS"


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_no_module_imports_a_layer_above_its_own(module):
    mine = _layer(module)
    bad = sorted(
        target for target in _imports(MODULES[module])
        if _layer(target) > mine and (module, target) not in ALLOWED_UPWARD
    )
    assert not bad, f"{module} (layer {mine}) imports {bad} from above"
    if module.startswith("mrgrpo.data"):  # data sits beside tasks, not on top of it
        assert not any(name.startswith("mrgrpo.tasks") for name in _imports(MODULES[module]))


@pytest.mark.parametrize("path", sorted([*SRC.glob("data/*.py"), *SRC.glob("tasks/*.py")]), ids=lambda p: p.name)
def test_data_and_tasks_do_not_import_the_layers_above(path):
    bad = sorted(name for name in _imports(path) if name.startswith(ABOVE))
    assert not bad, f"{path.relative_to(SRC)} imports {bad}"
    if path.parent.name == "data":  # data sits beside tasks, not on top of it
        assert not any(name.startswith("mrgrpo.tasks") for name in _imports(path))


def test_no_module_imports_the_private_names_of_another():
    found = set()
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mrgrpo"):
                found |= {(module, node.module, a.name) for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__") and node.module != module}
    assert not found - ALLOWED_PRIVATE, sorted(found - ALLOWED_PRIVATE)


def _circles() -> list[frozenset[str]]:
    """The groups of modules that import each other (strongly connected, more than one module)."""
    graph = {m: {t for t in _imports(p) if t in MODULES and t != m} for m, p in MODULES.items()}
    order, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return found


def test_no_import_circles():
    circles = [sorted(c) for c in _circles() if c not in ALLOWED_CIRCLES]
    assert not circles, f"modules that import each other: {circles}"


def test_the_checker_sees_an_arrow_up_and_a_circle(tmp_path, monkeypatch):
    # The checks above would pass vacuously if _imports found nothing: show they catch both kinds.
    assert "mrgrpo.rewards.base" in _imports(MODULES["mrgrpo.tasks.checks"])
    assert _layer("mrgrpo.cli") > _layer("mrgrpo.train.job") > _layer("mrgrpo.tasks.base") > _layer("mrgrpo.rewards.base")
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from mrgrpo.tasks import base\n")  # the registry imports base ...
    b.write_text("def f():\n    from mrgrpo.tasks.registry import get_task\n")  # ... and base, lazily, the registry
    monkeypatch.setitem(MODULES, "mrgrpo.tasks.base", b)
    monkeypatch.setitem(MODULES, "mrgrpo.tasks.registry", a)
    assert frozenset({"mrgrpo.tasks.base", "mrgrpo.tasks.registry"}) in _circles()
