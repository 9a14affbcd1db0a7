"""The core's modules import one another without a cycle, counting every import:
module level, inside functions and under ``TYPE_CHECKING`` alike."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(SRC).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The core modules ``path`` imports (``from despina import x`` counts as despina.x)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "despina":
                found.update(f"despina.{a.name}" for a in node.names)
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & modules


def test_core_modules_import_without_cycles() -> None:
    paths = {_module_name(p): p for p in SRC.rglob("*.py")}
    modules = set(paths) - {"despina"}  # the package re-exports lazily: it imports none
    graph = {name: _imports(paths[name], modules) - {name} for name in modules}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the cycle
