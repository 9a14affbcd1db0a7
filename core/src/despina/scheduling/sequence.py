"""Triton's sequence batcher for stateful models (``sequence_batching``).

Every request carries a correlation ID (uint64 or string) and START/END flags. A sequence
that starts gets a free slot (each instance has ``max_batch_size`` slots for Direct,
``max_candidate_sequences`` for Oldest) or, when none is free, waits in the backlog until
one frees up. Its requests then run in order on that slot's instance (see
:mod:`despina.scheduling.sequence_batcher`). A sequence that sends nothing for
``max_sequence_idle_microseconds`` (default 1 s) loses its slot; its next request, like
any request that neither starts a sequence nor continues a known one, gets Triton's
"must specify the START flag" error.

Iterative sequences (``iterative_sequence: true``, Triton's provisional feature): a request
without a correlation ID starts a sequence of its own under a fresh server-assigned ID
(counting from 1, as Triton), and a backend may :meth:`~despina.inference.request.InferenceRequest.reschedule`
it: once the execution returns it is queued again in its slot, flags cleared, and runs
again on the same instance; released without rescheduling, it ends its sequence and frees
the slot. A rescheduled request that was cancelled, already got its final response, or
meets a stopping scheduler is not queued again (the first and last are answered with an
error), so nothing loops on after its client or model is gone.

Implicit state: a backend reads a ``state`` entry's value from the request input
``input_name`` and writes the next value as the response output ``output_name``; the
scheduler keeps it for the sequence's next request and removes it from the response
unless it is also a declared model output.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import math
import time
from collections import deque

from despina.errors import Cancelled, InvalidArgument, Unavailable
from despina.inference.pipeline import reject
from despina.inference.request import InferenceRequest, SequenceFlags
from despina.repository.config import ENSEMBLE_PLATFORM, ModelConfig
from despina.scheduling.base import ScheduledModel, Scheduler, batch_size_of, stopping_error
from despina.scheduling.dynamic import scheduler_test_hook
from despina.scheduling.queue import QUEUE_FULL
from despina.scheduling.sequence_batcher import (
    RELEASE,
    DirectPolicy,
    InstanceBatcher,
    OldestPolicy,
    Policy,
    Slot,
)
from despina.scheduling.sequence_controls import SequenceControls, state_specs

log = logging.getLogger("despina.scheduling")

#: How often the reaper looks again at an idle sequence still waiting in the backlog or
#: executing (a sequence is not idle while one of its requests runs).
BACKLOG_RECHECK_S = 0.05


class Backlog(deque[InferenceRequest]):
    """The queued requests of a sequence waiting for a free slot."""

    #: When the earliest request timeout among them runs out (monotonic seconds).
    expires: float = math.inf

    def add(self, request: InferenceRequest) -> bool:
        """Queue ``request``; True when it moved ``expires`` earlier."""
        self.append(request)
        expires = time.monotonic() + request.timeout_us / 1e6 if request.timeout_us else math.inf
        if expires < self.expires:
            self.expires = expires
            return True
        return False


class SequenceBatchScheduler(Scheduler):
    """The scheduler for configs with ``sequence_batching``."""

    name = "sequence"

    @classmethod
    def handles(cls, config: ModelConfig) -> bool:
        return bool(config.HasField("sequence_batching")) and config.platform != ENSEMBLE_PLATFORM

    def __init__(self, model: ScheduledModel) -> None:
        super().__init__(model)
        config = model.config
        batching = config.sequence_batching
        self.iterative = bool(batching.iterative_sequence)
        self._sequence_ids = itertools.count(1)
        self.controls = SequenceControls(config)
        self.states = state_specs(config, model.model_dir)
        self.input_names = [i.name for i in config.input]
        self.idle_s = int(batching.max_sequence_idle_microseconds) / 1e6
        #: Triton's test hooks of the Direct strategy: ``TRITONSERVER_DELAY_SCHEDULER=N``
        #: holds the instances' first batches until N requests wait in the slots of all
        #: instances together (each instance's count as it last looked), and
        #: ``TRITONSERVER_BACKLOG_DELAY_SCHEDULER=M`` also until M wait in the backlog;
        #: then every instance goes (Triton's instances each poll every 10 ms, so they go
        #: together there too, before a sequence that ends takes a backlogged one).
        self.delay_count = scheduler_test_hook("TRITONSERVER_DELAY_SCHEDULER")
        self._backlog_delay_count = scheduler_test_hook("TRITONSERVER_BACKLOG_DELAY_SCHEDULER")
        self._queued_seen: dict[int, int] = {}
        policy: Policy
        slot_count = max(1, int(config.max_batch_size))
        if batching.WhichOneof("strategy_choice") == "oldest":
            slot_count = int(batching.oldest.max_candidate_sequences) or slot_count
            policy = OldestPolicy(config)
        else:
            policy = DirectPolicy(config)
        self.batchers = [
            InstanceBatcher(self, instance, index, slot_count, policy)
            for index, instance in enumerate(model.instances)
        ]
        # Free slots, lowest slot index first across instances (spreads sequences out).
        self._free = [(s.index, b.index, s) for b in self.batchers for s in b.slots]
        heapq.heapify(self._free)
        self._active: dict[int | str, Slot] = {}
        self._backlog: dict[int | str, Backlog] = {}
        self._backlogs: deque[Backlog] = deque()
        self._reaper_wake = asyncio.Event()
        self._last_seen: dict[int | str, float] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._reaper: asyncio.Task[None] | None = None
        self.stopping = False

    async def start(self) -> None:
        if not self.batchers:
            raise Unavailable(f"model '{self.model.name}' has no instance to run sequences on")
        self._tasks = [asyncio.create_task(b.run()) for b in self.batchers]
        self._reaper = asyncio.create_task(self._reap())

    @property
    def pending(self) -> int:
        return sum(b.pending for b in self.batchers) + sum(len(q) for q in self._backlogs)

    def _queued(self) -> int:
        """Requests waiting in slots and backlogs (a slot's RELEASE marker counted too):
        O(slots + backlogged sequences), cheap enough for every submit."""
        in_slots = sum(len(slot.queue) for b in self.batchers for slot in b.slots)
        return in_slots + sum(len(q) for q in self._backlogs)

    @property
    def busy(self) -> int:
        return sum(1 for b in self.batchers if b.executing)

    @property
    def in_flight(self) -> int:
        return len(self._active) + len(self._backlog)

    @property
    def settled(self) -> bool:
        """Also no sequence open: as Triton, a stopping server waits for the sequences in
        flight to end (or idle out)."""
        return super().settled and not self._active and not self._backlog

    takes_follow_ons = True

    def admit_while_stopping(self, request: InferenceRequest) -> None:
        """As Triton: a request starting a sequence is refused (UNAVAILABLE); any other
        goes on to :meth:`submit` (it continues its sequence, or gets the START error)."""
        starts = SequenceFlags.START in request.flags
        if starts or (self.iterative and request.correlation_id in (0, "")):
            raise self.refusal()

    def delays(self, batcher: InstanceBatcher) -> bool:
        """Whether ``batcher``'s first batch still waits for the delay test hooks; once
        they are met, no instance's does (the others are woken)."""
        if not self.delay_count:
            return False
        self._queued_seen[batcher.index] = batcher.pending
        if sum(self._queued_seen.values()) < self.delay_count:
            return True
        if sum(len(q) for q in self._backlogs) < self._backlog_delay_count:
            return True
        self.delay_count = 0
        for other in self.batchers:
            other.wake.set()
        return False

    def submit(self, request: InferenceRequest) -> None:
        model = self.model.name
        if self.stopping:
            raise self.refusal()
        if batch_size_of(request, self.model.config) > 1:
            raise InvalidArgument(
                f"inference request to model '{model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        limit = self.model.max_pending
        if limit and self._queued() >= limit:
            raise Unavailable(QUEUE_FULL)
        corrid = request.correlation_id
        if corrid == 0 or corrid == "":
            if not self.iterative:
                raise InvalidArgument(
                    f"inference request to model '{model}' must specify a non-zero or "
                    "non-empty correlation ID"
                )
            corrid = request.correlation_id = next(self._sequence_ids)
            request.flags = SequenceFlags.START
        request.reschedulable = self.iterative
        start = SequenceFlags.START in request.flags
        end = SequenceFlags.END in request.flags
        slot = self._active.get(corrid)
        backlog = self._backlog.get(corrid)
        if not start and slot is None and backlog is None:
            raise InvalidArgument(
                f"inference request for sequence {corrid} to model '{model}' must specify the "
                "START flag on the first request of the sequence"
            )
        self._last_seen[corrid] = time.monotonic()
        if start and (slot is not None or backlog is not None):
            log.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not end "
                "before this sequence start. Previous sequence will be terminated early.",
                corrid,
                model,
            )
        if slot is None and backlog is None and self._free:
            slot = heapq.heappop(self._free)[2]
            slot.corrid = corrid
            self._active[corrid] = slot
        if slot is None:
            if backlog is None:
                backlog = Backlog()
                self._backlogs.append(backlog)
                self._backlog[corrid] = backlog
            if backlog.add(request):
                self._reaper_wake.set()
            if end:
                del self._backlog[corrid]
            return
        if end:
            del self._active[corrid]
        slot.put(request)

    def executed(self, slot: Slot, request: InferenceRequest) -> None:
        """After ``request`` ran in ``slot``: queue it again when its backend rescheduled
        it; otherwise free the slot when its sequence ended (END flag, or any request of
        an iterative sequence)."""
        if request.rescheduled:
            request.rescheduled = False
            if self._requeue(slot, request):
                return
        corrid = request.correlation_id
        if SequenceFlags.END in request.flags:
            self.release(slot)
        elif self.iterative and self._active.get(corrid) is slot:
            # as Triton, through the slot's queue: requests already queued run first
            del self._active[corrid]
            self._last_seen.pop(corrid, None)
            slot.put(RELEASE)

    def _requeue(self, slot: Slot, request: InferenceRequest) -> bool:
        """Queue a rescheduled request again in ``slot`` (its flags cleared); False, with
        the request answered where it still waits for an answer, when it will not run
        again."""
        corrid = request.correlation_id
        model = self.model.name
        if request.stream is not None and request.stream.done:
            log.warning(
                "a request of sequence %s of model '%s' was rescheduled after its final "
                "response; its sequence ends",
                corrid,
                model,
            )
            return False
        if request.cancelled or self.stopping:
            error = Cancelled("Request was cancelled") if request.cancelled else None
            reject(self.model, request, error or stopping_error(self.model))
            return False
        holder = self._active.get(corrid)
        ended = SequenceFlags.END in request.flags
        if holder is None and ended and corrid not in self._backlog:  # its END is undone
            self._active[corrid] = slot
        elif holder is not slot:
            reject(
                self.model,
                request,
                Unavailable(
                    f"sequence {corrid} of model '{model}' was restarted before its "
                    "rescheduled request could run again"
                ),
            )
            return False
        request.flags = SequenceFlags.NONE
        self._last_seen[corrid] = time.monotonic()
        slot.put(request)
        return True

    def release(self, slot: Slot) -> None:
        """Free ``slot`` (its sequence ended, idled out or was cancelled) and give it to
        the oldest backlogged sequence. Requests still queued in it are cancelled."""
        for request in slot.queue:
            if request is not RELEASE:
                reject(self.model, request, Cancelled("Request was cancelled"))
        slot.queue.clear()
        if slot.corrid is not None and self._active.get(slot.corrid) is slot:
            del self._active[slot.corrid]
        slot.corrid = None
        slot.states = None
        while self._backlogs:
            queue = self._backlogs.popleft()
            if not queue:
                continue
            corrid = queue[-1].correlation_id
            if SequenceFlags.END not in queue[-1].flags:
                self._backlog.pop(corrid, None)
                self._active[corrid] = slot
            slot.corrid = corrid
            for request in queue:
                slot.put(request)
            return
        heapq.heappush(self._free, (slot.index, slot.batcher.index, slot))

    async def _reap(self) -> None:
        """Release the slots of sequences idle longer than ``max_sequence_idle_microseconds``
        and reject backlogged sequences whose request timeout ran out."""
        wait = self.idle_s
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reaper_wake.wait(), wait)
            self._reaper_wake.clear()
            now = time.monotonic()
            wait = min(self._release_idle(now), self._expire_backlogs(now))

    def _expire_backlogs(self, now: float) -> float:
        """Reject expired backlogs; return the seconds until the next one expires."""
        wait = math.inf
        for backlog in list(self._backlogs):
            if backlog.expires > now:
                wait = min(wait, backlog.expires - now)
                continue
            self._backlogs.remove(backlog)
            corrid = backlog[0].correlation_id
            if self._backlog.get(corrid) is backlog:
                del self._backlog[corrid]
            for request in backlog:
                error = Unavailable("timeout of the corresponding sequence has been expired")
                reject(self.model, request, error)
        return wait

    def _release_idle(self, now: float) -> float:
        """Free the slots of idle sequences; return the seconds until the next check."""
        wait = self.idle_s
        for corrid, seen in list(self._last_seen.items()):
            remaining = self.idle_s - (now - seen)
            if remaining > 0:
                wait = min(wait, remaining)
                continue
            slot = self._active.get(corrid)
            if slot is not None and slot.running:
                wait = min(wait, BACKLOG_RECHECK_S)
                continue
            slot = self._active.pop(corrid, None)
            if slot is not None:
                log.info("sequence %s of model '%s' idled out", corrid, self.model.name)
                slot.put(RELEASE)
            elif corrid in self._backlog:
                wait = min(wait, BACKLOG_RECHECK_S)
                continue
            del self._last_seen[corrid]
        return wait

    async def stop(self) -> None:
        """Idle workers and the reaper stop at once, queued requests are answered with the
        stopping error, then running executions finish."""
        self.stopping = True
        idle = [
            task
            for batcher, task in zip(self.batchers, self._tasks, strict=False)
            if not batcher.executing
        ]
        if self._reaper is not None:
            idle.append(self._reaper)
        for task in idle:
            task.cancel()
        for task in idle:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._reject_queued()
        for task in self._tasks:
            if task not in idle:
                await task

    def _reject_queued(self) -> None:
        """Answer every request waiting in a slot or a backlog with the stopping error."""
        queued = [r for b in self.batchers for s in b.slots for r in s.queue if r is not RELEASE]
        queued += [r for q in self._backlogs for r in q]
        for batcher in self.batchers:
            for slot in batcher.slots:
                slot.queue.clear()
        self._backlogs.clear()
        self._backlog.clear()
        for request in queued:
            if request is not None:
                reject(self.model, request, stopping_error(self.model))
