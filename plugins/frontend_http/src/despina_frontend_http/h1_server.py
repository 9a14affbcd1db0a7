"""The HTTP/1.1 front: the HTTP port's listener.

The front parses every connection with httptools (llhttp) and answers each request
through its :class:`~despina_frontend_http.router.Router` (the v2 routes and the plugins'),
writing a :class:`~despina_frontend_http.router.StreamResponse` chunked as it comes. The
endpoint that carries the load, ``POST /v2/models/{m}[/versions/{v}]/infer`` without
``Content-Encoding`` or ``Accept-Encoding``, is the router's infer route taken on a fast
path: recognised by :func:`infer_target` and answered through
:func:`~despina_frontend_http.routes_infer.start_infer` without building a
:class:`~despina_frontend_http.router.Request`.

A connection's HTTP/1.1 rules (parsing, the head and body limits with their 431/413/400
refusals, keep-alive, answers in request order, the refuse-then-linger close, the drain)
are an :class:`~despina_frontend_http.h1_engine.H1Engine`, which does no I/O.
:class:`FrontConnection` is the asyncio protocol around it and the engine's
:class:`~despina_frontend_http.h1_engine.Handler`: it writes, pauses reading, keeps the
timers, and answers the requests the engine hands it. The engine calls it directly from
httptools' callbacks (a callback interface: no event object or queue per request).

An inference request with nothing ahead of it on its connection is submitted from the
parser's callback; when its model ran it within ``submit`` (a cheap model, see
:class:`~despina.scheduling.default_scheduler.DefaultScheduler`) it is answered there too, else from
its response stream's end callback (:class:`AnswerDue`): no task either way. A task
answers the requests that came meanwhile. A connection's requests are answered in order
(pipelining works); reading pauses while requests wait; a relayed response is read from
a stream only as fast as the client takes it. A client that disconnects cancels its
running inference at once. A request refused before its body is read (413, 400) gets its
answer, then the connection stops writing and drops what the client still sends until it
closes, or :data:`LINGER_S` pass.

Connections are counted by a :class:`~despina.transport.roster.Roster`: one that has not
sent a whole request head within ``--http-handshake-timeout-secs`` is closed; at
``--http-max-connections`` a new connection makes room (the oldest without a request yet
is closed, else the longest-idle keep-alive connection drains as below: a request its
client sends meanwhile is answered). When every connection is busy, the new one is
closed at once. Running out of descriptors pauses accepting briefly
(:class:`~despina.transport.listen.Listener`).

Stopping, as Triton's HTTP service: as the server begins to stop,
:meth:`Front.refuse_connections` closes the listener and the open connections are served
as before; the server waits for their clients to close them (within the exit timeout).
Once the models are unloaded, :meth:`Front.drain`: on each connection still open the
requests read whole before the models began to stop (pipelined behind the one answered)
have run and are answered in turn, later ones are refused ("Server is stopping"); the
answer that leaves nothing read unanswered says ``Connection: close``, and the connection
closes after it in the same staged way. The server's stop waits for them
(:attr:`Front.settled`) before the models unload. An idle connection stays open
:data:`DRAIN_IDLE_S` for a request its client may be sending already (answered so), then
closes: a request is answered or never sent, not cut by the close.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast
from urllib.parse import unquote

from despina import Listener, Roster, listen, stop_listening

from despina_frontend_http.body import too_large
from despina_frontend_http.context import Context
from despina_frontend_http.h1_engine import H1Engine, Incoming, Limits
from despina_frontend_http.limits import head_too_large
from despina_frontend_http.responses import failure
from despina_frontend_http.router import Request, Router, StreamResponse
from despina_frontend_http.routes_infer import (
    Started,
    encode_outcome,
    finish_infer,
    forwarded_headers,
    plain_parts,
    response_parts,
    start_infer,
    trace_sending,
    trace_sent,
)

#: Seconds a refused connection reads and drops what its client still sends.
LINGER_S = 5.0
#: Seconds an idle connection stays open once the server stops, for a request its client
#: may be sending already: answered with ``Connection: close``, not cut.
DRAIN_IDLE_S = 0.5
#: Seconds the stop waits for draining connections to close before cutting them.
CLOSE_WAIT_S = 5.0
#: The inference route's paths (:func:`~despina_frontend_http.routes_infer.routes`) as the
#: fast path recognises them; anything else (and non-digit versions) goes to the router.
INFER_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?/infer")
#: Request targets already parsed by :func:`infer_target` (clients repeat one or a few).
_TARGETS: dict[bytes, tuple[str, str] | None] = {}
_TARGETS_KEPT = 256
#: Loop steps from a socket's accept to its protocol's ``connection_made`` (asyncio's
#: accept task, then the transport's scheduled callback), with one to spare.
ACCEPT_STEPS = 3


def infer_target(url: bytes) -> tuple[str, str] | None:
    """(model, version) when ``url`` is the inference path, else None; remembered for
    the few URLs a client repeats."""
    try:
        return _TARGETS[url]
    except KeyError:
        pass
    match = INFER_PATH.fullmatch(url.partition(b"?")[0].decode("latin-1"))
    target = (unquote(match[1]), match[2] or "") if match else None
    if len(_TARGETS) < _TARGETS_KEPT:
        _TARGETS[url] = target
    return target


class AnswerDue:
    """An inference answered from its stream's end callback. It holds the connection's
    turn meanwhile (:attr:`H1Engine.answering`), so the requests after it wait."""

    __slots__ = ("incoming", "started")

    def __init__(self, incoming: Incoming, started: Started) -> None:
        self.incoming = incoming
        self.started = started

    def cancel(self) -> None:
        """The client went away: cancel the inference (its answer is then dropped)."""
        self.started.request.cancel()


class FrontConnection(asyncio.Protocol):
    """One client connection: the asyncio protocol and answers around its
    :class:`H1Engine` (whose :class:`~despina_frontend_http.h1_engine.Handler` it is)."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.ctx = front.ctx
        self.engine = H1Engine(self, front.limits, front.ctx.host.tracer)
        self.transport: asyncio.Transport | None = None
        #: The client's address (host, port), when the transport tells it.
        self.peer: tuple[str, int] | None = None
        self.writable: asyncio.Event | None = None
        self.idle_timer: asyncio.TimerHandle | None = None
        self.loop = asyncio.get_running_loop()
        #: The loop's time when the client last sent something (the roster's measure).
        self.heard = self.loop.time()
        #: A request head came (the roster heard of it).
        self.handshaken = False

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport: asyncio's, or uvloop's (not an asyncio.Transport subclass)
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = (peer[0], peer[1]) if isinstance(peer, tuple) else None
        if not self.front.roster.admit(self):
            self.engine.closed = True  # every connection busy: nothing read, closed now
            transport.close()
            return
        self.front.connections.add(self)
        if self.front.stopping:  # accepted as the listener closed
            self.engine.drain()

    def data_received(self, data: bytes) -> None:
        self.heard = self.loop.time()  # the loop kept: asking for it costs a getpid() call
        self.engine.receive(data)
        if not self.handshaken and self.engine.heads:
            self.handshaken = True
            self.front.roster.handshaken(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.engine.lost()
        self.front.connections.discard(self)
        self.front.roster.leave(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        if self.writable is not None:
            self.writable.set()

    def pause_writing(self) -> None:
        self.writable = asyncio.Event()
        self.engine.write_blocked = True

    def resume_writing(self) -> None:
        self.engine.write_blocked = False
        if self.writable is not None:
            self.writable.set()
            self.writable = None

    # --- the roster's questions

    def idle(self) -> bool:
        """No request being read, waiting or answered, nothing left to write, not
        closing or draining."""
        engine = self.engine
        return not (
            engine.mid_message
            or engine.waiting
            or engine.answering is not None
            or engine.closed
            or engine.draining
            or self.transport is None
            or self.transport.get_write_buffer_size()
        )

    def evict(self) -> None:
        """Make room: close at once before a first request head, else drain (closed after
        :data:`DRAIN_IDLE_S` unless a request comes, answered with ``Connection: close``)."""
        if self.engine.heads:
            self.engine.drain()
        else:
            self.engine.close()

    # --- the engine's Handler: I/O

    def send(self, parts: Sequence[bytes]) -> None:
        if self.transport is not None:
            self.transport.writelines(parts)

    def close_now(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def linger(self) -> None:
        """Drop what comes until the client closes, or LINGER_S pass (see :class:`H1Engine`)."""
        if self.transport is not None:
            if self.transport.can_write_eof():  # not over TLS: the linger closes it
                self.transport.write_eof()
            asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)

    def pause_reading(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    def wait_idle(self) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.idle_timer = asyncio.get_running_loop().call_later(DRAIN_IDLE_S, self._idle_over)

    def _idle_over(self) -> None:
        self.idle_timer = None
        self.engine.idle_over()

    # --- the engine's Handler: answering

    def answer_at_once(self, incoming: Incoming) -> bool:
        """Take an inference request needing no compression either way: answer it within
        this callback when the model ran it within ``submit``, otherwise when its stream
        ends (:meth:`_answer_due`)."""
        if incoming.method != b"POST" or not self.front.infer_fast_path:
            return False
        headers = incoming.headers
        if "content-encoding" in headers or "accept-encoding" in headers:
            return False
        target = infer_target(incoming.url)
        if target is None:
            return False
        engine = self.engine
        started = self._start_infer(incoming, *target)
        if started is not None:
            if not started.stream.ended:
                due = engine.answering = AnswerDue(incoming, started)
                started.stream.on_end(lambda: self._answer_due(due))
                return True
            self._write_outcome(incoming, started)
        engine.after_answer(engine.stays_open(incoming))
        return True

    def answer_waiting(self) -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(self._answer_in_turn())

    async def _answer_in_turn(self) -> None:
        """Answer the waiting requests in order."""
        engine = self.engine
        try:
            while not engine.closed and engine.waiting:
                if self.writable is not None:  # the client reads slower than it sends
                    await self.writable.wait()
                    continue
                keep_alive = await self._answer(engine.next_waiting())
                if engine.closed or engine.after_answer(keep_alive):
                    return
            engine.answer_early_due()
        finally:
            engine.answering = None

    async def _answer(self, incoming: Incoming) -> bool:
        """Answer one request; whether the connection stays open."""
        if incoming.refusal is not None or incoming.over_limit:
            self.engine.refuse(incoming)
            return False
        fast = incoming.method == b"POST" and self.front.infer_fast_path
        target = infer_target(incoming.url) if fast else None
        if target is None or "content-encoding" in incoming.headers:
            return await self._route(incoming)
        await self._infer(incoming, *target)
        return self.engine.stays_open(incoming)

    def _answer_due(self, due: AnswerDue) -> None:
        """``due``'s stream ended: answer it, then serve the requests that came meanwhile
        (a task), or close."""
        engine = self.engine
        if engine.answering is not due or engine.closed:  # the client went away meanwhile
            due.started.request.release_regions()
            return
        engine.answering = None
        incoming = due.incoming
        self._write_outcome(incoming, due.started)
        if not engine.after_answer(engine.stays_open(incoming)):
            engine.answer_next()

    def _write_outcome(self, incoming: Incoming, started: Started) -> None:
        """Answer a request whose stream ended."""
        trace_sending(started)
        try:
            header, blobs = encode_outcome(self.ctx, started, started.stream.last_now())
        except Exception as exc:  # noqa: BLE001 - answered in Triton's error format
            self.engine.send_error(incoming, *failure(exc, "infer"))
        else:
            self._write_response(incoming, 200, *plain_parts(header, blobs))
        trace_sent(started)

    async def _infer(self, incoming: Incoming, name: str, version: str) -> None:
        started = self._start_infer(incoming, name, version)
        if started is not None:
            await self._finish_infer(incoming, started)

    def _start_infer(self, incoming: Incoming, name: str, version: str) -> Started | None:
        """Submit the request; None once its error is written."""
        ctx = self.ctx
        headers = incoming.headers
        try:
            if ctx.restrictions.rules:
                ctx.restrictions.check("inference", headers)
            return start_infer(
                ctx,
                name,
                version,
                b"".join(incoming.body),
                headers.get("inference-header-content-length"),
                forwarded_headers(ctx, headers),
                headers,
                incoming.begin_ns,
                incoming.read_ns,
            )
        except Exception as exc:  # noqa: BLE001 - answered in Triton's error format
            self.engine.send_error(incoming, *failure(exc, "infer"))
            return None

    async def _finish_infer(self, incoming: Incoming, started: Started) -> None:
        ctx = self.ctx
        try:
            header, blobs = await finish_infer(ctx, started)
            trace_sending(started)
            response_headers, parts = await response_parts(
                header, blobs, incoming.headers.get("accept-encoding"), ctx.executor
            )
        except Exception as exc:  # noqa: BLE001 - answered in Triton's error format
            self.engine.send_error(incoming, *failure(exc, "infer"))
        else:
            self._write_response(incoming, 200, response_headers, parts)
        trace_sent(started)

    async def _route(self, incoming: Incoming) -> bool:
        """Answer through the router; whether the connection stays open."""
        answer = await self.front.router.handle(self._request(incoming))
        if isinstance(answer, StreamResponse):
            await self._write_stream(incoming, answer)
            return self.engine.stays_open(incoming) and not self.engine.ends_stream(incoming, None)
        parts = answer.parts
        if incoming.method == b"HEAD":  # the head says what GET would answer; no body
            self._write_head(incoming, answer.status, answer.headers, sum(map(len, parts)))
        else:
            self._write_response(incoming, answer.status, answer.headers, parts)
        return self.engine.stays_open(incoming)

    def _request(self, incoming: Incoming) -> Request:
        """The router's view of ``incoming``."""
        target = incoming.url.decode("utf-8", "replace").partition("#")[0]
        path, _, query = target.partition("?")
        return Request(
            incoming.method.decode("latin-1"),
            path,
            incoming.headers,
            b"".join(incoming.body),
            query,
            self.peer,
            self.front.ssl_context is not None,
            connected=self.connected,
            received_ns=incoming.begin_ns,
            read_ns=incoming.read_ns,
        )

    def connected(self) -> bool:
        """Whether the client is still connected."""
        return self.transport is not None and not self.transport.is_closing()

    # --- writing

    def _write_response(
        self, incoming: Incoming, status: int, headers: Mapping[str, str], parts: Sequence[Any]
    ) -> None:
        if self.transport is None or self.engine.closed:
            return
        head = self.engine.head(incoming, status, headers, sum(map(len, parts)))
        self.transport.writelines([head, *parts])

    def _write_head(
        self, incoming: Incoming, status: int, headers: Mapping[str, str], length: int | None
    ) -> None:
        if self.transport is not None and not self.engine.closed:
            self.transport.write(self.engine.head(incoming, status, headers, length))

    async def _write_stream(self, incoming: Incoming, answer: StreamResponse) -> None:
        """Write ``answer``'s chunks as they come (chunked, or until the close for
        HTTP/1.0), no faster than the client reads; closes them when the client goes."""
        chunked = incoming.version != "1.0"
        chunks = answer.chunks
        try:
            self._write_head(incoming, answer.status, answer.headers, None)
            async for chunk in chunks:
                if self.transport is None or self.engine.closed:
                    return
                if chunk:
                    framed = [b"%x\r\n" % len(chunk), chunk, b"\r\n"] if chunked else [chunk]
                    self.transport.writelines(framed)
                if self.writable is not None:  # the client reads slower than events come
                    await self.writable.wait()
            if chunked and self.transport is not None and not self.engine.closed:
                self.transport.write(b"0\r\n\r\n")
        finally:
            await chunks.aclose()


class Front:
    """The listener, answering through ``router``."""

    #: Whether ``POST /v2/models/{m}[/versions/{v}]/infer`` takes the inference fast
    #: path; False for a listener whose router serves no v2 inference (set before start).
    infer_fast_path = True

    def __init__(
        self,
        ctx: Context,
        router: Router,
        max_connections: int = 0,
        handshake_timeout: float = 0.0,
    ) -> None:
        self.ctx = ctx
        self.router = router
        #: ``--http-max-connections`` (0: no limit) and ``--http-handshake-timeout-secs``.
        self.roster: Roster[FrontConnection] = Roster(
            "HTTP",
            "--http-max-connections",
            max_connections,
            handshake_timeout,
            logging.getLogger("despina.http"),
        )
        #: Every connection's limits, and the texts refusing a request over them.
        self.limits: Limits = Limits(
            ctx.max_header_size,
            ctx.max_input_size,
            head_too_large(ctx.max_header_size),
            str(too_large(ctx.max_input_size)),
        )
        self.connections: set[FrontConnection] = set()
        self.listener: Listener | None = None
        self.ssl_context: ssl.SSLContext | None = None
        #: Set by :meth:`drain`: a connection made after it drains at once.
        self.stopping = False

    async def start(
        self, host: str, port: int, reuse_port: bool, ssl_context: ssl.SSLContext | None = None
    ) -> int:
        """Listen (over TLS with ``ssl_context``); the bound port (OSError)."""
        self.ssl_context = ssl_context
        try:
            self.listener = await listen(
                lambda: FrontConnection(self),
                host,
                port,
                reuse_port=reuse_port,
                backlog=1024,
                ssl_context=ssl_context,
                ssl_handshake_timeout=self.roster.handshake_timeout or None,
                make_room=self.roster.make_room,
            )
        except OSError:
            await self.stop()
            raise
        return int(self.listener.sockets[0].getsockname()[1])

    def refuse_connections(self) -> None:
        """Stop listening (a connection the kernel completed meanwhile is still served);
        the open connections are served as before."""
        if self.listener is not None:
            stop_listening(self.listener, lambda: FrontConnection(self), self.ssl_context)
            self.listener = None

    def drain(self) -> None:
        """Stop listening; every connection drains (:meth:`H1Engine.drain`), and so
        does one accepted just before, as it is made."""
        self.stopping = True
        self.roster.close()
        self.refuse_connections()
        for connection in list(self.connections):
            connection.engine.drain()

    @property
    def settled(self) -> bool:
        """No connection has a request read and not answered: a stopping server waits for
        this with its models' queues (a request waiting its turn is not submitted yet)."""
        engine = (c.engine for c in self.connections)
        return not any(e.waiting or e.answering is not None for e in engine)

    async def stop(self) -> None:
        """:meth:`drain` unless draining; wait for the connections to close, then close
        those still open after CLOSE_WAIT_S."""
        if not self.stopping:
            self.drain()
        for _ in range(ACCEPT_STEPS):  # a socket accepted just before reaches connection_made
            await asyncio.sleep(0)
        deadline = time.monotonic() + CLOSE_WAIT_S
        while self.connections:
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        for transport in [c.transport for c in self.connections]:
            if transport is not None:  # still open: answering too long, or never read
                transport.abort()
        await asyncio.sleep(0)  # their connection_lost runs before the loop may stop
