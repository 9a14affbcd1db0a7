"""gRPC: the same calls to Despina and Triton 2.51 through tritonclient, the same answers
(results, status codes and texts), plus the decoupled stream and custom metrics."""

from __future__ import annotations

import os
import queue
import urllib.request
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf.json_format import MessageToDict
from tritonclient.utils import InferenceServerException

from .conftest import Pair, Served
from .models import ERROR_CODES

ONES = np.ones(4, np.float32)


DATATYPES = {
    "float32": "FP32",
    "float16": "FP16",
    "float64": "FP64",
    "int8": "INT8",
    "int32": "INT32",
    "uint64": "UINT64",
    "bool": "BOOL",
    "object": "BYTES",
}


def _inputs(**arrays: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = []
    for name, array in arrays.items():
        datatype = DATATYPES[array.dtype.name]
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _ask(served: Served, call: Callable[[grpcclient.InferenceServerClient], Any]) -> Any:
    """``call``'s result as plain data, or ("error", status, message)."""
    client = grpcclient.InferenceServerClient(served.grpc_url)
    try:
        result = call(client)
    except InferenceServerException as error:
        return ("error", error.status(), error.message())
    finally:
        client.close()
    if isinstance(result, grpcclient.InferResult):
        response = result.get_response()
        names = [output.name for output in response.outputs]
        return response.model_name, [(name, result.as_numpy(name).tolist()) for name in names]
    return MessageToDict(result) if hasattr(result, "DESCRIPTOR") else result


def _add_sub(first: float) -> list[grpcclient.InferInput]:
    return _inputs(INPUT0=np.array([first, 2, 3, 4], np.float32), INPUT1=ONES)


CALLS: dict[str, Callable[[grpcclient.InferenceServerClient], Any]] = {
    **{
        f"TritonError code {code}": lambda c, code=code: c.infer(
            "coded_error", _inputs(CODE=np.array([code], np.int32))
        )
        for code in range(ERROR_CODES)
    },
    "add_sub": lambda c: c.infer("add_sub", _add_sub(1)),
    "response with error=": lambda c: c.infer("add_sub", _add_sub(-1)),
    "execute raises": lambda c: c.infer("add_sub", _add_sub(-2)),
    "BYTES": lambda c: c.infer("strings", _inputs(TEXT=np.array([b"ab", b"x y"], np.object_))),
    "BLS exec": lambda c: c.infer("bls_sync", _add_sub(1)),
    "BLS async_exec": lambda c: c.infer("bls_async", _add_sub(1)),
    "missing input": lambda c: c.infer("add_sub", _inputs(INPUT0=ONES)),
    "unknown model": lambda c: c.infer("nope", _add_sub(1)),
    "model whose initialize raised": lambda c: c.infer("broken", _add_sub(1)),
    "decoupled model on ModelInfer": lambda c: c.infer(
        "repeat", _inputs(IN=np.array([1], np.int32))
    ),
    "wrong datatype": lambda c: c.infer(
        "add_sub", _inputs(INPUT0=np.arange(4, dtype=np.int32), INPUT1=ONES)
    ),
    "wrong shape": lambda c: c.infer(
        "add_sub", _inputs(INPUT0=np.ones((2, 2), np.float32), INPUT1=ONES)
    ),
    "load of a model whose initialize raises": lambda c: c.load_model("broken"),
    "load of a model missing from the repository": lambda c: c.load_model("missing"),
    "statistics of an unknown model": lambda c: c.get_inference_statistics("nope"),
    "every datatype": lambda c: c.infer(
        "echo",
        _inputs(
            B=np.array([True, False]),
            I8=np.array([-128, 127], np.int8),
            U64=np.array([0, 2**64 - 1], np.uint64),
            F16=np.array([0.1, 65504, -0.0], np.float16),
            F64=np.array([0.1, 1e300]),
            S=np.array([b"a", "\u00e9 z".encode(), b""], np.object_),
        ),
    ),
    "outputs requested in the reverse of the model's order": lambda c: c.infer(
        "add_sub",
        _add_sub(1),
        outputs=[grpcclient.InferRequestedOutput(n) for n in ("OUTPUT1", "OUTPUT0")],
    ),
    "ensemble": lambda c: c.infer("twice", _add_sub(1)),
    "input given twice": lambda c: c.infer("add_sub", [*_add_sub(1), *_inputs(INPUT0=ONES)]),
    "input given twice to an ensemble": lambda c: c.infer(
        "twice", [*_add_sub(1), *_inputs(INPUT1=ONES)]
    ),
    # Triton 2.51 answers it; newer Triton refuses it, as Despina does (REFUSED)
    "output requested twice": lambda c: c.infer(
        "add_sub", _add_sub(1), outputs=[grpcclient.InferRequestedOutput("OUTPUT0")] * 2
    ),
    "ensemble with a failing step": lambda c: c.infer("twice", _add_sub(-1)),
    "sequence without a correlation ID": lambda c: c.infer(
        "accumulate", _inputs(X=np.array([1], np.int32))
    ),
    "model metadata": lambda c: c.get_model_metadata("strings"),
    "config": lambda c: c.get_model_config("batched"),
    "auto-completed config": lambda c: c.get_model_config("auto"),
    "model ready": lambda c: c.is_model_ready("broken"),
}


#: (Despina's code, Triton's code) where they differ on purpose (the README's tables).
CODES = {
    "load of a model missing from the repository": ("StatusCode.NOT_FOUND", "StatusCode.INTERNAL"),
}

#: Calls Triton 2.51 answers and Despina refuses on purpose: Despina's (code, text).
REFUSED = {
    "output requested twice": (
        "StatusCode.INVALID_ARGUMENT",
        "[request id: <id_unknown>] output 'OUTPUT0' already exists in request",
    ),
}


#: Calls whose outputs follow ``request.inputs()``: Triton 2.51 lists a request's inputs in
#: an order of its own (neither the request's nor the config's); Despina in the request's.
INPUT_ORDER_FREE = {"every datatype"}


@pytest.mark.parametrize("name", list(CALLS))
def test_same_answer(pair: Pair, name: str) -> None:
    ours = _ask(pair.despina, CALLS[name])
    theirs = pair.as_despina_writes_paths(_ask(pair.triton, CALLS[name]))
    if name in REFUSED:
        assert theirs[0] == "add_sub"
        assert ours == ("error", *REFUSED[name])
        return
    if name in CODES:
        assert (ours[1], theirs[1]) == CODES[name]
        ours, theirs = ours[::2], theirs[::2]  # the rest must match: ("error", message)
    if name in INPUT_ORDER_FREE:
        ours, theirs = (ours[0], sorted(ours[1])), (theirs[0], sorted(theirs[1]))
    assert ours == theirs


def test_sequence(pair: Pair) -> None:
    """Two interleaved sequences over gRPC: START/END flags and correlation IDs."""
    steps = [
        (3, 1, True, False),
        (4, 10, True, False),
        (3, 2, False, False),
        (4, 20, False, True),
        (3, 3, False, True),
    ]
    answers = []
    for served in pair:
        answers.append(
            [
                _ask(
                    served,
                    lambda c, sid=sid, value=value, start=start, end=end: c.infer(
                        "accumulate",
                        _inputs(X=np.array([value], np.int32)),
                        sequence_id=sid,
                        sequence_start=start,
                        sequence_end=end,
                    ),
                )
                for sid, value, start, end in steps
            ]
        )
    assert answers[0] == answers[1]
    assert [answer[1][0][1] for answer in answers[0]] == [[1], [10], [3], [30], [6]]


def _stream(served: Served, values: list[int]) -> list[tuple[list[int], list[int], bool]]:
    """The decoupled model's responses to one streamed request: (OUT, IDX, final)."""
    answers: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(served.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    try:
        client.async_stream_infer(
            "repeat",
            _inputs(IN=np.array(values, np.int32)),
            enable_empty_final_response=True,
        )
        seen = []
        while True:
            answer = answers.get(timeout=30)
            assert not isinstance(answer, Exception), answer
            response = answer.get_response()
            final = response.parameters["triton_final_response"].bool_param
            outputs = [answer.as_numpy(n) for n in ("OUT", "IDX")] if response.outputs else []
            seen.append((*[o.tolist() for o in outputs], final))
            if final:
                return seen
    finally:
        client.stop_stream()
        client.close()


def _stream_answers(served: Served, model: str, values: list[int]) -> list[Any]:
    """Every callback of one streamed request, until the final flag or an error."""
    answers: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(served.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    seen: list[Any] = []
    try:
        client.async_stream_infer(model, _inputs(IN=np.array(values, np.int32)))
        while True:
            try:
                answer = answers.get(timeout=3)
            except queue.Empty:
                return seen
            if isinstance(answer, InferenceServerException):
                seen.append(("error", answer.status(), answer.message()))
                continue
            response = answer.get_response()
            seen.append([(o.name, answer.as_numpy(o.name).tolist()) for o in response.outputs])
            if response.parameters["triton_final_response"].bool_param:
                return seen
    finally:
        client.stop_stream()
        client.close()


@pytest.mark.parametrize("first", [3, -1], ids=["error response", "execute raises"])
def test_decoupled_errors(pair: Pair, first: int) -> None:
    ours = _stream_answers(pair.despina, "decoupled_errors", [first])
    theirs = _stream_answers(pair.triton, "decoupled_errors", [first])
    assert ours == pair.as_despina_writes_paths(theirs)


def test_plain_model_on_the_stream(pair: Pair) -> None:
    """ModelStreamInfer on a model that is not decoupled: one response per request."""
    answers = []
    for served in pair:
        results: queue.Queue[Any] = queue.Queue()
        client = grpcclient.InferenceServerClient(served.grpc_url)
        client.start_stream(callback=lambda result, error, into=results: into.put(error or result))
        try:
            for first in (1.0, -1.0, 3.0):
                client.async_stream_infer("add_sub", _add_sub(first), request_id=str(first))
            seen = []
            for _ in range(3):
                answer = results.get(timeout=30)
                if isinstance(answer, InferenceServerException):
                    seen.append(("error", answer.status(), answer.message()))
                else:
                    seen.append(MessageToDict(answer.get_response()))
            answers.append(seen)
        finally:
            client.stop_stream()
            client.close()
    assert answers[0] == answers[1]


def test_decoupled_stream(pair: Pair) -> None:
    ours, theirs = _stream(pair.despina, [5, 6, 7]), _stream(pair.triton, [5, 6, 7])
    assert ours == theirs
    assert len(ours) == 4  # three responses, then the empty final one


def _custom_metrics(served: Served) -> list[str]:
    """The custom families' lines, byte for byte (numbers in Triton's format: ``3``)."""
    url = f"http://127.0.0.1:{served.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    return [line for line in lines if "test_requests_total" in line or "test_last_value" in line]


def test_custom_metrics(pair: Pair) -> None:
    for served in pair:
        for first in (3.0, 5.0, 9.0):
            _ask(served, lambda c, first=first: c.infer("metrics", _add_sub(first)))
    ours = _custom_metrics(pair.despina)
    assert ours == _custom_metrics(pair.triton)
    assert 'test_requests_total{model="metrics"} 3' in ours
    assert 'test_last_value{model="metrics"} 9' in ours


def test_system_shared_memory(pair: Pair) -> None:
    """Register, infer with inputs and an output in the region, status, unregister."""
    import tritonclient.utils.shared_memory as shm

    key = f"/compare_grpc_{os.getpid()}"
    region = shm.create_shared_memory_region("compare_grpc", key, 64)
    try:
        shm.set_shared_memory_region(region, [np.arange(4, dtype=np.float32), ONES])
        answers = []
        for served in pair:
            client = grpcclient.InferenceServerClient(served.grpc_url)
            client.register_system_shared_memory("g1", key, 64)
            inputs = [grpcclient.InferInput(n, [4], "FP32") for n in ("INPUT0", "INPUT1")]
            inputs[0].set_shared_memory("g1", 16, 0)
            inputs[1].set_shared_memory("g1", 16, 16)
            output = grpcclient.InferRequestedOutput("OUTPUT0")
            output.set_shared_memory("g1", 16, 32)
            result = client.infer("add_sub", inputs, outputs=[output])
            status = MessageToDict(client.get_system_shared_memory_status("g1"))
            client.unregister_system_shared_memory("g1")
            answers.append((MessageToDict(result.get_response()), status))
            client.close()
        assert answers[0] == answers[1]
        np.testing.assert_array_equal(
            shm.get_contents_as_numpy(region, np.float32, [4], offset=32), np.arange(4) + 1
        )
    finally:
        shm.destroy_shared_memory_region(region)
