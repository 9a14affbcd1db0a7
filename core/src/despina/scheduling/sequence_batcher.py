"""One instance's side of the sequence batcher: its sequence slots and the batches it runs.

Each instance has a fixed number of slots; a slot holds one sequence at a time and queues
that sequence's requests in order. One worker per instance forms a batch from the heads of
the slot queues, runs it, and only then forms the next one, so the requests of a sequence
run in order, one at a time, always on the same instance.

- Direct: batch position ``i`` is slot ``i``; a slot with nothing ready up to the highest
  ready slot gets a padding request (every control false/zero, zero inputs) whose
  response is dropped, so a model may keep per-slot state by batch position.
- Oldest: the oldest heads across slots are batched like the dynamic batcher does
  (preferred sizes, queue delay), at most one request per sequence per batch.

Before execution each request gets its control tensors and its implicit state inputs;
after it, state outputs are kept for the sequence's next request, and the scheduler is
told each request ran (it queues a rescheduled one again, or frees an ended sequence's
slot).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from despina.inference.pipeline import execute_on
from despina.inference.request import (
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    ResponseStream,
    SequenceFlags,
)
from despina.memory.device_arrays import to_host
from despina.plugin.backend import ModelInstance
from despina.repository.config import ModelConfig
from despina.scheduling.dynamic import same_shapes

if TYPE_CHECKING:
    from despina.scheduling.base import ScheduledModel
    from despina.scheduling.sequence_controls import SequenceControls, StateSpec


class SlotOwner(Protocol):
    """What a slot reads of the scheduler that owns it
    (:class:`despina.scheduling.sequence.SequenceBatchScheduler`)."""

    stopping: bool
    model: ScheduledModel
    controls: SequenceControls
    states: list[StateSpec]
    input_names: list[str]

    delay_count: int

    def delays(self, batcher: InstanceBatcher) -> bool: ...

    def release(self, slot: Slot) -> None: ...

    def executed(self, slot: Slot, request: InferenceRequest) -> None: ...


#: How often a delayed instance looks again at the queued counts of the others (Triton's).
DELAY_POLL_S = 0.01

#: A slot-queue entry meaning "the sequence idled out: free the slot".
RELEASE = None

Chosen = list[tuple["Slot", InferenceRequest | None]]


class Slot:
    """One sequence slot of an instance."""

    __slots__ = ("batcher", "corrid", "index", "queue", "running", "states")

    def __init__(self, batcher: InstanceBatcher, index: int) -> None:
        self.batcher = batcher
        self.index = index
        self.queue: deque[InferenceRequest | None] = deque()
        #: The sequence holding the slot, None while free.
        self.corrid: int | str | None = None
        #: Implicit state of the sequence (input name -> tensor), None until its first run.
        self.states: dict[str, np.ndarray] | None = None
        #: True while a request of the slot executes (its sequence is not idle then).
        self.running = False

    def put(self, item: InferenceRequest | None) -> None:
        """Queue a request (or RELEASE) and wake the instance's worker."""
        self.queue.append(item)
        self.batcher.wake.set()


class Policy(Protocol):
    """How a batch is chosen from the ready heads (Direct or Oldest)."""

    def choose(
        self, heads: list[tuple[Slot, InferenceRequest]], slots: Sequence[Slot]
    ) -> tuple[Chosen, float | None]:
        """(batch, 0) to run now, popping chosen heads; ([], seconds) to look again later."""
        ...


def _ragged(config: ModelConfig) -> set[str]:
    return {i.name for i in config.input if i.allow_ragged_batch}


class DirectPolicy:
    """Batch position = slot index; padding for slots with nothing ready."""

    def __init__(self, config: ModelConfig) -> None:
        direct = config.sequence_batching.direct
        self.max_batch = max(1, int(config.max_batch_size))
        self.delay_ns = int(direct.max_queue_delay_microseconds) * 1000
        self.min_utilization = float(direct.minimum_slot_utilization)
        self.ragged = _ragged(config)

    def choose(
        self, heads: list[tuple[Slot, InferenceRequest]], slots: Sequence[Slot]
    ) -> tuple[Chosen, float | None]:
        if self.delay_ns and self.min_utilization:
            age = time.monotonic_ns() - min(r.received_ns for _, r in heads)
            if age <= self.delay_ns and len(heads) / self.max_batch < self.min_utilization:
                return [], (self.delay_ns - age) / 1e9
        first = heads[0][1]
        ready = {slot.index: request for slot, request in heads}
        chosen: Chosen = []
        for slot in slots[: max(ready) + 1]:
            request = ready.get(slot.index)
            if request is not None and same_shapes(first, request, self.ragged):
                slot.queue.popleft()
                chosen.append((slot, request))
            else:
                chosen.append((slot, None))
        return chosen, 0


class OldestPolicy:
    """The oldest ready heads, batched with preferred sizes and a queue delay."""

    def __init__(self, config: ModelConfig) -> None:
        oldest = config.sequence_batching.oldest
        self.max_batch = max(1, int(config.max_batch_size))
        preferred = [int(p) for p in oldest.preferred_batch_size] or [self.max_batch]
        self.preferred = sorted(p for p in preferred if p <= self.max_batch)
        self.delay_ns = int(oldest.max_queue_delay_microseconds) * 1000
        self.ragged = _ragged(config)

    def choose(
        self, heads: list[tuple[Slot, InferenceRequest]], slots: Sequence[Slot]
    ) -> tuple[Chosen, float | None]:
        heads = sorted(heads, key=lambda head: head[1].received_ns)
        first = heads[0][1]
        fitting = [h for h in heads if same_shapes(first, h[1], self.ragged)][: self.max_batch]
        count = len(fitting)
        best = max((p for p in self.preferred if p <= count), default=0)
        age = time.monotonic_ns() - first.received_ns
        if not best:
            if age < self.delay_ns:
                return [], (self.delay_ns - age) / 1e9
            best = count
        chosen: Chosen = []
        for slot, request in fitting[:best]:
            slot.queue.popleft()
            chosen.append((slot, request))
        return chosen, 0


class InstanceBatcher:
    """The slots of one instance and the worker that runs their batches."""

    def __init__(
        self,
        owner: SlotOwner,
        instance: ModelInstance,
        index: int,
        slot_count: int,
        policy: Policy,
    ) -> None:
        self.owner = owner
        self.instance = instance
        self.index = index
        self.policy = policy
        self.slots = [Slot(self, i) for i in range(slot_count)]
        self.wake = asyncio.Event()
        self.executing = False
        #: Until the delay test hooks let it go (Direct only, as Triton's).
        self.delayed = owner.delay_count > 0 and isinstance(policy, DirectPolicy)

    @property
    def pending(self) -> int:
        return sum(1 for slot in self.slots for item in slot.queue if item is not None)

    async def run(self) -> None:
        """The worker: form a batch, run it, report its requests; until stopped."""
        while not self.owner.stopping:
            chosen = await self._next_batch()
            self.executing = True
            try:
                await self._execute(chosen)
            finally:
                self.executing = False

    async def _next_batch(self) -> Chosen:
        while True:
            self.wake.clear()
            if self.delayed:
                self.delayed = self.owner.delays(self)
                if self.delayed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.wake.wait(), DELAY_POLL_S)
                    continue
            heads = self._heads()
            wait: float | None = None
            if heads:
                chosen, wait = self.policy.choose(heads, self.slots)
                if chosen:
                    return chosen
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), wait)

    def _heads(self) -> list[tuple[Slot, InferenceRequest]]:
        """The first live request of every slot; frees slots of idle or cancelled ones."""
        heads: list[tuple[Slot, InferenceRequest]] = []
        for slot in self.slots:
            while slot.queue:
                front = slot.queue[0]
                if front is RELEASE:
                    slot.queue.popleft()
                    self.owner.release(slot)
                elif front.cancelled:
                    self.owner.release(slot)
                else:
                    heads.append((slot, front))
                    break
        return heads

    async def _execute(self, chosen: Chosen) -> None:
        ran = [(slot, request) for slot, request in chosen if request is not None]
        execution = _Execution(self.owner, self.instance, chosen)
        for slot, _ in ran:
            slot.running = True
        try:
            padding = len(chosen) - len(ran)  # counted in the batch size, as Triton's
            requests = [r for _, r in ran]
            await execute_on(self.owner.model, self.index, requests, execution, padding=padding)
        finally:
            for slot, _ in ran:
                slot.running = False
        again = any(request.rescheduled for _, request in ran)
        for slot, request in ran:
            self.owner.executed(slot, request)
        if again:  # a backend that never suspends must not hold the loop across iterations
            await asyncio.sleep(0)


class _Execution(ModelInstance):
    """Runs one chosen batch on the real instance: adds controls, states and padding,
    keeps the state outputs, and hands back one response per real request."""

    def __init__(self, owner: SlotOwner, instance: ModelInstance, chosen: Chosen) -> None:
        self.owner = owner
        self.instance = instance
        self.chosen = chosen
        #: Requests whose requested outputs were widened by the state outputs, with the
        #: client's own list (put back before the responses are delivered).
        self.widened: list[tuple[InferenceRequest, list[RequestedOutput]]] = []

    async def execute(
        self, requests: Sequence[InferenceRequest]
    ) -> Sequence[InferenceResponse] | None:
        batch: list[InferenceRequest] = []
        for slot, request in self.chosen:
            batch.append(
                self._pad(requests[0]) if request is None else self._prepare(slot, request)
            )
        try:
            responses = await self.instance.execute(batch)
        finally:
            for request, outputs in self.widened:
                request.outputs = outputs
        if responses is None or len(responses) != len(batch):
            return responses
        kept: list[InferenceResponse] = []
        for (slot, request), response in zip(self.chosen, responses, strict=True):
            if request is not None:
                self._keep_states(slot, response)
                kept.append(response)
        return kept

    def _prepare(self, slot: Slot, request: InferenceRequest) -> InferenceRequest:
        owner = self.owner
        request.inputs.update(owner.controls.tensors(request.flags, request.correlation_id, True))
        if owner.states:
            if slot.states is None or SequenceFlags.START in request.flags:
                slot.states = {s.input_name: s.initial for s in owner.states}
            request.inputs.update(slot.states)
            if request.outputs is not None:
                # the backend must produce the state outputs even when the client
                # named only some outputs
                self.widened.append((request, request.outputs))
                named = {o.name for o in request.outputs}
                request.outputs = request.outputs + [
                    RequestedOutput(s.output_name)
                    for s in owner.states
                    if s.output_name not in named
                ]
        return request

    def _keep_states(self, slot: Slot, response: InferenceResponse) -> None:
        if response.error is not None or slot.states is None:
            return
        for spec in self.owner.states:
            value = response.outputs.get(spec.output_name)
            if value is None:
                continue
            # the state comes back as an input: on the device only where inputs may be
            slot.states[spec.input_name] = value if self.instance.device_inputs else to_host(value)
            if not spec.visible:
                del response.outputs[spec.output_name]

    def _pad(self, like: InferenceRequest) -> InferenceRequest:
        """A not-ready request shaped like ``like``; nobody reads its responses."""
        owner = self.owner
        inputs = {
            name: _zeros_like(like.inputs[name])
            for name in owner.input_names
            if name in like.inputs
        }
        inputs.update(owner.controls.tensors(SequenceFlags.NONE, 0, False))
        inputs.update({s.input_name: s.initial for s in owner.states})
        padding = InferenceRequest(owner.model.name, inputs, model_version=owner.model.version)
        padding.stream = ResponseStream()
        return padding


def _zeros_like(array: np.ndarray[Any, Any]) -> np.ndarray:
    if array.dtype == np.object_:
        return np.full(array.shape, b"", dtype=np.object_)
    return np.zeros_like(array)
