"""Schedulers built on one :class:`RequestQueue` and a worker task per instance slot."""

from __future__ import annotations

import abc
import asyncio
import contextlib

from despina.errors import DespinaError
from despina.inference import InferenceRequest
from despina.scheduling.base import ScheduledModel, Scheduler, execute_on, reject, stopping_error
from despina.scheduling.queue import RequestQueue

#: Concurrent executions per instance whose ``concurrent`` flag is set (async models).
CONCURRENT_SLOTS = 64


class QueueScheduler(Scheduler):
    """Workers, one per instance (``CONCURRENT_SLOTS`` for concurrent instances), take
    batches from a shared queue; subclasses decide what a batch is (:meth:`next_batch`)."""

    def __init__(self, model: ScheduledModel) -> None:
        super().__init__(model)
        self.queue = self.make_queue()
        self._workers: list[asyncio.Task[None]] = []
        self._executing: set[asyncio.Task[None]] = set()
        self._stopping = False

    def make_queue(self) -> RequestQueue:
        """The queue; subclasses pass their queue policy."""
        return RequestQueue(self._reject)

    def _reject(self, request: InferenceRequest, error: DespinaError) -> None:
        reject(self.model, request, error)

    async def start(self) -> None:
        for index, instance in enumerate(self.model.instances):
            slots = CONCURRENT_SLOTS if instance.concurrent else 1
            for _ in range(slots):
                self._workers.append(asyncio.create_task(self._work(index)))

    def submit(self, request: InferenceRequest) -> None:
        if self._stopping:
            raise stopping_error(self.model)
        self.queue.put(request)

    @property
    def pending(self) -> int:
        return len(self.queue)

    @property
    def busy(self) -> int:
        return len(self._executing)

    @abc.abstractmethod
    async def next_batch(self) -> list[InferenceRequest]:
        """Wait for and return the next requests to execute together (never empty).

        Must be cancellation-safe: requests taken from the queue go back on cancel."""

    async def _work(self, index: int) -> None:
        task = asyncio.current_task()
        assert task is not None
        while not self._stopping:
            batch = await self.next_batch()
            self._executing.add(task)
            try:
                await execute_on(self.model, index, batch)
            finally:
                self._executing.discard(task)
                del batch  # the requests' arrays (shared-memory views) go now, not next turn

    async def stop(self) -> None:
        self._stopping = True
        for worker in self._workers:
            if worker not in self._executing:
                worker.cancel()
        for worker in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        for request in self.queue.drain():
            reject(self.model, request, stopping_error(self.model))


class DefaultScheduler(QueueScheduler):
    """Triton's default scheduler: each request executes alone, on the next free instance."""

    name = "default"

    async def next_batch(self) -> list[InferenceRequest]:
        return [await self.queue.get()]
