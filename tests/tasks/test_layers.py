"""Layers point one way: `data` and `tasks` import nothing from the layers above them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "mrgrpo"
ABOVE = ("mrgrpo.train", "mrgrpo.integrations", "mrgrpo.experiments", "mrgrpo.cli")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted([*SRC.glob("data/*.py"), *SRC.glob("tasks/*.py")]), ids=lambda p: p.name)
def test_data_and_tasks_do_not_import_the_layers_above(path):
    bad = sorted(name for name in _imports(path) if name.startswith(ABOVE))
    assert not bad, f"{path.relative_to(SRC)} imports {bad}"
    if path.parent.name == "data":  # data sits beside tasks, not on top of it
        assert not any(name.startswith("mrgrpo.tasks") for name in _imports(path))
