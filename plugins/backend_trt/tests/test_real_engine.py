"""Real TensorRT on a real GPU: build an engine from an ONNX add/sub model with TensorRT's
builder, serve it, infer over HTTP. Skipped where TensorRT is missing (always, in this
project's CI: this test has never run)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from despina.testing import RepositoryBuilder, RunningServer

pytestmark = pytest.mark.gpu


def _tensorrt() -> Any:
    try:
        import tensorrt
    except (ImportError, OSError):
        pytest.skip("TensorRT runtime not installed")
    return tensorrt


def build_add_sub_plan(trt: Any) -> bytes:
    """An FP32 [-1, 4] add/sub engine with one profile, batch 1..8."""
    from onnx import TensorProto, helper

    io = helper.make_tensor_value_info
    shape = ["batch", 4]
    graph = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"])],
        "add_sub",
        [io(n, TensorProto.FLOAT, shape) for n in ("INPUT0", "INPUT1")],
        [io(n, TensorProto.FLOAT, shape) for n in ("OUTPUT0", "OUTPUT1")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(model.SerializeToString()), parser.get_error(0)
    config = builder.create_builder_config()
    profile = builder.create_optimization_profile()
    for name in ("INPUT0", "INPUT1"):
        profile.set_shape(name, (1, 4), (4, 4), (8, 4))
    config.add_optimization_profile(profile)
    return bytes(builder.build_serialized_network(network, config))


def test_builds_an_engine_from_onnx_and_serves_it(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    trt = _tensorrt()
    import tritonclient.http as httpclient

    model_repository.add("add_sub", None, {"1/model.plan": build_add_sub_plan(trt)})
    client = httpclient.InferenceServerClient(despina_server(model_repository.root).http_url)
    assert client.get_model_config("add_sub")["max_batch_size"] == 8
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    items = []
    for name in ("INPUT0", "INPUT1"):
        item = httpclient.InferInput(name, [3, 4], "FP32")
        item.set_data_from_numpy(a)
        items.append(item)
    result = client.infer("add_sub", items)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)
