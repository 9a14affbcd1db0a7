"""Code is grouped by where it runs: what runs in a model's own process (``model_process``,
``wire``, ``hosting``, ``pb``) imports neither the server side (``server``) nor the
Despina core, so a model's process never loads the server (nor needs it installed, in a
foreign execution environment)."""

from __future__ import annotations

import ast
from pathlib import Path

import despina_backend_python

PACKAGE = Path(despina_backend_python.__file__).parent
MODEL_SIDE = ("model_process", "wire", "hosting", "pb")


def test_model_side_code_imports_no_server_code() -> None:
    offenders = []
    for group in MODEL_SIDE:
        for path in sorted((PACKAGE / group).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                offenders += [
                    f"{path.relative_to(PACKAGE)}:{node.lineno}: {name}"
                    for name in names
                    if name.split(".")[0] == "despina"
                    or name.startswith("despina_backend_python.server")
                ]
    assert offenders == []
