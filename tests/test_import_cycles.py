"""No module imports itself back, in the core or in any plugin: each distribution's
modules form an import graph without a cycle, counting every import (module level,
inside functions and under ``TYPE_CHECKING`` alike; relative imports resolved)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "core" / "src", *sorted(ROOT.glob("plugins/*/src"))]


def modules_of(src: Path) -> dict[str, Path]:
    """Module name -> file, for every module of the distribution whose sources are ``src``."""
    found = {}
    for path in src.rglob("*.py"):
        if any(part.endswith(".egg-info") for part in path.relative_to(src).parts):
            continue
        name = ".".join(path.relative_to(src).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imported(path: Path, name: str) -> set[str]:
    """The dotted names a module imports (``from p import x`` gives ``p.x``: a module, or
    a name of ``p``); relative imports made absolute."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def graph_of(src: Path) -> dict[str, set[str]]:
    """Module -> the modules of the same distribution it imports."""
    modules = modules_of(src)
    graph = {}
    for name, path in modules.items():
        edges = set()
        for target in imported(path, name):
            # the most specific module named: ``p.x`` when x is a module, else ``p``
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


@pytest.mark.parametrize("src", SOURCES, ids=lambda src: src.parent.name)
def test_modules_import_without_cycles(src: Path) -> None:
    graph = graph_of(src)
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming one
