"""The HTTP/1.1 front (``--http-stack despina``, the default): the port's listener.

aiohttp's request machinery costs ~70 µs of the event loop per request on the 2-core
development host, more than the whole inference path of a small model. The front parses
every connection with httptools (llhttp) and serves the endpoint that carries the load,
``POST /v2/models/{m}[/versions/{v}]/infer`` without ``Content-Encoding``, itself through
:func:`~despina_frontend_http.routes_infer.start_infer`. Every other request is handed,
re-framed with a ``Content-Length``, to the aiohttp application's request handler over an
in-memory connection (:mod:`~despina_frontend_http.memory_pipe`: no socket, no system
call), which sees the client's address and TLS status; its response is relayed byte for
byte. So every endpoint keeps one implementation, and the hot one skips aiohttp.

An inference request with nothing ahead of it on its connection is submitted from the
parser's callback; when its model ran it within ``submit`` (a cheap model, see
:class:`~despina.scheduling.workers.DefaultScheduler`) it is answered there too, else from
its response stream's end callback (:class:`AnswerDue`): no task either way. A task
answers the requests that came meanwhile. A connection's requests are answered in order
(pipelining works); reading pauses while requests wait; a relayed response is read from
aiohttp only as fast as the client takes it.
Bodies are bounded by ``--http-max-input-size`` (413): a ``Content-Length`` or a chunk's
size over the limit is refused before the body comes, a chunked body as it passes the limit.
A client that disconnects cancels its running inference at once. A request refused before
its body is read (413, 400) gets its answer, then the connection stops writing and drops
what the client still sends until it closes (closing on unread bytes would reset the
connection and lose the answer).

Stopping (:meth:`Front.drain`, as the server begins to stop): the listener closes; on each
connection the answer that leaves nothing read unanswered says ``Connection: close``, and
the connection closes after it in the same staged way. An idle connection stays open
:data:`DRAIN_IDLE_S` for a request its client may be sending already (answered so), then
closes: a request is answered or never sent, not cut by the close.
"""

from __future__ import annotations

import asyncio
import collections
import http
import logging
import re
import ssl
import time
from typing import Any
from urllib.parse import unquote

import httptools
import orjson
from aiohttp import web
from despina import ascii_digits, stop_listening

from despina_frontend_http import memory_pipe
from despina_frontend_http.aioserver import (
    CLOSE_WAIT_S,
    DRAIN_IDLE_S,
    LINGER_S,
    head_too_large,
)
from despina_frontend_http.body import too_large
from despina_frontend_http.context import Context
from despina_frontend_http.framing import ChunkSizes
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

log = logging.getLogger("despina.http")

#: The inference path; anything else (and non-digit versions) goes to aiohttp.
INFER_PATH = re.compile(r"/v2/models/([^/]+)(?:/versions/([0-9]+))?/infer")
#: Requests a connection may have waiting before it stops reading.
MAX_WAITING = 16
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_PHRASES = {status.value: status.phrase for status in http.HTTPStatus}
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
_UPGRADE_TOKENS = frozenset({b"upgrade", b"http2-settings"})


class Incoming:
    """One request as it is parsed."""

    __slots__ = (
        "begin_ns",
        "body",
        "early_due",
        "head_bytes",
        "headers",
        "keep_alive",
        "method",
        "over_limit",
        "raw_headers",
        "refusal",
        "refusal_status",
        "size",
        "url",
        "version",
    )

    def __init__(self) -> None:
        self.url = b""
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.headers: dict[str, str] = {}
        self.method = b""
        self.version = "1.1"
        self.keep_alive = True
        self.body: list[bytes] = []
        self.size = 0
        self.head_bytes = 0
        self.over_limit = False
        self.early_due = False
        #: Why the request could not be parsed (answered in its turn), else None.
        self.refusal: str | None = None
        #: The status answering :attr:`refusal`: 400, or 431 for a head over the limit.
        self.refusal_status = 400
        #: When its first byte came, taken only while tracing is on (else 0).
        self.begin_ns = 0


class AnswerDue:
    """An inference answered from its stream's end callback. It holds the connection's
    turn meanwhile (:attr:`FrontConnection.task`), so the requests after it wait."""

    __slots__ = ("incoming", "started")

    def __init__(self, incoming: Incoming, started: Started) -> None:
        self.incoming = incoming
        self.started = started

    def cancel(self) -> None:
        """The client went away: cancel the inference (its answer is then dropped)."""
        self.started.request.cancel()


class FrontConnection(asyncio.Protocol):
    """One client connection."""

    def __init__(self, front: Front) -> None:
        self.front = front
        self.ctx = front.ctx
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.current = Incoming()
        self.chunks = ChunkSizes()
        self.waiting: collections.deque[Incoming] = collections.deque()
        #: What answers this connection's requests now, if anything.
        self.task: asyncio.Task[None] | AnswerDue | None = None
        self.link: AppLink | None = None
        self.reading_paused = False
        self.writable: asyncio.Event | None = None
        self.draining = False
        #: Bytes came since :meth:`_wait_idle`.
        self.heard = False
        self.idle_timer: asyncio.TimerHandle | None = None
        self.parse_failed = False
        self.closed = False
        #: The parser is reading a request's line and headers (or waits for a request).
        self.in_head = True
        #: Bytes fed to the parser while :attr:`in_head`, since the head began.
        self.head_fed = 0
        #: A head passed ``--http-max-header-size`` within a parser callback.
        self.head_over = False
        #: Heads read whole on this connection.
        self.heads = 0

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if len(self.front.connections) >= self.front.max_connections:
            self.closed = True  # over --http-max-connections: nothing read, closed now
            transport.close()
            return
        self.front.connections.add(self)
        if self.front.stopping:  # accepted as the listener closed
            self.drain()

    def data_received(self, data: bytes) -> None:
        if self.closed or self.parse_failed:  # refused: dropped (see _linger)
            return
        self.heard = True
        if self.in_head:  # a head being read: never more than the limit reaches the parser
            room = self.ctx.max_header_size - self.head_fed
            if len(data) > room:
                if not self._feed_head(data[: max(room, 0)]):
                    return
                data = data[room:]
            else:
                self.head_fed += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self._ignore_upgrade(data[exc.args[0] :])
        except httptools.HttpParserError as exc:
            self._parse_error(exc)
        else:
            self._check_chunks(data)

    def _check_chunks(self, data: bytes) -> None:
        """After ``data`` was fed: 413 when the chunks announce a body over the limit."""
        chunks = self.chunks
        if chunks.reading or chunks.opened:
            incoming = self.current
            if chunks.announced(data, incoming.size) > self.ctx.max_input_size:
                self._too_large(incoming)

    def _feed_head(self, head: bytes) -> bool:
        """Feed the bytes the head may still take; False (answered: 431 or 400) when the
        head did not end within them (one that began after another ended may go on), or
        a size line begun in them announces a body over the limit."""
        heads = self.heads
        try:
            self.parser.feed_data(head)
        except httptools.HttpParserUpgrade:
            pass  # the head ended (an upgrade offer): the rest is parsed again
        except httptools.HttpParserError as exc:
            self._parse_error(exc)
            return False
        if self.in_head and self.heads == heads:
            self._head_too_large()
            return False
        self._check_chunks(head)
        return not self.closed

    def _parse_error(self, exc: httptools.HttpParserError) -> None:
        if self.head_over:
            self._head_too_large()
        else:
            self._bad_request(f"malformed HTTP request: {exc}")

    def _head_too_large(self) -> None:
        self._bad_request(head_too_large(self.ctx.max_header_size), 431)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.front.connections.discard(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.waiting.clear()
        if self.task is not None:
            self.task.cancel()
        if self.link is not None:
            self.link.close()
        if self.writable is not None:
            self.writable.set()

    def pause_writing(self) -> None:
        self.writable = asyncio.Event()
        if self.link is not None:
            self.link.pause()

    def resume_writing(self) -> None:
        if self.writable is not None:
            self.writable.set()
            self.writable = None
        if self.link is not None:
            self.link.resume()

    # --- httptools callbacks

    def on_message_begin(self) -> None:
        self.current = Incoming()
        self.in_head = True
        if self.ctx.host.tracer.active:
            self.current.begin_ns = time.monotonic_ns()

    def on_url(self, url: bytes) -> None:
        self.current.url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        current = self.current
        current.raw_headers.append((name, value))
        current.head_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if current.head_bytes > self.ctx.max_header_size:
            self.head_over = True
            raise httptools.HttpParserError("request head too large")

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.head_fed = 0
        self.heads += 1
        incoming = self.current
        parser = self.parser
        incoming.method = parser.get_method()
        incoming.version = parser.get_http_version()
        incoming.keep_alive = parser.should_keep_alive()
        incoming.headers = headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in incoming.raw_headers
        }
        if "transfer-encoding" in headers:
            self.chunks.between()  # llhttp calls on_chunk_header if the body is chunked
        length = headers.get("content-length")
        if length is not None and ascii_digits(length) and int(length) > self.ctx.max_input_size:
            incoming.over_limit = True
        expects = incoming.version == "1.1" and headers.get("expect", "").lower() == "100-continue"
        if incoming.over_limit or expects:
            self._early(incoming)

    def on_chunk_header(self) -> None:
        self.chunks.header(self.current.size)

    def on_chunk_complete(self) -> None:
        self.chunks.between()

    def on_body(self, body: bytes) -> None:
        incoming = self.current
        if incoming.over_limit:
            return
        incoming.size += len(body)
        if incoming.size > self.ctx.max_input_size:
            self._too_large(incoming)
        else:
            incoming.body.append(body)

    def on_message_complete(self) -> None:
        self.in_head = True  # what follows is the next request's head
        self.chunks.end()
        incoming = self.current
        incoming.early_due = False  # its body came: answered in turn
        if self.closed:
            return
        if self.task is None and not self.waiting and self.writable is None:
            target = self._at_once_target(incoming)
            if target is not None:
                self._infer_at_once(incoming, *target)
                return
        self.waiting.append(incoming)
        if len(self.waiting) >= MAX_WAITING and self.transport is not None:
            self.transport.pause_reading()
            self.reading_paused = True
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._answer_waiting())

    # --- answering

    async def _answer_waiting(self) -> None:
        """Answer the waiting requests in order."""
        try:
            while not self.closed and self.waiting:
                if self.writable is not None:  # the client reads slower than it sends
                    await self.writable.wait()
                    continue
                incoming = self.waiting.popleft()
                if self.reading_paused and len(self.waiting) < MAX_WAITING // 2:
                    assert self.transport is not None
                    self.transport.resume_reading()
                    self.reading_paused = False
                keep_alive = await self._answer(incoming)
                if self.closed or self._close_after(keep_alive):
                    return
            if self.current.early_due and not self.closed:
                self.current.early_due = False
                self._answer_early(self.current)
        finally:
            self.task = None

    def _too_large(self, incoming: Incoming) -> None:
        """``incoming``'s body is over the limit: refused (413) before the rest is read."""
        incoming.over_limit = True
        incoming.body.clear()
        self._early(incoming)

    def _early(self, incoming: Incoming) -> None:
        """Answer ``incoming`` before its body (:meth:`_answer_early`): now, or once the
        requests before it are answered (responses stay in order)."""
        if self.task is None and not self.waiting:
            self._answer_early(incoming)
        else:
            incoming.early_due = True

    def _answer_early(self, incoming: Incoming) -> None:
        """Before the body: refuse a body over the limit (413), else send 100 Continue."""
        if incoming.over_limit:
            self._write_error(incoming, *failure(too_large(self.ctx.max_input_size), "body"))
            self._linger()
        else:
            self.write(_CONTINUE)

    async def _answer(self, incoming: Incoming) -> bool:
        """Answer one request; whether the connection stays open."""
        if incoming.refusal is not None:
            self._write_error(incoming, incoming.refusal_status, incoming.refusal)
            self._linger()
            return False
        if incoming.over_limit:
            self._write_error(incoming, *failure(too_large(self.ctx.max_input_size), "body"))
            return False
        target = infer_target(incoming.url) if incoming.method == b"POST" else None
        if target is None or "content-encoding" in incoming.headers:
            return await self._relay(incoming)
        await self._infer(incoming, *target)
        return self._stays_open(incoming)

    def _at_once_target(self, incoming: Incoming) -> tuple[str, str] | None:
        """(model, version) of a request :meth:`_infer_at_once` takes: an inference
        request needing no compression either way."""
        if incoming.refusal is not None or incoming.over_limit or incoming.method != b"POST":
            return None
        if self.parser.should_upgrade():  # parsed again without the offer: _ignore_upgrade
            return None
        headers = incoming.headers
        if "content-encoding" in headers or "accept-encoding" in headers:
            return None
        return infer_target(incoming.url)

    def _infer_at_once(self, incoming: Incoming, name: str, version: str) -> None:
        """Answer within this callback when the model ran the request within ``submit``,
        otherwise when its stream ends (:meth:`_answer_due`)."""
        started = self._start_infer(incoming, name, version)
        if started is not None:
            if not started.stream.ended:
                due = self.task = AnswerDue(incoming, started)
                started.stream.on_end(lambda: self._answer_due(due))
                return
            self._write_outcome(incoming, started)
        self._close_after(self._stays_open(incoming))

    def _answer_due(self, due: AnswerDue) -> None:
        """``due``'s stream ended: answer it, then serve the requests that came meanwhile
        (a task), or close."""
        if self.task is not due or self.closed:  # the client went away meanwhile
            return
        self.task = None
        incoming = due.incoming
        self._write_outcome(incoming, due.started)
        if self._close_after(self._stays_open(incoming)):
            return
        if self.waiting or self.current.early_due:
            self.task = asyncio.get_running_loop().create_task(self._answer_waiting())

    def _write_outcome(self, incoming: Incoming, started: Started) -> None:
        """Answer a request whose stream ended."""
        trace_sending(started)
        try:
            header, blobs = encode_outcome(self.ctx, started, started.stream.last_now())
        except Exception as exc:  # noqa: BLE001 - answered in Triton's error format
            self._write_error(incoming, *failure(exc, "infer"))
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
            self._write_error(incoming, *failure(exc, "infer"))
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
            self._write_error(incoming, *failure(exc, "infer"))
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
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def _write_response(
        self, incoming: Incoming, status: int, headers: dict[str, str], parts: list[Any]
    ) -> None:
        if self.transport is None or self.closed:
            return
        lines = [f"HTTP/{incoming.version} {status} {_PHRASES[status]}\r\n"]
        lines += [f"{key}: {value}\r\n" for key, value in headers.items()]
        lines.append(f"Content-Length: {sum(len(p) for p in parts)}\r\n")
        if status in (413, 431) or not self._stays_open(incoming):
            lines.append("Connection: close\r\n")
        elif incoming.version == "1.0":
            lines.append("Connection: keep-alive\r\n")
        lines.append("\r\n")
        self.transport.writelines([("".join(lines)).encode("latin-1"), *parts])

    def _write_error(self, incoming: Incoming, status: int, message: str) -> None:
        body = orjson.dumps({"error": message})
        self._write_response(incoming, status, {"Content-Type": "application/json"}, [body])

    def _bad_request(self, message: str, status: int = 400) -> None:
        """A request that does not parse (400) or whose head is over the limit (431):
        answered after the answers before it, then the connection closes."""
        incoming = Incoming()
        incoming.keep_alive = False
        incoming.refusal = message
        incoming.refusal_status = status
        self.parse_failed = True
        if self.task is None and not self.waiting:
            self._write_error(incoming, status, message)
            self._linger()
        else:
            self.waiting.append(incoming)

    def _count_head(self, size: int) -> None:
        self.current.head_bytes += size
        if self.current.head_bytes > self.ctx.max_header_size:
            self.head_over = True
            raise httptools.HttpParserError("request head too large")

    def _ignore_upgrade(self, rest: bytes) -> None:
        """Only HTTP/1.1 is spoken here: a request offering an upgrade (curl's h2c) was
        completed by the parser without its body; parse it again without the offer."""
        if self.closed or not self.waiting:
            return
        incoming = self.waiting.pop()
        head = [b"%s %s HTTP/%s\r\n" % (incoming.method, incoming.url, incoming.version.encode())]
        for name, value in incoming.raw_headers:
            lowered = name.lower()
            if lowered == b"connection":
                tokens = [t for t in value.split(b",") if t.strip().lower() not in _UPGRADE_TOKENS]
                value = b",".join(tokens)
            if value and lowered not in _UPGRADE_TOKENS:
                head.append(name + b": " + value + b"\r\n")
        self.parser = httptools.HttpRequestParser(self)
        self.data_received(b"".join(head) + b"\r\n" + rest)

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _linger(self) -> None:
        """Close after an answer the client may not have read yet (a refusal sent before
        the request was read, the last answer while draining): stop writing, drop what
        the client still sends until it closes or LINGER_S pass (closing on unread bytes
        would reset the connection and lose the answer)."""
        self.closed = True
        if self.transport is not None:
            if self.reading_paused:
                self.transport.resume_reading()
            if self.transport.can_write_eof():  # not over TLS: the linger closes it
                self.transport.write_eof()
            asyncio.get_running_loop().call_later(LINGER_S, self.transport.close)

    def _close_after(self, stays_open: bool) -> bool:
        """After an answer that did (not ``stays_open``) or did not say ``Connection:
        close``: close then (staged when draining); whether the connection closed.
        Draining, after an answer begun before the drain with nothing left to answer,
        wait as an idle connection does."""
        if not stays_open:
            if self.draining:
                self._linger()
            else:
                self._close()
            return True
        if self._drained():
            self._wait_idle()
        return False

    def _stays_open(self, incoming: Incoming) -> bool:
        """Whether the answer to ``incoming`` leaves the connection open: the client keeps
        it alive, and it is not the last answer of a draining connection."""
        return incoming.keep_alive and not self._drained()

    def drain(self) -> None:
        """The server is stopping: answer the requests read and arriving, the last with
        ``Connection: close``, then close (staged). An idle connection waits for one
        (:meth:`_wait_idle`)."""
        if self.draining or self.closed:
            return
        self.draining = True
        if self.task is None and not self.waiting:
            self._wait_idle()

    def _wait_idle(self) -> None:
        """Draining with nothing to answer: close in DRAIN_IDLE_S unless a request comes
        meanwhile (its client may be sending it already)."""
        self.heard = False
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        self.idle_timer = asyncio.get_running_loop().call_later(DRAIN_IDLE_S, self._close_if_idle)

    def _close_if_idle(self) -> None:
        """Close unless a request began or is answered since :meth:`_wait_idle`."""
        self.idle_timer = None
        if self.closed or self.heard or self.task is not None or self.waiting:
            return
        if self.in_head and self.head_fed == 0:
            self._close()

    def _drained(self) -> bool:
        """Closing at shutdown, and no request read is left to answer."""
        return self.draining and not self.waiting


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
        closing = self.client.draining and not self.client.waiting
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
        """Stop listening; every connection drains (:meth:`FrontConnection.drain`), and so
        does one accepted just before, as it is made."""
        self.stopping = True
        if self.listener is not None:
            stop_listening(self.listener, lambda: FrontConnection(self), self.ssl_context)
        for connection in list(self.connections):
            connection.drain()

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
