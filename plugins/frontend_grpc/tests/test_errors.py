"""Every error case answers with Triton's status code and text, and the next request on
the same channel succeeds."""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from despina.testing import RunningServer
from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc
from tritonclient.utils import InferenceServerException

ONES = np.ones(16, np.float32).tobytes()
NOT_FOUND, INVALID, UNAVAILABLE = (
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.UNAVAILABLE,
)


def infer_request(
    model: str = "add_sub", version: str = "", raw: bool = True, shape: tuple[int, ...] = (1, 16)
) -> Any:
    request = pb.ModelInferRequest(model_name=model, model_version=version)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=shape)
    if raw:
        request.raw_input_contents.extend([ONES, ONES])
    return request


def bytes_request(shape: list[int], data: bytes) -> Any:
    request = pb.ModelInferRequest(model_name="echo_bytes")
    request.inputs.add(name="IN", datatype="BYTES", shape=shape)
    request.raw_input_contents.append(data)
    return request


TWO_STRINGS = b"\x01\x00\x00\x00a\x02\x00\x00\x00bc"


def mutate(change: Callable[[Any], None], **kwargs: Any) -> Any:
    request = infer_request(**kwargs)
    change(request)
    return request


def _typed(request: Any, counts: tuple[int, int] = (16, 16)) -> None:
    for tensor, count in zip(request.inputs, counts, strict=True):
        tensor.contents.fp32_contents.extend([1.0] * count)


def _shm_input(request: Any) -> None:
    parameters = request.inputs[0].parameters
    parameters["shared_memory_region"].string_param = "nope"
    parameters["shared_memory_byte_size"].int64_param = 64


CASES: list[tuple[str, str, Any, grpc.StatusCode, str]] = [
    (
        "unknown model",
        "ModelInfer",
        infer_request("nope"),
        NOT_FOUND,
        "Request for unknown model: 'nope' is not found",
    ),
    (
        "unknown version",
        "ModelInfer",
        infer_request(version="3"),
        NOT_FOUND,
        "Request for unknown model: 'add_sub' version 3 is not found",
    ),
    (
        "bad shape",
        "ModelInfer",
        infer_request(shape=(1, 15)),
        INVALID,
        "[request id: <id_unknown>] unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,16], got [1,15]. ",
    ),
    (
        "negative shape",
        "ModelInfer",
        infer_request(shape=(-1, 16)),
        INVALID,
        "[request id: <id_unknown>] input 'INPUT0' for model 'add_sub' has an invalid shape [-1, 16]: dimensions must be >= 0",
    ),
    (
        "wrong datatype",
        "ModelInfer",
        mutate(lambda r: [setattr(t, "datatype", "INT32") for t in r.inputs]),
        INVALID,
        "[request id: <id_unknown>] inference input 'INPUT0' data-type is 'INT32', but model 'add_sub' expects 'FP32'",
    ),
    (
        "unknown datatype",
        "ModelInfer",
        mutate(lambda r: setattr(r.inputs[0], "datatype", "FOO")),
        INVALID,
        "[request id: <id_unknown>] inference input 'INPUT0' data-type is '<invalid>', but model 'add_sub' expects 'FP32'",
    ),
    (
        "missing raw entry",
        "ModelInfer",
        mutate(lambda r: r.raw_input_contents.pop()),
        INVALID,
        "unable to find data for input tensor 'INPUT1' for model 'add_sub' in request.",
    ),
    (
        "extra raw entry",
        "ModelInfer",
        mutate(lambda r: r.raw_input_contents.append(ONES)),
        INVALID,
        "[request id: <id_unknown>] expected 2 entries in raw_input_contents for model 'add_sub', got 3",
    ),
    (
        "raw size",
        "ModelInfer",
        mutate(lambda r: r.raw_input_contents.__setitem__(0, b"abc")),
        INVALID,
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 64, got 3",
    ),
    (
        "no data",
        "ModelInfer",
        infer_request(raw=False),
        INVALID,
        "unable to find data for input tensor 'INPUT0' for model 'add_sub' in request.",
    ),
    (
        "typed count",
        "ModelInfer",
        mutate(lambda r: _typed(r, (16, 15)), raw=False),
        INVALID,
        "[request id: <id_unknown>] input byte size mismatch for input 'INPUT1' for model 'add_sub'. Expected 64, got 60",
    ),
    (
        "typed field",
        "ModelInfer",
        mutate(lambda r: r.inputs[0].contents.int_contents.extend([1] * 16), raw=False),
        INVALID,
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'add_sub' of type 'INT32', expected datatype 'FP32'",
    ),
    (
        "typed and raw",
        "ModelInfer",
        mutate(lambda r: r.inputs[0].contents.fp32_contents.extend([1.0] * 16)),
        INVALID,
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'add_sub'",
    ),
    (
        "duplicate input",
        "ModelInfer",
        mutate(lambda r: setattr(r.inputs[1], "name", "INPUT0")),
        INVALID,
        "[request id: <id_unknown>] input 'INPUT0' already exists in request",
    ),
    (
        "duplicate input with an id",
        "ModelInfer",
        mutate(lambda r: (setattr(r.inputs[1], "name", "INPUT0"), setattr(r, "id", "r7"))),
        INVALID,
        "[request id: r7] input 'INPUT0' already exists in request",
    ),
    (
        "duplicate input before an unknown datatype",
        "ModelInfer",
        mutate(
            lambda r: (
                setattr(r.inputs[1], "name", "INPUT0"),
                r.inputs.add(name="INPUT1", datatype="FP99", shape=[1]),
            )
        ),
        INVALID,
        "[request id: <id_unknown>] input 'INPUT0' already exists in request",
    ),
    (
        "duplicate output (newer Triton's; 2.51 answers)",
        "ModelInfer",
        mutate(lambda r: (r.outputs.add(name="OUTPUT0"), r.outputs.add(name="OUTPUT0"))),
        INVALID,
        "[request id: <id_unknown>] output 'OUTPUT0' already exists in request",
    ),
    (
        "missing input",
        "ModelInfer",
        mutate(lambda r: (r.inputs.pop(), r.raw_input_contents.pop())),
        INVALID,
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'add_sub'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).",
    ),
    (
        "unknown output",
        "ModelInfer",
        mutate(lambda r: r.outputs.add(name="NOPE")),
        INVALID,
        "unexpected inference output 'NOPE' for model 'add_sub'",
    ),
    (
        "unknown shm region",
        "ModelInfer",
        mutate(_shm_input),
        NOT_FOUND,
        "Unable to find shared memory region: 'nope'",
    ),
    (
        "shm output without size",
        "ModelInfer",
        mutate(
            lambda r: (
                r.outputs.add(name="OUTPUT0")
                .parameters["shared_memory_region"]
                .MergeFrom(pb.InferParameter(string_param="x"))
            )
        ),
        INVALID,
        "'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor 'OUTPUT0'",
    ),
    (
        "classification",
        "ModelInfer",
        mutate(
            lambda r: (
                r.outputs.add(name="OUTPUT0")
                .parameters["classification"]
                .MergeFrom(pb.InferParameter(int64_param=0))
            )
        ),
        INVALID,
        "invalid classification count for output 'OUTPUT0'",
    ),
    (
        "priority type",
        "ModelInfer",
        mutate(lambda r: r.parameters["priority"].MergeFrom(pb.InferParameter(string_param="x"))),
        INVALID,
        "invalid value type for 'priority' parameter, expected int64_param or uint64_param.",
    ),
    (
        "timeout type",
        "ModelInfer",
        mutate(lambda r: r.parameters["timeout"].MergeFrom(pb.InferParameter(string_param="x"))),
        INVALID,
        "invalid value type for 'timeout' parameter, expected int64_param.",
    ),
    (
        "sequence flag type",
        "ModelInfer",
        mutate(
            lambda r: r.parameters["sequence_start"].MergeFrom(pb.InferParameter(int64_param=1))
        ),
        INVALID,
        "invalid value type for 'sequence_start' parameter, expected bool_param.",
    ),
    (
        "model failure",
        "ModelInfer",
        mutate(
            lambda r: (
                setattr(r, "model_name", "fail"),
                r.ClearField("inputs"),
                r.ClearField("raw_input_contents"),
                r.inputs.add(name="IN", datatype="FP32", shape=[1]).contents.fp32_contents.append(
                    1.0
                ),
            )
        ),
        INVALID,
        "grpctest model refuses every request",
    ),
    (
        "too few strings",
        "ModelInfer",
        bytes_request([1, 3], TWO_STRINGS),
        INVALID,
        "[request id: <id_unknown>] expected 3 string elements for inference input 'IN' for model 'echo_bytes', got 2",
    ),
    (
        "too many strings",
        "ModelInfer",
        bytes_request([1, 1], TWO_STRINGS),
        INVALID,
        "[request id: <id_unknown>] unexpected number of string elements 2 for inference input 'IN' for model 'echo_bytes', expecting 1",
    ),
    (
        "truncated string",
        "ModelInfer",
        bytes_request([1, 2], TWO_STRINGS[:-1]),
        INVALID,
        "unexpected end of BYTES tensor data: element past the buffer",
    ),
    (
        "metadata of unknown model",
        "ModelMetadata",
        pb.ModelMetadataRequest(name="nope"),
        NOT_FOUND,
        "Request for unknown model: 'nope' is not found",
    ),
    (
        "metadata of unknown version",
        "ModelMetadata",
        pb.ModelMetadataRequest(name="add_sub", version="7"),
        NOT_FOUND,
        "Request for unknown model: 'add_sub' version 7 is not found",
    ),
    (
        "config of unknown model",
        "ModelConfig",
        pb.ModelConfigRequest(name="nope"),
        NOT_FOUND,
        "Request for unknown model: 'nope' is not found",
    ),
    (
        "statistics of unknown model",
        "ModelStatistics",
        pb.ModelStatisticsRequest(name="nope"),
        INVALID,
        "requested model 'nope' is not available",
    ),
    (
        "unknown shm status",
        "SystemSharedMemoryStatus",
        pb.SystemSharedMemoryStatusRequest(name="nope"),
        NOT_FOUND,
        "Unable to find system shared memory region: 'nope'",
    ),
    (
        "unknown cuda shm status",
        "CudaSharedMemoryStatus",
        pb.CudaSharedMemoryStatusRequest(name="nope"),
        NOT_FOUND,
        "Unable to find cuda shared memory region: 'nope'",
    ),
    (
        "trace of unknown model",
        "TraceSetting",
        pb.TraceSettingRequest(model_name="nope"),
        INVALID,
        "Request for unknown model : nope",
    ),
]


@pytest.fixture(scope="module")
def stub(server: RunningServer) -> Any:
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


@pytest.mark.parametrize(
    ("method", "request_message", "code", "text"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_error_then_success(
    stub: Any, method: str, request_message: Any, code: grpc.StatusCode, text: str
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        getattr(stub, method)(request_message)
    assert (info.value.code(), info.value.details()) == (code, text)
    response = stub.ModelInfer(infer_request())
    assert grpcclient.InferResult(response).as_numpy("OUTPUT0").tolist() == [[2.0] * 16]


def test_client_deadline_then_success(client: Any) -> None:
    slow = grpcclient.InferInput("IN", [1], "FP32")
    slow.set_data_from_numpy(np.array([5.0], np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("sleep", [slow], client_timeout=0.05)
    assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED"
    quick = grpcclient.InferInput("IN", [1], "FP32")
    quick.set_data_from_numpy(np.array([0.0], np.float32))
    assert client.infer("sleep", [quick]).as_numpy("OUT").tolist() == [0.0]


def test_garbage_message_then_success(server: RunningServer, stub: Any) -> None:
    with grpc.insecure_channel(server.grpc_url) as channel:
        raw_call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as info:
            raw_call(b"\xff\xff\xff\xff garbage")
        assert (info.value.code(), info.value.details()) == (
            grpc.StatusCode.INTERNAL,
            "Unable to parse request",
        )
    assert stub.ServerLive(pb.ServerLiveRequest()).live


def test_stream_request_naming_an_input_twice_then_success(client: Any) -> None:
    """tritonclient's stream: the error comes back in the stream, which stays open."""
    answers: queue.SimpleQueue[Any] = queue.SimpleQueue()
    ones = np.ones((1, 16), np.float32)

    def inputs(names: tuple[str, ...]) -> list[Any]:
        tensors = [grpcclient.InferInput(n, [1, 16], "FP32") for n in names]
        for tensor in tensors:
            tensor.set_data_from_numpy(ones)
        return tensors

    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer(
            "add_sub", inputs(("INPUT0", "INPUT0", "INPUT1")), request_id="s1"
        )
        result, error = answers.get(timeout=30)
        assert result is None
        assert error.message() == "[request id: s1] input 'INPUT0' already exists in request"
        client.async_stream_infer("add_sub", inputs(("INPUT0", "INPUT1")), request_id="s2")
        result, error = answers.get(timeout=30)
        assert error is None
        assert result.as_numpy("OUTPUT0").tolist() == [[2.0] * 16]
    finally:
        client.stop_stream()
