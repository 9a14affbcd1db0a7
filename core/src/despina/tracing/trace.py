"""One traced request: Triton's timestamps and tensors as they happen.

A :class:`Trace` is created by the :class:`~despina.tracing.tracer.Tracer` (a frontend
asks it for one per incoming request) or by :meth:`Trace.child` (an ensemble step, a BLS
call). It is *held* by its creator until :meth:`Trace.release`, and by the server from
:meth:`Trace.accepted` (the request was queued) until the request's final response
(:meth:`Trace.responded`); a root trace also waits for its children. Once nothing holds
it, it goes to its sink once (a trace file, or OpenTelemetry spans), with its children.
Timestamps are ``time.monotonic_ns()`` (Triton's steady clock).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

import numpy as np

from despina.inference.tensors import datatype_of
from despina.memory.device_arrays import to_host


class TracedRequest(Protocol):
    """What a trace reads of the request it follows (an ``InferenceRequest``)."""

    id: str
    received_ns: int
    inputs: dict[str, np.ndarray]


class TracedResponse(Protocol):
    """What a trace reads of a response (an ``InferenceResponse``)."""

    outputs: dict[str, np.ndarray]
    error: Any


class TraceSink(Protocol):
    """Where complete traces go (one per sampling setting)."""

    def emit(self, trace: Trace) -> None:
        """Take a complete root trace (its :attr:`Trace.children` are complete too)."""
        ...

    def next_id(self) -> int:
        """A new trace id (unique in the server, from 1)."""
        ...


class Trace:
    """What one traced request recorded; see the module docstring for its life."""

    __slots__ = (
        "_holds",
        "_lock",
        "children",
        "id",
        "model_name",
        "model_version",
        "parent",
        "request_id",
        "sink",
        "tensors",
        "timestamps",
        "traceparent",
        "with_tensors",
        "with_timestamps",
    )

    def __init__(
        self,
        sink: TraceSink,
        levels: frozenset[str],
        parent: Trace | None = None,
        traceparent: str = "",
        held: bool = True,
    ) -> None:
        self.sink = sink
        self.id = sink.next_id()
        self.parent = parent
        #: The W3C ``traceparent`` the client sent ("" for none).
        self.traceparent = traceparent
        self.with_timestamps = "TIMESTAMPS" in levels
        self.with_tensors = "TENSORS" in levels
        self.model_name = ""
        self.model_version = 0
        self.request_id = ""
        #: (name, monotonic ns) in the order recorded.
        self.timestamps: list[tuple[str, int]] = []
        #: (activity, name, data, shape, datatype), Triton's tensor activity fields.
        self.tensors: list[tuple[str, str, str, str, str]] = []
        #: Complete child traces (ensemble steps, BLS calls), in the order they finished.
        self.children: list[Trace] = []
        self._holds = 1 if held else 0
        self._lock = threading.Lock()

    @property
    def root(self) -> Trace:
        """The trace this one belongs to (itself when it has no parent)."""
        trace = self
        while trace.parent is not None:
            trace = trace.parent
        return trace

    def record(self, name: str, ns: int | None = None) -> None:
        """A timestamp (``ns`` None: now); kept at level TIMESTAMPS only."""
        if self.with_timestamps:
            self.timestamps.append((name, time.monotonic_ns() if ns is None else ns))

    def received(self, protocol: str, start_ns: int) -> None:
        """The frontend read the request from ``start_ns`` until now: HTTP_RECV_START and
        HTTP_RECV_END (``protocol`` "HTTP"), GRPC_WAITREAD_START and GRPC_WAITREAD_END
        ("GRPC")."""
        read = "RECV" if protocol == "HTTP" else "WAITREAD"
        self.record(f"{protocol}_{read}_START", start_ns)
        self.record(f"{protocol}_{read}_END")

    def sending(self, protocol: str) -> None:
        """The frontend has the response and starts writing it: INFER_RESPONSE_COMPLETE
        and ``<protocol>_SEND_START``."""
        self.record("INFER_RESPONSE_COMPLETE")
        self.record(f"{protocol}_SEND_START")

    def sent(self, protocol: str) -> None:
        """The frontend wrote the response: ``<protocol>_SEND_END``; it releases the trace."""
        self.record(f"{protocol}_SEND_END")
        self.release()

    def child(self) -> Trace:
        """A trace for a request this one's request makes (an ensemble step, a BLS call):
        its own id, this one as parent; held by the server (and holding its root) only
        once accepted."""
        levels = frozenset(
            name
            for name, on in (("TIMESTAMPS", self.with_timestamps), ("TENSORS", self.with_tensors))
            if on
        )
        return Trace(self.sink, levels, parent=self, held=False)

    def accepted(self, model_name: str, model_version: int | str, request: TracedRequest) -> None:
        """The server queued the request on a model version: REQUEST_START (when it was
        received), QUEUE_START (now) and, at level TENSORS, its inputs."""
        with self._lock:
            self._holds += 1
        if self.parent is not None:
            root = self.root
            with root._lock:
                root._holds += 1  # the root is written with its children
        self.model_name = model_name
        self.model_version = int(model_version)
        self.request_id = request.id
        self.record("REQUEST_START", request.received_ns)
        self.record("QUEUE_START")
        if self.with_tensors:
            for name, array in request.inputs.items():
                self._tensor("TENSOR_QUEUE_INPUT", name, array)

    def computed(self, start_ns: int, end_ns: int, compute_ns: tuple[int, int, int]) -> None:
        """An execution from ``start_ns`` to ``end_ns`` whose (input, infer, output)
        durations are ``compute_ns``: COMPUTE_START, COMPUTE_INPUT_END,
        COMPUTE_OUTPUT_START, COMPUTE_END."""
        self.record("COMPUTE_START", start_ns)
        self.record("COMPUTE_INPUT_END", start_ns + compute_ns[0])
        self.record("COMPUTE_OUTPUT_START", end_ns - compute_ns[2])
        self.record("COMPUTE_END", end_ns)

    def responded(self, response: TracedResponse | None, final: bool) -> None:
        """A response of the request was sent (any thread): its outputs at level TENSORS;
        the final one ends the request (REQUEST_END)."""
        if response is not None and self.with_tensors and response.error is None:
            for name, array in response.outputs.items():
                self._tensor("TENSOR_BACKEND_OUTPUT", name, array)
        if final:
            self.record("REQUEST_END")
            self.release()

    def release(self) -> None:
        """Drop one hold (the creator's once it is done with the trace, or the server's at
        the request's end); the last one sends the trace to its sink, or to its parent."""
        with self._lock:
            self._holds -= 1
            if self._holds:
                return
        if not self.model_name:
            return  # never reached a model (refused before queueing): nothing to report
        parent = self.parent
        if parent is None:
            self.sink.emit(self)
            return
        root = self.root
        with root._lock:
            root.children.append(self)
        root.release()

    def _tensor(self, activity: str, name: str, array: Any) -> None:
        array = np.asarray(to_host(array))
        datatype = datatype_of(array)
        shape = ",".join(str(d) for d in array.shape)
        self.tensors.append((activity, name, tensor_text(array, datatype), shape, datatype))


def tensor_text(array: np.ndarray, datatype: str) -> str:
    """A tensor's ``data`` as Triton writes it: elements joined by commas (floats as C++
    streams them, ``%g``; BYTES quoted; FP16/BF16 left empty, as Triton)."""
    if datatype in ("FP16", "BF16"):
        return ""
    flat = array.reshape(-1)
    if datatype == "BYTES":
        return ",".join(
            '"' + (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)) + '"'
            for v in flat
        )
    if datatype in ("FP32", "FP64"):
        return ",".join(f"{v:g}" for v in flat.tolist())
    if datatype == "BOOL":
        return ",".join("1" if v else "0" for v in flat.tolist())
    return ",".join(str(v) for v in flat.tolist())
