"""gRPC call semantics over one connection's HTTP/2 engine: one task per call.

:class:`GrpcCalls` is the :class:`~despina_frontend_grpc.h2_engine.H2Handler` of a
connection's :class:`~despina_frontend_grpc.h2_engine.H2Engine`: a stream opened with
gRPC request headers becomes a call (unary or streaming) whose handler runs in its own
task; request messages are split and inflated (gzip, deflate) with
:mod:`~despina_frontend_grpc.grpc_framing`; ``grpc-timeout`` deadlines, message size
limits and restricted protocols end a call with its status, given by
``StatusCode`` name, in the trailers. A request that is not gRPC gets a bare HTTP
status (405, 415).

A compressed request message inflates on the event loop for its first
:data:`INLINE_INFLATE` bytes of output; a larger one finishes inflating in a worker
thread (zlib releases the GIL), checked against the size limit step by step as before,
so a compression bomb holds up only its own call, not the other clients'. While it
inflates its stream's credit is held back, and the call's later messages wait behind it.

Request memory: a call charges its messages to the server-wide budget
(``--max-inflight-request-bytes``, :class:`despina.BodyBudget`): a message not whole on
arrival its announced size once its length prefix is seen, a compressed one each inflated
step. A message the budget cannot take ends the call with RESOURCE_EXHAUSTED. A unary
call's charge is released when the call ends: its answer or error queued, or the call
reset, cancelled, expired or its connection gone; a streaming call gives a message's share
back when its handler takes the message, and the rest when the call ends.

Flow control: a stream's credit is returned as its bytes arrive, except while a streaming
call has :data:`INBOX_LIMIT` messages its handler has not taken (then a client that sends
without reading is held back); responses wait for the client's credit, and a streaming
call's next write waits while it has :data:`OUTBOX_LIMIT` bytes queued or the transport
is paused.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from despina import BodyBudget, BodyBudgetExhausted, BodyCharge, Inflation

from despina_frontend_grpc import grpc_framing as framing, h2_frames, rpc_dispatch
from despina_frontend_grpc.connection_limits import ConnectionLimits
from despina_frontend_grpc.errors import INTERNAL_TEXT
from despina_frontend_grpc.h2_engine import H2Engine, H2Stream
from despina_frontend_grpc.status import StatusCode

log = logging.getLogger("despina.frontend.grpc")

#: Messages a streaming call may hold untaken before its credit stops being returned.
INBOX_LIMIT = 64
#: Response bytes a streaming call may queue before its next write waits.
OUTBOX_LIMIT = 1 << 22
#: Output bytes of a compressed message inflated on the event loop; the rest of a larger
#: one inflates in a worker thread (one of :data:`INFLATE_THREADS`).
INLINE_INFLATE = 1 << 20
INFLATE_THREADS = min(4, os.cpu_count() or 1)

Route = tuple[rpc_dispatch.Method, Callable[..., Any]]
#: Triton's names of its inference handlers, which log a client's cancellation.
_INFER_HANDLERS = {"ModelInfer": "ModelInferHandler", "ModelStreamInfer": "ModelStreamInferHandler"}

#: gRPC status numbers for the trailers, by StatusCode name.
_OK = StatusCode.OK.value[0]
_DEADLINE_EXCEEDED = StatusCode.DEADLINE_EXCEEDED.value[0]
_RESOURCE_EXHAUSTED = StatusCode.RESOURCE_EXHAUSTED.value[0]
_UNIMPLEMENTED = StatusCode.UNIMPLEMENTED.value[0]
_UNAVAILABLE = StatusCode.UNAVAILABLE.value[0]
_INTERNAL = StatusCode.INTERNAL.value[0]
_INVALID = StatusCode.INVALID_ARGUMENT.value[0]


class CallServer(Protocol):
    """What calls need of their server."""

    routes: dict[str, Route]
    request_bodies: BodyBudget

    def refusal(self, path: str, metadata: tuple[tuple[str, Any], ...]) -> str | None: ...
    def inflater(self) -> ThreadPoolExecutor: ...


class Output(Protocol):
    """What calls need of the connection's transport adapter."""

    def flush_soon(self) -> None:
        """Write the engine's queued bytes soon (once per loop iteration)."""

    def half_close(self) -> None:
        """The connection drained: end our side of it."""


class Call(H2Stream):
    """One call: the stream's HTTP/2 state, what has arrived, and its task."""

    __slots__ = (
        "attributed",
        "body",
        "charge",
        "deadline",
        "encoding",
        "gzip",
        "head_charged",
        "headers_sent",
        "inbox",
        "inflating",
        "messages",
        "metadata",
        "route",
        "shares",
        "task",
        "writable",
    )

    def __init__(self, stream_id: int, send_window: int) -> None:
        super().__init__(stream_id, send_window)
        self.route: Route | None = None
        self.metadata: tuple[tuple[str, Any], ...] = ()
        self.encoding: str | None = None
        self.gzip = False
        self.body = bytearray()
        self.messages: list[bytes] = []
        self.inbox: asyncio.Queue[bytes | None] | None = None
        self.task: asyncio.Task[None] | None = None
        self.writable: asyncio.Event | None = None
        self.headers_sent = False
        self.deadline: asyncio.TimerHandle | None = None
        #: The request message inflating in a worker thread; later messages wait for it.
        self.inflating: Inflation | None = None
        #: The call's messages' bytes charged to the budget (created when first needed:
        #: at the headers of a compressed call, else for a message not whole on arrival).
        self.charge: BodyCharge | None = None
        #: The incomplete message at the start of ``body`` is charged.
        self.head_charged = False
        #: Streaming: the charge's share of each message in ``inbox``, and their sum.
        self.shares: deque[int] = deque()
        self.attributed = 0

    def holds_credit(self) -> bool:
        """While a message inflates, or a streaming call's inbox is full."""
        if self.inflating is not None:  # held back until the message is whole
            return True
        return self.inbox is not None and self.inbox.qsize() >= INBOX_LIMIT


class GrpcCalls:
    """The calls of one connection, over its engine (:attr:`engine`)."""

    def __init__(self, server: CallServer, limits: ConnectionLimits, output: Output) -> None:
        self.server = server
        self.limits = limits
        self.output = output
        self.loop = asyncio.get_running_loop()
        self.engine: H2Engine[Call] = H2Engine(self, Call, limits, self.loop.time)
        #: The transport asked us to stop writing.
        self.paused = False
        #: Tasks waiting for a message inflating in a worker thread.
        self.inflations: set[asyncio.Task[None]] = set()

    # --- the engine's events

    def stream_opened(self, stream: Call, headers: list[tuple[str, str]]) -> None:
        fields = dict(headers)
        if fields.get(":method") != "POST":
            self._refuse(stream, 405)
            return
        if not fields.get("content-type", "").startswith("application/grpc"):
            self._refuse(stream, 415)
            return
        stream.metadata = framing.call_metadata(headers)
        encoding = fields.get("grpc-encoding")
        if encoding not in (None, "identity", "gzip", "deflate"):
            self._finish(
                stream,
                _UNIMPLEMENTED,
                f"Compression algorithm '{encoding}' is not supported",
                framing.ACCEPT_ENCODING,
            )
            return
        stream.encoding = encoding
        if encoding in ("gzip", "deflate"):
            stream.charge = self.server.request_bodies.charge()
        stream.gzip = bool(self.limits.zlib_level) and "gzip" in fields.get(
            "grpc-accept-encoding", ""
        )
        path = fields.get(":path", "")
        route = self.server.routes.get(path)
        if route is None:
            self._finish(stream, _UNIMPLEMENTED, "Method not found!")
            return
        refusal = self.server.refusal(path, stream.metadata)
        if refusal is not None:
            self._finish(stream, _UNAVAILABLE, refusal)
            return
        stream.route = route
        timeout = fields.get("grpc-timeout")
        if timeout is not None:
            seconds = framing.timeout_seconds(timeout)
            if seconds is None:
                self._finish(stream, _INVALID, f"malformed grpc-timeout '{timeout}'")
                return
            stream.deadline = self.loop.call_later(seconds, self._expire, stream)
        method = route[0]
        if method.request_streaming or method.response_streaming:
            stream.inbox = asyncio.Queue()
            self._run(stream, self._streaming(stream))

    def stream_data(self, stream: Call, data: bytes) -> None:
        if not stream.finished:
            stream.body += data
            self._take_messages(stream)

    def stream_ended(self, stream: Call) -> None:
        if stream.finished:  # answered already; trailers may wait for credit
            return
        if stream.inflating is None:  # else _inflate goes on once the message is whole
            self._requests_ended(stream)

    def stream_sent(self, stream: Call) -> None:
        """Let a streaming call write again once its queue is short (or block it)."""
        full = self.paused or stream.outbox_size > OUTBOX_LIMIT
        if full and stream.writable is None:
            stream.writable = asyncio.Event()
        elif not full and stream.writable is not None:
            stream.writable.set()
            stream.writable = None

    def stream_closed(self, stream: Call, reset: bool) -> None:
        if stream.inflating is not None:
            stream.inflating.cancel()
        self._release(stream)
        if stream.deadline is not None:
            stream.deadline.cancel()
        if stream.writable is not None:
            stream.writable.set()
        if reset and stream.task is not None:
            handler = _INFER_HANDLERS.get(stream.route[0].name) if stream.route else None
            if handler is not None and not stream.task.done():
                # Triton's verbose line (its gRPC frontend; qa/L0_request_cancellation greps it)
                log.debug(
                    "Cancellation notification received for %s, rpc_ok=1, stream %d",
                    handler,
                    stream.id,
                )
            stream.task.cancel()

    def drained(self) -> None:
        self.output.half_close()

    # --- the transport's state

    def resume_writing(self) -> None:
        """The transport may be written again: wake the calls waiting to write."""
        self.paused = False
        for stream in list(self.engine.streams.values()):
            self.stream_sent(stream)

    def abort(self) -> None:
        """End every call still running with UNAVAILABLE, and cancel its task."""
        for stream in list(self.engine.streams.values()):
            self._finish(stream, _UNAVAILABLE, "the server is shutting down")
            self.engine.forget(stream, reset=True)

    def cancel_all(self) -> None:
        """The connection is gone: cancel every call and inflation."""
        for stream in list(self.engine.streams.values()):
            self.engine.forget(stream, reset=True)
        for task in list(self.inflations):
            task.cancel()

    # --- requests

    def _take_messages(self, stream: Call) -> None:
        """Hand the stream's complete request messages to its call; a compressed one
        that is large once inflated finishes inflating in a worker thread
        (:meth:`_inflate`), and the messages after it wait in ``stream.body``."""
        if stream.inflating is not None or stream.finished:
            return
        body = stream.body
        size = len(body)
        try:
            messages, pending = framing.take_messages(
                body, self.limits.max_receive, stream.encoding, INLINE_INFLATE, stream.charge
            )
            if len(body) < size:  # the first message is taken: a new one may start
                stream.head_charged = False
            if len(body) >= 5 and not stream.head_charged:
                self._charge_head(stream)
        except framing.MessageError as exc:
            self._finish(stream, exc.code.value[0], exc.details)
            return
        except BodyBudgetExhausted as exc:
            self._finish(stream, _RESOURCE_EXHAUSTED, str(exc))
            return
        self._deliver(stream, messages)
        if pending is not None:
            stream.inflating = pending
            task = self.loop.create_task(self._inflate(stream, pending))
            self.inflations.add(task)
            task.add_done_callback(self.inflations.discard)

    def _charge_head(self, stream: Call) -> None:
        """Charge the incomplete message at the start of the body its announced size
        (BodyBudgetExhausted when the budget cannot take it)."""
        if stream.charge is None:
            stream.charge = self.server.request_bodies.charge()
        stream.charge.add(5 + int.from_bytes(stream.body[1:5], "big"))
        stream.head_charged = True

    def _deliver(self, stream: Call, messages: list[bytes]) -> None:
        if stream.inbox is not None:
            for message in messages:
                # the charge not yet attributed goes with the first message delivered
                share = 0 if stream.charge is None else stream.charge.size - stream.attributed
                stream.attributed += share
                stream.shares.append(share)
                stream.inbox.put_nowait(message)
        else:
            stream.messages += messages

    def _taken(self, stream: Call) -> None:
        """A streaming call's handler took its next message: give its share back."""
        share = stream.shares.popleft()
        if share and stream.charge is not None:
            stream.attributed -= share
            stream.charge.give_back(share)

    def _release(self, stream: Call) -> None:
        """The call's messages no longer count: drop them and release their charge."""
        stream.body.clear()
        stream.messages.clear()
        if stream.charge is not None:
            stream.charge.release()

    async def _inflate(self, stream: Call, inflation: Inflation) -> None:
        """Finish inflating a message off the event loop, then go on with the stream."""
        try:
            whole = await self.loop.run_in_executor(
                self.server.inflater(), framing.finish, inflation
            )
        except framing.MessageError as exc:
            stream.inflating = None
            self._finish(stream, exc.code.value[0], exc.details)
            return
        except Exception:  # a bug here fails this call, not the connection
            log.exception("inflating a gRPC message failed")
            stream.inflating = None
            self._finish(stream, _INTERNAL, INTERNAL_TEXT)
            return
        stream.inflating = None
        if not whole or stream.finished:  # cancelled, reset, expired or connection gone
            return
        self._deliver(stream, [inflation.result()])
        self._take_messages(stream)
        if stream.inflating is None and not stream.finished:
            if stream.remote_closed:
                self._requests_ended(stream)
            else:
                self.engine.return_credit(stream)
        self.output.flush_soon()

    def _requests_ended(self, stream: Call) -> None:
        if stream.body:
            self._finish(stream, _INVALID, "the request ended inside a message")
        elif stream.inbox is not None:
            stream.inbox.put_nowait(None)
        elif len(stream.messages) != 1:
            self._finish(
                stream,
                _INVALID,
                f"a unary call needs one request message, got {len(stream.messages)}",
            )
        else:
            self._run(stream, self._unary(stream, stream.messages.pop()))

    # --- running calls

    def _run(self, stream: Call, call: Any) -> None:
        stream.task = task = self.loop.create_task(call)

        def done(_: Any) -> None:
            if not task.cancelled() and task.exception() is not None:
                log.error("gRPC call failed", exc_info=task.exception())
                self._finish(stream, _INTERNAL, INTERNAL_TEXT)

        task.add_done_callback(done)

    async def _unary(self, stream: Call, data: bytes) -> None:
        assert stream.route is not None
        method, handler = stream.route
        context = rpc_dispatch.CallContext(stream.metadata)
        code, reply = await rpc_dispatch.run_unary(handler, method, data, context)
        if code != rpc_dispatch.OK:
            self._finish(stream, code, reply.decode())
        elif self._send_message(stream, reply) is not False:
            self._finish(stream, _OK, "")

    async def _streaming(self, stream: Call) -> None:
        assert stream.route is not None and stream.inbox is not None
        method, handler = stream.route
        inbox = stream.inbox
        engine = self.engine
        output = self.output

        async def requests() -> Any:
            while (data := await inbox.get()) is not None:
                self._taken(stream)
                engine.return_credit(stream)
                output.flush_soon()
                yield data

        def send(data: bytes) -> Awaitable[Any] | None:
            if self._send_message(stream, data) is False:
                raise rpc_dispatch.Aborted(
                    StatusCode.RESOURCE_EXHAUSTED, _too_large(len(data), self.limits.max_send)
                )
            if stream.writable is not None and not stream.writable.is_set():
                return stream.writable.wait()
            return None

        context = rpc_dispatch.CallContext(stream.metadata, send)
        code, details = await rpc_dispatch.run_streaming(handler, method, requests(), context, send)
        self._finish(stream, code, details)

    def _expire(self, stream: Call) -> None:
        stream.deadline = None
        if stream.finished:
            return
        self._finish(stream, _DEADLINE_EXCEEDED, "Deadline Exceeded")
        if stream.task is not None:
            stream.task.cancel()
        self.output.flush_soon()

    # --- answering

    def _refuse(self, stream: Call, status: int) -> None:
        """Answer a request that is not gRPC with a bare HTTP status."""
        stream.finished = True
        self.engine.end_with_headers(stream, h2_frames.status(status))

    def _send_message(self, stream: Call, data: bytes) -> bool | None:
        """Queue one response message; False when it is over the size limit."""
        if stream.finished:
            return None
        if len(data) > self.limits.max_send:
            self._finish(stream, _RESOURCE_EXHAUSTED, _too_large(len(data), self.limits.max_send))
            return False
        if not stream.headers_sent:
            block = framing.GZIP_RESPONSE_HEADERS if stream.gzip else framing.RESPONSE_HEADERS
            self.engine.send_headers(stream.id, block, end_stream=False)
            stream.headers_sent = True
        self.engine.send_data(
            stream, framing.frame_message(data, self.limits.zlib_level, stream.gzip)
        )
        self.output.flush_soon()
        return None

    def _finish(self, stream: Call, code: int, details: str, extra: bytes = b"") -> None:
        """End a call with its status (after the messages still waiting for credit)."""
        if stream.finished:
            return
        stream.finished = True
        if stream.inflating is not None:
            stream.inflating.cancel()
        self._release(stream)
        if stream.deadline is not None:
            stream.deadline.cancel()
            stream.deadline = None
        if code == 0 and stream.headers_sent:
            block = framing.OK_TRAILERS
        else:
            block = framing.trailers(code, details, stream.headers_sent, extra)
        if stream.headers_sent:
            self.engine.send_trailers(stream, block)
        else:
            self.engine.end_with_headers(stream, block)
        self.output.flush_soon()


def _too_large(size: int, limit: int) -> str:
    return f"Sent message larger than max ({size} vs. {limit})"
