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


def http_input(module: Any, value: int) -> Any:
    tensor = module.InferInput("INPUT", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[value]], np.int32))
    return tensor


def test_direct_interleaved_over_http(running: RunningServer, http_client: Any) -> None:
    client = http_client(running)
    sequences = {1001: [1, 2, 3], 1002: [10, 20, 30], 1003: [7, 7, 7]}
    outputs: dict[int, list[int]] = {c: [] for c in sequences}
    for index in range(3):  # request i of every sequence, then request i + 1 ...
        for corrid, values in sequences.items():
            result = client.infer(
                "direct",
                [http_input(httpclient, values[index])],
                sequence_id=corrid,
                sequence_start=index == 0,
                sequence_end=index == 2,
            )
            outputs[corrid].append(int(result.as_numpy("OUTPUT")[0][0]))
    assert outputs == {c: running_sums(v) for c, v in sequences.items()}
    with pytest.raises(InferenceServerException) as info:
        client.infer("direct", [http_input(httpclient, 1)], sequence_id=1001)
    assert info.value.status() == "400"
    assert (
        "inference request for sequence 1001 to model 'direct' must specify the START flag"
        in str(info.value)
    )
    with pytest.raises(InferenceServerException) as info:
        client.infer("direct", [http_input(httpclient, 1)])
    assert "must specify a non-zero or non-empty correlation ID" in str(info.value)
    assert client.is_server_live()


def test_oldest_with_state_over_grpc_stream(running: RunningServer, grpc_client: Any) -> None:
    client = grpc_client(running)
    results: queue.Queue[Any] = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    sequences = {f"user-{i}": [i, i + 1, i + 2, i + 3] for i in range(5)}
    try:
        for index in range(4):
            for corrid, values in sequences.items():
                client.async_stream_infer(
                    "oldest",
                    [http_input(grpcclient, values[index])],
                    request_id=f"{corrid}/{index}",
                    sequence_id=corrid,
                    sequence_start=index == 0,
                    sequence_end=index == 3,
                )
        answers: dict[str, dict[int, int]] = {c: {} for c in sequences}
        for _ in range(4 * len(sequences)):
            result, error = results.get(timeout=30)
            assert error is None, error
            corrid, index = result.get_response().id.split("/")
            answers[corrid][int(index)] = int(result.as_numpy("OUTPUT")[0][0])
    finally:
        client.stop_stream()
    expected = {c: running_sums(v, start=100) for c, v in sequences.items()}
    assert {c: [a[i] for i in range(4)] for c, a in answers.items()} == expected
    with pytest.raises(InferenceServerException) as info:
        client.infer("oldest", [http_input(grpcclient, 1)], sequence_id="nobody")
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert (
        "inference request for sequence nobody to model 'oldest' must specify the START flag"
        in str(info.value)
    )
