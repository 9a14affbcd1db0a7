"""The gRPC frontend's public API: every name of ``__all__`` loads, type checkers see the
same names, and importing the package (as the entry module does) imports no grpc."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import despina_frontend_grpc
import pytest

INIT = Path(despina_frontend_grpc.__file__)


def test_every_public_name_resolves() -> None:
    for name in despina_frontend_grpc.__all__:
        assert getattr(despina_frontend_grpc, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = despina_frontend_grpc.Nope  # type: ignore[attr-defined]


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
    assert typed == set(despina_frontend_grpc.__all__)


def test_importing_the_entry_module_imports_no_grpc() -> None:
    code = "import sys, despina_frontend_grpc.plugin; print('grpc' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"
