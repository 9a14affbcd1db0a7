"""The dynamic batcher's priority levels and queue policies, through real requests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import toy_backend
from despina.errors import Unavailable
from despina.testing import RepositoryBuilder, RunningServer
from toy_backend import toy_config, toy_request

Start = Callable[..., RunningServer]


def _serve(
    model_repository: RepositoryBuilder, despina_server: Start, batching: str
) -> RunningServer:
    extra = f"dynamic_batching {{ {batching} }}"
    model_repository.add("q", toy_config(mbs=1, extra=extra), {"1/model.toy": '{"delay_s": 0.1}'})
    return despina_server(model_repository.root, plugins=[toy_backend])


def _backlog(running: RunningServer, requests: list[dict[str, Any]]) -> list[Any]:
    """Submit requests 5 ms apart (the first one occupies the single instance)."""

    async def scenario() -> list[Any]:
        futures = []
        for spec in requests:
            futures.append(
                asyncio.ensure_future(running.server.infer(toy_request("q", batch=1, **spec)))
            )
            await asyncio.sleep(0.005)
        return await asyncio.gather(*futures, return_exceptions=True)

    return running.call(scenario())


def test_priorities_reorder_a_backlog(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    running = _serve(
        model_repository, despina_server, "priority_levels: 2 default_priority_level: 2"
    )
    toy_backend.ToyBackend.order.clear()
    specs = [{"id": "first"}, {"id": "low1"}, {"id": "low2"}, {"id": "high", "priority": 1}]
    results = _backlog(running, specs)
    assert not [r for r in results if isinstance(r, Exception)]
    assert toy_backend.ToyBackend.order == ["first", "high", "low1", "low2"]


def test_per_level_queue_size_rejects(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    policy = "priority_levels: 2 default_priority_level: 2 priority_queue_policy { key: 2 value: { max_queue_size: 1 } }"
    running = _serve(model_repository, despina_server, policy)
    results = _backlog(running, [{"id": "a"}, {"id": "b"}, {"id": "c"}, {"id": "d", "priority": 1}])
    rejected = [r for r in results if isinstance(r, Unavailable)]
    assert [str(r) for r in rejected] == ["Exceeds maximum queue size"]
    assert results[3].id == "d"


def test_timeouts_reject_or_delay(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    policy = (
        "default_queue_policy { default_timeout_microseconds: 20000 allow_timeout_override: true }"
    )
    running = _serve(model_repository, despina_server, policy)
    results = _backlog(
        running, [{"id": "busy"}, {"id": "late"}, {"id": "patient", "timeout_us": 5_000_000}]
    )
    assert results[0].id == "busy"
    assert isinstance(results[1], Unavailable) and str(results[1]) == "Request timeout expired"
    assert results[2].id == "patient"
    stats = running.server.models.get("q").stats
    assert stats.failures["REJECTED"] == 1


def test_delay_action_runs_expired_requests_last(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    policy = "default_queue_policy { default_timeout_microseconds: 20000 timeout_action: DELAY allow_timeout_override: true }"
    running = _serve(model_repository, despina_server, policy)
    toy_backend.ToyBackend.order.clear()
    results = _backlog(
        running, [{"id": "busy"}, {"id": "expires"}, {"id": "on-time", "timeout_us": 5_000_000}]
    )
    assert not [r for r in results if isinstance(r, Exception)]
    assert toy_backend.ToyBackend.order == ["busy", "on-time", "expires"]


def test_preserve_ordering_answers_in_arrival_order(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    # Two instances; the first request is slow, the second fast: without ordering the
    # second answer would leave first.
    extra = "dynamic_batching { preserve_ordering: true } instance_group [ { count: 2 } ]"
    model_repository.add(
        "ordered", toy_config(mbs=1, extra=extra), {"1/model.toy": '{"delay_by_value": true}'}
    )
    running = despina_server(model_repository.root, plugins=[toy_backend])
    answered: list[str] = []

    async def scenario() -> None:
        async def one(request_id: str, value: float) -> None:
            await running.server.infer(toy_request("ordered", batch=1, value=value, id=request_id))
            answered.append(request_id)

        slow = asyncio.ensure_future(one("slow", 0.2))
        await asyncio.sleep(0.01)
        await asyncio.gather(slow, one("fast", 0.0))

    running.call(scenario())
    assert answered == ["slow", "fast"]
