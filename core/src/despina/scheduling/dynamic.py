"""Triton's dynamic batcher: requests queued together execute as one batch.

A batch starts at the oldest request and takes the queued requests after it in order. It
runs at once at the largest preferred batch size it can reach (the requests after that
prefix wait for the next batch), or, when the next request would take it past the largest
preferred size, at the size before that request; else it waits for more requests until
the oldest request has waited ``max_queue_delay_microseconds`` (its age counts from its
arrival, not from the batch's start), then runs all it holds, up to ``max_batch_size``.
Without a queue delay it never waits. Requests whose non-batch input shapes differ from
the batch's first request are never batched together (unless the input allows ragged
batches), nor are requests whose shape-tensor inputs (``is_shape_tensor``) hold different
values (Triton's rule); they start the next batch. Priority levels, queue size limits and queue timeouts follow the queue policy.
Under the rate limiter a batch grows only once its instance's resources are available.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Set
from typing import Any

import numpy as np

from despina.inference.request import InferenceRequest
from despina.repository.config import ModelConfig, mc
from despina.scheduling.base import ScheduledModel, batch_size_of
from despina.scheduling.default_scheduler import QueueScheduler
from despina.scheduling.queue import QueuePolicy, RequestQueue
from despina.serving.digits import ascii_digits


class DynamicBatchScheduler(QueueScheduler):
    """The scheduler for configs with ``dynamic_batching`` and ``max_batch_size > 0``."""

    name = "dynamic"

    def __init__(self, model: ScheduledModel) -> None:
        super().__init__(model)
        #: Requests taken from the queue into batches still forming (waiting for the
        #: queue delay): accepted work that is neither queued nor executing.
        self._forming = 0
        #: Rate limited, one batch forms at a time, once its instance can run (Triton's
        #: one batcher per model, which waits for a free slot): the requests that come
        #: meanwhile join it instead of a batch that would wait for the instance.
        limited = model.limiter is not None and any(n is not None for n in model.needs)
        self._one_at_a_time = asyncio.Lock() if limited else None
        #: Triton's test hook ``TRITONSERVER_DELAY_SCHEDULER=N``: the first batch forms
        #: once N requests are queued.
        self._start_after = scheduler_test_hook("TRITONSERVER_DELAY_SCHEDULER")

    @property
    def pending(self) -> int:
        return len(self.queue) + self._forming

    @classmethod
    def handles(cls, config: ModelConfig) -> bool:
        return bool(config.HasField("dynamic_batching")) and config.max_batch_size > 0

    def make_queue(self) -> RequestQueue:
        batching = self.model.config.dynamic_batching
        levels = int(batching.priority_levels) or 1
        default_max = self.model.max_pending
        policies = [
            _policy(batching.priority_queue_policy[level], default_max)
            if level in batching.priority_queue_policy
            else _policy(batching.default_queue_policy, default_max)
            for level in range(1, levels + 1)
        ]
        return RequestQueue(self._reject, policies, int(batching.default_priority_level) or 1)

    async def next_batch(self, index: int) -> list[InferenceRequest]:
        if self._one_at_a_time is None:
            return await self._form(index)
        async with self._one_at_a_time:
            return await self._form(index)

    async def _form(self, index: int) -> list[InferenceRequest]:
        """The next batch by Triton's rules: from the oldest request, take the queued
        requests that fit ``max_batch_size`` and the first one's shapes; run the largest
        prefix of preferred size (or, when one more would pass the largest preferred
        size, the prefix before it) unless the oldest request has waited the queue delay,
        then all of them; without such a prefix run them all once they can grow no more
        or the delay passed (at once without a delay), else wait for more requests."""
        config = self.model.config
        batching = config.dynamic_batching
        max_size = int(config.max_batch_size)
        preferred = {int(p) for p in batching.preferred_batch_size if 0 < p <= max_size}
        max_preferred = max(preferred, default=max_size)
        delay_ns = int(batching.max_queue_delay_microseconds) * 1000
        ragged = {i.name for i in config.input if i.allow_ragged_batch}
        values = {i.name for i in config.input if i.is_shape_tensor}

        while len(self.queue) < self._start_after:
            await asyncio.sleep(0.01)  # Triton's batcher looks every 10 ms
        self._start_after = 0
        first = await self.queue.get()
        batch, size = [first], batch_size_of(first, config)
        best = 1 if size in preferred else 0  # requests in the batch to run, if found
        full = False  # the next queued request fits no batch with these
        self._forming += 1
        needs = self.model.needs[index] if index < len(self.model.needs) else None
        try:
            if self.model.limiter is not None and needs is not None:
                await self.model.limiter.until_fits(needs)
            while True:
                candidate = None if full else self.queue.pop_nowait()
                if candidate is not None:
                    candidate_size = batch_size_of(candidate, config)
                    if size + candidate_size > max_preferred and not best:
                        best = len(batch)
                    if size + candidate_size > max_size or not same_shapes(
                        first, candidate, ragged, values
                    ):
                        self.queue.push_front(candidate)
                        full = True
                        continue
                    batch.append(candidate)
                    self._forming += 1
                    size += candidate_size
                    if size in preferred:
                        best = len(batch)
                    continue
                waited = time.monotonic_ns() - first.received_ns
                exceeded = bool(delay_ns) and waited >= delay_ns
                if best and not exceeded:
                    for request in reversed(batch[best:]):
                        self.queue.push_front(request)
                    self._forming -= len(batch) - best
                    del batch[best:]
                    break
                if full or exceeded or not delay_ns or size >= max_preferred:
                    break
                await self.queue.wait((delay_ns - waited) / 1e9)
        except asyncio.CancelledError:
            for request in reversed(batch):
                self.queue.push_front(request)
            raise
        finally:
            self._forming -= len(batch)
        return batch


def scheduler_test_hook(variable: str) -> int:
    """The count N of one of Triton's scheduler test hooks (``variable=N`` in the
    server's environment), 0 when unset or not a number."""
    value = os.environ.get(variable, "")
    return int(value) if ascii_digits(value) else 0


def _policy(policy: Any, default_max: int = 0) -> QueuePolicy:
    """A config ``ModelQueuePolicy`` as a :class:`QueuePolicy`; a level whose
    ``max_queue_size`` is 0 (unbounded in Triton) holds at most ``default_max``
    (``--max-pending-requests``; 0: unbounded)."""
    return QueuePolicy(
        max_size=int(policy.max_queue_size) or default_max,
        default_timeout_us=int(policy.default_timeout_microseconds),
        allow_timeout_override=bool(policy.allow_timeout_override),
        delay_on_timeout=policy.timeout_action == mc.ModelQueuePolicy.DELAY,
    )


def same_shapes(
    a: InferenceRequest, b: InferenceRequest, ragged: set[str], values: Set[str] = frozenset()
) -> bool:
    """True when every input has the same shape past the batch dimension, and the inputs
    named in ``values`` (shape tensors) hold the same values."""
    for name, array in a.inputs.items():
        if name in ragged:
            continue
        other = b.inputs.get(name)
        if other is None or other.shape[1:] != array.shape[1:]:
            return False
        if name in values and not np.array_equal(other, array):
            return False
    return a.inputs.keys() == b.inputs.keys()
