"""Tensor encodings: JSON and binary for every datatype, BYTES, nested JSON, parameters,
classification, compression, large outputs, and the asyncio client."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from despina.inference.tensors import DATATYPES
from despina.testing import RunningServer

from .helpers import add_sub_inputs, infer_ok


def sample(datatype: str) -> np.ndarray:
    """A [2, 3] tensor of ``datatype`` with distinct values."""
    if datatype == "BYTES":
        return np.array([[b"a", b"bc", "é".encode()], [b"", b"xyz", b"0"]], dtype=np.object_)
    if datatype == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    dtype = ml_dtypes.bfloat16 if datatype == "BF16" else httpclient.triton_to_np_dtype(datatype)
    return np.arange(6).reshape(2, 3).astype(dtype)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("datatype", DATATYPES)
def test_every_datatype_round_trips(
    server: RunningServer, http_client: Callable[..., Any], datatype: str, binary: bool
) -> None:
    if datatype == "BF16" and not binary:
        pytest.skip("tritonclient sends BF16 only as binary data")
    client = http_client(server)
    data = sample(datatype)
    inputs = [httpclient.InferInput(f"INPUT{i}", list(data.shape), datatype) for i in range(2)]
    for tensor in inputs:
        tensor.set_data_from_numpy(data, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}", binary_data=binary) for i in range(2)]
    result = client.infer(f"echo_{datatype.lower()}", inputs, outputs=outputs)
    for i in range(2):
        got = result.as_numpy(f"OUTPUT{i}")
        assert got.shape == data.shape
        if datatype == "BYTES":  # the client gives JSON strings back as str
            assert [
                v if isinstance(v, bytes) else v.encode() for v in got.reshape(-1)
            ] == data.reshape(-1).tolist()
        else:
            np.testing.assert_array_equal(got.astype(np.float64), data.astype(np.float64))
        assert result.get_output(f"OUTPUT{i}")["datatype"] == datatype


def post_json(server: RunningServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{server.http_url}{path}", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


def test_nested_json_data_and_request_id(server: RunningServer) -> None:
    body = {
        "id": "42",
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [2, 2], "data": [[1, 2], [3, 4]]},
            {"name": "INPUT1", "datatype": "INT32", "shape": [2, 2], "data": [5, 6, 7, 8]},
        ],
    }
    answer = post_json(server, "/v2/models/echo_int32/infer", body)
    assert answer["id"] == "42" and answer["model_version"] == "1"
    assert answer["outputs"][0] == {
        "name": "OUTPUT0",
        "datatype": "INT32",
        "shape": [2, 2],
        "data": [1, 2, 3, 4],
    }
    bytes_body = {
        "inputs": [
            {"name": f"INPUT{i}", "datatype": "BYTES", "shape": [1, 2], "data": [["hi", "there"]]}
            for i in range(2)
        ],
        "outputs": [{"name": "OUTPUT1"}],
    }
    answer = post_json(server, "/v2/models/echo_bytes/versions/1/infer", bytes_body)
    assert answer["outputs"] == [
        {"name": "OUTPUT1", "datatype": "BYTES", "shape": [1, 2], "data": ["hi", "there"]}
    ]


def test_parameters_reach_the_model_and_come_back(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server)
    inputs, _, _ = add_sub_inputs()
    result = client.infer("add_sub", inputs, parameters={"echo_me": "yes", "echo_n": 3})
    assert result.get_response()["parameters"] == {"echo_me": "yes", "echo_n": 3}


def test_forwarded_headers_become_parameters(
    serve: Callable[..., RunningServer], http_client: Callable[..., Any]
) -> None:
    client = http_client(serve("--http-header-forward-pattern=^x-fwd"))
    inputs, _, _ = add_sub_inputs()
    result = client.infer("add_sub", inputs, headers={"X-Fwd-Tenant": "t1", "X-Other": "no"})
    assert result.get_response()["parameters"] == {"x-fwd-tenant": "t1"}


@pytest.mark.parametrize(
    ("pattern", "forwarded"), [("X-FWD-T", True), ("(?-i)X-FWD-T", False), ("(?-i)x-fwd-t", True)]
)
def test_header_forward_pattern_is_re2_and_case_insensitive(
    serve: Callable[..., RunningServer],
    http_client: Callable[..., Any],
    pattern: str,
    forwarded: bool,
) -> None:
    """As Triton (L0_parameters): RE2 syntax, case-insensitive unless ``(?-i)`` says not."""
    client = http_client(serve(f"--http-header-forward-pattern={pattern}"))
    inputs, _, _ = add_sub_inputs()
    result = client.infer("add_sub", inputs, headers={"X-Fwd-Tenant": "t1"})
    assert result.get_response().get("parameters") == (
        {"x-fwd-tenant": "t1"} if forwarded else None
    )


def test_classification_with_and_without_labels(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server)
    data = np.array([[0.1, 0.7, 0.2, 0.0], [0.9, 0.0, 0.05, 0.05]], dtype=np.float32)
    tensor = httpclient.InferInput("INPUT0", [2, 4], "FP32")
    tensor.set_data_from_numpy(data)
    wanted = [httpclient.InferRequestedOutput("OUTPUT0", class_count=2)]
    result = client.infer("labelled", [tensor], outputs=wanted)
    labels = result.as_numpy("OUTPUT0")
    assert labels.shape == (2, 2)
    assert labels[0].tolist() == [b"0.700000:1:dog", b"0.200000:2:bird"]
    assert labels[1][0] == b"0.900000:0:cat"
    inputs, _, _ = add_sub_inputs(n=4)
    result = client.infer(
        "add_sub", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=1)]
    )
    assert result.as_numpy("OUTPUT0").tolist() == [b"4.000000:3"]


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_request_and_response_compression(
    server: RunningServer, http_client: Callable[..., Any], algorithm: str
) -> None:
    client = http_client(server)
    for binary in (True, False):
        inputs, a, b = add_sub_inputs(binary=binary, n=4096)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
        result = client.infer(
            "add_sub",
            inputs,
            outputs=outputs,
            request_compression_algorithm=algorithm,
            response_compression_algorithm=algorithm,
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


def test_large_binary_output_streams(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server)
    data = np.random.default_rng(0).random((512, 1024), dtype=np.float32)  # 2 MiB a tensor
    inputs = [httpclient.InferInput(f"INPUT{i}", list(data.shape), "FP32") for i in range(2)]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    result = client.infer("echo_fp32", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), data)


def test_binary_data_output_request_parameter(server: RunningServer) -> None:
    body = {
        "inputs": [
            {"name": f"INPUT{i}", "datatype": "FP32", "shape": [2], "data": [1, 2]}
            for i in range(2)
        ],
        "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}, {"name": "OUTPUT1"}],
        "parameters": {"binary_data_output": True},
    }
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/add_sub/infer",
        data=json.dumps(body).encode(),
        method="POST",
    )
    with urllib.request.urlopen(request) as response:
        length = int(response.headers["Inference-Header-Content-Length"])
        raw = response.read()
    header = json.loads(raw[:length])
    assert header["outputs"][0]["data"] == [2.0, 4.0]
    assert header["outputs"][1]["parameters"] == {"binary_data_size": 8}
    assert np.frombuffer(raw[length:], np.float32).tolist() == [0.0, 0.0]


def test_asyncio_client(server: RunningServer) -> None:
    async def run() -> None:
        client = aioclient.InferenceServerClient(server.http_url)
        try:
            assert await client.is_server_ready()
            inputs, a, b = add_sub_inputs()
            results = await asyncio.gather(*(client.infer("add_sub", inputs) for _ in range(8)))
            for result in results:
                np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
            assert (await client.get_model_metadata("add_sub"))["name"] == "add_sub"
        finally:
            await client.close()

    asyncio.run(run())


def test_sync_client_keeps_serving_many_requests(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server, concurrency=4)
    for _ in range(20):
        infer_ok(client)


def test_bf16_as_json_data(server: RunningServer) -> None:
    body = {
        "inputs": [
            {"name": f"INPUT{i}", "datatype": "BF16", "shape": [1, 2], "data": [1.5, -2.0]}
            for i in range(2)
        ]
    }
    answer = post_json(server, "/v2/models/echo_bf16/infer", body)
    assert answer["outputs"][0] == {
        "name": "OUTPUT0",
        "datatype": "BF16",
        "shape": [1, 2],
        "data": [1.5, -2.0],
    }
