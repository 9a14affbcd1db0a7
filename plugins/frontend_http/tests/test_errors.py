"""Bad requests get Triton's error JSON and status, and the server keeps serving."""

from __future__ import annotations

import gzip
import json
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from despina.testing import RunningServer

from .helpers import INFER, add_sub_inputs, expect_error, infer_ok, raw


def binary_body(sizes: tuple[int, int] = (64, 64), data_bytes: int = 128) -> tuple[bytes, int]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": f"INPUT{i}",
                    "datatype": "FP32",
                    "shape": [16],
                    "parameters": {"binary_data_size": size},
                }
                for i, size in enumerate(sizes)
            ]
        }
    ).encode()
    return header + struct.pack("<32f", *range(32))[:data_bytes], len(header)


def json_input(name: str, shape: list[int], data: Any, datatype: str = "FP32") -> dict[str, Any]:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


GOOD = [json_input("INPUT0", [2], [1, 2]), json_input("INPUT1", [2], [3, 4])]


@pytest.mark.parametrize(
    ("body", "headers", "status", "message"),
    [
        (b"{bad", {}, 400, "failed to parse the request JSON buffer"),
        (b"[]", {}, 400, "Unable to parse 'inputs'"),
        (
            json.dumps({"inputs": {}}).encode(),
            {},
            400,
            "Unable to parse 'inputs': attempt to access JSON non-array as array",
        ),
        (
            binary_body(data_bytes=100)[0],
            {"Inference-Header-Content-Length": str(binary_body()[1])},
            400,
            "unexpected size for input 'INPUT1', expecting 28 additional bytes for model 'add_sub'",
        ),
        (
            binary_body()[0] + b"extra",
            {"Inference-Header-Content-Length": str(binary_body()[1])},
            400,
            "unexpected additional input data for model 'add_sub'",
        ),
        (
            json.dumps({"inputs": GOOD}).encode() + b"extra",
            {"Inference-Header-Content-Length": str(len(json.dumps({"inputs": GOOD})))},
            400,
            "unexpected additional input data for model 'add_sub'",
        ),
        (
            binary_body()[0],
            {"Inference-Header-Content-Length": "100000"},
            400,
            "inference header size should be in range (0, ",
        ),
        (
            binary_body(sizes=(60, 64))[0],
            {"Inference-Header-Content-Length": str(binary_body(sizes=(60, 64))[1])},
            400,
            "input byte size mismatch for input 'INPUT0' for model 'add_sub'. Expected 64, got 60",
        ),
        (
            json.dumps(
                {
                    "inputs": [
                        json_input("INPUT0", [2], [1, 2]),
                        json_input("INPUT1", [2], [1], "FP32"),
                    ]
                }
            ).encode(),
            {},
            400,
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
        (
            json.dumps({"inputs": [json_input("INPUT0", [100000, 100000], [1]), GOOD[1]]}).encode(),
            {},
            400,
            "Shape does not match true shape",
        ),
        (
            json.dumps({"inputs": [GOOD[0], json_input("INPUT1", [2], ["a", "b"])]}).encode(),
            {},
            400,
            "Unable to parse 'data'",
        ),
        (
            json.dumps({"inputs": [GOOD[0], json_input("INPUT1", [2], [1, 2], "FP99")]}).encode(),
            {},
            400,
            "invalid datatype for input INPUT1",
        ),
        (
            json.dumps(
                {"inputs": GOOD, "outputs": [{"name": f"O{i}"} for i in range(5000)]}
            ).encode(),
            {},
            400,
            "names 5000 outputs",
        ),
        (
            json.dumps(
                {"inputs": [GOOD[0], {**GOOD[1], "parameters": {"binary_data_size": 8}}]}
            ).encode(),
            {},
            400,
            "But set 'data' 'binary_data_size'",
        ),
        (b"not gzip at all", {"Content-Encoding": "gzip"}, 400, "failed to read the request body"),
    ],
)
def test_malformed_requests(
    server: RunningServer,
    http_client: Callable[..., Any],
    body: bytes,
    headers: dict[str, str],
    status: int,
    message: str,
) -> None:
    got_status, answer = raw(server, INFER, body, headers)
    assert (got_status, set(answer)) == (status, {"error"})
    assert message in answer["error"]
    infer_ok(http_client(server))


def test_model_errors_have_triton_texts(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server)
    inputs, _, _ = add_sub_inputs()
    expect_error(
        lambda: client.infer("nope", inputs), 404, "Request for unknown model: 'nope' is not found"
    )
    expect_error(
        lambda: client.infer("add_sub", inputs, model_version="3"),
        404,
        "Request for unknown model: 'add_sub' version 3 is not found",
    )
    expect_error(
        lambda: client.infer("add_sub", inputs[:1]),
        400,
        "[request id: <id_unknown>] expected 2 inputs but got 1 inputs for model 'add_sub'. "
        "Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).",
    )
    wrong = httpclient.InferInput("INPUT1", [16], "INT32")
    wrong.set_data_from_numpy(np.ones(16, np.int32))
    expect_error(
        lambda: client.infer("add_sub", [inputs[0], wrong]),
        400,
        "inference input 'INPUT1' data-type is 'INT32', but model 'add_sub' expects 'FP32'",
    )
    shaped = httpclient.InferInput("INPUT0", [2, 8], "FP32")
    shaped.set_data_from_numpy(np.ones((2, 8), np.float32))
    expect_error(
        lambda: client.infer("add_sub", [shaped, inputs[1]]),
        400,
        "unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1], got [2,8]",
    )
    batch = [httpclient.InferInput(f"INPUT{i}", [9, 4], "FP32") for i in range(2)]
    for tensor in batch:
        tensor.set_data_from_numpy(np.ones((9, 4), np.float32))
    expect_error(
        lambda: client.infer("batched", batch),
        400,
        "inference request batch-size must be <= 8 for 'batched'",
    )
    mixed = [httpclient.InferInput(f"INPUT{i}", [2 - i, 4], "FP32") for i in range(2)]
    for i, tensor in enumerate(mixed):
        tensor.set_data_from_numpy(np.ones((2 - i, 4), np.float32))
    expect_error(
        lambda: client.infer("batched", mixed),
        400,
        "input 'INPUT1' batch size does not match other inputs for 'batched'",
    )
    expect_error(
        lambda: client.infer("add_sub", inputs, outputs=[httpclient.InferRequestedOutput("NOPE")]),
        400,
        "unexpected inference output 'NOPE' for model 'add_sub'",
    )
    infer_ok(client)


def _held_open(body: bytes) -> Iterator[bytes]:
    """``body`` as one chunk, the chunked body's end only later: the server has read more
    than the limit before it knows the body is complete."""
    yield body
    time.sleep(0.3)


def test_body_size_limit_applies_to_plain_chunked_and_compressed_bodies(
    serve: Callable[..., RunningServer], http_client: Callable[..., Any]
) -> None:
    running = serve("--http-max-input-size=4096")
    big = json.dumps({"inputs": [json_input("INPUT0", [2000], [1] * 2000), GOOD[1]]}).encode()
    status, answer = raw(running, INFER, big)
    assert status == 413 and "--http-max-input-size" in answer["error"]
    status, _ = raw(running, INFER, (big[i : i + 1000] for i in range(0, len(big), 1000)))
    assert status == 413
    status, _ = raw(running, INFER, _held_open(big))
    assert status == 413
    bomb = gzip.compress(b" " * 50_000_000)  # 50 MB of whitespace in ~50 kB
    status, _ = raw(running, INFER, bomb, {"Content-Encoding": "gzip"})
    assert status == 413
    small = json.dumps({"inputs": GOOD}).encode()
    status, answer = raw(running, INFER, (small[i : i + 10] for i in range(0, len(small), 10)))
    assert status == 200 and answer["outputs"][1]["data"] == [-2.0, -2.0]
    deflated = zlib.compress(json.dumps({"inputs": GOOD}).encode())
    status, answer = raw(running, INFER, deflated, {"Content-Encoding": "deflate"})
    assert status == 200 and answer["outputs"][0]["data"] == [4.0, 6.0]
    infer_ok(http_client(running))


def test_restricted_api_needs_the_header(
    serve: Callable[..., RunningServer], http_client: Callable[..., Any]
) -> None:
    running = serve(
        "--http-restricted-api=model-repository,shared-memory:admin-key=secret",
        "--http-restricted-api=inference:infer-key=k",
    )
    client = http_client(running)
    expect_error(
        client.get_model_repository_index,
        403,
        "This API is restricted, expecting header 'admin-key'",
    )
    expect_error(client.get_system_shared_memory_status, 403, "expecting header 'admin-key'")
    expect_error(
        lambda: client.get_model_repository_index(headers={"admin-key": "wrong"}), 403, "admin-key"
    )
    assert client.get_model_repository_index(headers={"admin-key": "secret"})
    assert client.get_system_shared_memory_status(headers={"Admin-Key": "secret"}) == []
    inputs, _, _ = add_sub_inputs()
    expect_error(lambda: client.infer("add_sub", inputs), 403, "expecting header 'infer-key'")
    assert (
        client.infer("add_sub", inputs, headers={"infer-key": "k"}).as_numpy("OUTPUT0") is not None
    )
    assert client.is_server_live() and client.get_model_metadata("add_sub")


def test_bad_restricted_api_flag_fails_startup(serve: Callable[..., RunningServer]) -> None:
    from despina.serving.server import StartupError

    with pytest.raises(StartupError, match="unknown restricted API 'everything'"):
        serve("--http-restricted-api=everything:k=v")


@pytest.mark.parametrize(
    ("datatype", "data", "message"),
    [
        ("INT32", [1.5], "attempt to access JSON non-signed-integer as signed-integer"),
        ("INT64", ["1"], "attempt to access JSON non-signed-integer as signed-integer"),
        ("UINT8", [-1], "attempt to access JSON non-unsigned-integer as unsigned-integer"),
        ("UINT8", [256], "a value is above the range of UINT8"),
        ("INT8", [-129], "a value is below the range of INT8"),
        ("FP32", [True], "attempt to access JSON non-number as double"),
        ("FP64", [None], "attempt to access JSON non-number as double"),
        ("BOOL", [1], "attempt to access JSON non-boolean as boolean"),
    ],
)
def test_json_data_of_the_wrong_type_is_refused(
    server: RunningServer, datatype: str, data: list[Any], message: str
) -> None:
    """Triton's texts; never a silent conversion (1.5 truncated, 256 wrapped, True as 1.0)."""
    model = f"/v2/models/echo_{datatype.lower()}/infer"
    tensors = [json_input(f"INPUT{i}", [1, 1], data, datatype) for i in range(2)]
    status, answer = raw(server, model, json.dumps({"inputs": tensors}).encode())
    assert (status, answer) == (400, {"error": f"Unable to parse 'data': {message}"})
    good = [True, False] if datatype == "BOOL" else [0, 1]
    tensors = [json_input(f"INPUT{i}", [1, 2], good, datatype) for i in range(2)]
    status, answer = raw(server, model, json.dumps({"inputs": tensors}).encode())
    assert status == 200 and answer["outputs"][0]["data"] == good


def test_json_integers_past_int64_are_exact(server: RunningServer) -> None:
    """numpy alone would read [0, 2**64 - 1] as float64 and lose the last digits."""
    values = [0, 2**64 - 1]
    tensors = [json_input(f"INPUT{i}", [1, 2], values, "UINT64") for i in range(2)]
    status, answer = raw(
        server, "/v2/models/echo_uint64/infer", json.dumps({"inputs": tensors}).encode()
    )
    assert status == 200 and answer["outputs"][0]["data"] == values
