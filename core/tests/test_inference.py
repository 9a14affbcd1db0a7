"""The in-process inference path: validation texts, outputs, statistics, instances."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import toy_backend
from despina.errors import InvalidArgument, NotFound, Unavailable
from despina.inference.request import InferenceRequest, RequestedOutput
from despina.testing import RepositoryBuilder, RunningServer
from toy_backend import toy_config, toy_request

Start = Callable[..., RunningServer]


@pytest.fixture
def toy(model_repository: RepositoryBuilder, despina_server: Start) -> RunningServer:
    model_repository.add("plain", toy_config(), {"1/model.toy": ""})
    model_repository.add("batched", toy_config(mbs=8), {"1/model.toy": ""})
    return despina_server(model_repository.root, plugins=[toy_backend])


def infer(running: RunningServer, request: InferenceRequest) -> Any:
    return running.call(running.server.infer(request))


def test_infer_returns_outputs_and_ids(toy: RunningServer) -> None:
    response = infer(toy, toy_request("plain", value=3.0, id="req-7"))
    assert response.id == "req-7"
    assert (response.model_name, response.model_version) == ("plain", "1")
    np.testing.assert_array_equal(response.outputs["OUTPUT0"], np.full(4, 4.0, np.float32))
    np.testing.assert_array_equal(response.outputs["OUTPUT1"], np.full(4, 2.0, np.float32))


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: InferenceRequest("plain", {"INPUT0": np.ones(4, np.float32)}),
            "expected 2 inputs but got 1 inputs for model 'plain'. Got input(s) ['INPUT0'], "
            "but missing required input(s) ['INPUT1']. Please provide all required input(s).",
        ),
        (
            lambda: InferenceRequest(
                "plain",
                {
                    "INPUT0": np.ones(4, np.float32),
                    "INPUT1": np.ones(4, np.float32),
                    "EXTRA": np.ones(1),
                },
            ),
            "unexpected inference input 'EXTRA' for model 'plain'",
        ),
        (
            lambda: InferenceRequest(
                "plain", {"INPUT0": np.ones(4), "INPUT1": np.ones(4, np.float32)}
            ),
            "inference input 'INPUT0' data-type is 'FP64', but model 'plain' expects 'FP32'",
        ),
        (
            lambda: InferenceRequest(
                "plain", {"INPUT0": np.ones(5, np.float32), "INPUT1": np.ones(4, np.float32)}
            ),
            "unexpected shape for input 'INPUT0' for model 'plain'. Expected [4], got [5]",
        ),
        (
            lambda: toy_request("batched", batch=9),
            "inference request batch-size must be <= 8 for 'batched'",
        ),
        (
            lambda: toy_request("plain", outputs=[RequestedOutput("NOPE")]),
            "unexpected inference output 'NOPE' for model 'plain'",
        ),
    ],
)
def test_invalid_requests_get_triton_messages_and_server_keeps_serving(
    toy: RunningServer, build: Callable[[], InferenceRequest], message: str
) -> None:
    with pytest.raises(InvalidArgument) as info:
        infer(toy, build())
    assert message in str(info.value)
    assert infer(toy, toy_request("plain")).outputs["OUTPUT0"][0] == 2.0


def test_unknown_model_and_version(toy: RunningServer) -> None:
    with pytest.raises(NotFound, match="Request for unknown model: 'nope' is not found"):
        infer(toy, toy_request("nope"))
    with pytest.raises(NotFound, match="'plain' version 2 is not found"):
        infer(toy, toy_request("plain", model_version="2"))


def test_requested_outputs_limit_the_response(toy: RunningServer) -> None:
    response = infer(toy, toy_request("plain", outputs=[RequestedOutput("OUTPUT1")]))
    assert response.outputs.keys() >= {"OUTPUT1"}


def test_statistics_count_successes_failures_and_batches(toy: RunningServer) -> None:
    for _ in range(3):
        infer(toy, toy_request("batched", batch=2))
    with pytest.raises(InvalidArgument):
        infer(toy, toy_request("batched", batch=9))
    stats = toy.server.models.get("batched").stats.snapshot()
    assert stats["inference_count"] == 6
    assert stats["execution_count"] == 3
    assert stats["inference_stats"]["success"]["count"] == 3
    assert stats["inference_stats"]["success"]["ns"] > 0
    assert stats["inference_stats"]["compute_infer"]["count"] == 3
    assert stats["batch_stats"][0]["batch_size"] == 2
    assert stats["batch_stats"][0]["compute_infer"]["count"] == 3
    assert stats["last_inference"] > 0


def test_backend_errors_fail_only_their_request(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("picky", toy_config(), {"1/model.toy": '{"reject_negative": true}'})
    model_repository.add("broken", toy_config(), {"1/model.toy": '{"raise": true}'})
    running = despina_server(model_repository.root, plugins=[toy_backend])
    with pytest.raises(InvalidArgument, match="negative input"):
        infer(running, toy_request("picky", value=-1.0))
    with pytest.raises(Exception, match="toy model exploded"):
        infer(running, toy_request("broken"))
    assert infer(running, toy_request("picky", value=1.0)).outputs["OUTPUT0"][0] == 2.0
    stats = running.server.models.get("broken").stats.snapshot()
    assert stats["inference_stats"]["fail"]["count"] == 1
    assert running.server.models.get("broken").stats.failures["BACKEND"] == 1


def test_instances_of_a_group_run_concurrently(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    extra = "instance_group [ { count: 3 kind: KIND_CPU } ]"
    model_repository.add("slow", toy_config(extra=extra), {"1/model.toy": '{"delay_s": 0.2}'})
    running = despina_server(model_repository.root, plugins=[toy_backend])
    toy_backend.ToyBackend.executions.clear()

    async def burst() -> list[Any]:
        return await asyncio.gather(*(running.server.infer(toy_request("slow")) for _ in range(6)))

    assert len(running.call(burst())) == 6
    used = {name for name, _ in toy_backend.ToyBackend.executions}
    assert used == {"slow_0_0", "slow_0_1", "slow_0_2"}


def test_dynamic_batcher_forms_batches_from_concurrent_requests(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    extra = "dynamic_batching { max_queue_delay_microseconds: 100000 }"
    model_repository.add(
        "dyn", toy_config(mbs=8, extra=extra), {"1/model.toy": '{"delay_s": 0.05}'}
    )
    running = despina_server(model_repository.root, plugins=[toy_backend])

    async def burst() -> list[Any]:
        return await asyncio.gather(
            *(running.server.infer(toy_request("dyn", batch=1)) for _ in range(16))
        )

    responses = running.call(burst())
    assert all(r.outputs["OUTPUT0"].shape == (1, 4) for r in responses)
    stats = running.server.models.get("dyn").stats.snapshot()
    assert stats["inference_count"] == 16
    assert stats["execution_count"] < 16


def test_full_queue_rejects_with_unavailable(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    extra = "dynamic_batching { default_queue_policy { max_queue_size: 1 } }"
    model_repository.add(
        "tight", toy_config(mbs=1, extra=extra), {"1/model.toy": '{"delay_s": 0.3}'}
    )
    running = despina_server(model_repository.root, plugins=[toy_backend])

    async def burst() -> list[Any]:
        return await asyncio.gather(
            *(running.server.infer(toy_request("tight", batch=1)) for _ in range(4)),
            return_exceptions=True,
        )

    results = running.call(burst())
    rejected = [r for r in results if isinstance(r, Unavailable)]
    assert rejected and "Exceeds maximum queue size" in str(rejected[0])
    assert any(not isinstance(r, Exception) for r in results)


def test_kind_gpu_for_a_cpu_backend_is_unavailable_with_reason(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """The toy backend states it runs on CPUs only: its KIND_GPU group is refused at load
    (Triton's "has kind KIND_GPU but ..." text) on any host."""
    model_repository.add(
        "gpu", toy_config(extra="instance_group [ { kind: KIND_GPU } ]"), {"1/model.toy": ""}
    )
    running = despina_server(
        model_repository.root, ["--exit-on-error=false"], plugins=[toy_backend]
    )
    (row,) = running.server.models.index()
    assert row["state"] == "UNAVAILABLE"
    assert (
        "instance group gpu_0 of model gpu has kind KIND_GPU but the toy backend runs on "
        "CPUs only" in row["reason"]
    )


def test_dynamic_batcher_honours_preferred_sizes_and_delay(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    # preferred 4 of max 8: a backlog of 12 forms batches of 4; the long delay lets each
    # batch wait for its preferred size instead of running what is queued.
    extra = "dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000 }"
    model_repository.add(
        "pref", toy_config(mbs=8, extra=extra), {"1/model.toy": '{"delay_s": 0.05}'}
    )
    running = despina_server(model_repository.root, plugins=[toy_backend])

    async def burst() -> list[Any]:
        return await asyncio.gather(
            *(running.server.infer(toy_request("pref", batch=1)) for _ in range(12))
        )

    assert len(running.call(burst())) == 12
    stats = running.server.models.get("pref").stats.snapshot()
    assert [b["batch_size"] for b in stats["batch_stats"]] == [4]
    assert stats["batch_stats"][0]["compute_infer"]["count"] == 3
