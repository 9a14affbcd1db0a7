"""RequestQueue.get: a queued request wakes one waiting caller; an idle instance's caller
before a deferring one, and not a second caller of an instance whose woken caller has not
run yet; a woken caller that is cancelled passes its request on to another."""

from __future__ import annotations

import asyncio

from despina.inference.request import InferenceRequest
from despina.scheduling.queue import RequestQueue


def _queue() -> RequestQueue:
    def reject(request: InferenceRequest, error: Exception) -> None:
        raise AssertionError(f"no request should be rejected: {error}")

    return RequestQueue(reject)


async def _turns(count: int = 5) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def test_each_request_wakes_one_waiting_caller() -> None:
    async def scenario() -> None:
        queue = _queue()
        getters = [asyncio.create_task(queue.get()) for _ in range(4)]
        await _turns()
        first = InferenceRequest("m", {}, id="first")
        queue.put(first)
        await _turns()
        done = [g for g in getters if g.done()]
        assert [g.result() for g in done] == [first]  # the other three still wait
        rest = [InferenceRequest("m", {}, id=str(i)) for i in range(3)]
        for request in rest:
            queue.put(request)
        results = await asyncio.wait_for(asyncio.gather(*getters), 5)
        assert sorted(r.id for r in results) == ["0", "1", "2", "first"]
        assert len(queue) == 0

    asyncio.run(scenario())


def test_an_idle_instance_takes_the_request_before_a_deferring_one() -> None:
    async def scenario() -> None:
        queue = _queue()
        busy = asyncio.create_task(queue.get(defer=lambda: True))
        await _turns()
        idle = asyncio.create_task(queue.get(defer=lambda: False))
        await _turns()
        request = InferenceRequest("m", {})
        queue.put(request)
        assert await asyncio.wait_for(idle, 5) is request
        await _turns()
        assert not busy.done()
        busy.cancel()

    asyncio.run(scenario())


def test_a_woken_caller_cancelled_passes_its_request_on() -> None:
    async def scenario() -> None:
        queue = _queue()
        first = asyncio.create_task(queue.get())
        await _turns()
        second = asyncio.create_task(queue.get())
        await _turns()
        request = InferenceRequest("m", {})
        queue.put(request)  # wakes the first caller, which is cancelled before it runs
        first.cancel()
        assert await asyncio.wait_for(second, 5) is request
        assert first.cancelled()

    asyncio.run(scenario())


def test_two_requests_go_to_two_idle_instances() -> None:
    """Both requests are queued before any woken caller runs: the second must not wake
    the other worker of the first request's instance."""

    async def scenario() -> None:
        queue = _queue()
        running = {"a": 0, "b": 0}
        taken: dict[str, str] = {}

        async def worker(owner: str) -> None:
            request = await queue.get(defer=lambda: running[owner] > 0, owner=owner)
            running[owner] += 1  # as the scheduler marks its instance busy
            taken[request.id] = owner

        workers = [asyncio.create_task(worker(owner)) for owner in "aabb"]
        await _turns()
        queue.put(InferenceRequest("m", {}, id="r1"))
        queue.put(InferenceRequest("m", {}, id="r2"))
        await _turns()
        assert sorted(taken.values()) == ["a", "b"], taken
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)

    asyncio.run(scenario())
