"""Which batches the dynamic batcher forms from a queue, by Triton's rules, seen through
tritonclient and the model's batch statistics: one identity instance runs a first batch
for a second while the next requests queue up behind it (as Triton's
``TRITONSERVER_DELAY_SCHEDULER`` lets them in ``qa/L0_batcher``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_backend_qa")

CONFIG = """
backend: "identity"
max_batch_size: 8
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }}]
instance_group [{{ count: 1 kind: KIND_CPU }}]
dynamic_batching {{ {batching} }}
parameters [{{ key: "execute_delay_ms" value: {{ string_value: "1000" }} }}]
"""


def _inputs(batch: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [batch, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((batch, 4), np.float32))
    return [tensor]


def _queue_behind_first(
    running: RunningServer, grpc_client: Callable[..., Any], first: int, queued: list[int]
) -> tuple[dict[int, int], list[float]]:
    """Send a request of batch size ``first``, then, while it runs, requests of the
    ``queued`` sizes; the model's executions by batch size once all are answered, and
    each queued request's seconds from its sending to its answer."""
    client = grpc_client(running)
    answered: list[float] = []
    errors: list[Any] = []

    def done(sent: float, index: int) -> Callable[[Any, Any], None]:
        def callback(result: Any, error: Any) -> None:
            answered[index] = time.monotonic() - sent
            if error is not None:
                errors.append(error)

        return callback

    answered = [0.0] * (len(queued) + 1)
    client.async_infer("m", _inputs(first), done(time.monotonic(), 0))
    time.sleep(0.3)  # the first batch runs (1 s)
    for index, size in enumerate(queued, 1):
        client.async_infer("m", _inputs(size), done(time.monotonic(), index))
        time.sleep(0.02)  # in this order
    deadline = time.monotonic() + 30
    while not all(answered) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not errors and all(answered)
    stats = client.get_inference_statistics("m").model_stats[0]
    batches = {b.batch_size: b.compute_infer.count for b in stats.batch_stats}
    return batches, answered[1:]


def _serve(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer], batching: str
) -> RunningServer:
    model_repository.add("m", CONFIG.format(batching=batching), {"1/.keep": ""})
    return despina_server(model_repository.root)


def test_a_request_past_the_largest_preferred_size_waits_for_the_next_batch(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    grpc_client: Callable[..., Any],
) -> None:
    batching = "preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: 3000000"
    running = _serve(model_repository, despina_server, batching)
    batches, seconds = _queue_behind_first(running, grpc_client, 2, [3, 4])
    assert batches == {2: 1, 3: 1, 4: 1}  # 3 + 4 passes 6: the 3 runs alone at once
    assert seconds[0] < 2.5 < seconds[1]  # the 4 waits out its queue delay


def test_the_largest_preferred_prefix_runs_and_the_rest_waits(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    grpc_client: Callable[..., Any],
) -> None:
    batching = "preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: 3000000"
    running = _serve(model_repository, despina_server, batching)
    batches, seconds = _queue_behind_first(running, grpc_client, 2, [1, 1, 1])
    assert batches == {2: 2, 1: 1}
    assert seconds[1] < 2.5 < seconds[2]


def test_without_a_queue_delay_a_preferred_prefix_still_runs_first(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    grpc_client: Callable[..., Any],
) -> None:
    running = _serve(model_repository, despina_server, "preferred_batch_size: [ 4, 6 ]")
    batches, _ = _queue_behind_first(running, grpc_client, 4, [1, 1, 1, 1, 1])
    assert batches == {4: 2, 1: 1}


def test_requests_past_their_queue_delay_run_together_up_to_the_max_batch_size(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    grpc_client: Callable[..., Any],
) -> None:
    batching = "preferred_batch_size: [ 2, 6 ] max_queue_delay_microseconds: 200000"
    running = _serve(model_repository, despina_server, batching)
    batches, _ = _queue_behind_first(running, grpc_client, 2, [3, 4])
    assert batches == {2: 1, 7: 1}  # both waited past 0.2 s behind the first batch
