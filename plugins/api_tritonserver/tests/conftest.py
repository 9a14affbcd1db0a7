"""A model repository the tests build (Python-backend add_sub, identity, and a decoupled
repeat) and a started ``tritonserver.Server`` over it, shared by a test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonserver
from despina.testing import ADD_SUB_MODEL_PY, RepositoryBuilder

ADD_SUB_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""

IDENTITY_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

IDENTITY_MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""

#: Decoupled: answers COUNT responses, OUT = i for the i-th, then the final flag alone.
REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

REPEAT_MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            for i in range(count):
                out = pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def build_repository(root: Path) -> Path:
    builder = RepositoryBuilder(root)
    builder.add("add_sub", ADD_SUB_CONFIG, {"1/model.py": ADD_SUB_MODEL_PY})
    builder.add("identity", IDENTITY_CONFIG, {"1/model.py": IDENTITY_MODEL_PY})
    builder.add("repeat", REPEAT_CONFIG, {"1/model.py": REPEAT_MODEL_PY})
    return root


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[tritonserver.Server]:
    """add_sub and repeat loaded (explicit control mode); identity not loaded."""
    server = tritonserver.Server(
        model_repository=str(repository),
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
        startup_models=["add_sub", "repeat"],
        exit_timeout=5,
    ).start(wait_until_ready=True, timeout=120)
    yield server
    server.stop()
