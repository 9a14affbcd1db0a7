"""The HTTP/1.1 front: the HTTP port's listener.

aiohttp's request machinery costs ~70 µs of the event loop per request on the 2-core
development host, more than the whole inference path of a small model. The front parses
every connection with httptools (llhttp) and serves the endpoint that carries the load,
``POST /v2/models/{m}[/versions/{v}]/infer`` without ``Content-Encoding``, itself through
:func:`~despina_frontend_http.routes_infer.start_infer`. Every other request is handed,
re-framed with a ``Content-Length``, to the aiohttp application's request handler over an
in-memory connection (:mod:`~despina_frontend_http.memory_pipe`: no socket, no system
call), which sees the client's address and TLS status; its response is relayed byte for
byte. So every endpoint keeps one implementation, and the hot one skips aiohttp.

A connection's HTTP/1.1 rules (parsing, the head and body limits with their 431/413/400
refusals, keep-alive, answers in request order, the refuse-then-linger close, the drain)
are an :class:`~despina_frontend_http.h1_engine.H1Engine`, which does no I/O.
:class:`FrontConnection` is the asyncio protocol around it and the engine's
:class:`~despina_frontend_http.h1_engine.Handler`: it writes, pauses reading, keeps the
timers, and answers the requests the engine hands it. The engine calls it directly from
httptools' callbacks (a callback interface: no event object or queue per request).

An inference request with nothing ahead of it on its connection is submitted from the
parser's callback; when its model ran it within ``submit`` (a cheap model, see
:class:`~despina.scheduling.workers.DefaultScheduler`) it is answered there too, else from
its response stream's end callback (:class:`AnswerDue`): no task either way. A task
answers the requests that came meanwhile. A connection's requests are answered in order
(pipelining works); reading pauses while requests wait; a relayed response is read from
aiohttp only as fast as the client takes it. A client that disconnects cancels its
running inference at once. A request refused before its body is read (413, 400) gets its
answer, then the connection stops writing and drops what the client still sends until it
closes, or :data:`LINGER_S` pass.

Stopping (:meth:`Front.drain`, as the server begins to stop): the listener closes; on each
connection the answer that leaves nothing read unanswered says ``Connection: close``, and
the connection closes after it in the same staged way. An idle connection stays open
:data:`DRAIN_IDLE_S` for a request its client may be sending already (answered so), then
closes: a request is answered or never sent, not cut by the close.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import httptools
from aiohttp import web
from despina import stop_listening

from despina_frontend_http import memory_pipe
from despina_frontend_http.body import too_large
from despina_frontend_http.context import Context
from despina_frontend_http.h1_engine import H1Engine, Incoming, Limits
from despina_frontend_http.limits import head_too_large
from despina_frontend_http.responses import failure
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
#: The inference path; anything else (and non-digit versions) goes to aiohttp.
INFER_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?/infer")
#: Request targets already parsed by :func:`infer_target` (clients repeat one or a few).
_TARGETS: dict[bytes, tuple[str, str] | None] = {}
_TARGETS_KEPT = 256
#: What the application's side of a link tells of its client's connection (``peername``
#: for ``request.remote``, ``sslcontext`` for ``request.secure``...).
CLIENT_INFO = ("peername", "sockname", "sslcontext", "ssl_object", "peercert", "cipher")
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


_HOP_BY_HOP = frozenset({b"content-length", b"transfer-encoding", b"expect"})
#: What a draining connection's last relayed request drops: it goes as ``Connection: close``.
_CLOSING_HOP_BY_HOP = _HOP_BY_HOP | {b"connection", b"keep-alive"}


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
        self.link: AppLink | None = None
        self.writable: asyncio.Event | None = None
        self.idle_timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if len(self.front.connections) >= self.front.max_connections:
            self.engine.closed = True  # over --http-max-connections: nothing read, closed now
            transport.close()
            return
        self.front.connections.add(self)
        if self.front.stopping:  # accepted as the listener closed
            self.engine.drain()

    def data_received(self, data: bytes) -> None:
        self.engine.receive(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.engine.lost()
        self.front.connections.discard(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        if self.link is not None:
            self.link.close()
        if self.writable is not None:
            self.writable.set()

    def pause_writing(self) -> None:
        self.writable = asyncio.Event()
        self.engine.write_blocked = True
        if self.link is not None:
            self.link.pause()

    def resume_writing(self) -> None:
        self.engine.write_blocked = False
        if self.writable is not None:
            self.writable.set()
            self.writable = None
        if self.link is not None:
            self.link.resume()

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
        if incoming.method != b"POST":
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
        target = infer_target(incoming.url) if incoming.method == b"POST" else None
        if target is None or "content-encoding" in incoming.headers:
            return await self._relay(incoming)
        await self._infer(incoming, *target)
        return self.engine.stays_open(incoming)

    def _answer_due(self, due: AnswerDue) -> None:
        """``due``'s stream ended: answer it, then serve the requests that came meanwhile
        (a task), or close."""
        engine = self.engine
        if engine.answering is not due or engine.closed:  # the client went away meanwhile
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

    async def _relay(self, incoming: Incoming) -> bool:
        """Have the aiohttp application answer; its bytes go to the client as they come."""
        if self.link is None or self.link.closed:
            self.link = self.front.open_link(self)
        return await self.link.exchange(incoming)

    # --- writing

    def write(self, data: bytes) -> None:
        """Relayed bytes, unless the connection is closing."""
        if self.transport is not None and not self.engine.closed:
            self.transport.write(data)

    def _write_response(
        self, incoming: Incoming, status: int, headers: dict[str, str], parts: list[Any]
    ) -> None:
        if self.transport is None or self.engine.closed:
            return
        head = self.engine.head(incoming, status, headers, sum(len(p) for p in parts))
        self.transport.writelines([head, *parts])


class AppLink(asyncio.Protocol):
    """One front connection's connection to the in-process aiohttp application."""

    def __init__(self, client: FrontConnection) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.done: asyncio.Future[bool] | None = None
        self.head_only = False
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.client.write(data)
        if self.client.writable is not None:  # a slow client holds the relay back
            self.pause()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._finish(False)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.client.front.links.discard(self)
        self._finish(False)

    def on_headers_complete(self) -> None:
        if self.head_only:  # a response to HEAD has no body, whatever its headers say
            self._finish(self.parser.should_keep_alive())

    def on_message_complete(self) -> None:
        self._finish(self.parser.should_keep_alive())

    def _finish(self, keep_alive: bool) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(keep_alive)

    async def exchange(self, incoming: Incoming) -> bool:
        """Send one request; True when its response ended and both sides stay open. The
        last request of a draining connection goes as ``Connection: close``, so that the
        application's answer says so."""
        assert self.transport is not None
        self.done = asyncio.get_running_loop().create_future()
        self.head_only = incoming.method == b"HEAD"
        self.parser = httptools.HttpResponseParser(self)
        body = b"".join(incoming.body)
        closing = self.client.engine.drained()
        skipped = _CLOSING_HOP_BY_HOP if closing else _HOP_BY_HOP
        head = [b"%s %s HTTP/%s\r\n" % (incoming.method, incoming.url, incoming.version.encode())]
        head += [
            name + b": " + value + b"\r\n"
            for name, value in incoming.raw_headers
            if name.lower() not in skipped
        ]
        if closing:
            head.append(b"Connection: close\r\n")
        head.append(b"Content-Length: %d\r\n\r\n" % len(body))
        self.transport.writelines([*head, body])
        keep_alive = await self.done
        if not keep_alive:
            self.close()
        return keep_alive and incoming.keep_alive

    def pause(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Front:
    """The listener, and the aiohttp application it relays to."""

    def __init__(self, ctx: Context, app: web.Application, max_connections: int = 1 << 62) -> None:
        self.ctx = ctx
        self.app = app
        #: ``--http-max-connections``: a connection beyond it is closed at once.
        self.max_connections = max_connections
        #: Every connection's limits, and the texts refusing a request over them.
        self.limits = Limits(
            ctx.max_header_size,
            ctx.max_input_size,
            head_too_large(ctx.max_header_size),
            str(too_large(ctx.max_input_size)),
        )
        self.connections: set[FrontConnection] = set()
        self.links: set[AppLink] = set()
        self.runner: web.AppRunner | None = None
        self.listener: asyncio.Server | None = None
        self.ssl_context: ssl.SSLContext | None = None
        #: Set by :meth:`drain`: a connection made after it drains at once.
        self.stopping = False

    async def start(
        self, host: str, port: int, reuse_port: bool, ssl_context: ssl.SSLContext | None = None
    ) -> int:
        """Set the application up, then listen (over TLS with ``ssl_context``); the bound
        port (OSError)."""
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.runner.setup()
        self.ssl_context = ssl_context
        loop = asyncio.get_running_loop()
        try:
            self.listener = await loop.create_server(
                lambda: FrontConnection(self),
                host or None,
                port,
                reuse_port=reuse_port or None,
                backlog=1024,
                ssl=ssl_context,
            )
        except OSError:
            await self.stop()
            raise
        return int(self.listener.sockets[0].getsockname()[1])

    def open_link(self, client: FrontConnection) -> AppLink:
        """A new in-memory connection from ``client`` to the application's request
        handler, which sees the client's address and TLS status (:data:`CLIENT_INFO`)."""
        assert self.runner is not None and self.runner.server is not None
        assert client.transport is not None
        info = {key: client.transport.get_extra_info(key) for key in CLIENT_INFO}
        link = AppLink(client)
        memory_pipe.connect(link, self.runner.server(), b_extra=info)
        self.links.add(link)
        return link

    def drain(self) -> None:
        """Stop listening; every connection drains (:meth:`H1Engine.drain`), and so
        does one accepted just before, as it is made."""
        self.stopping = True
        if self.listener is not None:
            stop_listening(self.listener, lambda: FrontConnection(self), self.ssl_context)
        for connection in list(self.connections):
            connection.engine.drain()

    async def stop(self) -> None:
        """:meth:`drain` unless draining; wait for the connections to close, then close
        those still open after CLOSE_WAIT_S, and the application."""
        if not self.stopping:
            self.drain()
        for _ in range(ACCEPT_STEPS):  # a socket accepted just before reaches connection_made
            await asyncio.sleep(0)
        deadline = time.monotonic() + CLOSE_WAIT_S
        while self.connections or self.links:  # a closed link's last callback runs too
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.05)
        for transport in [c.transport for c in self.connections] + [
            link.transport for link in self.links
        ]:
            if transport is not None:  # still open: answering too long, or never read
                transport.abort()
        await asyncio.sleep(0)  # their connection_lost runs before the loop may stop
        if self.runner is not None:
            await self.runner.cleanup()
