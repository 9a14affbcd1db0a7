"""A model that fails to load is reported to the client without the server's file system
paths (the CVE-2025-23320 class): what the exception says stays (its type, text and line),
paths under the model's folder become relative to it, any other absolute path is dropped.
The server log keeps the full detail."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from despina.testing import RepositoryBuilder, RunningServer, http_post

pytest.importorskip("despina_backend_python")

LOCAL = ["--grpc-address=127.0.0.1", "--http-address=127.0.0.1", "--allow-metrics=false"]
CONFIG = {
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
}
RAISES = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        open("/etc/despina-secret-settings/weights.bin")  # a path outside the model
"""
RAISES_TEXT = "No such file or directory"
BROKEN = """
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests)
        return []
"""
#: An absolute path: a slash after a start, a space, a quote or a parenthesis.
ABSOLUTE = re.compile(r"(?:^|[\s'\"(=])/[\w.-]")


@pytest.fixture
def running(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> Iterator[RunningServer]:
    pbtxt = 'backend: "python"\nmax_batch_size: 0\n'
    model_repository.add("raises_in_repo", pbtxt + _pbtxt_tensors(), {"1/model.py": RAISES})
    model_repository.add("broken_in_repo", pbtxt + _pbtxt_tensors(), {"1/model.py": BROKEN})
    yield despina_server(model_repository.root, args=[*LOCAL, "--model-control-mode=explicit"])


def _pbtxt_tensors() -> str:
    return (
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )


def load(running: RunningServer, name: str, files: dict[str, str] | None = None) -> str:
    """Load ``name`` over HTTP (with ``files`` as an override); its error text."""
    body: dict[str, Any] = {}
    if files is not None:
        parameters = {"config": json.dumps({"name": name, **CONFIG})}
        for path, text in files.items():
            parameters[f"file:{path}"] = base64.b64encode(text.encode()).decode()
        body = {"parameters": parameters}
    assert running.http_port is not None
    status, _, raw = http_post(
        running.http_port, f"/v2/repository/models/{name}/load", json.dumps(body)
    )
    assert status == 400, raw
    return str(json.loads(raw)["error"])


def index_reasons(running: RunningServer) -> dict[str, str]:
    assert running.http_port is not None
    status, _, raw = http_post(running.http_port, "/v2/repository/index", "{}")
    assert status == 200, raw
    return {entry["name"]: entry.get("reason", "") for entry in json.loads(raw)}


def assert_safe(text: str, *roots: Path) -> None:
    assert "/tmp" not in text, text
    assert not ABSOLUTE.search(text), text
    for root in roots:
        assert str(root) not in text, text


@pytest.mark.parametrize("overridden", [True, False], ids=["override", "repository"])
def test_load_errors_name_no_server_paths(
    running: RunningServer, model_repository: RepositoryBuilder, overridden: bool
) -> None:
    suffix = "" if overridden else "_in_repo"
    files = (lambda text: {"1/model.py": text}) if overridden else (lambda text: None)
    raised = load(running, "raises" + suffix, files(RAISES))
    assert RAISES_TEXT in raised and "FileNotFoundError" in raised, raised
    assert "1/model.py(7): initialize" in raised, raised  # where, relative to the model
    broken = load(running, "broken" + suffix, files(BROKEN))
    assert "SyntaxError" in broken and "expected ':'" in broken, broken
    assert "(model.py, line 5)" in broken, broken
    for text in (raised, broken):
        assert_safe(text, model_repository.root, Path.cwd())
    reasons = index_reasons(running)
    if overridden:  # the index lists the repository's folders, as Triton's
        assert "raises" not in reasons and "broken" not in reasons
        return
    for text in (reasons["raises_in_repo"], reasons["broken_in_repo"]):
        assert_safe(text, model_repository.root, Path.cwd())
    assert RAISES_TEXT in reasons["raises_in_repo"]
    assert "SyntaxError" in reasons["broken_in_repo"]


def test_safe_text_rewrites_only_absolute_paths(tmp_path: Path) -> None:
    from despina.repository.redact import safe_text

    root = tmp_path / "repo"
    model = root / "m"
    text = (
        f"Error: '{model}/1/model.py' ({root}/other/1/x.py) at {model}/1/model.py(3): f; "
        f"open('/etc/secret/key.pem') in /usr/lib/python3/a.py, line 9; [{tmp_path}]"
        " and 1/model.py, a/b, https://host/path, 3/4 stay"
    )
    assert safe_text(text, model, [root]) == (
        "Error: '1/model.py' (other/1/x.py) at 1/model.py(3): f; "
        f"open('key.pem') in a.py, line 9; [{tmp_path.name}]"
        " and 1/model.py, a/b, https://host/path, 3/4 stay"
    )
