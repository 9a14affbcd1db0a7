"""HTTP/REST: the same requests to Despina and Triton 2.51, the same answers.

Each case compares the status and the JSON body. Where Despina differs on purpose (the
README's tables), the case names both answers, so a change on either side shows up.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from .conftest import Pair, Served


@dataclass(frozen=True)
class Case:
    name: str
    method: str
    path: str
    body: Any = None
    #: (Despina's status, Triton's status) where they differ on purpose; bodies still match.
    statuses: tuple[int, int] | None = None


def _infer(*tensors: tuple[str, str, list[int], list[Any]], **extra: Any) -> dict[str, Any]:
    inputs = [{"name": n, "datatype": d, "shape": s, "data": v} for n, d, s, v in tensors]
    return {"inputs": inputs, **extra}


def _add_sub(first: list[float], second: list[float], **extra: Any) -> dict[str, Any]:
    return _infer(("INPUT0", "FP32", [4], first), ("INPUT1", "FP32", [4], second), **extra)


ONES = [1.0, 1.0, 1.0, 1.0]
OK = [1.0, 2.0, 3.0, 4.0]

CASES = [
    Case("model metadata", "GET", "/v2/models/add_sub"),
    Case("BYTES model metadata", "GET", "/v2/models/strings"),
    Case("decoupled model metadata", "GET", "/v2/models/repeat"),
    Case("config", "GET", "/v2/models/add_sub/config"),
    Case("config with dynamic batching", "GET", "/v2/models/batched/config"),
    Case("decoupled config", "GET", "/v2/models/repeat/config"),
    Case("auto-completed config", "GET", "/v2/models/auto/config"),
    Case("ready of a model whose initialize raised", "GET", "/v2/models/broken/ready"),
    Case("metadata of a model whose initialize raised", "GET", "/v2/models/broken"),
    Case(
        "infer on a model whose initialize raised",
        "POST",
        "/v2/models/broken/infer",
        _add_sub(OK, ONES),
    ),
    Case("unknown model", "POST", "/v2/models/nope/infer", _add_sub(OK, ONES)),
    Case("add_sub", "POST", "/v2/models/add_sub/infer", _add_sub(OK, ONES, id="r1")),
    Case(
        "one requested output",
        "POST",
        "/v2/models/add_sub/infer",
        _add_sub(OK, ONES, outputs=[{"name": "OUTPUT1"}]),
    ),
    Case(
        "unknown requested output",
        "POST",
        "/v2/models/add_sub/infer",
        _add_sub(OK, ONES, outputs=[{"name": "NOPE"}]),
    ),
    Case("response with error=", "POST", "/v2/models/add_sub/infer", _add_sub([-1, 2, 3, 4], ONES)),
    Case("execute raises", "POST", "/v2/models/add_sub/infer", _add_sub([-2, 2, 3, 4], ONES)),
    Case(
        "execute returns no responses", "POST", "/v2/models/wrong_return/infer", _add_sub(OK, ONES)
    ),
    Case("missing input", "POST", "/v2/models/add_sub/infer", _infer(("INPUT0", "FP32", [4], OK))),
    Case(
        "wrong datatype",
        "POST",
        "/v2/models/add_sub/infer",
        _infer(("INPUT0", "INT32", [4], [1, 2, 3, 4]), ("INPUT1", "FP32", [4], ONES)),
    ),
    Case(
        "wrong shape",
        "POST",
        "/v2/models/add_sub/infer",
        _infer(("INPUT0", "FP32", [2, 2], OK), ("INPUT1", "FP32", [4], ONES)),
    ),
    Case(
        "data shorter than the shape",
        "POST",
        "/v2/models/add_sub/infer",
        _add_sub([1, 2, 3], ONES),
        statuses=(400, 500),
    ),
    Case(
        "BYTES",
        "POST",
        "/v2/models/strings/infer",
        _infer(("TEXT", "BYTES", [3], ["ab", "cd e", ""])),
    ),
    Case(
        "BYTES given numbers",
        "POST",
        "/v2/models/strings/infer",
        _infer(("TEXT", "BYTES", [2], [1, 2])),
        statuses=(400, 500),
    ),
    Case(
        "batch under the dynamic batcher",
        "POST",
        "/v2/models/batched/infer",
        _infer(("X", "INT64", [2, 1], [3, 4])),
    ),
    Case(
        "batch above max_batch_size",
        "POST",
        "/v2/models/batched/infer",
        _infer(("X", "INT64", [9, 1], list(range(9)))),
    ),
    Case(
        "auto-completed model",
        "POST",
        "/v2/models/auto/infer",
        _infer(("INPUT0", "FP32", [1, 4], OK)),
    ),
    Case("BLS exec", "POST", "/v2/models/bls_sync/infer", _add_sub(OK, ONES)),
    Case("BLS async_exec", "POST", "/v2/models/bls_async/infer", _add_sub(OK, ONES)),
    Case(
        "decoupled model on the infer endpoint",
        "POST",
        "/v2/models/repeat/infer",
        _infer(("IN", "INT32", [2], [1, 2])),
        statuses=(400, 501),
    ),
    Case(
        "load of a model whose initialize raises", "POST", "/v2/repository/models/broken/load", {}
    ),
    Case(
        "load of a model missing from the repository",
        "POST",
        "/v2/repository/models/missing/load",
        {},
        statuses=(404, 500),
    ),
]


def _call(served: Served, case: Case) -> tuple[int, Any]:
    body = None if case.body is None else json.dumps(case.body).encode()
    request = urllib.request.Request(
        f"http://{served.http_url}{case.path}", data=body, method=case.method
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    return status, json.loads(raw) if raw else None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_same_answer(pair: Pair, case: Case) -> None:
    (ours, our_body), (theirs, their_body) = _call(pair.despina, case), _call(pair.triton, case)
    assert our_body == their_body
    assert (ours, theirs) == (case.statuses or (theirs, theirs))


def test_repository_index(pair: Pair) -> None:
    index = Case("index", "POST", "/v2/repository/index", {})
    assert _call(pair.despina, index) == _call(pair.triton, index)


def test_binary_tensors(pair: Pair) -> None:
    """The binary tensor extension both ways (tritonclient's default for numpy data)."""
    answers = []
    for served in pair:
        client = httpclient.InferenceServerClient(served.http_url)
        inputs = [httpclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
        inputs[0].set_data_from_numpy(np.arange(4, dtype=np.float32))
        inputs[1].set_data_from_numpy(np.full(4, 0.5, np.float32))
        outputs = [
            httpclient.InferRequestedOutput(n, binary_data=True) for n in ("OUTPUT0", "OUTPUT1")
        ]
        result = client.infer("add_sub", inputs, outputs=outputs, request_id="b1")
        answers.append(
            (result.get_response(), result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1"))
        )
        client.close()
    (ours, our0, our1), (theirs, their0, their1) = answers
    assert ours == theirs
    np.testing.assert_array_equal(our0, their0)
    np.testing.assert_array_equal(our1, their1)
