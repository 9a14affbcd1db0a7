"""The sequence batcher over the wire: tritonclient HTTP and gRPC streaming."""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import seq_backend
from despina.testing import RepositoryBuilder, RunningServer
from test_sequence import STATE, running_sums, seq_config

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

Start = Callable[..., RunningServer]
OLDEST = "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 1000 }"


@pytest.fixture
def running(model_repository: RepositoryBuilder, despina_server: Start) -> RunningServer:
    model_repository.add("direct", seq_config(mbs=2, instances=2), {"1/model.seq": ""})
    hundred = np.array([100], np.int32).tobytes()
    oldest = seq_config(OLDEST, mbs=4, corrid_type="TYPE_STRING", extra=STATE)
    model_repository.add("oldest", oldest, {"1/model.seq": "", "initial_state/hundred": hundred})
    seq_backend.SeqBackend.batches.clear()
    return despina_server(model_repository.root, plugins=[seq_backend])


def tensor(module: Any, value: int) -> Any:
    """INPUT [1, 1] INT32 for either client module."""
    infer_input = module.InferInput("INPUT", [1, 1], "INT32")
    infer_input.set_data_from_numpy(np.array([[value]], np.int32))
    return infer_input


#: model -> (correlation IDs of 3 interleaved sequences, where the running sum starts)
STRATEGIES = {
    "direct": ([1001, 1002, 1003], 0),  # uint64 IDs, sums kept by the model per CORRID
    "oldest": (["user-a", "user-b", "user-c"], 100),  # string IDs, implicit state from 100
}
VALUES = [[1, 2, 3, 4], [10, 20, 30, 40], [7, 7, 7, 7]]


@pytest.mark.parametrize("model", sorted(STRATEGIES))
def test_interleaved_sequences_over_http(
    running: RunningServer, http_client: Any, model: str
) -> None:
    client = http_client(running)
    ids, start = STRATEGIES[model]
    outputs: dict[Any, list[int]] = {c: [] for c in ids}
    for index in range(4):  # request i of every sequence, then request i + 1 ...
        for corrid, values in zip(ids, VALUES, strict=True):
            result = client.infer(
                model,
                [tensor(httpclient, values[index])],
                sequence_id=corrid,
                sequence_start=index == 0,
                sequence_end=index == 3,
            )
            outputs[corrid].append(int(result.as_numpy("OUTPUT")[0][0]))
    assert outputs == {c: running_sums(v, start) for c, v in zip(ids, VALUES, strict=True)}
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, [tensor(httpclient, 1)], sequence_id=ids[0])
    assert info.value.status() == "400"
    assert info.value.message() == (
        f"inference request for sequence {ids[0]} to model '{model}' must specify the START "
        "flag on the first request of the sequence"
    )
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, [tensor(httpclient, 1)])
    assert info.value.message() == (
        f"inference request to model '{model}' must specify a non-zero or non-empty correlation ID"
    )
    assert client.is_server_live()


@pytest.mark.parametrize("model", sorted(STRATEGIES))
def test_interleaved_sequences_over_grpc_stream(
    running: RunningServer, grpc_client: Any, model: str
) -> None:
    client = grpc_client(running)
    ids, start = STRATEGIES[model]
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        for index in range(4):  # all sent at once: the server keeps each sequence in order
            for corrid, values in zip(ids, VALUES, strict=True):
                client.async_stream_infer(
                    model,
                    [tensor(grpcclient, values[index])],
                    request_id=f"{corrid}/{index}",
                    sequence_id=corrid,
                    sequence_start=index == 0,
                    sequence_end=index == 3,
                )
        answers: dict[str, dict[int, int]] = {str(c): {} for c in ids}
        for _ in range(4 * len(ids)):
            result, error = results.get(timeout=30)
            assert error is None, error
            corrid, index = result.get_response().id.split("/")
            answers[corrid][int(index)] = int(result.as_numpy("OUTPUT")[0][0])
    finally:
        client.stop_stream()
    expected = {str(c): running_sums(v, start) for c, v in zip(ids, VALUES, strict=True)}
    assert {c: [a[i] for i in range(4)] for c, a in answers.items()} == expected
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, [tensor(grpcclient, 1)], sequence_id=ids[1])
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == (
        f"inference request for sequence {ids[1]} to model '{model}' must specify the START "
        "flag on the first request of the sequence"
    )
