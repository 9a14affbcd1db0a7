"""Ragged batching through the PyTorch backend, with tritonclient (gRPC): requests of
different lengths of an ``allow_ragged_batch`` input run as one batch (one flat tensor),
and the scattered output is split back per request by the shapes its input had (an
identity model, as Triton's ``qa/L0_batcher`` makes of ``libtorch_nobatch_zero_1_float32``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from despina.testing import RepositoryBuilder, RunningServer

CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] }]
batch_output [{ target_name: "OUTPUT__0" kind: BATCH_SCATTER_WITH_INPUT_SHAPE
                source_input: "INPUT__0" }]
instance_group [{ count: 1 kind: KIND_CPU }]
dynamic_batching { max_queue_delay_microseconds: 2000000 preferred_batch_size: [ 2 ] }
"""


def test_requests_of_different_lengths_run_as_one_ragged_batch(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    grpc_client: Callable[..., Any],
    torch_models: dict[str, Callable[..., bytes]],
) -> None:
    import tritonclient.grpc as grpcclient

    model_repository.add("ragged", CONFIG, {"1/model.pt": torch_models["identity"]()})
    client = grpc_client(despina_server(model_repository.root))
    sent = [np.arange(n, dtype=np.float32).reshape(1, n) for n in (16, 8)]
    answers: dict[int, np.ndarray] = {}

    def infer(index: int) -> None:
        tensor = grpcclient.InferInput("INPUT__0", list(sent[index].shape), "FP32")
        tensor.set_data_from_numpy(sent[index])
        answers[index] = client.infer("ragged", [tensor]).as_numpy("OUTPUT__0")

    threads = [threading.Thread(target=infer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [answers[i].tolist() for i in range(2)] == [a.tolist() for a in sent]
    stats = client.get_inference_statistics("ragged").model_stats[0]
    assert [(b.batch_size, b.compute_infer.count) for b in stats.batch_stats] == [(2, 1)]
