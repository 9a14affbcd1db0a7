"""Schedulers built on one :class:`RequestQueue` and a worker task per instance slot."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
from collections.abc import Sequence

from despina.errors import DespinaError
from despina.inference.pipeline import execute_on, reject, run_batch_now
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.plugin.backend import ModelInstance
from despina.scheduling.base import ScheduledModel, Scheduler, stopping_error
from despina.scheduling.queue import QueuePolicy, RequestQueue


class QueueScheduler(Scheduler):
    """Workers, ``max_in_flight`` per instance, take batches from a shared queue;
    subclasses decide what a batch is (:meth:`next_batch`)."""

    def __init__(self, model: ScheduledModel) -> None:
        super().__init__(model)
        self.queue = self.make_queue()
        #: Worker tasks, ``max_in_flight`` per instance, by instance index.
        self._workers: dict[int, list[asyncio.Task[None]]] = {}
        self._executing: set[asyncio.Task[None]] = set()
        self._stopping = False
        #: The scheduler this one handed over to (:meth:`hand_over`).
        self._successor: QueueScheduler | None = None
        self._last_turn: asyncio.Future[None] | None = None
        #: Executions running on each instance.
        self._running = [0] * len(model.instances)

    def make_queue(self) -> RequestQueue:
        """The queue, bounded by ``--max-pending-requests``; subclasses pass their queue
        policy."""
        return RequestQueue(self._reject, (QueuePolicy(max_size=self.model.max_pending),))

    def _reject(self, request: InferenceRequest, error: DespinaError) -> None:
        reject(self.model, request, error)

    async def start(self) -> None:
        """A worker per execution slot; an instance in ``model.busy_until`` counts as
        running one execution (so it is not picked by :meth:`submit` either) until its
        future is done."""
        for index, instance in enumerate(self.model.instances):
            busy = self.model.busy_until.get(index)
            if busy is not None and not busy.done():
                self._running[index] += 1
                busy.add_done_callback(functools.partial(self._free, index))
            self._workers[index] = [
                asyncio.create_task(self._work(index, busy)) for _ in range(instance.max_in_flight)
            ]

    def _free(self, index: int, _: object) -> None:
        self._running[index] -= 1

    def submit(self, request: InferenceRequest) -> None:
        if self._stopping:
            if self._successor is not None:
                self._successor.submit(request)
                return
            raise stopping_error(self.model)
        self.queue.put(request)

    @property
    def pending(self) -> int:
        return len(self.queue)

    @property
    def busy(self) -> int:
        return len(self._executing)

    @abc.abstractmethod
    async def next_batch(self, index: int) -> list[InferenceRequest]:
        """Wait for and return the next requests to execute together (never empty), for a
        worker of instance ``index``.

        Must be cancellation-safe: requests taken from the queue go back on cancel."""

    def instance_busy(self, index: int) -> bool:
        """Whether instance ``index`` has an execution running (its other workers, when
        it takes several at once, then let idle instances go first)."""
        return self._running[index] > 0

    async def _work(self, index: int, busy: asyncio.Future[None] | None) -> None:
        task = asyncio.current_task()
        assert task is not None
        if busy is not None:
            await asyncio.shield(busy)
        while not self._stopping:
            batch = await self.next_batch(index)
            self._executing.add(task)
            self._running[index] += 1
            try:
                await execute_on(self.model, index, batch, self._ordered(index))
            finally:
                self._running[index] -= 1
                self._executing.discard(task)
                del batch  # the requests' arrays (shared-memory views) go now, not next turn

    def _ordered(self, index: int) -> ModelInstance | None:
        """With ``preserve_ordering``: the instance wrapped to answer after the batch formed
        before it (batches take turns in the order they were formed); else None."""
        if not self.model.config.dynamic_batching.preserve_ordering:
            return None
        previous, self._last_turn = self._last_turn, asyncio.get_running_loop().create_future()
        return OrderedExecution(self.model.instances[index], previous, self._last_turn)

    async def stop(self) -> None:
        """Idle workers stop at once (a batch being formed goes back to the queue), the
        queue is answered with the stopping error, then running executions finish."""
        await self._stop_idle()
        for request in self.queue.drain():
            reject(self.model, request, stopping_error(self.model))
        for workers in self._workers.values():
            for worker in workers:
                if not worker.cancelled():  # an idle one, ended above
                    await worker

    def can_hand_over(self, successor: Scheduler) -> bool:
        return isinstance(successor, QueueScheduler)

    async def hand_over(self, successor: Scheduler) -> dict[int, asyncio.Future[None]]:
        """Every queued request (and each batch being formed) moves to ``successor``'s
        queue in its order, and so does any request still submitted here; running
        executions finish here."""
        assert isinstance(successor, QueueScheduler)
        self._successor = successor
        await self._stop_idle()
        for request in self.queue.drain():
            try:
                successor.queue.put(request)
            except DespinaError as exc:  # the new queue is smaller and full
                reject(self.model, request, exc)
        return {
            index: asyncio.ensure_future(_all_done(running))
            for index, workers in self._workers.items()
            if (running := [w for w in workers if not w.done()])
        }

    async def _stop_idle(self) -> None:
        """Stop taking requests and end the idle workers (a batch being formed goes
        back to the queue); running executions go on."""
        self._stopping = True
        idle = [w for ws in self._workers.values() for w in ws if w not in self._executing]
        for worker in idle:
            worker.cancel()
        for worker in idle:
            with contextlib.suppress(asyncio.CancelledError):
                await worker


async def _all_done(tasks: list[asyncio.Task[None]]) -> None:
    await asyncio.wait(tasks)


class OrderedExecution(ModelInstance):
    """Runs a batch on ``inner`` but returns only after the previous batch returned.

    :func:`~despina.inference.pipeline.run_batch` delivers responses synchronously right after
    ``execute`` returns, so responses leave in the order the batches were formed.
    """

    def __init__(
        self,
        inner: ModelInstance,
        previous: asyncio.Future[None] | None,
        mine: asyncio.Future[None],
    ) -> None:
        self.inner = inner
        self.previous = previous
        self.mine = mine

    async def execute(
        self, requests: Sequence[InferenceRequest]
    ) -> Sequence[InferenceResponse] | None:
        try:
            return await self.inner.execute(requests)
        finally:
            if self.previous is not None:
                await asyncio.shield(self.previous)
            self.mine.set_result(None)


class DefaultScheduler(QueueScheduler):
    """Triton's default scheduler: each request executes alone, on the next free instance
    (an idle one before one that is executing already).

    A request that finds the queue empty and an instance idle whose calls run on the loop
    (:attr:`~despina.plugin.backend.ModelInstance.runs_now`) executes within :meth:`submit`:
    waking a worker for it would cost more than a small model's execution.
    """

    name = "default"

    def submit(self, request: InferenceRequest) -> None:
        if not self.queue and self._workers and self.model.limiter is None and not self._stopping:
            for index, instance in enumerate(self.model.instances):
                if not self._running[index] and instance.runs_now:
                    if self._run_now(index, instance, request):
                        return
                    break
        super().submit(request)

    def _run_now(self, index: int, instance: ModelInstance, request: InferenceRequest) -> bool:
        self._running[index] += 1
        try:
            return run_batch_now(self.model, instance, [request])
        finally:
            self._running[index] -= 1

    async def next_batch(self, index: int) -> list[InferenceRequest]:
        if len(self.model.instances) == 1:
            return [await self.queue.get()]
        return [await self.queue.get(defer=lambda: self.instance_busy(index), owner=index)]
