"""A sequence model through the ONNX Runtime backend, over gRPC: the model's control
inputs (START, READY) and implicit state input are not config inputs (the server
provides them), and the model loads and accumulates as Triton's ONNX sequence models do."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from despina.testing import RepositoryBuilder, RunningServer
from onnx import TensorProto, helper

CONFIG = """
backend: "onnxruntime"
max_batch_size: 0
input [{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }]
output [{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }]
sequence_batching {
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }] },
    { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] }] }
  ]
  state [{
    input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ 1 ]
    initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }
  }]
}
instance_group [{ count: 1 kind: KIND_CPU }]
"""


def accumulator_model() -> bytes:
    """OUTPUT = OUTPUT_STATE = (INPUT_STATE * (1 - START) + INPUT) * READY, INT32 [1]."""
    io = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Sub", ["one", "START"], ["kept"]),
        helper.make_node("Mul", ["INPUT_STATE", "kept"], ["carried"]),
        helper.make_node("Add", ["carried", "INPUT"], ["sum"]),
        helper.make_node("Mul", ["sum", "READY"], ["OUTPUT_STATE"]),
        helper.make_node("Identity", ["OUTPUT_STATE"], ["OUTPUT"]),
    ]
    graph = helper.make_graph(
        nodes,
        "accumulator",
        [io(name, TensorProto.INT32, [1]) for name in ("INPUT", "START", "READY", "INPUT_STATE")],
        [io(name, TensorProto.INT32, [1]) for name in ("OUTPUT", "OUTPUT_STATE")],
        [helper.make_tensor("one", TensorProto.INT32, [1], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())


def test_sequence_model_with_control_and_state_inputs(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    import tritonclient.grpc as grpcclient

    model_repository.add("accumulator", CONFIG, {"1/model.onnx": accumulator_model()})
    running = despina_server(model_repository.root)
    client = grpcclient.InferenceServerClient(running.grpc_url)
    assert client.is_model_ready("accumulator")
    results = []
    for index, value in enumerate((3, 4, 5)):
        tensor = grpcclient.InferInput("INPUT", [1], "INT32")
        tensor.set_data_from_numpy(np.array([value], np.int32))
        result = client.infer(
            "accumulator",
            [tensor],
            sequence_id=7,
            sequence_start=index == 0,
            sequence_end=index == 2,
        )
        results.append(int(result.as_numpy("OUTPUT")[0]))
        assert result.as_numpy("OUTPUT_STATE") is None
    assert results == [3, 7, 12]
    client.close()
