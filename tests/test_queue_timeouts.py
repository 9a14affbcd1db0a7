"""A queued request whose queue-policy timeout passes is answered at once with Triton's
UNAVAILABLE "Request timeout expired", while every instance is still busy (Triton's
``qa/L0_batcher/queue_timeout_test.py``), seen through tritonclient (gRPC)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from despina.testing import RepositoryBuilder, RunningServer
from tritonclient.utils import InferenceServerException

pytest.importorskip("despina_backend_qa")

CONFIG = """
backend: "identity"
max_batch_size: 1
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }]
instance_group [{ count: 1 kind: KIND_CPU }]
dynamic_batching {
  preferred_batch_size: [ 1 ]
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 300000
                         max_queue_size: 8 }
}
parameters [{ key: "execute_delay_ms" value: { string_value: "3000" } }]
"""


def _send(client: Any) -> tuple[Future[Any], float]:
    """An async request of one row; its future (result or error) and when it was sent."""
    answer: Future[Any] = Future()
    tensor = grpcclient.InferInput("INPUT0", [1, 8], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 8), np.float32))

    def done(result: Any, error: Any) -> None:
        answer.set_result(error if error is not None else result)

    client.async_infer("m", [tensor], done)
    return answer, time.monotonic()


def test_a_request_is_rejected_when_its_queue_timeout_passes_not_when_an_instance_frees(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    grpc_client: Callable[..., Any],
) -> None:
    model_repository.add("m", CONFIG, {"1/.keep": ""})
    client = grpc_client(despina_server(model_repository.root))
    busy, _ = _send(client)  # runs for 3 s on the one instance
    time.sleep(0.5)
    queued, sent = _send(client)
    error = queued.result(timeout=10)
    waited = time.monotonic() - sent
    assert isinstance(error, InferenceServerException)
    assert (error.status(), error.message()) == (
        "StatusCode.UNAVAILABLE",
        "Request timeout expired",
    )
    assert waited < 1.5  # its 0.3 s timeout, not the 2.5 s left of the running execution
    assert not isinstance(busy.result(timeout=10), InferenceServerException)
    stats = client.get_inference_statistics("m").model_stats[0]
    assert (stats.inference_stats.success.count, stats.inference_stats.fail.count) == (1, 1)
