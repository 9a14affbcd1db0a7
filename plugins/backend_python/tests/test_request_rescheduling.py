"""Request rescheduling (``request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)``)
on models with ``sequence_batching { iterative_sequence: true }``, as Triton's QA suite
``qa/L0_backend_python/request_rescheduling`` checks it, in both execution modes: over
HTTP, gRPC (plain and streaming) and BLS, the texts of the mistakes, and a client that
leaves in the middle of a rescheduled request."""

from __future__ import annotations

import json
import logging
import queue
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from .models import add
from .qa_models import COUNTDOWN, COUNTDOWN_IO, SUM_IO, THREE_RUNS

MODES = ["process", "in-process"]
ITERATIVE = "sequence_batching { iterative_sequence: true }"
DECOUPLED = "model_transaction_policy { decoupled: true }"

#: Triton's texts (its spelling "reschduled" included: tests grep for it).
NOT_NONE = (
    "Expected a None object in the execute function return list for reschduled request, "
    "found type '<class "
)
NOT_CONFIGURED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)

BLS_IO = 'output [ { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] } ]'

#: Calls the two models above through BLS and answers with what it saw, as JSON.
BLS = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        a = pb_utils.Tensor("INPUT0", np.arange(4, dtype=np.float32))
        b = pb_utils.Tensor("INPUT1", np.full(4, 10, np.float32))
        seen = {}
        summed = pb_utils.InferenceRequest(
            model_name="three_runs", inputs=[a, b], requested_output_names=["SUM", "RUNS"]).exec()
        seen["error"] = summed.error().message() if summed.has_error() else None
        for tensor in summed.output_tensors():
            seen[tensor.name()] = tensor.as_numpy().tolist()
        counted = pb_utils.InferenceRequest(
            model_name="countdown", inputs=[pb_utils.Tensor("IN", np.array([3], np.int32))],
            requested_output_names=["OUT"]).exec(decoupled=True)
        seen["countdown"] = [
            r.error().message() if r.has_error() else
            [t.as_numpy().tolist() for t in r.output_tensors()] for r in counted]
        text = np.array([json.dumps(seen).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", text)]) for _ in requests]
"""


def serve(repo: Any, despina_server: Any, mode: str) -> Any:
    """The models above in ``mode``, on a started server; ``not_iterative`` is
    THREE_RUNS without a sequence batcher."""
    add(repo, "three_runs", THREE_RUNS, SUM_IO, mode, ITERATIVE)
    add(repo, "not_iterative", THREE_RUNS, SUM_IO, mode)
    add(repo, "countdown", COUNTDOWN, COUNTDOWN_IO, mode, f"{ITERATIVE}\n{DECOUPLED}")
    add(repo, "bls", BLS, BLS_IO, mode)
    return despina_server(repo.root)


def pair(module: Any) -> list[Any]:
    inputs = []
    for name, value in (("INPUT0", 1.0), ("INPUT1", 2.0)):
        tensor = module.InferInput(name, [4], "FP32")
        tensor.set_data_from_numpy(np.full(4, value, np.float32))
        inputs.append(tensor)
    return inputs


def countdown(client: Any, value: int) -> list[Any]:
    """Stream one countdown request; every (OUT or None, error) received."""
    got: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    client.async_stream_infer(
        "countdown", [tensor.set_data_from_numpy(np.array([value], np.int32))]
    )
    client.stop_stream()  # returns once the request ended
    results = [got.get() for _ in range(got.qsize())]
    return [(None if r is None else int(r.as_numpy("OUT")[0]), e) for r, e in results]


@pytest.mark.parametrize("mode", MODES)
def test_a_rescheduled_request_is_answered_by_a_later_execute(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any, grpc_client: Any
) -> None:
    running = serve(model_repository, despina_server, mode)
    answer = http_client(running).infer("three_runs", pair(httpclient))
    assert answer.as_numpy("SUM").tolist() == [3.0] * 4
    # a fresh sequence ID, START on the first execution only, the same request each time
    assert answer.as_numpy("RUNS").tolist() == [1, 1, 0, 0]
    answer = grpc_client(running).infer("three_runs", pair(grpcclient))
    assert answer.as_numpy("RUNS").tolist() == [2, 1, 0, 0]
    own = {"sequence_id": 77, "sequence_start": True}
    answer = http_client(running).infer("three_runs", pair(httpclient), **own)
    assert answer.as_numpy("RUNS").tolist() == [77, 1, 0, 0]


@pytest.mark.parametrize("mode", MODES)
def test_a_decoupled_model_streams_one_response_per_execution(
    mode: str, model_repository: Any, despina_server: Any, grpc_client: Any
) -> None:
    client = grpc_client(serve(model_repository, despina_server, mode))
    assert countdown(client, 3) == [(2, None), (1, None), (0, None)]
    assert countdown(client, 1) == [(0, None)]


@pytest.mark.parametrize("mode", MODES)
def test_bls_calls_reach_rescheduled_models(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    client = http_client(serve(model_repository, despina_server, mode))
    seen = json.loads(client.infer("bls", []).as_numpy("SEEN")[0])
    assert seen == {
        "error": None,
        "SUM": [10.0, 11.0, 12.0, 13.0],
        "RUNS": [1, 1, 0, 0],
        "countdown": [[[2]], [[1]], [[0]]],
    }


@pytest.mark.parametrize("mode", MODES)
def test_mistakes_get_triton_texts_and_the_model_keeps_serving(
    mode: str,
    model_repository: Any,
    despina_server: Any,
    http_client: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = http_client(serve(model_repository, despina_server, mode))
    with pytest.raises(InferenceServerException) as info:
        client.infer("three_runs", pair(httpclient), parameters={"RETURN_ANYWAY": True})
    assert info.value.status() == "500"
    message = info.value.message()
    assert message.startswith("Failed to process the request(s) for model 'three_runs_0")
    assert NOT_NONE in message and "InferenceResponse'>'." in message
    caplog.set_level(logging.ERROR)
    with pytest.raises(InferenceServerException) as info:
        client.infer("not_iterative", pair(httpclient))
    assert info.value.status() == "500"
    assert info.value.message().endswith(f"message: {NOT_CONFIGURED}")
    assert f"Failed to release request: {NOT_CONFIGURED}" in caplog.text
    # neither left a sequence or a request behind
    assert client.infer("three_runs", pair(httpclient)).as_numpy("RUNS").tolist()[1:] == [1, 0, 0]


@pytest.mark.parametrize("mode", MODES)
def test_a_client_leaving_ends_an_endless_rescheduled_request(
    mode: str, model_repository: Any, despina_server: Any, grpc_client: Any
) -> None:
    running = serve(model_repository, despina_server, mode)
    client = grpc_client(running)
    got: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    try:
        client.async_stream_infer(
            "countdown", [tensor.set_data_from_numpy(np.array([-1], np.int32))]
        )
        for expected in (-2, -3, -4):
            result, error = got.get(timeout=30)
            assert error is None and int(result.as_numpy("OUT")[0]) == expected
    finally:
        client.stop_stream(cancel_requests=True)
    # the one sequence slot is free again: the next request runs to its end
    assert countdown(grpc_client(running), 2) == [(1, None), (0, None)]
