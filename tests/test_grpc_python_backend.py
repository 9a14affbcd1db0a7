"""End to end across plugins: a Triton-style Python-backend model served over gRPC, and
shared-memory regions registered over HTTP used by a gRPC inference (one registry)."""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_grpc")
pytest.importorskip("despina_backend_python")

CONFIG = """
name: "add_sub"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1, 16 ] },
        { name: "INPUT1" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1, 16 ] },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]
"""

MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if a[0, 0] < 0:
                error = pb_utils.TritonError("negative input", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
"""

LOCAL = ["--grpc-address=127.0.0.1", "--http-address=127.0.0.1", "--allow-metrics=false"]


def inputs(first: float) -> list[Any]:
    import tritonclient.grpc as grpcclient

    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    data[0, 0] = first
    tensors = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(data)
        tensors.append(tensor)
    return tensors


@pytest.fixture
def running(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> RunningServer:
    model_repository.add("add_sub", CONFIG, {"1/model.py": MODEL})
    return despina_server(model_repository.root, args=[*LOCAL, "--allow-client-shm=true"])


def test_python_backend_model_over_grpc(
    running: RunningServer, grpc_client: Callable[..., Any]
) -> None:
    from tritonclient.utils import InferenceServerException

    client = grpc_client(running)
    assert client.get_model_metadata("add_sub").platform == "python"
    result = client.infer("add_sub", inputs(5.0))
    expected = np.arange(16, dtype=np.float32).reshape(1, 16)
    expected[0, 0] = 5.0
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected * 2)
    with pytest.raises(InferenceServerException) as info:
        client.infer("add_sub", inputs(-1.0))
    assert info.value.message() == "negative input"
    received: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: received.put((result, error)))
    for index, first in enumerate((1.0, -1.0, 2.0)):
        client.async_stream_infer("add_sub", inputs(first), request_id=str(index))
    items = [received.get(timeout=60) for _ in range(3)]
    client.stop_stream()
    assert sorted(str(e) for _, e in items if e is not None) == ["negative input"]
    assert sorted(r.get_response().id for r, e in items if e is None) == ["0", "2"]


def test_region_registered_over_http_serves_grpc(
    running: RunningServer, grpc_client: Callable[..., Any], http_client: Callable[..., Any]
) -> None:
    pytest.importorskip("despina_frontend_http")
    import tritonclient.grpc as grpcclient
    import tritonclient.utils.shared_memory as shm

    key = "/despina_cross_grpc_http"
    region = shm.create_shared_memory_region("cross", key, 128)
    try:
        data = np.full((1, 16), 3, np.float32)
        shm.set_shared_memory_region(region, [data, data])
        http_client(running).register_system_shared_memory("cross", key, 128)
        client = grpc_client(running)
        assert list(client.get_system_shared_memory_status(as_json=True)["regions"]) == ["cross"]
        tensors = []
        for index, name in enumerate(("INPUT0", "INPUT1")):
            tensor = grpcclient.InferInput(name, [1, 16], "FP32")
            tensor.set_shared_memory("cross", 64, offset=64 * index)
            tensors.append(tensor)
        result = client.infer("add_sub", tensors)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data * 2)
        client.unregister_system_shared_memory("cross")
        assert http_client(running).get_system_shared_memory_status() == []
    finally:
        shm.destroy_shared_memory_region(region)
