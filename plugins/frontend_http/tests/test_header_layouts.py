"""Requests whose JSON header repeats are built from the header's remembered layout
(:class:`despina_frontend_http.decode.HeaderLayouts`): each must still get its own data,
parameters and errors, exactly as when the header is parsed."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from despina.inference.request import InferenceRequest
from despina.memory.shared_memory import SharedMemoryRegistry
from despina.testing import RunningServer
from despina_frontend_http.decode import HeaderLayouts, decode_request

from .helpers import add_sub_inputs, raw


def test_a_repeated_header_answers_each_request_from_its_own_body(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server)
    for start in range(5):  # one header, five bodies: the first parses, the rest reuse it
        a = np.arange(start, start + 16, dtype=np.float32)
        b = np.full(16, start, dtype=np.float32)
        inputs, _, _ = add_sub_inputs()
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = client.infer("add_sub", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_repeated_bytes_inputs_are_read_from_each_body(
    server: RunningServer, http_client: Callable[..., Any]
) -> None:
    client = http_client(server)
    for words in ([b"ab", b"c"], [b"xy", b"z"], [b"q", b"rs"], [b"", b"long word"]):
        data = np.array([words], dtype=np.object_)
        inputs = [httpclient.InferInput(f"INPUT{i}", [1, 2], "BYTES") for i in range(2)]
        for tensor in inputs:
            tensor.set_data_from_numpy(data)
        result = client.infer("echo_bytes", inputs)
        assert result.as_numpy("OUTPUT0").tolist() == [words]


def test_forwarded_headers_do_not_stick_to_a_repeated_header(
    serve: Callable[..., RunningServer], http_client: Callable[..., Any]
) -> None:
    client = http_client(serve("--http-header-forward-pattern=^x-fwd"))
    inputs, _, _ = add_sub_inputs()
    for tenant in ("t1", "t2"):
        result = client.infer("add_sub", inputs, headers={"X-Fwd-Tenant": tenant})
        assert result.get_response()["parameters"] == {"x-fwd-tenant": tenant}
    result = client.infer("add_sub", inputs)
    assert "parameters" not in result.get_response()


def test_a_repeated_header_with_a_short_or_long_body_gets_its_error(server: RunningServer) -> None:
    header = json.dumps(
        {
            "inputs": [
                {"name": f"INPUT{i}", "datatype": "FP32", "shape": [4]}
                | {"parameters": {"binary_data_size": 16}}
                for i in range(2)
            ]
        }
    ).encode()
    data = np.arange(8, dtype=np.float32).tobytes()
    length = {"Inference-Header-Content-Length": str(len(header))}
    path = "/v2/models/add_sub/infer"
    assert raw(server, path, header + data, length)[0] == 200
    status, answer = raw(server, path, header + data[:20], length)
    assert status == 400
    assert "unexpected size for input 'INPUT1', expecting 12 additional bytes" in answer["error"]
    status, answer = raw(server, path, header + data + b"more", length)
    assert status == 400
    assert answer["error"] == "unexpected additional input data for model 'add_sub'"
    assert raw(server, path, header + data, length)[0] == 200


HEADERS = {
    "binary": {
        "inputs": [{"name": "A", "datatype": "INT32", "shape": [1, 2]}],
        "outputs": [{"name": "B", "parameters": {"binary_data": True, "classification": 2}}],
    },
    "id and sequence": {
        "id": 7,
        "inputs": [{"name": "A", "datatype": "FP16", "shape": [2]}],
        "parameters": {"sequence_id": 3, "sequence_start": True, "priority": 2},
    },
    "bytes": {"inputs": [{"name": "A", "datatype": "BYTES", "shape": [2]}]},
}


def _body(header: dict[str, Any]) -> tuple[bytes, str]:
    data = {"INT32": b"\1\0\0\0\2\0\0\0", "FP16": b"\0<\0@", "BYTES": b"\1\0\0\0a\2\0\0\0bc"}
    blob = data[header["inputs"][0]["datatype"]]
    header["inputs"][0]["parameters"] = {"binary_data_size": len(blob)}
    text = json.dumps(header).encode()
    return text + blob, str(len(text))


def _same(got: InferenceRequest, want: InferenceRequest) -> None:
    assert got.inputs.keys() == want.inputs.keys()
    for name, array in want.inputs.items():
        assert got.inputs[name].dtype == array.dtype
        np.testing.assert_array_equal(got.inputs[name], array)
    for field in ("id", "outputs", "parameters", "correlation_id", "flags", "priority"):
        assert getattr(got, field) == getattr(want, field), field


@pytest.mark.parametrize("header", list(HEADERS.values()), ids=list(HEADERS))
def test_a_layout_builds_what_parsing_builds(header: dict[str, Any]) -> None:
    body, length = _body(header)
    shm, layouts = SharedMemoryRegistry(), HeaderLayouts()
    parsed = decode_request(body, length, "m", "1", shm, HeaderLayouts())  # a first sighting
    first = decode_request(body, length, "m", "1", shm, layouts)
    assert layouts.get(body[: int(length)]) is not None
    reused = decode_request(body, length, "m", "1", shm, layouts)
    _same(first, parsed)
    _same(reused, parsed)
    reused.parameters["x-fwd"] = "mutated"  # what forwarding does to a request's parameters
    if reused.outputs:
        reused.outputs[0].parameters["binary_data"] = False
    _same(decode_request(body, length, "m", "1", shm, layouts), parsed)


def test_headers_with_json_data_or_nested_parameters_are_not_kept() -> None:
    shm, layouts = SharedMemoryRegistry(), HeaderLayouts()
    json_data = json.dumps(
        {"inputs": [{"name": "A", "datatype": "INT32", "shape": [1], "data": [1]}]}
    ).encode()
    decode_request(json_data, str(len(json_data)), "m", "", shm, layouts)
    body, length = _body({**HEADERS["binary"], "parameters": {"nested": {"a": 1}}})
    decode_request(body, length, "m", "", shm, layouts)
    assert layouts.get(json_data) is None
    assert layouts.get(body[: int(length)]) is None


def test_the_oldest_layout_goes_first() -> None:
    shm, layouts = SharedMemoryRegistry(), HeaderLayouts(kept=2)
    keys = []
    for request_id in range(3):
        body, length = _body({**HEADERS["bytes"], "id": str(request_id)})
        decode_request(body, length, "m", "", shm, layouts)
        keys.append(body[: int(length)])
    assert [layouts.get(key) is not None for key in keys] == [False, True, True]
