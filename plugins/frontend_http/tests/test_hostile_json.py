"""Hostile JSON tensors: a value of the wrong JSON type inside ``data`` and a
``binary_data_size`` that is not an unsigned integer get 400 with Triton's texts, also
when the same header comes again (the header-layout fast path); so do shapes no tensor
can have, with the text gRPC answers too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from despina.inference.tensors import MAX_TENSOR_BYTES
from despina.testing import RunningServer

from .helpers import raw

NUMBER = "attempt to access JSON non-number as double"
SIGNED = "attempt to access JSON non-signed-integer as signed-integer"
UNSIGNED = "attempt to access JSON non-unsigned-integer as unsigned-integer"
BOOLEAN = "attempt to access JSON non-boolean as boolean"
MANY = 300  # past the size checked value by value


def infer(server: RunningServer, datatype: str, shape: list[int], data: Any) -> tuple[int, Any]:
    """Both inputs of ``echo_<datatype>`` as JSON ``data``: (status, answer)."""
    inputs = [
        {"name": f"INPUT{i}", "datatype": datatype, "shape": shape, "data": data} for i in range(2)
    ]
    path = f"/v2/models/echo_{datatype.lower()}/infer"
    return raw(server, path, json.dumps({"inputs": inputs}).encode())


@pytest.mark.parametrize(
    ("datatype", "shape", "data", "message"),
    [
        ("FP32", [1, 2], [1.0, True], NUMBER),
        ("FP32", [1, 2], [[False, 2.5]], NUMBER),
        ("FP32", [2, 1], [[True], [2.5]], NUMBER),
        ("INT32", [2, 1], [[1], [False]], SIGNED),
        ("FP64", [1, MANY], [0.5] * (MANY - 1) + [True], NUMBER),
        ("FP32", [2, MANY], [[0.0] * MANY, [1.0] * (MANY - 1) + [False]], NUMBER),
        ("FP16", [1, 2], [True, 3.0], NUMBER),
        ("FP32", [1, 2], [1.0, "2"], NUMBER),
        ("INT32", [1, 2], [1, True], SIGNED),
        ("INT64", [1, MANY], [7] * (MANY - 1) + [False], SIGNED),
        ("UINT8", [1, 2], [True, 1], UNSIGNED),
        ("BOOL", [1, 2], [True, 1], BOOLEAN),
        ("BOOL", [1, 2], [False, 0.0], BOOLEAN),
    ],
)
def test_json_values_of_the_wrong_type_are_refused(
    server: RunningServer, datatype: str, shape: list[int], data: Any, message: str
) -> None:
    status, answer = infer(server, datatype, shape, data)
    assert (status, answer) == (400, {"error": f"Unable to parse 'data': {message}"})


@pytest.mark.parametrize(
    ("datatype", "value", "inside"),
    [
        ("FP16", 1e10, 2.0),
        ("FP16", -70000.0, 2.0),
        ("FP16", 65520, 65519.99),  # the least magnitude that rounds to infinity
        ("FP16", -65520.0, -65519.99),
        ("FP32", 1e39, 2.0),
        ("FP32", 2.0**128 - 2.0**103, 3.4028235677973362e38),
        ("FP32", -(2.0**128 - 2.0**103), -3.4028235677973362e38),
    ],
)
def test_floats_past_the_datatype_are_refused(
    server: RunningServer, datatype: str, value: float, inside: float
) -> None:
    """Found by `make fuzz`: numpy's overflowing cast became inf with a RuntimeWarning
    (a 500 where warnings are errors); a client's value the type cannot hold is a 400,
    among few values or many, flat or nested; ``inside`` (the largest that rounds to a
    finite value at the boundary) passes."""
    message = f"Unable to parse 'data': a value is outside the range of {datatype}"
    for shape, data in (([1, 2], [1.0, value]), ([1, MANY], [[1.0] * (MANY - 1) + [value]])):
        status, answer = infer(server, datatype, shape, data)
        assert (status, answer) == (400, {"error": message})
    status, answer = infer(server, datatype, [1, 2], [1.0, inside])
    assert status == 200, answer


@pytest.mark.parametrize("datatype", ["FP32", "INT32", "UINT8"])
def test_zeros_and_ones_are_numbers(server: RunningServer, datatype: str) -> None:
    """Numbers equal to a boolean's 0 and 1 stay accepted, few or many."""
    for data in ([0, 1], [[0, 1] * (MANY // 2)]):
        flat = data if isinstance(data[0], int) else data[0]
        status, answer = infer(server, datatype, [1, len(flat)], data)
        assert status == 200, answer
        assert answer["outputs"][0]["data"] == flat


@pytest.mark.parametrize("size", [None, True, False, -1, 16.0, "16", [16], {"n": 16}])
def test_binary_data_size_must_be_an_unsigned_integer(server: RunningServer, size: Any) -> None:
    """Refused every time, also with JSON data beside it, and however often the header
    repeats (an invalid header is never kept as a layout)."""
    blob = bytes(16)
    for data in (None, [1.0, 2.0, 3.0, 4.0]):
        item: dict[str, Any] = {"name": "INPUT0", "datatype": "FP32", "shape": [4]}
        item["parameters"] = {"binary_data_size": size}
        if data is not None:
            item["data"] = data
        second = {**item, "name": "INPUT1", "parameters": {"binary_data_size": 16}}
        header = json.dumps({"inputs": [item, second]}).encode()
        length = {"Inference-Header-Content-Length": str(len(header))}
        body = header + (blob if data is not None else blob + blob)
        for _ in range(3):
            status, answer = raw(server, "/v2/models/add_sub/infer", body, length)
            assert (status, answer) == (
                400,
                {"error": f"Unable to parse 'binary_data_size': {UNSIGNED}"},
            )


HUGE = 2**40


@pytest.mark.parametrize(
    ("shape", "size"),
    [
        ([HUGE, HUGE, HUGE], 16),  # the count overflows int64
        ([2**31, 2**31], 16),  # the count fits, its bytes do not
        ([0, HUGE, HUGE, HUGE], 0),  # no elements, still no such array
    ],
)
def test_impossible_shapes_are_refused(server: RunningServer, shape: list[int], size: int) -> None:
    tensors = [
        {"name": f"INPUT{i}", "datatype": "FP32", "shape": shape}
        | {"parameters": {"binary_data_size": size}}
        for i in range(2)
    ]
    header = json.dumps({"inputs": tensors}).encode()
    length = {"Inference-Header-Content-Length": str(len(header))}
    status, answer = raw(server, "/v2/models/echo_fp32/infer", header + bytes(2 * size), length)
    assert (status, answer) == (
        400,
        {
            "error": f"[request id: <id_unknown>] input 'INPUT0' for model 'echo_fp32' has an "
            f"invalid shape {shape}: the tensor would span more than {MAX_TENSOR_BYTES} bytes"
        },
    )
