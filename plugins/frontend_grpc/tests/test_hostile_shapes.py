"""Shapes no tensor can have (element count or byte size past 64 bits, negative dims)
are INVALID_ARGUMENT, with the text HTTP's 400 has too
(:func:`despina.inference.tensors.checked_element_count`); the server keeps serving."""

from __future__ import annotations

from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from despina.inference.tensors import MAX_TENSOR_BYTES
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

HUGE = 2**40
TOO_LARGE = f"the tensor would span more than {MAX_TENSOR_BYTES} bytes"
#: (shape, raw bytes sent, the problem stated)
SHAPES = [
    ((HUGE, HUGE, HUGE), b"\0" * 16, TOO_LARGE),  # the count overflows int64
    ((2**31, 2**31), b"\0" * 16, TOO_LARGE),  # the count fits, its bytes do not
    ((0, HUGE, HUGE, HUGE), b"", TOO_LARGE),  # no elements, still no such array
    ((2**62, -1), b"", "dimensions must be >= 0"),
]


def text(shape: tuple[int, ...], problem: str) -> str:
    return (
        "[request id: <id_unknown>] input 'INPUT0' for model 'add_sub' has an invalid shape "
        f"{list(shape)}: {problem}"
    )


@pytest.mark.parametrize(("shape", "data", "problem"), SHAPES)
def test_impossible_shapes_are_invalid_arguments(
    client: Any, shape: tuple[int, ...], data: bytes, problem: str
) -> None:
    request = pb.ModelInferRequest(model_name="add_sub")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=shape)
    request.raw_input_contents.extend([data, data])
    with pytest.raises(grpc.RpcError) as info:
        client._client_stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == text(shape, problem)
    ones = np.ones((1, 16), np.float32)  # the next request on the channel is served
    inputs = [grpcclient.InferInput(f"INPUT{i}", [1, 16], "FP32") for i in range(2)]
    for tensor in inputs:
        tensor.set_data_from_numpy(ones)
    np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), 2 * ones)


def test_impossible_shapes_through_tritonclient(client: Any) -> None:
    """What ``tritonclient.grpc`` sends for a shape it is given (typed contents)."""
    shape = [HUGE, HUGE, HUGE]
    tensor = grpcclient.InferInput("INPUT0", shape, "FP32")
    tensor._get_tensor().contents.fp32_contents.extend([1.0])
    other = grpcclient.InferInput("INPUT1", shape, "FP32")
    other._get_tensor().contents.fp32_contents.extend([1.0])
    with pytest.raises(InferenceServerException) as info:
        client.infer("add_sub", [tensor, other])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == text(tuple(shape), TOO_LARGE)
