"""Readiness through ``tritonserver``: ``Model.ready()`` asks the model's own
``is_ready()``, and ``Server.ready()`` asks every READY model's with strict readiness,
as Triton's server and model readiness do (a Python model that defines ``is_ready``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonserver
from despina.testing import RepositoryBuilder

GATED_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

#: Ready while a file ``ready`` is in its model folder.
GATED_MODEL_PY = """
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.flag = os.path.join(args["model_repository"], "ready")

    def is_ready(self):
        return os.path.exists(self.flag)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""


@pytest.fixture(scope="module")
def gated_repository(repository: Path) -> Path:
    """The tests' repository and the gated model, ready."""
    root = repository
    RepositoryBuilder(root).add("gated", GATED_CONFIG, {"1/model.py": GATED_MODEL_PY})
    (root / "gated" / "ready").touch()
    return root


def _start(repository: Path, strict_readiness: bool) -> tritonserver.Server:
    return tritonserver.Server(
        model_repository=str(repository),
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
        startup_models=["add_sub", "gated"],
        strict_readiness=strict_readiness,
        exit_timeout=5,
    ).start(wait_until_ready=True, timeout=120)


@pytest.fixture
def flag(gated_repository: Path) -> Iterator[Path]:
    """The gated model's flag file, present again after the test."""
    path = gated_repository / "gated" / "ready"
    yield path
    path.touch()


def test_model_and_strict_server_readiness_ask_is_ready(gated_repository: Path, flag: Path) -> None:
    server = _start(gated_repository, strict_readiness=True)
    try:
        assert server.ready() and server.model("gated").ready()
        flag.unlink()
        assert not server.model("gated").ready()
        assert server.model("add_sub").ready()
        assert not server.ready()
        assert server.live()
        flag.touch()
        assert server.ready() and server.model("gated").ready()
    finally:
        server.stop()


def test_server_readiness_without_strict_readiness_asks_no_model(
    gated_repository: Path, flag: Path
) -> None:
    server = _start(gated_repository, strict_readiness=False)
    try:
        flag.unlink()
        assert not server.model("gated").ready()
        assert server.ready()
    finally:
        server.stop()
