"""A plugin takes another plugin distribution's names from that distribution's top level
only (``from despina_frontend_grpc import InferenceServicer``), and only names its
``__all__`` lists: its submodules are internal. (``despina`` itself: core/tests/
test_public_api.py.)"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = sorted(path.parent for path in ROOT.glob("plugins/*/src"))


def top_level_names(src: Path) -> set[str]:
    """The importable top-level packages and modules a distribution's ``src`` holds."""
    return {
        path.stem if path.suffix == ".py" else path.name
        for path in src.iterdir()
        if path.suffix == ".py" or (path / "__init__.py").is_file()
    }


def imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, names taken from it; [] for ``import m``) of a file's
    imports, nested ones included."""
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, []) for alias in node.names)
    return found


def test_plugins_import_other_plugins_only_through_their_public_api() -> None:
    owner = {name: plugin for plugin in PLUGINS for name in top_level_names(plugin / "src")}
    offenders = []
    for plugin in PLUGINS:
        for path in sorted((plugin / "src").rglob("*.py")):
            for line, module, names in imports(path):
                top = module.split(".")[0]
                if owner.get(top, plugin) == plugin:
                    continue  # its own code, the core's or a third party's
                public = set(getattr(importlib.import_module(top), "__all__", ()))
                if module != top or not set(names) <= public:
                    where = path.relative_to(ROOT)
                    offenders.append(f"{where}:{line}: {module} {sorted(set(names) - public)}")
    assert offenders == [], "another plugin's non-public names:\n" + "\n".join(offenders)
