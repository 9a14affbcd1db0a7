"""``--max-pending-requests``: every model version's queue is bounded where its config
sets no ``max_queue_size``; a flood beyond it is refused at once with UNAVAILABLE
"Exceeds maximum queue size" (Triton's text for a full queue), the queued requests are
served and the server goes on serving."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import toy_backend
from despina.errors import Unavailable
from despina.inference.request import InferenceRequest, SequenceFlags
from despina.plugin.manager import create_plugins
from despina.scheduling.base import DEFAULT_MAX_PENDING_REQUESTS
from despina.serving.flags import parse_settings
from despina.serving.settings import CoreSettings
from despina.testing import RepositoryBuilder, RunningServer
from toy_backend import toy_config, toy_request

Start = Callable[..., RunningServer]
#: Seconds each execution of the slow model takes.
DELAY_S = 0.2
FULL = "Exceeds maximum queue size"


def _serve(
    model_repository: RepositoryBuilder, despina_server: Start, extra: str = "", *args: str
) -> RunningServer:
    mbs = 1 if "dynamic_batching" in extra else 0
    model_repository.add(
        "slow", toy_config(mbs=mbs, extra=extra), {"1/model.toy": f'{{"delay_s": {DELAY_S}}}'}
    )
    return despina_server(model_repository.root, args=list(args), plugins=[toy_backend])


def _flood(
    running: RunningServer,
    count: int,
    batch: int | None = None,
    model: str = "slow",
    **kwargs: Callable[[int], Any],
) -> list[Any]:
    """``count`` requests submitted at once; the results in the order they completed
    (each an InferenceResponse or the exception). ``kwargs``: request fields by index."""

    async def scenario() -> list[Any]:
        done: list[Any] = []

        async def one(index: int) -> None:
            fields = {key: make(index) for key, make in kwargs.items()}
            request = toy_request(model, batch, id=str(index), **fields)
            try:
                done.append(await running.server.infer(request))
            except Unavailable as exc:
                done.append(exc)

        await asyncio.gather(*(one(i) for i in range(count)))
        return done

    return running.call(scenario())


def _bound_queue(running: RunningServer, limit: int) -> None:
    """What the loader does with ``--max-pending-requests=limit``: the version's
    scheduler builds its queue with that bound."""
    scheduler: Any = running.server.models.get("slow").scheduler
    scheduler.model.max_pending = limit

    async def rebuild() -> None:
        scheduler.queue = scheduler.make_queue()
        for workers in scheduler._workers.values():  # they wait on the old queue
            for worker in workers:
                worker.cancel()
        scheduler._workers.clear()
        await scheduler.start()

    running.call(rebuild())


def _check_flood(results: list[Any], count: int, limit: int) -> None:
    refused = [r for r in results if isinstance(r, Exception)]
    served = [r for r in results if not isinstance(r, Exception)]
    assert all(isinstance(r, Unavailable) and str(r) == FULL for r in refused), refused
    # the queue holds ``limit``; one or two more were executing or taken by a worker
    assert limit <= len(served) <= limit + 2, len(served)
    assert len(refused) == count - len(served)
    # refused at once: every refusal came back before the first request was served
    first_served = next(i for i, r in enumerate(results) if not isinstance(r, Exception))
    assert first_served == len(refused), [type(r).__name__ for r in results]
    assert all(r.error is None for r in served)


def test_flag_default_and_values() -> None:
    plugins = create_plugins([])

    def value(*argv: str) -> int:
        return CoreSettings.from_namespace(parse_settings(argv, plugins)).max_pending_requests

    assert value() == DEFAULT_MAX_PENDING_REQUESTS
    assert value("--max-pending-requests=0") == 0
    assert value("--max-pending-requests=3") == 3
    with pytest.raises(SystemExit):
        value("--max-pending-requests=-1")


def test_default_scheduler_queue_is_bounded(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    running = _serve(model_repository, despina_server)
    assert running.server.models.get("slow").scheduler.model.max_pending > 0  # type: ignore[union-attr]
    _bound_queue(running, 4)
    results = _flood(running, 30)
    _check_flood(results, 30, 4)
    assert _flood(running, 1)[0].error is None  # still serving


def test_dynamic_batcher_queue_is_bounded_unless_the_config_sets_one(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    running = _serve(model_repository, despina_server, "dynamic_batching { }")
    _bound_queue(running, 4)
    _check_flood(_flood(running, 30, batch=1), 30, 4)
    # max_queue_size in the config wins over the flag, larger or smaller
    config = toy_config(1, "dynamic_batching { default_queue_policy { max_queue_size: 8 } }")
    model_repository.add("slow", config, {"1/model.toy": f'{{"delay_s": {DELAY_S}}}'})
    running.call(running.server.models.load("slow"))
    _bound_queue(running, 2)
    _check_flood(_flood(running, 30, batch=1), 30, 8)


def test_zero_is_unbounded(model_repository: RepositoryBuilder, despina_server: Start) -> None:
    running = _serve(model_repository, despina_server)
    _bound_queue(running, 0)
    results = _flood(running, 6)
    assert not [r for r in results if isinstance(r, Exception)]


def test_flag_bounds_the_queue(model_repository: RepositoryBuilder, despina_server: Start) -> None:
    running = _serve(model_repository, despina_server, "", "--max-pending-requests=3")
    results = _flood(running, 20)
    _check_flood(results, 20, 3)
    assert _flood(running, 1)[0].error is None


ENSEMBLE = """
platform: "ensemble"
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ {
  model_name: "slow" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" }
} ] }
"""


def test_flag_bounds_ensemble_requests_in_flight(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("pipeline", ENSEMBLE)
    running = _serve(model_repository, despina_server, "", "--max-pending-requests=3")

    async def flood(count: int) -> list[Any]:
        async def one(index: int) -> Any:
            ones = np.ones(4, np.float32)
            request = InferenceRequest("pipeline", {"A": ones, "B": ones}, id=str(index))
            try:
                return await running.server.infer(request)
            except Unavailable as exc:
                return exc

        return list(await asyncio.gather(*(one(i) for i in range(count))))

    results = running.call(flood(20))
    refused = [r for r in results if isinstance(r, Exception)]
    assert all(isinstance(r, Unavailable) and str(r) == FULL for r in refused), refused
    assert len(refused) == 17  # three in flight
    assert all(r.error is None for r in results if not isinstance(r, Exception))
    (after,) = running.call(flood(1))  # serving again once they ended
    assert after.error is None
    np.testing.assert_array_equal(after.outputs["SUM"], np.full(4, 2, np.float32))


def test_flag_bounds_the_sequence_batcher(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """Twenty one-request sequences at once on one slot: three wait (slot and backlog),
    the rest are refused at once."""
    running = _serve(
        model_repository, despina_server, "sequence_batching { }", "--max-pending-requests=3"
    )
    both = SequenceFlags.START | SequenceFlags.END
    results = _flood(running, 20, correlation_id=lambda i: i + 1, flags=lambda _: both)
    _check_flood(results, 20, 3)
    again = _flood(running, 1, correlation_id=lambda _: 99, flags=lambda _: both)
    assert again[0].error is None
