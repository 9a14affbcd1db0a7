"""Device tensors in and out of TensorRT instances (issue 22), on TWO TEST-ONLY stand-ins:
the numpy ``tensorrt`` (conftest.py) and the cupy stand-in (``core/tests/standin_cuda``),
both of which keep "device" memory in host memory. They check which copies the backend
makes (device to device into and out of its bindings where the tensors are on the device
already, host copies otherwise), not anything about CUDA.

The tests' GPU model "devtoy" (core/tests/device_backend.py) feeds TensorRT DeviceArrays
in an ensemble, and reads TensorRT's outputs as DeviceArrays in another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import device_backend
import numpy as np
import pytest
import tritonclient.http as httpclient
from cuda_standin import installed
from despina.testing import RepositoryBuilder, RunningServer
from despina_trt_standin import SimulatedGpu, add_sub_plan

A = np.array([[1, 2, 3, 4]], np.float32)
B = np.array([[10, 20, 30, 40]], np.float32)


def _ensemble(first: str, second: str) -> str:
    tensor = '{{ name: "{}" data_type: TYPE_FP32 dims: [ 1, 4 ] }}'
    return f"""
platform: "ensemble"
input [ {tensor.format("X")}, {tensor.format("Y")} ]
output [ {tensor.format("P")}, {tensor.format("Q")} ]
ensemble_scheduling {{ step [
  {{ model_name: "{first}" model_version: -1
    input_map {{ key: "INPUT0" value: "X" }} input_map {{ key: "INPUT1" value: "Y" }}
    output_map {{ key: "OUTPUT0" value: "s" }} output_map {{ key: "OUTPUT1" value: "d" }} }},
  {{ model_name: "{second}" model_version: -1
    input_map {{ key: "INPUT0" value: "s" }} input_map {{ key: "INPUT1" value: "d" }}
    output_map {{ key: "OUTPUT0" value: "P" }} output_map {{ key: "OUTPUT1" value: "Q" }} }}
] }}
"""


@pytest.fixture
def cupy_standin() -> Iterator[Any]:
    with installed() as cupy:
        yield cupy


@pytest.fixture
def running(
    trt_standin: Any,
    cupy_standin: Any,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
) -> RunningServer:
    model_repository.add("trt", None, {"1/model.plan": add_sub_plan()})
    model_repository.add("dev", device_backend.devtoy_config("1, 4"), {"1/model.devtoy": ""})
    model_repository.add("dev_then_trt", _ensemble("dev", "trt"))
    model_repository.add("trt_then_dev", _ensemble("trt", "dev"))
    device_backend.DevToyBackend.seen.clear()
    return despina_server(model_repository.root, plugins=[SimulatedGpu(), device_backend])


def _infer(running: RunningServer, model: str) -> None:
    client = httpclient.InferenceServerClient(running.http_url)
    inputs = []
    for name, values in (("X", A), ("Y", B)):
        tensor = httpclient.InferInput(name, [1, 4], "FP32")
        tensor.set_data_from_numpy(values)
        inputs.append(tensor)
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("P"), 2 * A)
    np.testing.assert_array_equal(result.as_numpy("Q"), 2 * B)
    client.close()


def test_device_inputs_go_device_to_device_into_the_bindings_standin(
    running: RunningServer, trt_standin: Any
) -> None:
    copies = trt_standin.despina_device_memory.copies
    copies.clear()
    _infer(running, "dev_then_trt")
    # devtoy's DeviceArrays went in device to device; the outputs go to the wire, so host
    assert dict(copies) == {"copy_in": 2, "download": 2}


def test_outputs_stay_on_the_device_for_a_device_reader_standin(
    running: RunningServer, trt_standin: Any
) -> None:
    copies = trt_standin.despina_device_memory.copies
    copies.clear()
    _infer(running, "trt_then_dev")
    # host inputs from the wire; the outputs feed devtoy, which takes device inputs
    assert dict(copies) == {"upload": 2, "download_device": 2}
    assert device_backend.DevToyBackend.seen == [("DeviceArray", "DeviceArray", False)]
