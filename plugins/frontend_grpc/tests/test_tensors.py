"""Tensor contents both ways: raw (tritonclient) and typed ``contents`` for every datatype,
BYTES, FP16/BF16 raw only, parameters and sequence fields, system shared memory."""

from __future__ import annotations

from typing import Any

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from despina.inference.tensors import DATATYPES
from despina.testing import RunningServer
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

TYPED_FIELD = {
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def sample(datatype: str) -> np.ndarray:
    """A 2x3 array of ``datatype`` with values at the type's edges."""
    if datatype == "BYTES":
        return np.array(
            [[b"", b"a\x00b", "é".encode()], [b"x" * 300, b"y", b"z"]], dtype=np.object_
        )
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    if datatype == "BF16":
        return np.array([[1.5, -2.0, 0.0], [3.25, 1e10, -1e-3]], dtype=ml_dtypes.bfloat16)
    dtype = np.dtype(grpcclient.triton_to_np_dtype(datatype))
    if dtype.kind == "f":
        return np.array([[0.5, -1.25, 3.0], [1e4, -0.0, 7.75]], dtype=dtype)
    info = np.iinfo(dtype)
    return np.array([[info.min, info.max, 0], [1, info.max - 1, info.min + 1]], dtype=dtype)


@pytest.fixture(scope="module")
def stub(server: RunningServer) -> Any:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.mark.parametrize("datatype", DATATYPES)
def test_raw_contents_every_datatype(client: Any, datatype: str) -> None:
    data = sample(datatype)
    tensor = grpcclient.InferInput("IN", list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    result = client.infer(f"echo_{datatype.lower()}", [tensor])
    output = result.get_output("OUT")
    assert output.datatype == datatype and list(output.shape) == [2, 3]
    np.testing.assert_array_equal(result.as_numpy("OUT"), data)


@pytest.mark.parametrize("datatype", [d for d in DATATYPES if d in TYPED_FIELD])
def test_typed_contents_every_datatype(stub: Any, datatype: str) -> None:
    data = sample(datatype)
    request = service_pb2.ModelInferRequest(model_name=f"echo_{datatype.lower()}")
    tensor = request.inputs.add(name="IN", datatype=datatype, shape=[2, 3])
    getattr(tensor.contents, TYPED_FIELD[datatype]).extend(data.reshape(-1).tolist())
    response = stub.ModelInfer(request)
    result = grpcclient.InferResult(response)
    assert response.outputs[0].datatype == datatype
    np.testing.assert_array_equal(result.as_numpy("OUT"), data)


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_types_are_raw_only(stub: Any, datatype: str) -> None:
    request = service_pb2.ModelInferRequest(model_name=f"echo_{datatype.lower()}")
    request.inputs.add(name="IN", datatype=datatype, shape=[1, 1]).contents.fp32_contents.append(
        1.0
    )
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(request)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "raw_input_contents" in info.value.details()


def test_parameters_both_ways(client: Any) -> None:
    tensor = grpcclient.InferInput("IN", [1, 2], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 2), np.float32))
    result = client.infer(
        "echo_fp32", [tensor], parameters={"flag": True, "count": 7, "ratio": 0.5, "who": "me"}
    )
    got = result.get_response().parameters
    assert got["flag"].bool_param is True
    assert got["count"].int64_param == 7
    assert got["ratio"].double_param == 0.5
    assert got["who"].string_param == "me"


@pytest.mark.parametrize("sequence_id", [42, "session-7"])
def test_sequence_fields(client: Any, sequence_id: int | str) -> None:
    tensor = grpcclient.InferInput("IN", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 1), np.float32))
    for start, end, flags in ((True, False, 1), (False, False, 0), (False, True, 2)):
        result = client.infer(
            "echo_fp32", [tensor], sequence_id=sequence_id, sequence_start=start, sequence_end=end
        )
        got = result.get_response().parameters
        correlation = got["correlation_id"]
        value = (
            correlation.string_param if isinstance(sequence_id, str) else correlation.int64_param
        )
        assert value == sequence_id
        assert got["sequence_flags"].int64_param == flags


def test_system_shared_memory_inputs_and_outputs(client: Any) -> None:
    a, b = np.arange(16, dtype=np.float32).reshape(1, 16), np.full((1, 16), 2, np.float32)
    key_in, key_out = "/despina_grpc_test_in", "/despina_grpc_test_out"
    region_in = shm.create_shared_memory_region("in", key_in, 128)
    region_out = shm.create_shared_memory_region("out", key_out, 128)
    try:
        shm.set_shared_memory_region(region_in, [a, b])
        client.unregister_system_shared_memory()
        client.register_system_shared_memory("in", key_in, 128)
        client.register_system_shared_memory("out", key_out, 128)
        status = client.get_system_shared_memory_status(as_json=True)["regions"]
        assert status["in"] == {"name": "in", "key": key_in, "byte_size": "128"}
        inputs = []
        for index, name in enumerate(("INPUT0", "INPUT1")):
            tensor = grpcclient.InferInput(name, [1, 16], "FP32")
            tensor.set_shared_memory("in", 64, offset=64 * index)
            inputs.append(tensor)
        out0 = grpcclient.InferRequestedOutput("OUTPUT0")
        out0.set_shared_memory("out", 64, offset=64)
        out1 = grpcclient.InferRequestedOutput("OUTPUT1")
        result = client.infer("add_sub", inputs, outputs=[out0, out1])
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        written = shm.get_contents_as_numpy(region_out, np.float32, [2, 16])
        np.testing.assert_array_equal(written[1], (a + b)[0])
        with pytest.raises(InferenceServerException) as info:
            client.register_system_shared_memory("in", key_in, 128)
        assert info.value.status() == "StatusCode.ALREADY_EXISTS"
        client.unregister_system_shared_memory("in")
        assert list(client.get_system_shared_memory_status(as_json=True)["regions"]) == ["out"]
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(region_in)
        shm.destroy_shared_memory_region(region_out)
