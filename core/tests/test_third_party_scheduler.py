"""A third-party scheduler that only chooses batches and runs them with
:func:`despina.inference.pipeline.execute_on` still gets everything the request pipeline gives: the
response cache, classification, per-model statistics and the trace, on a real server
over HTTP with tritonclient."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import toy_backend
from despina.inference.pipeline import execute_on, reject
from despina.inference.request import InferenceRequest
from despina.plugin.hookspecs import hookimpl
from despina.repository.config import ModelConfig
from despina.scheduling.base import Scheduler, stopping_error
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_http")

PICKED = """
backend: "toy"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" },
         { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "scheduler" value: { string_value: "fifo" } }
response_cache { enable: true }
"""


class FifoScheduler(Scheduler):
    """Whatever is queued, up to ``max_batch_size`` requests, runs as one batch on the
    first instance: it chooses batches and nothing else."""

    name = "fifo"
    #: Sizes of the batches it ran (all servers of the process).
    batches: list[int] = []

    @classmethod
    def handles(cls, config: ModelConfig) -> bool:
        return config.parameters["scheduler"].string_value == "fifo"

    async def start(self) -> None:
        self.queue: asyncio.Queue[InferenceRequest] = asyncio.Queue()
        self.worker = asyncio.create_task(self._work())

    def submit(self, request: InferenceRequest) -> None:
        self.queue.put_nowait(request)

    async def _work(self) -> None:
        while True:
            batch = [await self.queue.get()]
            while not self.queue.empty() and len(batch) < self.model.config.max_batch_size:
                batch.append(self.queue.get_nowait())
            FifoScheduler.batches.append(len(batch))
            await execute_on(self.model, 0, batch)

    async def stop(self) -> None:
        self.worker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.worker
        while not self.queue.empty():
            reject(self.model, self.queue.get_nowait(), stopping_error(self.model))


class FifoPlugin:
    @hookimpl
    def despina_schedulers(self) -> list[type[Scheduler]]:
        return [FifoScheduler]


def test_a_scheduler_that_only_chooses_batches_gets_the_whole_pipeline(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Callable[..., Any],
    tmp_path: Path,
) -> None:
    import tritonclient.http as httpclient

    model_repository.add(
        "picked", PICKED, {"1/model.toy": '{"reject_negative": true}', "labels.txt": "a\nb\nc\nd\n"}
    )
    trace_file = tmp_path / "trace.json"
    running = despina_server(
        model_repository.root,
        [
            "--http-address=127.0.0.1",
            "--allow-grpc=false",
            "--allow-metrics=false",
            "--cache-config=local,size=1048576",
            f"--trace-config=triton,file={trace_file}",
            "--trace-config=level=TIMESTAMPS",
            "--trace-config=rate=1",
        ],
        plugins=[toy_backend, FifoPlugin()],
    )
    client = http_client(running)
    FifoScheduler.batches.clear()

    def infer(first: list[float]) -> Any:
        inputs = [
            httpclient.InferInput("INPUT0", [1, 4], "FP32"),
            httpclient.InferInput("INPUT1", [1, 4], "FP32"),
        ]
        inputs[0].set_data_from_numpy(np.array([first], np.float32))
        inputs[1].set_data_from_numpy(np.ones((1, 4), np.float32))
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", class_count=2)]
        return client.infer("picked", inputs, outputs=outputs)

    for _ in range(2):  # the second is a cache hit: answered before the scheduler
        result = infer([0.5, 3.0, 1.0, 2.0])  # OUTPUT0 = INPUT0 + 1
        assert result.as_numpy("OUTPUT0").tolist() == [[b"4.000000:1:b", b"3.000000:3:d"]]
    with pytest.raises(Exception, match="negative input"):
        infer([-1.0, 0.0, 0.0, 0.0])
    assert FifoScheduler.batches == [1, 1]

    stats = client.get_inference_statistics("picked")["model_stats"][0]
    inference = stats["inference_stats"]
    assert (inference["cache_hit"]["count"], inference["cache_miss"]["count"]) == (1, 2)
    assert inference["success"]["count"] == 2 and inference["success"]["ns"] > 0
    assert inference["fail"]["count"] == 1
    assert (stats["execution_count"], stats["inference_count"]) == (2, 1)
    assert inference["queue"]["count"] == 2  # the cache hit's too
    assert inference["compute_infer"]["count"] == 1 and inference["compute_infer"]["ns"] > 0
    assert [b["batch_size"] for b in stats["batch_stats"]] == [1]

    running.stop()
    names = [
        [t["name"] for t in entry["timestamps"]]
        for entry in json.loads(trace_file.read_text())
        if "timestamps" in entry
    ]
    executed = [n for trace in names for n in trace if n.startswith(("COMPUTE", "REQUEST"))]
    assert executed.count("REQUEST_END") == 3
    assert executed.count("COMPUTE_START") == executed.count("COMPUTE_END") == 2


def test_the_builtin_schedulers_answer_only_through_the_pipeline() -> None:
    """No scheduler module sends on a stream, counts statistics, classifies or caches:
    :mod:`despina.inference.pipeline` does, for them all."""
    import despina.scheduling

    bypasses = ("stream.send(", ".respond(", ".record_", "classify_outputs", "cache.store(")
    for path in Path(despina.scheduling.__file__).parent.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not [b for b in bypasses if b in text], path.name
