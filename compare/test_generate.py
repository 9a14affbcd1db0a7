"""The generate extension: the same ``/generate`` and ``/generate_stream`` requests to
Despina and Triton 2.51; status, Content-Type and body bytes compared (both sort keys)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from despina.testing import http_post

from .conftest import Pair, Served
from .models import ERROR_CODES

NOT_ONE = (
    b'{"error":"generate expects model to produce exactly 1 response, use generate stream '
    b'for model that generates various number of responses"}'
)


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: Any
    #: (Despina's status, Triton's status) where they differ on purpose; bodies still match.
    statuses: tuple[int, int] | None = None


CASES = [
    Case(
        "keys become inputs and parameters",
        "request_info/generate",
        {"X": 3, "id": "g1", "k": "v", "parameters": {"n": 2, "b": False, "f": 0.5, "s": "t"}},
    ),
    Case(
        "every datatype",
        "echo/generate",
        {
            "B": [True, False],
            "I8": [-3],
            "U64": [18446744073709551615],
            "F64": [0.25, -2.5],
            "S": ["a", "é"],
        },
    ),
    Case("BYTES", "strings/generate_stream", {"TEXT": ["ab", "cde"]}),
    Case("batch dimension", "batched/generate", {"X": [5]}),
    Case("a versioned path", "strings/versions/1/generate", {"TEXT": "one"}),
    Case("a decoupled model streams", "repeat/generate_stream", {"IN": [4, 5, 6]}),
    Case("a decoupled model answering once", "repeat/generate", {"IN": [4]}),
    Case("a decoupled model answering nothing", "repeat/generate_stream", {"IN": []}),
    Case("an error event after a response", "decoupled_errors/generate_stream", {"IN": [7]}),
    # The status of an error event that starts a stream: see test_error_status_is_the_error_code.
    Case(
        "a stream whose model raises", "decoupled_errors/generate_stream", {"IN": [-1]}, (500, 400)
    ),
    Case("an error response", "coded_error/generate", {"CODE": 3}),
    Case("an error response streamed", "coded_error/generate_stream", {"CODE": 3}),
    Case("nested arrays", "strings/generate", {"TEXT": [["a"], ["b"]]}),
    Case("more values than the shape", "batched/generate", {"X": [[1, 2]]}, (400, 500)),
    Case("a count the dims cannot take", "request_info/generate", {"X": [1, 2]}),
    Case("a parameter of no parameter type", "request_info/generate", {"X": 1, "z": None}),
    Case(
        "a nested parameter of no parameter type",
        "request_info/generate",
        {"X": 1, "parameters": {"z": [1]}},
    ),
    Case(
        "an input at the top and nested", "request_info/generate", {"X": 1, "parameters": {"X": 2}}
    ),
    Case("unknown model", "nope/generate", {"X": 1}),
    Case("unknown version", "strings/versions/7/generate_stream", {"TEXT": "a"}),
    Case("id that is not a string", "request_info/generate", {"X": 1, "id": 5}, (400, 500)),
    Case(
        "parameters that are not an object",
        "request_info/generate",
        {"X": 1, "parameters": 5},
        (400, 500),
    ),
    Case("an integer input given a float", "request_info/generate", {"X": 1.5}, (400, 500)),
    Case("a BYTES input given a number", "strings/generate", {"TEXT": 5}, (400, 500)),
    # Triton starts its reply before it knows the count, so it answers 200 with an error body.
    Case("a decoupled model answering twice", "repeat/generate", {"IN": [4, 5]}, (400, 200)),
    Case("a decoupled model answering nothing", "repeat/generate", {"IN": []}, (400, 200)),
]


def _post(served: Served, path: str, body: Any) -> tuple[int, str, bytes]:
    return http_post(served.http_port, f"/v2/models/{path}", json.dumps(body))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_same_answer(pair: Pair, case: Case) -> None:
    ours = _post(pair.despina, case.path, case.body)
    theirs = pair.as_despina_writes_paths(_post(pair.triton, case.path, case.body))
    assert ours[1:] == theirs[1:]
    assert (ours[0], theirs[0]) == (case.statuses or (theirs[0], theirs[0]))


@pytest.mark.parametrize(
    "body",
    [
        b'{"X": 1, "X": 2}',
        b'{"X": 1, "\\u0058": 2}',
        b'{"k": 1, "parameters": {"X": 1, "X": 2}}',
    ],
    ids=["two keys", "two keys, one escaped", "two nested keys"],
)
def test_input_named_by_two_keys(pair: Pair, body: bytes) -> None:
    """JSON the parser reads with the last key winning; Triton reads both keys."""
    ours, theirs = (http_post(s.http_port, "/v2/models/request_info/generate", body) for s in pair)
    assert ours == theirs
    assert ours[0] == 400


@pytest.mark.parametrize("code", range(ERROR_CODES))
def test_error_status_is_the_error_code(pair: Pair, code: int) -> None:
    """Despina answers a model's error with its code's status, as ``/infer`` does; Triton
    2.51 reads the status from an error it has already freed here (observed: 400 always)."""
    ours, theirs = (_post(s, "coded_error/generate", {"CODE": code}) for s in pair)
    on_infer = _post(pair.despina, "coded_error/infer", _infer_body(code))
    assert ours[1:] == theirs[1:]
    assert ours[0] == on_infer[0]
    assert theirs[0] == 400


def _infer_body(code: int) -> dict[str, Any]:
    return {"inputs": [{"name": "CODE", "datatype": "INT32", "shape": [1], "data": [code]}]}
