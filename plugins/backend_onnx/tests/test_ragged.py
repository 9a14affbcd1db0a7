"""Ragged batching through the ONNX Runtime backend, over HTTP: requests of different
lengths are batched together as one flat input, the server generates the batch inputs
(accumulated element counts with zero, element counts, item shapes), and a scattered batch output is
split back per request by the ragged input's shapes."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
from despina.testing import RepositoryBuilder, RunningServer
from onnx import TensorProto, helper

CONFIG = """
backend: "onnxruntime"
max_batch_size: 16
input [{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }]
batch_input [
  { kind: BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO target_name: "INDEX"
    data_type: TYPE_INT32 source_input: "INPUT" },
  { kind: BATCH_ELEMENT_COUNT target_name: "COUNT" data_type: TYPE_FP32 source_input: "INPUT" },
  { kind: BATCH_ITEM_SHAPE target_name: "ITEM_SHAPE" data_type: TYPE_INT32 source_input: "INPUT" }
]
output [
  { name: "SUM" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "MEAN" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "DOUBLE" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "LENGTH" data_type: TYPE_INT32 dims: [ 1 ] }
]
batch_output [{ target_name: "DOUBLE" kind: BATCH_SCATTER_WITH_INPUT_SHAPE source_input: "INPUT" }]
instance_group [{ count: 1 kind: KIND_CPU }]
dynamic_batching { max_queue_delay_microseconds: 100000 }
"""

CLIENTS = 8
ROUNDS = 5


def ragged_sum_model() -> bytes:
    """SUM/MEAN per request from the flat INPUT [n], INDEX [r+1] (accumulated counts with
    a leading zero) and COUNT [r]; DOUBLE = 2 * INPUT, flat; LENGTH = ITEM_SHAPE [r, 1]."""
    io = helper.make_tensor_value_info
    const = helper.make_tensor
    nodes = [
        helper.make_node("CumSum", ["INPUT", "axis0"], ["cs"]),
        helper.make_node("Concat", ["zero", "cs"], ["padded"], axis=0),
        helper.make_node("Gather", ["padded", "INDEX"], ["bounds"], axis=0),
        helper.make_node("Slice", ["bounds", "one", "big"], ["hi"]),
        helper.make_node("Slice", ["bounds", "start", "minus_one"], ["lo"]),
        helper.make_node("Sub", ["hi", "lo"], ["sums"]),
        helper.make_node("Div", ["sums", "COUNT"], ["means"]),
        helper.make_node("Unsqueeze", ["sums", "one"], ["SUM"]),
        helper.make_node("Unsqueeze", ["means", "one"], ["MEAN"]),
        helper.make_node("Mul", ["INPUT", "two"], ["DOUBLE"]),
        helper.make_node("Identity", ["ITEM_SHAPE"], ["LENGTH"]),
    ]
    inits = [
        const("axis0", TensorProto.INT64, [], [0]),
        const("zero", TensorProto.FLOAT, [1], [0.0]),
        const("two", TensorProto.FLOAT, [], [2.0]),
        const("one", TensorProto.INT64, [1], [1]),
        const("start", TensorProto.INT64, [1], [0]),
        const("minus_one", TensorProto.INT64, [1], [-1]),
        const("big", TensorProto.INT64, [1], [2**31]),
    ]
    graph = helper.make_graph(
        nodes,
        "ragged_sum",
        [
            io("INPUT", TensorProto.FLOAT, ["n"]),
            io("INDEX", TensorProto.INT32, ["r1"]),
            io("COUNT", TensorProto.FLOAT, ["r"]),
            io("ITEM_SHAPE", TensorProto.INT32, ["r", 1]),
        ],
        [
            io("SUM", TensorProto.FLOAT, ["r", 1]),
            io("MEAN", TensorProto.FLOAT, ["r", 1]),
            io("DOUBLE", TensorProto.FLOAT, ["n"]),
            io("LENGTH", TensorProto.INT32, ["r", 1]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return bytes(model.SerializeToString())


def test_ragged_batches_with_batch_inputs_and_scattered_output(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    import tritonclient.http as httpclient

    model_repository.add("ragged", CONFIG, {"1/model.onnx": ragged_sum_model()})
    running = despina_server(model_repository.root, ["--allow-grpc=false"])
    barrier = threading.Barrier(CLIENTS)
    failures: list[str] = []

    def client(index: int) -> None:
        connection = httpclient.InferenceServerClient(running.http_url)
        for round_ in range(ROUNDS):
            length = 1 + (index * 3 + round_) % 11  # lengths differ across requests
            data = np.arange(length, dtype=np.float32).reshape(1, length) + index
            tensor = httpclient.InferInput("INPUT", [1, length], "FP32")
            tensor.set_data_from_numpy(data)
            barrier.wait(60)
            result = connection.infer("ragged", [tensor])
            expected = {
                "SUM": data.sum(axis=1, keepdims=True),
                "MEAN": data.mean(axis=1, keepdims=True),
                "DOUBLE": data * 2,
                "LENGTH": np.array([[length]], np.int32),
            }
            for name, want in expected.items():
                got = result.as_numpy(name)
                if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5):
                    failures.append(f"client {index} round {round_} {name}: {got} != {want}")
        connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive()
    assert not failures
    stats = httpclient.InferenceServerClient(running.http_url).get_inference_statistics("ragged")
    model_stats = stats["model_stats"][0]
    assert model_stats["inference_count"] == CLIENTS * ROUNDS
    # Requests of different lengths ran together: fewer executions than requests.
    assert model_stats["execution_count"] < model_stats["inference_count"]
