"""The public API: ``despina`` exports every name plugins use, lazily, with type
information; no plugin imports a core module other than ``despina`` itself."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import despina
import pytest

ROOT = Path(__file__).resolve().parents[2]
INIT = ROOT / "core" / "src" / "despina" / "__init__.py"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every ``despina``-package import in a file, nested ones included."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, name) for line, name in found if name.split(".")[0] == "despina"]


def test_every_public_name_resolves() -> None:
    for name in despina.__all__:
        assert getattr(despina, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = despina.Nope  # type: ignore[attr-defined]


def test_type_checkers_see_the_names_that_load_at_run_time() -> None:
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    typed = {
        alias.asname or alias.name
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert typed == set(despina.__all__) - {"__version__"}


def test_the_package_is_typed() -> None:
    assert (INIT.parent / "py.typed").is_file()


def test_importing_the_plugin_contract_stays_cheap() -> None:
    code = (
        "import sys\n"
        "from despina import hookimpl\n"
        "heavy = [m for m in ('numpy', 'google.protobuf', 'tritonclient', 'despina.serving.server')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == ""


def test_plugins_import_only_the_public_api() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((ROOT / "plugins").glob("*/src/**/*.py"))
        for line, module in _imports(path)
        if module != "despina"
    ]
    assert offenders == [], "plugins must import from 'despina' only:\n" + "\n".join(offenders)
