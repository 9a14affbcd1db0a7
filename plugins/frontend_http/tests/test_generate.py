"""Triton's generate extension: flat JSON in and out.

Streaming of decoupled models is tested end to end in ``tests/test_http_generate.py``."""

from __future__ import annotations

import http.client
import json

import pytest
from despina.errors import InvalidArgument
from despina.testing import RunningServer, http_post
from despina_frontend_http.generate import generate_shape


def post(server: RunningServer, path: str, body: bytes) -> tuple[int, str, bytes]:
    return http_post(server.http_port, path, body)


@pytest.mark.parametrize(
    ("count", "dims", "shape"),
    [
        (3, [-1], [3]),
        (1, [1], [1]),
        (8, [-1, 4], [2, 4]),
        (6, [-1, 2, -1], [1, 2, 3]),
        (0, [-1], [0]),
        (12, [2, -1, 3], [2, 2, 3]),
    ],
)
def test_generate_shape_distributes_the_count(
    count: int, dims: list[int], shape: list[int]
) -> None:
    assert generate_shape("x", count, dims) == shape


@pytest.mark.parametrize(("count", "dims"), [(2, [1]), (6, [-1, 4]), (0, [4]), (3, [0, -1])])
def test_generate_shape_refuses_counts_that_do_not_fit(count: int, dims: list[int]) -> None:
    with pytest.raises(InvalidArgument, match="can not convert input 'x' to tensor with proper"):
        generate_shape("x", count, dims)


def test_generate_turns_keys_into_inputs_and_parameters(server: RunningServer) -> None:
    """echo_fp32 answers OUTPUTn = INPUTn and returns ``echo*``/``x-*`` request parameters
    as response parameters: both come back as flat keys, one-element outputs as scalars."""
    body = {
        "id": "7",
        "INPUT0": [1, 2, 3],
        "x-top": "a",
        "parameters": {"INPUT1": 2.5, "echo": True, "echo_n": 3, "echo_f": 0.5},
    }
    status, kind, raw = post(server, "/v2/models/echo_fp32/generate", json.dumps(body).encode())
    assert (status, kind) == (200, "application/json")
    assert raw == (
        b'{"OUTPUT0":[1.0,2.0,3.0],"OUTPUT1":2.5,"echo":true,"echo_f":0.5,"echo_n":3,'
        b'"id":"7","model_name":"echo_fp32","model_version":"1","x-top":"a"}'
    )


def test_generate_shapes_follow_the_metadata(server: RunningServer) -> None:
    """batched: dims [4], max_batch_size 8, so metadata [-1, 4]: 8 values are [2, 4]."""
    status, _, raw = post(
        server,
        "/v2/models/batched/versions/1/generate",
        json.dumps({"INPUT0": list(range(8)), "INPUT1": [1] * 8}).encode(),
    )
    assert status == 200
    assert json.loads(raw)["OUTPUT0"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    status, _, raw = post(
        server, "/v2/models/batched/generate", b'{"INPUT0": [1, 2, 3], "INPUT1": [1, 2, 3]}'
    )
    assert status == 400
    assert json.loads(raw) == {
        "error": "The schema can not convert input 'INPUT0' to tensor with proper shape"
    }


def test_generate_bytes_and_booleans(server: RunningServer) -> None:
    status, _, raw = post(
        server,
        "/v2/models/echo_bytes/generate",
        '{"INPUT0": "héllo", "INPUT1": ["a", "b"]}'.encode(),
    )
    assert status == 200
    assert json.loads(raw)["OUTPUT0"] == "héllo" and json.loads(raw)["OUTPUT1"] == ["a", "b"]
    status, _, raw = post(
        server, "/v2/models/echo_bool/generate", b'{"INPUT0": true, "INPUT1": [false]}'
    )
    assert status == 200
    assert json.loads(raw)["OUTPUT0"] is True and json.loads(raw)["OUTPUT1"] is False


def test_generate_stream_of_a_plain_model_is_one_event(server: RunningServer) -> None:
    status, kind, raw = post(
        server, "/v2/models/echo_int32/generate_stream", b'{"INPUT0": [1, 2], "INPUT1": 3}'
    )
    assert (status, kind) == (200, "text/event-stream; charset=utf-8")
    assert raw == (
        b'data: {"OUTPUT0":[1,2],"OUTPUT1":3,"model_name":"echo_int32","model_version":"1"}\n\n'
    )


@pytest.mark.parametrize(
    ("path", "body", "status", "error"),
    [
        ("echo_int32/generate", b'{"INPUT0": 1, "INPUT1": "s"}', 400,
         "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
        ("echo_int32/generate", b'{"INPUT0": 1, "INPUT1": 1.5}', 400,
         "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"),
        ("echo_bytes/generate", b'{"INPUT0": 5, "INPUT1": "a"}', 400,
         "Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
        ("echo_int32/generate", b'{"INPUT0": 1, "INPUT1": 1, "id": 5}', 400,
         "Unable to parse 'id': attempt to access JSON non-string as string"),
        ("echo_int32/generate_stream", b'{"INPUT0": 1, "INPUT1": 1, "parameters": 5}', 400,
         "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object as object"),
        ("echo_int32/generate", b'{"INPUT0": 1, "INPUT1": 1, "parameters": {"z": [1]}}', 400,
         "Converting keyword: 'parameters': parameter 'z' has invalid type. It should be either "
         "'int', 'bool', or 'string'."),
        ("echo_int32/generate", b'{"INPUT0": 1, "INPUT1": 1, "z": null}', 400,
         "parameter 'z' has invalid type. It should be either 'int', 'bool', or 'string'."),
        ("echo_int32/generate", b"[1]", 400, "failed to parse the request JSON buffer"),
        ("echo_int32/generate", b"{nope", 400, "failed to parse the request JSON buffer"),
        ("echo_int32/generate", b'{"INPUT0": 1}', 400, "missing required input(s) ['INPUT1']"),
        ("nope/generate", b"{}", 404, "Request for unknown model: 'nope' is not found"),
        ("echo_int32/versions/9/generate_stream", b"{}", 404,
         "Request for unknown model: 'echo_int32' version 9 is not found"),
    ],
)  # fmt: skip
def test_generate_refusals_are_json_errors(
    server: RunningServer, path: str, body: bytes, status: int, error: str
) -> None:
    got, kind, raw = post(server, f"/v2/models/{path}", body)
    assert (got, kind) == (status, "application/json")
    assert error in json.loads(raw)["error"]
    got, _, _ = post(server, "/v2/models/echo_int32/generate", b'{"INPUT0": 1, "INPUT1": 2}')
    assert got == 200


def test_a_known_path_with_another_method_is_405(server: RunningServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
    try:
        for method, path in [("GET", "/v2/models/add_sub/generate"), ("POST", "/v2/health/live")]:
            connection.request(method, path)
            response = connection.getresponse()
            assert (response.status, json.loads(response.read())) == (
                405,
                {"error": "Method Not Allowed"},
            )
    finally:
        connection.close()
