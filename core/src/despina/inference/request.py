"""Inference requests and responses: what frontends build and backends answer.

A request holds its inputs as numpy arrays (BYTES as object arrays). Every request owns a
:class:`ResponseStream` through which responses travel back to whoever submitted it; the
scheduler writes to it, the frontend reads from it. Non-decoupled models answer with exactly
one final response; decoupled models with zero or more, then a final flag.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from despina.errors import DespinaError, InvalidArgument
from despina.memory.device_arrays import to_host

if TYPE_CHECKING:
    from despina.tracing.trace import Trace


#: Triton's error for a request released with ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``
#: by a model whose sequence batcher is not iterative.
RESCHEDULE_UNSUPPORTED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


class SequenceFlags(enum.IntFlag):
    """Triton's sequence flags (``TRITONSERVER_REQUEST_FLAG_SEQUENCE_*``)."""

    NONE = 0
    START = 1
    END = 2


@dataclass
class RequestedOutput:
    """An output the client asked for, with its protocol parameters (binary_data, ...)."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class InferenceResponse:
    """One response: outputs by name, or ``error`` set when the request failed."""

    model_name: str = ""
    model_version: str = ""
    id: str = ""
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    parameters: dict[str, Any] = field(default_factory=dict)
    error: DespinaError | None = None
    #: True on the last response of a request (always true for non-decoupled models).
    final: bool = True


class ResponseStream:
    """Carries a request's responses back to its submitter, across threads if needed.

    ``send`` may be called from any thread; reading happens on the event loop that created
    the stream, by ``async for``, for one response by :meth:`last`, or without waiting by
    :meth:`last_now` once :attr:`ended` or from an :meth:`on_end` callback. After a
    response with ``final=True`` the stream ends.
    """

    __slots__ = ("_done", "_ended", "_items", "_lock", "_loop", "_on_end", "_waiter", "trace")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._items: deque[InferenceResponse] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._done = False  # a final response was sent (any thread)
        self._ended = False  # the final flag reached the loop
        self._lock = threading.Lock()
        self._on_end: Callable[[], None] | None = None
        #: The request's trace when it is traced: told of every response sent.
        self.trace: Trace | None = None

    @property
    def done(self) -> bool:
        """True once a final response was sent."""
        return self._done

    def send(self, response: InferenceResponse | None, final: bool) -> None:
        """Deliver ``response`` (None: only the final flag); ignored after the final one."""
        with self._lock:
            if self._done:
                return
            self._done = final
        if response is not None:
            response.final = final
        if self.trace is not None:
            self.trace.responded(response, final)
        if _running_loop() is self._loop:
            self._put(response, final)
        else:
            self._loop.call_soon_threadsafe(self._put, response, final)

    def on_end(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the loop when the final flag reaches it (for a reader that
        does not wait: it reads with :meth:`last_now`); register it on the loop, before
        :attr:`ended`. An exception it raises goes to the loop's exception handler."""
        self._on_end = callback

    def _put(self, item: InferenceResponse | None, final: bool) -> None:
        if item is not None:
            self._items.append(item)
        self._ended = self._ended or final
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        callback = self._on_end
        if final and callback is not None:
            self._on_end = None
            try:
                callback()
            except Exception as exc:  # noqa: BLE001 - never the sender's failure
                self._loop.call_exception_handler(
                    {"message": "a response stream's end callback failed", "exception": exc}
                )

    async def _next(self) -> InferenceResponse | None:
        """The next response, or None once the stream ended."""
        while not self._items:
            if self._ended:
                return None
            self._waiter = self._loop.create_future()
            await self._waiter
        return self._items.popleft()

    async def __aiter__(self) -> AsyncIterator[InferenceResponse]:
        while (item := await self._next()) is not None:
            yield item

    @property
    def ended(self) -> bool:
        """True once the final flag reached the loop: :meth:`last_now` may be called."""
        return self._ended

    def last_now(self) -> InferenceResponse | None:
        """:meth:`last` of an :attr:`ended` stream, without waiting."""
        if not self._ended:
            raise RuntimeError("last_now() before the stream ended")
        last = None
        while self._items:
            last = self._items.popleft()
        return last

    async def last(self) -> InferenceResponse | None:
        """Wait for the end of the stream; return its last response (None if none)."""
        last = None
        while (item := await self._next()) is not None:
            last = item
        return last


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@dataclass
class InferenceRequest:
    """A request to one model, as frontends build it and backends read it.

    ``model_version`` "" means the version chosen by the model's version policy (the
    highest loaded). ``outputs`` None means every output of the model. ``parameters`` are
    the request's free-form parameters (protocol keys such as ``binary_data_output``
    included). ``timeout_us`` 0 means no timeout.
    """

    model_name: str
    inputs: dict[str, np.ndarray]
    model_version: str = ""
    id: str = ""
    outputs: list[RequestedOutput] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    timeout_us: int = 0
    correlation_id: int | str = 0
    flags: SequenceFlags = SequenceFlags.NONE
    #: Whether the requester takes :class:`~despina.DeviceArray` outputs, so that a GPU
    #: backend may answer without copying them to the host: an ensemble step whose
    #: readers all take device inputs, a BLS call preferring GPU memory. False (frontends):
    #: backends answer host arrays where they can (any DeviceArray is copied at the wire).
    device_outputs: bool = False
    #: Set by the server when the request is accepted; backends send through it.
    stream: ResponseStream | None = field(default=None, repr=False)
    #: Monotonic nanoseconds when the server accepted the request.
    received_ns: int = field(default_factory=time.monotonic_ns)
    #: Set by the server when the model caches responses and this request missed.
    cache_key: bytes | None = field(default=None, repr=False)
    #: The request's trace when it is traced (a frontend sampled it, or it is an
    #: ensemble step or a BLS call of a traced request: ``parent.trace.child()``).
    trace: Trace | None = field(default=None, repr=False)
    #: Monotonic nanoseconds when its backend's framework got the converted inputs and
    #: gave back the outputs (``despina.report_compute``); 0 until reported.
    compute_input_end_ns: int = field(default=0, repr=False)
    compute_output_start_ns: int = field(default=0, repr=False)
    _cancelled: bool = field(default=False, repr=False)
    #: Set at admission when outputs are bound to client shared-memory regions: releases
    #: the server's hold on them; the frontend calls it (or :meth:`release_regions`) once
    #: the answer is written, or the request failed.
    region_release: Callable[[], None] | None = field(default=None, repr=False)
    #: Whether a backend may :meth:`reschedule` the request: set by the sequence batcher of
    #: a model with ``sequence_batching { iterative_sequence: true }``.
    reschedulable: bool = field(default=False, init=False, repr=False)
    #: Set by :meth:`reschedule`; the scheduler reads and clears it once the execution ends.
    rescheduled: bool = field(default=False, init=False, repr=False)

    @property
    def requested_output_names(self) -> list[str] | None:
        """Names of the requested outputs, or None for "all outputs"."""
        return None if self.outputs is None else [o.name for o in self.outputs]

    def selected_outputs(
        self, response: InferenceResponse
    ) -> Iterator[tuple[str, np.ndarray, dict[str, Any]]]:
        """(name, array, the request's parameters for it) of each output of ``response``
        this request asked for (every one when it named none), in the response's order,
        which is the model's, as Triton answers. This is where outputs leave for the wire:
        a :class:`~despina.DeviceArray` comes as a host copy, except an output the request
        binds to a shared-memory region (``shared_memory_region``), which comes as it is
        for :meth:`~despina.memory.shared_memory.Window.write_array` to place."""
        if self.outputs is None:
            for name, array in response.outputs.items():
                yield name, to_host(array), {}
            return
        wanted = {o.name: o.parameters for o in self.outputs}
        for name, array in response.outputs.items():
            parameters = wanted.get(name)
            if parameters is not None:
                if "shared_memory_region" not in parameters:
                    array = to_host(array)
                yield name, array, parameters

    def release_regions(self) -> None:
        """Release the shared-memory regions this request holds (idempotent)."""
        if self.region_release is not None:
            self.region_release()

    def cancel(self) -> None:
        """Flag the request cancelled (client gone); the scheduler drops it if still queued."""
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def reschedule(self) -> None:
        """Release the request to run again (Triton's ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``):
        called by a backend during an execution, which then must not send the request's
        final response. Once the execution returns, the request is queued again in its
        sequence, with its inputs, stream and correlation ID and with neither START nor
        END. Raises InvalidArgument (Triton's text) unless :attr:`reschedulable`."""
        if not self.reschedulable:
            raise InvalidArgument(RESCHEDULE_UNSUPPORTED)
        self.rescheduled = True

    def respond(self, response: InferenceResponse, final: bool = True) -> None:
        """Send a response to the submitter (backends of decoupled models call this)."""
        if self.stream is None:
            raise RuntimeError("request was not submitted to a server")
        if not response.id:
            response.id = self.id
        self.stream.send(response, final)

    def fail(self, error: DespinaError) -> None:
        """Answer the request with an error (final)."""
        self.respond(InferenceResponse(id=self.id, error=error), final=True)
