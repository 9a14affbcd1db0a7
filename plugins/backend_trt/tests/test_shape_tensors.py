"""Shape tensors served end to end with the stand-in runtime (TEST-ONLY, see conftest.py):
Triton's shape-tensor test model (DUMMY_INPUT0 resized to the values of the shape tensor
INPUT0; OUTPUT0 gives the values back), unbatched and batched, over HTTP and gRPC; and
the stand-in's shape-tensor rules themselves."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from despina import InferenceRequest
from despina.testing import RepositoryBuilder, RunningServer
from despina_trt_standin import HostMemory, SimulatedGpu, add_sub_plan, resize_plan
from tritonclient.utils import InferenceServerException

Start = Callable[..., RunningServer]

UNBATCHED = """backend: "tensorrt"
max_batch_size: 0
input [ { name: "DUMMY_INPUT0" data_type: TYPE_FP32 dims: [ -1, -1 ] },
        { name: "INPUT0" data_type: TYPE_INT32 dims: [ 2 ] is_shape_tensor: true } ]
output [ { name: "DUMMY_OUTPUT0" data_type: TYPE_FP32 dims: [ -1, -1 ] },
         { name: "OUTPUT0" data_type: TYPE_INT64 dims: [ 2 ] is_shape_tensor: true } ]
"""


def start(repo: RepositoryBuilder, server: Start) -> RunningServer:
    return server(repo.root, ["--exit-on-error=false"], plugins=[SimulatedGpu()])


def infer(module: Any, client: Any, model: str, dummy: np.ndarray, values: list[int]) -> Any:
    """One request: DUMMY_INPUT0 and the shape tensor INPUT0 (INT32, as given)."""
    items = [
        module.InferInput("DUMMY_INPUT0", list(dummy.shape), "FP32"),
        module.InferInput("INPUT0", [len(values)], "INT32"),
    ]
    items[0].set_data_from_numpy(dummy)
    items[1].set_data_from_numpy(np.array(values, np.int32))
    return client.infer(model, items)


def test_unbatched_shape_tensor_model_over_http_and_grpc(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("resize", UNBATCHED, {"1/model.plan": resize_plan(batched=False)})
    running = start(model_repository, despina_server)
    dummy = np.arange(6, dtype=np.float32).reshape(2, 3)
    http = httpclient.InferenceServerClient(running.http_url)
    with grpcclient.InferenceServerClient(running.grpc_url) as grpc:
        for module, client in ((httpclient, http), (grpcclient, grpc)):
            for values in ([3, 5], [1, 8]):
                result = infer(module, client, "resize", dummy, values)
                np.testing.assert_array_equal(
                    result.as_numpy("DUMMY_OUTPUT0"), np.resize(dummy, values)
                )
                out = result.as_numpy("OUTPUT0")
                assert out.dtype == np.int64 and out.tolist() == values


def test_batched_shape_tensor_model_autocompletes_and_serves(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """The request's shape tensor carries no batch dimension (Triton's rule): INPUT0 is
    [1], or [2] led by the request's batch size as Triton's documentation shows, and the
    backend puts the batch's size before the value; OUTPUT0 answers [batch, 1]."""
    model_repository.add("resize", None, {"1/model.plan": resize_plan(batched=True)})
    running = start(model_repository, despina_server)
    http = httpclient.InferenceServerClient(running.http_url)
    config = http.get_model_config("resize")
    assert config["max_batch_size"] == 8
    assert [(i["name"], i["data_type"], i["dims"], i.get("is_shape_tensor", False))
            for i in config["input"]] == [
        ("DUMMY_INPUT0", "TYPE_FP32", [-1], False), ("INPUT0", "TYPE_INT32", [1], True)
    ]  # fmt: skip
    assert [(o["name"], o.get("is_shape_tensor", False)) for o in config["output"]] == [
        ("DUMMY_OUTPUT0", False), ("OUTPUT0", True)
    ]  # fmt: skip
    dummy = np.ones((3, 5), np.float32)
    with grpcclient.InferenceServerClient(running.grpc_url) as grpc:
        for module, client in ((httpclient, http), (grpcclient, grpc)):
            # the values alone, or (Triton's documented form) led by the batch size
            for values in ([4], [3, 4]):
                result = infer(module, client, "resize", dummy, values)
                assert result.as_numpy("DUMMY_OUTPUT0").shape == (3, 4)
                assert result.as_numpy("OUTPUT0").tolist() == [[4], [4], [4]]


def test_requests_with_different_shape_values_are_not_batched_together(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    config = 'backend: "tensorrt"\ndynamic_batching { max_queue_delay_microseconds: 20000 }\n'
    model_repository.add("resize", config, {"1/model.plan": resize_plan(batched=True)})
    running = start(model_repository, despina_server)
    client = httpclient.InferenceServerClient(running.http_url, concurrency=8)
    sent = []
    for index in range(16):
        width = 2 if index < 8 else 3  # a change of values ends a batch
        items = [
            httpclient.InferInput("DUMMY_INPUT0", [1, 4], "FP32"),
            httpclient.InferInput("INPUT0", [1], "INT32"),
        ]
        items[0].set_data_from_numpy(np.full((1, 4), index, np.float32))
        items[1].set_data_from_numpy(np.array([width], np.int32))
        sent.append((index, width, client.async_infer("resize", items)))
    for index, width, pending in sent:
        result = pending.get_result()
        assert result.as_numpy("OUTPUT0").tolist() == [[width]]
        assert result.as_numpy("DUMMY_OUTPUT0").tolist() == [[float(index)] * width]
    stats = client.get_inference_statistics("resize")["model_stats"][0]
    assert stats["inference_count"] == 16
    assert stats["execution_count"] < 16  # requests with equal values were batched


def test_a_batch_mixing_shape_values_runs_per_value(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """A batch no scheduler should form (different shape values) still answers each
    request with its own values: the instance runs one execution per set of values."""
    model_repository.add("resize", None, {"1/model.plan": resize_plan(batched=True)})
    running = start(model_repository, despina_server)
    [instance] = running.server.models.get("resize").instances
    widths = [2, 5, 2]
    requests = [
        InferenceRequest(
            "resize",
            {
                "DUMMY_INPUT0": np.full((1, 3), i, np.float32),
                "INPUT0": np.array([w], np.int32),
            },
        )
        for i, w in enumerate(widths)
    ]
    responses = asyncio.run(instance.execute(requests))
    for index, (width, response) in enumerate(zip(widths, responses, strict=True)):
        assert response.error is None
        assert response.outputs["OUTPUT0"].tolist() == [[width]]
        assert response.outputs["DUMMY_OUTPUT0"].tolist() == [[float(index)] * width]


def test_shape_values_outside_the_profile_are_a_client_error(
    trt_standin: Any, model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("resize", UNBATCHED, {"1/model.plan": resize_plan(batched=False)})
    running = start(model_repository, despina_server)
    http = httpclient.InferenceServerClient(running.http_url)
    dummy = np.ones((2, 2), np.float32)
    with pytest.raises(InferenceServerException) as failed:
        infer(httpclient, http, "resize", dummy, [3, 9])
    assert str(failed.value.status()) == "400"
    assert (
        "shape tensor 'INPUT0': The shape value at index 1 is expected to be in range from 1 "
        "to 8, Got: 9" in str(failed.value)
    )
    with (
        grpcclient.InferenceServerClient(running.grpc_url) as grpc,
        pytest.raises(InferenceServerException) as refused,
    ):
        infer(grpcclient, grpc, "resize", dummy, [0, 2])
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "index 0 is expected to be in range from 1 to 8, Got: 0" in str(refused.value)
    assert infer(httpclient, http, "resize", dummy, [2, 2]).as_numpy("OUTPUT0").tolist() == [2, 2]


@pytest.mark.parametrize(
    ("change", "output", "reason"),
    [
        (
            ("TYPE_INT32 dims: [ 2 ]", "TYPE_INT64 dims: [ 2 ]"),
            "INT64",
            "input 'INPUT0' for model 'resize' has data type TYPE_INT64 in the configuration "
            "but TYPE_INT32 in the engine",
        ),
        (
            ("TYPE_INT64 dims: [ 2 ]", "TYPE_INT32 dims: [ 2 ]"),
            "INT32",
            "unexpected datatype TYPE_INT32 in model configuration for shape output 'OUTPUT0', "
            "expecting TYPE_INT64 for resize",
        ),
        (
            ("TYPE_INT32 dims: [ 2 ]", "TYPE_INT32 dims: [ 3 ]"),
            "INT64",
            "unable to load model 'resize', binding 'INPUT0' shape expected by framework [2] "
            "doesn't match model configuration shape [3]",
        ),
    ],
)
def test_shape_tensor_config_errors_fail_the_load(
    trt_standin: Any,
    model_repository: RepositoryBuilder,
    despina_server: Start,
    change: tuple[str, str],
    output: str,
    reason: str,
) -> None:
    config = UNBATCHED.replace(*change)
    plan = resize_plan(batched=False, output=output)
    model_repository.add("resize", config, {"1/model.plan": plan})
    client = httpclient.InferenceServerClient(start(model_repository, despina_server).http_url)
    [entry] = client.get_model_repository_index()
    assert entry["state"] == "UNAVAILABLE"
    assert reason in entry["reason"]


# -- the stand-in's shape-tensor rules (what the backend is held to) -------------------


def context_of(trt: Any, plan: bytes) -> Any:
    logger = trt.Logger()
    engine = trt.Runtime(logger).deserialize_cuda_engine(plan)
    return engine.create_execution_context()


def test_standin_needs_shape_values_in_host_memory_within_the_profile(
    trt_standin: Any,
) -> None:
    memory: HostMemory = trt_standin.despina_device_memory
    context = context_of(trt_standin, resize_plan(batched=False))
    dummy = memory.allocate(0, 4 * 4)
    out = memory.allocate(0, 4 * 64)
    assert context.set_input_shape("DUMMY_INPUT0", (2, 2))
    assert context.set_tensor_address("DUMMY_INPUT0", dummy.ptr)
    assert context.set_tensor_address("DUMMY_OUTPUT0", out.ptr)
    shape_out = np.zeros(2, np.int64)
    assert context.set_tensor_address("OUTPUT0", shape_out.ctypes.data)
    assert context.get_tensor_shape("DUMMY_OUTPUT0") == (-1, -1)  # values not set yet
    assert not context.execute_async_v3(0)
    assert not context.set_tensor_address("INPUT0", memory.allocate(0, 8).ptr)  # device memory
    assert not context.set_tensor_address("DUMMY_INPUT0", shape_out.ctypes.data)  # host memory
    values = np.array([3, 9], np.int32)
    assert context.set_tensor_address("INPUT0", values.ctypes.data)
    assert context.get_tensor_shape("DUMMY_OUTPUT0") == (-1, -1)  # 9 is above the profile
    assert not context.execute_async_v3(0)
    values[1] = 4
    assert context.get_tensor_shape("DUMMY_OUTPUT0") == (3, 4)
    assert context.execute_async_v3(0)
    assert shape_out.tolist() == [3, 4]


def test_standin_profile_values_only_for_shape_tensors(trt_standin: Any) -> None:
    engine = trt_standin.Runtime(trt_standin.Logger()).deserialize_cuda_engine(
        resize_plan(batched=True)
    )
    assert engine.is_shape_inference_io("INPUT0") and engine.is_shape_inference_io("OUTPUT0")
    assert not engine.is_shape_inference_io("DUMMY_INPUT0")
    assert engine.get_tensor_profile_values("INPUT0", 0) == [[1, 1], [4, 1], [8, 8]]
    with pytest.raises(RuntimeError, match="not a shape tensor"):
        engine.get_tensor_profile_values("DUMMY_INPUT0", 0)
    plain = trt_standin.Runtime(trt_standin.Logger()).deserialize_cuda_engine(add_sub_plan())
    assert not plain.is_shape_inference_io("INPUT0")
