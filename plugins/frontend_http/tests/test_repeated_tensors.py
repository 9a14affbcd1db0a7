"""A request naming an input or an output twice is refused with Triton's text (inputs:
Triton 2.51's 400; outputs: newer Triton's, 2.51 answers them), JSON, binary and
``/generate`` alike, and the server keeps serving."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from despina.testing import RunningServer, http_post

from .helpers import INFER, add_sub_inputs, expect_error, infer_ok, raw

TWICE = "[request id: <id_unknown>] input 'INPUT0' already exists in request"
OUTPUT_TWICE = "[request id: <id_unknown>] output 'OUTPUT0' already exists in request"


def _json_input(name: str, values: list[float]) -> dict[str, Any]:
    return {"name": name, "datatype": "FP32", "shape": [len(values)], "data": values}


def _binary_body(names: tuple[str, ...]) -> tuple[bytes, dict[str, str]]:
    """Binary inputs of 2 FP32 each, named ``names``, and the header length header."""
    inputs = [
        {"name": n, "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}}
        for n in names
    ]
    header = json.dumps({"inputs": inputs}).encode()
    data = struct.pack(f"<{2 * len(names)}f", *range(2 * len(names)))
    return header + data, {"Inference-Header-Content-Length": str(len(header))}


@pytest.mark.parametrize(
    ("inputs", "request_id", "message"),
    [
        ([("INPUT0", [1, 2]), ("INPUT0", [3, 4]), ("INPUT1", [5, 6])], None, TWICE),
        # reported where Triton adds the input: before a later input's own error and
        # before the name is checked against the model
        ([("INPUT0", [1, 2]), ("INPUT0", [3, 4])], None, TWICE),
        (
            [("X", [1]), ("X", [1]), ("INPUT1", [1])],
            None,
            "[request id: <id_unknown>] input 'X' already exists in request",
        ),
        (
            [("INPUT0", [1, 2]), ("INPUT0", [3, 4]), ("INPUT1", [5, 6])],
            "r7",
            "[request id: r7] input 'INPUT0' already exists in request",
        ),
    ],
)
def test_json_input_given_twice(
    server: RunningServer,
    http_client: Callable[..., Any],
    inputs: list[tuple[str, list[float]]],
    request_id: str | None,
    message: str,
) -> None:
    body: dict[str, Any] = {"inputs": [_json_input(n, v) for n, v in inputs]}
    if request_id is not None:
        body["id"] = request_id
    assert raw(server, INFER, json.dumps(body).encode()) == (400, {"error": message})
    infer_ok(http_client(server))


def test_binary_input_given_twice_is_refused_each_time(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    """The same header twice: a refused header is never kept as a known layout."""
    body, headers = _binary_body(("INPUT0", "INPUT0", "INPUT1"))
    for _ in range(2):
        assert raw(server, INFER, body, headers) == (400, {"error": TWICE})
    good, good_headers = _binary_body(("INPUT0", "INPUT1"))
    for _ in range(2):  # the second from the kept layout
        status, answer = raw(server, INFER, good, good_headers)
        assert status == 200, answer
    infer_ok(http_client(server))


def test_tritonclient_input_given_twice(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server)
    inputs, _, _ = add_sub_inputs()
    again = httpclient.InferInput("INPUT0", [16], "FP32")
    again.set_data_from_numpy(np.zeros(16, np.float32))
    expect_error(lambda: client.infer("add_sub", [*inputs, again]), 400, TWICE)
    infer_ok(client)


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_output_requested_twice(
    server: RunningServer, http_client: Callable[..., Any], binary: bool
) -> None:
    client = http_client(server)
    inputs, _, _ = add_sub_inputs(binary)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary) for _ in range(2)]
    error = expect_error(lambda: client.infer("add_sub", inputs, outputs=outputs), 400, "")
    assert error.message() == OUTPUT_TWICE
    infer_ok(client)


def test_output_twice_is_reported_before_input_errors(server: RunningServer) -> None:
    """Newer Triton refuses it while building the request, before checking the inputs."""
    body = {"inputs": [_json_input("INPUT0", [1])], "outputs": [{"name": "OUTPUT0"}] * 2}
    assert raw(server, INFER, json.dumps(body).encode()) == (400, {"error": OUTPUT_TWICE})


GENERATE = "/v2/models/add_sub/generate"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"INPUT0": [1, 2], "INPUT1": [3, 4], "parameters": {"INPUT0": [5, 6]}}',
            f"Converting keyword: 'parameters': {TWICE}",
        ),
        (
            b'{"id": "g1", "INPUT0": [1, 2], "INPUT1": [3, 4], "parameters": {"INPUT0": [5, 6]}}',
            "Converting keyword: 'parameters': "
            "[request id: g1] input 'INPUT0' already exists in request",
        ),
        (
            b'{"INPUT1": [3, 4], "parameters": {"INPUT0": [1, 2], "INPUT0": [5, 6]}}',
            f"Converting keyword: 'parameters': {TWICE}",
        ),
        # two keys of one object: the JSON parser keeps the last, Triton's reads both
        (b'{"INPUT0": [1, 2], "INPUT0": [5, 6], "INPUT1": [3, 4]}', TWICE),
        (b'{"INPUT0": [1, 2], "\\u0049NPUT0": [5, 6], "INPUT1": [3, 4]}', TWICE),
    ],
)
def test_generate_input_given_twice(
    server: RunningServer, http_client: Callable[..., Any], body: bytes, message: str
) -> None:
    status, _, answer = http_post(server.http_port, GENERATE, body)
    assert (status, json.loads(answer)) == (400, {"error": message})
    infer_ok(http_client(server))


@pytest.mark.parametrize(
    "body",
    [
        # the input names appear twice, once as keys; an escape in a parameter
        b'{"INPUT0": [1, 2], "INPUT1": [3, 4], "note": "INPUT0"}',
        b'{"INPUT0": [1, 2], "INPUT1": [3, 4], "note": "a\\nb", "parameters": {"p": 1}}',
    ],
)
def test_generate_with_each_input_once_is_answered(server: RunningServer, body: bytes) -> None:
    status, _, answer = http_post(server.http_port, GENERATE, body)
    assert status == 200, answer
    assert json.loads(answer)["OUTPUT0"] == [4.0, 6.0]
