"""A sequence-batched model's scheduler in one of several serving processes.

:class:`RoutedSequences` wraps the model's sequence scheduler: a request whose sequence
this process owns goes to it; any other is forwarded to the serving process that owns the
sequence (:mod:`despina.serving.sequence_routing`), which runs and counts it, and its
responses are relayed as they come (:func:`~despina.inference.pipeline.relay`). A forward
that fails (the owner gone or stopping) answers the request with the owner's error or
Unavailable, counted here as rejected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Protocol

from despina.errors import DespinaError, Internal
from despina.inference.pipeline import reject, relay
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.scheduling.base import Scheduler, stopping_error

log = logging.getLogger("despina.scheduling")


class SequenceForwarding(Protocol):
    """Where sequences run (:class:`despina.serving.sequence_routing.SequenceRouter`)."""

    def owner(self, correlation_id: int | str) -> int | None:
        """The serving process that runs ``correlation_id``; None: this one."""
        ...

    def forward(
        self, owner: int, request: InferenceRequest
    ) -> AsyncGenerator[tuple[InferenceResponse | None, bool], None]:
        """Run ``request`` in ``owner``; each response and whether it is the final one."""
        ...


class RoutedSequences(Scheduler):
    """``inner`` (the sequence scheduler) for the sequences this process owns; the others'
    requests forwarded through ``forwarding``."""

    name = "sequence (routed)"
    takes_follow_ons = True

    def __init__(self, inner: Scheduler, forwarding: SequenceForwarding) -> None:
        super().__init__(inner.model)
        self.inner = inner
        self._forwarding = forwarding
        self._forwarded: set[asyncio.Task[None]] = set()
        self._stopping = False

    async def start(self) -> None:
        await self.inner.start()

    def submit(self, request: InferenceRequest) -> None:
        owner = self._forwarding.owner(request.correlation_id)
        if owner is None:
            self.inner.submit(request)
            return
        if self._stopping:
            raise self.refusal()
        task = asyncio.get_running_loop().create_task(self._forward(owner, request))
        self._forwarded.add(task)
        task.add_done_callback(self._forwarded.discard)

    async def _forward(self, owner: int, request: InferenceRequest) -> None:
        """Relay the owner's responses to ``request``; never raises but for cancellation,
        which answers the request with the stopping error."""
        try:
            answers = self._forwarding.forward(owner, request)
            async with contextlib.aclosing(answers):
                async for response, final in answers:
                    relay(request, response, final)
        except DespinaError as exc:
            reject(self.model, request, exc)
        except asyncio.CancelledError:
            reject(self.model, request, stopping_error(self.model))
            raise
        except Exception as exc:
            log.error("model '%s': a request could not be forwarded", self.model.name, exc_info=exc)
            reject(self.model, request, Internal(f"{type(exc).__name__}: {exc}"))

    async def stop(self) -> None:
        """Stop the inner scheduler; forwarded requests still waiting for their owner are
        answered with the stopping error."""
        self._stopping = True
        for task in list(self._forwarded):
            task.cancel()
        await asyncio.gather(*self._forwarded, return_exceptions=True)
        await self.inner.stop()

    @property
    def pending(self) -> int:
        return self.inner.pending

    @property
    def ready(self) -> bool:
        return self.inner.ready

    @property
    def busy(self) -> int:
        """The inner scheduler's executions and the requests forwarded and not answered."""
        return self.inner.busy + len(self._forwarded)

    @property
    def in_flight(self) -> int:
        return self.inner.in_flight + len(self._forwarded)

    @property
    def settled(self) -> bool:
        return self.inner.settled and not self._forwarded

    def admit_while_stopping(self, request: InferenceRequest) -> None:
        """As the inner scheduler (a sequence's start is refused); the owner of a
        forwarded request decides the rest."""
        self.inner.admit_while_stopping(request)

    def can_hand_over(self, successor: Scheduler) -> bool:
        """Never: a model of several serving processes is reloaded in full."""
        return False
