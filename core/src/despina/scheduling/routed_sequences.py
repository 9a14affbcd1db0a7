"""A sequence-batched model's scheduler in one of several serving processes.

:class:`RoutedSequences` wraps the model's sequence scheduler: a request whose sequence
this process owns goes to it; any other is forwarded to the serving process that owns the
sequence (:mod:`despina.serving.sequence_routing`), which runs and counts it, and its
responses are relayed as they come (:func:`~despina.inference.pipeline.relay`). A forward
that fails (the owner gone or stopping) answers the request with the owner's error or
Unavailable, counted here as rejected.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Protocol

from despina.errors import DespinaError
from despina.inference.pipeline import reject, relay
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.scheduling.base import Scheduler, stopping_error


class SequenceForwarding(Protocol):
    """Where sequences run (:class:`despina.serving.sequence_routing.SequenceRouter`)."""

    def owner(self, correlation_id: int | str) -> int | None:
        """The serving process that runs ``correlation_id``; None: this one."""
        ...

    def forward(
        self,
        owner: int,
        request: InferenceRequest,
        answer: Callable[[InferenceResponse | None, bool], None],
        fail: Callable[[DespinaError], None],
    ) -> None:
        """Run ``request`` in ``owner``: ``answer`` gets each response and whether it is
        the final one, or ``fail`` why it got no (more) answers."""
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
        #: Requests forwarded and not answered in full, by ``id()``.
        self._forwarded: dict[int, InferenceRequest] = {}
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
        self._forwarded[id(request)] = request
        answer = functools.partial(self._answered, request)
        self._forwarding.forward(owner, request, answer, functools.partial(self._failed, request))

    def _answered(
        self, request: InferenceRequest, response: InferenceResponse | None, final: bool
    ) -> None:
        if final:
            self._forwarded.pop(id(request), None)
        relay(request, response, final)

    def _failed(self, request: InferenceRequest, error: DespinaError) -> None:
        if self._forwarded.pop(id(request), None) is not None:
            reject(self.model, request, error)

    async def stop(self) -> None:
        """Stop the inner scheduler; forwarded requests still waiting for their owner are
        cancelled there and answered here with the stopping error."""
        self._stopping = True
        for request in list(self._forwarded.values()):
            request.cancel()
            self._failed(request, stopping_error(self.model))
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
