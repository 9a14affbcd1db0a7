"""HTTP/REST: the same requests to Despina and Triton 2.51, the same answers.

Each case compares the status and the JSON body. Where Despina differs on purpose (the
README's tables), the case names both answers, so a change on either side shows up.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from .conftest import Pair, Served
from .models import ERROR_CODES


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

CODED = [
    Case(
        f"TritonError code {code}",
        "POST",
        "/v2/models/coded_error/infer",
        _infer(("CODE", "INT32", [1], [code])),
    )
    for code in range(ERROR_CODES)
]

CASES = [
    *CODED,
    Case(
        "input given twice",
        "POST",
        "/v2/models/add_sub/infer",
        _infer(
            ("INPUT0", "FP32", [4], OK), ("INPUT0", "FP32", [4], OK), ("INPUT1", "FP32", [4], OK)
        ),
    ),
    Case(
        "input given twice, with an id",
        "POST",
        "/v2/models/add_sub/infer",
        _infer(("INPUT0", "FP32", [4], OK), ("INPUT0", "FP32", [4], OK), id="r7"),
    ),
    Case(
        "input given twice to an ensemble",
        "POST",
        "/v2/models/twice/infer",
        _infer(
            ("INPUT0", "FP32", [4], OK), ("INPUT1", "FP32", [4], OK), ("INPUT1", "FP32", [4], OK)
        ),
    ),
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
    Case(
        "BLS exec whose callee answers an error",
        "POST",
        "/v2/models/bls_sync/infer",
        _add_sub([-1, 2, 3, 4], ONES),
    ),
    Case(
        "BLS exec whose callee raises",
        "POST",
        "/v2/models/bls_sync/infer",
        _add_sub([-2, 2, 3, 4], ONES),
    ),
    Case("BLS async_exec", "POST", "/v2/models/bls_async/infer", _add_sub(OK, ONES)),
    Case(
        "decoupled model on the infer endpoint",
        "POST",
        "/v2/models/repeat/infer",
        _infer(("IN", "INT32", [2], [1, 2])),
    ),
    Case(
        "every JSON datatype",
        "POST",
        "/v2/models/echo/infer",
        _infer(
            ("B", "BOOL", [2], [True, False]),
            ("I8", "INT8", [2], [-128, 127]),
            ("U64", "UINT64", [2], [0, 18446744073709551615]),
            ("F64", "FP64", [2], [0.1, 1e300]),
            ("S", "BYTES", [2], ["a", "\u00e9 z"]),
        ),
    ),
    Case(
        "classification",
        "POST",
        "/v2/models/add_sub/infer",
        _add_sub(
            [4, 9, 1, 7], ONES, outputs=[{"name": "OUTPUT0", "parameters": {"classification": 2}}]
        ),
    ),
    Case(
        "what execute sees of a request",
        "POST",
        "/v2/models/request_info/infer",
        _infer(
            ("X", "INT32", [1], [1]),
            id="req-9",
            parameters={"text": "v", "number": 3, "flag": True, "priority": 0},
            outputs=[{"name": "INFO"}],
        ),
    ),
    Case(
        "what execute sees of a request without parameters",
        "POST",
        "/v2/models/request_info/infer",
        _infer(("X", "INT32", [1], [1])),
    ),
    Case(
        "outputs requested in the reverse of the model's order",
        "POST",
        "/v2/models/add_sub/infer",
        _add_sub(OK, ONES, outputs=[{"name": "OUTPUT1"}, {"name": "OUTPUT0"}]),
    ),
    Case(
        "outputs that disagree with the config",
        "POST",
        "/v2/models/sloppy/infer",
        _add_sub(OK, ONES),
    ),
    Case("versioned metadata", "GET", "/v2/models/add_sub/versions/1"),
    Case("unknown version", "GET", "/v2/models/add_sub/versions/7"),
    Case("version that is not a number", "GET", "/v2/models/add_sub/versions/x1"),
    Case("versioned infer", "POST", "/v2/models/add_sub/versions/1/infer", _add_sub(OK, ONES)),
    Case(
        "infer on an unknown version",
        "POST",
        "/v2/models/add_sub/versions/3/infer",
        _add_sub(OK, ONES),
    ),
    Case("versioned ready", "GET", "/v2/models/add_sub/versions/1/ready"),
    Case("statistics of an unknown model", "GET", "/v2/models/nope/stats"),
    Case("log settings", "GET", "/v2/logging"),
    Case("trace settings", "GET", "/v2/trace/setting"),
    Case("model trace settings", "GET", "/v2/models/add_sub/trace/setting"),
    Case(
        "binary_data_output as a parameter",
        "POST",
        "/v2/models/add_sub/infer",
        _add_sub(OK, ONES, outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": False}}]),
    ),
    Case(
        "bad priority",
        "POST",
        "/v2/models/add_sub/infer",
        _add_sub(OK, ONES, parameters={"priority": "high"}),
        statuses=(400, 500),
    ),
    Case(
        "bad timeout",
        "POST",
        "/v2/models/add_sub/infer",
        _add_sub(OK, ONES, parameters={"timeout": "soon"}),
        statuses=(400, 500),
    ),
    Case(
        "sequence_id on a model without sequence batching",
        "POST",
        "/v2/models/add_sub/infer",
        _add_sub(OK, ONES, parameters={"sequence_id": 5}),
    ),
    Case(
        "empty tensors of every JSON datatype",
        "POST",
        "/v2/models/echo/infer",
        _infer(
            ("B", "BOOL", [0], []),
            ("I8", "INT8", [0], []),
            ("U64", "UINT64", [0], []),
            ("F64", "FP64", [0], []),
            ("S", "BYTES", [1], ["plain"]),
        ),
    ),
    Case(
        "unload of a model that is not loaded",
        "POST",
        "/v2/repository/models/never_loaded/unload",
        {},
    ),
    Case("ensemble metadata", "GET", "/v2/models/twice"),
    Case("ensemble config", "GET", "/v2/models/twice/config"),
    Case("ensemble", "POST", "/v2/models/twice/infer", _add_sub(OK, ONES)),
    Case(
        "sequence without a sequence_id",
        "POST",
        "/v2/models/accumulate/infer",
        _infer(("X", "INT32", [1], [5])),
    ),
    Case("sequence model config", "GET", "/v2/models/accumulate/config"),
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


def _newer_schema_fields(body: Any) -> Any:
    """A config without ``ensemble_scheduling.max_inflight_requests``: Despina's schema
    (tritonclient's protos) is newer than Triton 2.51's and prints it (default 0)."""
    if isinstance(body, dict) and "ensemble_scheduling" in body:
        assert body["ensemble_scheduling"].pop("max_inflight_requests", 0) == 0
    return body


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_same_answer(pair: Pair, case: Case) -> None:
    (ours, our_body), (theirs, their_body) = _call(pair.despina, case), _call(pair.triton, case)
    our_body = _newer_schema_fields(our_body)
    assert our_body == pair.as_despina_writes_paths(their_body)
    assert (ours, theirs) == (case.statuses or (theirs, theirs))


def test_failing_ensemble_step(pair: Pair) -> None:
    """Triton's text: the ensemble's prefix before the step's own error."""
    case = Case("step error", "POST", "/v2/models/twice/infer", _add_sub([-1, 2, 3, 4], ONES))
    (ours, our_body), (theirs, their_body) = _call(pair.despina, case), _call(pair.triton, case)
    assert ours == theirs
    assert their_body["error"].startswith("in ensemble 'twice', ")
    assert our_body["error"] == their_body["error"]


@pytest.mark.parametrize("model", ["add_sub", "twice"])
def test_output_requested_twice(pair: Pair, model: str) -> None:
    """Triton 2.51 answers it (newer Triton refuses it); Despina refuses it as newer Triton."""
    output = "OUTPUT0" if model == "add_sub" else "TWICE"
    body = _add_sub(OK, ONES, outputs=[{"name": output}, {"name": output}])
    case = Case("output twice", "POST", f"/v2/models/{model}/infer", body)
    (ours, our_body), (theirs, their_body) = _call(pair.despina, case), _call(pair.triton, case)
    assert theirs == 200
    assert [o["name"] for o in their_body["outputs"]] == [output]
    assert (ours, our_body) == (
        400,
        {"error": f"[request id: <id_unknown>] output '{output}' already exists in request"},
    )


def test_sequence(pair: Pair) -> None:
    """Two interleaved sequences, START and END flags as request parameters."""
    steps = [
        (7, 1, True, False),
        (8, 10, True, False),
        (7, 2, False, False),
        (8, 20, False, True),
        (7, 3, False, True),
    ]
    answers = []
    for served in pair:
        seen = []
        for sequence_id, value, start, end in steps:
            parameters = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
            case = Case(
                "step",
                "POST",
                "/v2/models/accumulate/infer",
                _infer(("X", "INT32", [1], [value]), parameters=parameters),
            )
            seen.append(_call(served, case))
        answers.append(seen)
    assert answers[0] == answers[1]
    assert [body["outputs"][0]["data"] for _, body in answers[0]] == [[1], [10], [3], [30], [6]]


def test_statistics_count_the_same_requests(pair: Pair) -> None:
    """After the same requests, the same counts (durations are each server's own)."""

    def counts(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: counts(v) for k, v in value.items() if k not in ("ns", "last_inference")}
        if isinstance(value, list):
            return [counts(v) for v in value]
        return value

    # not add_sub: Triton counts its error= responses as successes, Despina as failures;
    # not the ensemble: Triton 2.51 counts a request whose step failed twice in ``fail``
    for model in ("strings", "batched", "echo", "wrong_return", "bls_sync", "accumulate"):
        case = Case("statistics", "GET", f"/v2/models/{model}/stats")
        ours, theirs = _call(pair.despina, case), _call(pair.triton, case)
        assert ours[0] == theirs[0] == 200, model
        assert counts(ours[1]) == counts(theirs[1]), model


@pytest.mark.parametrize("model", ["add_sub", "batched", "accumulate", "auto", "repeat"])
def test_config_bytes(pair: Pair, model: str) -> None:
    """The config JSON byte for byte (key order and number forms included)."""
    answers = []
    for served in pair:
        url = f"http://{served.http_url}/v2/models/{model}/config"
        with urllib.request.urlopen(url, timeout=30) as answer:
            answers.append(answer.read())
    assert answers[0] == answers[1]


def test_fp16_as_json(pair: Pair) -> None:
    """Despina reads and writes FP16 as JSON numbers; Triton refuses them in JSON."""
    case = Case(
        "fp16",
        "POST",
        "/v2/models/echo/infer",
        _infer(
            ("B", "BOOL", [1], [True]),
            ("I8", "INT8", [1], [1]),
            ("U64", "UINT64", [1], [1]),
            ("F16", "FP16", [2], [0.5, -2]),
            ("F64", "FP64", [1], [1]),
            ("S", "BYTES", [1], ["a"]),
        ),
    )
    (ours, our_body), (theirs, their_body) = _call(pair.despina, case), _call(pair.triton, case)
    assert ours == 200 and our_body["outputs"][3]["data"] == [0.5, -2.0]
    assert (theirs, their_body) == (
        400,
        {
            "error": "receiving FP16 data via JSON is not supported. Please use the binary "
            "data format for input F16"
        },
    )


def test_statistics_of_every_model_list_the_same_models(pair: Pair) -> None:
    case = Case("all statistics", "GET", "/v2/models/stats")
    listed = []
    for served in pair:
        status, body = _call(served, case)
        listed.append((status, [(m["name"], m["version"]) for m in body["model_stats"]]))
    assert listed[0] == listed[1]


def test_repository_index(pair: Pair) -> None:
    index = Case("index", "POST", "/v2/repository/index", {})
    assert _call(pair.despina, index) == pair.as_despina_writes_paths(_call(pair.triton, index))


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


def _post(served: Served, body: bytes, header_length: int) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://{served.http_url}/v2/models/add_sub/infer",
        data=body,
        method="POST",
        headers={"Inference-Header-Content-Length": str(header_length)},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_one_binary_header_with_bodies_of_every_length(pair: Pair) -> None:
    """The same JSON header again and again (Despina builds the repeats from its kept
    layout) over the right body, a short one, a long one and the right one again."""
    header = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "FP32", "shape": [4]}
                | {"parameters": {"binary_data_size": 16}}
                for n in ("INPUT0", "INPUT1")
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    data = np.arange(8, dtype=np.float32).tobytes()
    bodies = [header + data, header + data[:20], header + data + b"more", header + data]
    ours, theirs = ([_post(served, b, len(header)) for b in bodies] for served in pair)
    assert ours == theirs
    assert [status for status, _ in ours] == [200, 400, 400, 200]


def test_system_shared_memory(pair: Pair) -> None:
    """Register a region, read an input from it and write an output into it, status,
    the usual mistakes, unregister: the same answers (Despina runs with
    ``--allow-client-shm=true``; without it registering is refused, as the README says)."""
    import tritonclient.utils.shared_memory as shm

    key = f"/compare_{os.getpid()}"
    region = shm.create_shared_memory_region("compare_region", key, 64)
    try:
        shm.set_shared_memory_region(
            region, [np.arange(4, dtype=np.float32), np.ones(4, np.float32)]
        )
        register = {"key": key, "offset": 0, "byte_size": 64}
        steps = [
            Case("register", "POST", "/v2/systemsharedmemory/region/r1/register", register),
            Case("register again", "POST", "/v2/systemsharedmemory/region/r1/register", register),
            Case("status", "GET", "/v2/systemsharedmemory/region/r1/status"),
            Case("status of an unknown region", "GET", "/v2/systemsharedmemory/region/r9/status"),
            Case(
                "inputs and an output in the region",
                "POST",
                "/v2/models/add_sub/infer",
                {
                    "inputs": [
                        {
                            "name": n,
                            "datatype": "FP32",
                            "shape": [4],
                            "parameters": {
                                "shared_memory_region": "r1",
                                "shared_memory_byte_size": 16,
                                "shared_memory_offset": offset,
                            },
                        }
                        for n, offset in (("INPUT0", 0), ("INPUT1", 16))
                    ],
                    "outputs": [
                        {
                            "name": "OUTPUT0",
                            "parameters": {
                                "shared_memory_region": "r1",
                                "shared_memory_byte_size": 16,
                                "shared_memory_offset": 32,
                            },
                        }
                    ],
                },
            ),
            Case(
                "an input past the region's end",
                "POST",
                "/v2/models/add_sub/infer",
                _infer(("INPUT1", "FP32", [4], ONES))
                | {
                    "inputs": [
                        {
                            "name": "INPUT0",
                            "datatype": "FP32",
                            "shape": [4],
                            "parameters": {
                                "shared_memory_region": "r1",
                                "shared_memory_byte_size": 16,
                                "shared_memory_offset": 56,
                            },
                        },
                        {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": ONES},
                    ]
                },
            ),
            Case("unregister", "POST", "/v2/systemsharedmemory/region/r1/unregister", {}),
            Case("status after unregister", "GET", "/v2/systemsharedmemory/status"),
        ]
        for step in steps:
            ours, theirs = _call(pair.despina, step), _call(pair.triton, step)
            assert ours == theirs, step.name
        missing = {"key": f"{key}_missing", "offset": 0, "byte_size": 64}
        step = Case("no such key", "POST", "/v2/systemsharedmemory/region/r0/register", missing)
        ours, theirs = _call(pair.despina, step), _call(pair.triton, step)
        assert ours == (400, {"error": "Unable to open shared memory region: 'r0'"})
        assert theirs == (500, {"error": f"Unable to open shared memory region: '{key}_missing'"})
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(region, np.float32, [4], offset=32), np.arange(4) + 1
        )
    finally:
        shm.destroy_shared_memory_region(region)
