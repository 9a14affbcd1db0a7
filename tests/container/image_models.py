"""The image test's models: ``add_sub`` in Python and in ONNX, and ``drain``, a Python
model whose request is still running when the container gets SIGTERM."""

from __future__ import annotations

from onnx import TensorProto, helper

#: Touched by the ``drain`` model when it starts executing.
DRAIN_STARTED = "/tmp/despina-drain-started"

PYTHON_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
       { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] },
        { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1 ] }]
"""

ONNX_CONFIG = """
backend: "onnxruntime"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
       { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }]
"""

DRAIN_CONFIG = """
backend: "python"
max_batch_size: 0
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
"""

# OUTPUT0 = INPUT0, answered only once the server stopped being ready (it got SIGTERM):
# a request that is running when the container is stopped.
DRAIN_MODEL_PY = f"""
import time
import urllib.request

import triton_python_backend_utils as pb_utils


def _ready():
    try:
        with urllib.request.urlopen("http://127.0.0.1:8000/v2/health/ready", timeout=2):
            return True
    except OSError:
        return False


class TritonPythonModel:
    def execute(self, requests):
        open("{DRAIN_STARTED}", "w").close()
        deadline = time.monotonic() + 60
        while _ready() and time.monotonic() < deadline:
            time.sleep(0.1)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
"""


def onnx_add_sub() -> bytes:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1: FP32 [batch, 4], opset 17."""
    io = helper.make_tensor_value_info
    shape: list[str | int | None] = ["batch", 4]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "add_sub",
        [io(name, TensorProto.FLOAT, shape) for name in ("INPUT0", "INPUT1")],
        [io(name, TensorProto.FLOAT, shape) for name in ("OUTPUT0", "OUTPUT1")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())
