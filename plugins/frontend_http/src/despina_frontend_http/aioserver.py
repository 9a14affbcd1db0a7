"""aiohttp's listening side with the frontend's limits (``--http-stack=aiohttp`` and the
worker processes): TLS, ``--http-max-connections``, ``--http-max-header-size``,
``--http-max-input-size`` for chunk sizes, and Triton's ``{"error": ...}`` JSON for
requests aiohttp cannot parse.

:class:`GuardedSite` is a ``TCPSite`` whose listener makes :class:`JsonErrorsHandler`
protocols, or, past the connection limit, a :class:`Refused` one that closes at once.
aiohttp's parser (llhttp) bounds each head line, not their sum, and does not report what
size a chunk announces: :class:`GuardedParser` has
:class:`~despina_frontend_http.framing.RequestFraming` follow the same bytes for both.

Stopping, :meth:`GuardedSite.drain` closes the listener and drains each connection as
Despina's front does: the next answer says ``Connection: close`` and the connection closes
after it (staged); an idle one waits :data:`DRAIN_IDLE_S` for a request its client may be
sending. (aiohttp's own shutdown closes idle keep-alive connections at once and sends
its last answers without ``Connection: close``.)
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.http_parser import HttpRequestParser, RawRequestMessage
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.web_protocol import RequestHandler

try:  # aiohttp's internal error record (3.9 to 3.14 at least): GuardedParser hands it on
    from aiohttp.web_protocol import _ErrInfo
except ImportError:  # pragma: no cover - a future aiohttp; the guard is then off
    _ErrInfo = None  # type: ignore[assignment, misc]
from aiohttp.web_request import BaseRequest
from despina import stop_listening

from despina_frontend_http.body import too_large
from despina_frontend_http.framing import OverLimit, RequestFraming

log = logging.getLogger("despina.http")

#: Seconds a refused connection reads and drops what its client still sends (both stacks).
LINGER_S = 5.0
#: Seconds an idle connection stays open once the server stops, for a request its client
#: may be sending already: answered with ``Connection: close``, not cut (both stacks).
DRAIN_IDLE_S = 0.5
#: Seconds the stop waits for draining connections to close before cutting them (both
#: stacks).
CLOSE_WAIT_S = 5.0
#: What aiohttp's parser returns: (messages, upgraded, the bytes after an upgrade).
Parsed = tuple[Sequence[tuple[Any, StreamReader]], bool, bytes]
_NOTHING: Parsed = ((), False, b"")


def head_too_large(limit: int) -> str:
    """The 431 answer's text (both stacks)."""
    return (
        f"request line and headers exceed {limit} bytes; "
        "use --http-max-header-size to increase the limit"
    )


def head_size(message: RawRequestMessage) -> int:
    """A parsed request's target and header lines, counted as Despina's front counts them
    (``name: value`` and CRLF)."""
    target = len(message.path.encode("utf-8", "surrogateescape"))
    return target + sum(len(name) + len(value) + 4 for name, value in message.raw_headers)


def handler_args(max_header_size: int) -> dict[str, int]:
    """aiohttp's parser settings for ``--http-max-header-size``: it bounds the request
    line and each header line (at most ``max_headers``, 128, of them); their sum is
    bounded beside it (:class:`GuardedParser`)."""
    return {"max_line_size": max_header_size, "max_field_size": max_header_size}


class GuardedParser:
    """aiohttp's request parser, with :class:`RequestFraming` following the same bytes.

    A request over a limit is not handed on: in its place comes an error aiohttp answers
    (:meth:`JsonErrorsHandler.handle_error`: 431, or 413 for chunks announcing a body over
    the limit), after the requests before it. A request handed on before its chunks went
    over has its payload fail with ``PayloadTooLarge`` (its handler answers 413) and end,
    and :attr:`refused` names it (its answer closes the connection). Either way nothing
    after it is parsed. On a connection that pipelines, the heads aiohttp parsed are
    counted (:func:`head_size`) before they are handed on.
    RequestFraming runs ahead of aiohttp's parser when that one paused (a full queue):
    a verdict waits until aiohttp reached the request it names.
    """

    __slots__ = ("done", "framing", "last", "over", "parser", "refused", "returned")

    def __init__(self, parser: HttpRequestParser, framing: RequestFraming) -> None:
        self.parser = parser
        self.framing = framing
        #: The request found over a limit, not yet refused.
        self.over: OverLimit | None = None
        #: Requests aiohttp's parser handed on, and the last one's payload.
        self.returned = 0
        self.last: StreamReader | None = None
        #: The payload refused with 413.
        self.refused: StreamReader | None = None
        #: A request was refused, or aiohttp's parser failed: nothing more is parsed.
        self.done = False

    def feed_data(self, data: bytes) -> Parsed:
        if self.done:
            return _NOTHING
        if self.over is not None:  # aiohttp's parser is behind: only what it kept is parsed
            return self._refuse(b"")
        if data:
            self.over = self.framing.feed(data)
            if self.over is not None:
                return self._refuse(data)
        parsed = self._feed(data)
        if parsed[0] and self.framing.pipelined:
            return self._count_heads(parsed)
        return parsed

    def _feed(self, data: bytes) -> Parsed:
        try:
            parsed: Parsed = self.parser.feed_data(data)
        except HttpProcessingError:  # aiohttp answers it, then closes
            self.done = True
            raise
        if parsed[0]:
            self.returned += len(parsed[0])
            self.last = parsed[0][-1][1]
        return parsed

    def _count_heads(self, parsed: Parsed) -> Parsed:
        """``parsed``, cut at the first request whose head is over the limit."""
        messages = parsed[0]
        before = self.returned - len(messages)
        limit = self.framing.max_header_size
        for index, (message, _) in enumerate(messages):
            if head_size(message) > limit:
                self.over = OverLimit(431, before + 1 + index)
                return self._cut(before, messages)
        return parsed

    def _refuse(self, data: bytes) -> Parsed:
        """Hand on the requests before :attr:`over`'s, then refuse it."""
        assert self.over is not None
        status, number = self.over
        before = self.returned
        if status == 413 and before >= number and self.last is not None:  # being read
            self.last.set_exception(too_large(self.framing.max_input_size))
            self.last.feed_eof()  # aiohttp does not linger on it
            self.refused, self.done = self.last, True
            return _NOTHING
        return self._cut(before, self._feed(data)[0] if before < number - 1 else ())

    def _cut(self, before: int, messages: Sequence[tuple[Any, StreamReader]]) -> Parsed:
        """The ``messages`` (numbered from ``before + 1``) ahead of :attr:`over`'s request,
        then, once all of those were handed on, an error in its place."""
        assert self.over is not None
        status, number = self.over
        kept = list(messages[: max(number - 1 - before, 0)])
        if self.returned >= number - 1:
            limits = self.framing
            text = (
                head_too_large(limits.max_header_size)
                if status == 431
                else str(too_large(limits.max_input_size))
            )
            error = HttpProcessingError(code=status, message=text)
            kept.append((_ErrInfo(status=status, exc=error, message=text), EMPTY_PAYLOAD))
            self.done = True
        return kept, False, b""

    # aiohttp's protocol calls these too

    def message_consumed(self) -> None:
        self.parser.message_consumed()

    def pause_reading(self) -> None:
        self.parser.pause_reading()

    def set_upgraded(self, val: bool) -> None:
        self.parser.set_upgraded(val)


_unguarded_warned = False


def _warn_unguarded() -> None:
    """Once: this aiohttp's internals differ from those GuardedParser wraps."""
    global _unguarded_warned
    _unguarded_warned = True
    log.warning(
        "aiohttp %s: its request parser cannot be wrapped; on the aiohttp stack and in "
        "worker processes the total head size and chunk sizes go unchecked (each line "
        "and the body stay bounded)",
        aiohttp.__version__,
    )


class ConnectionCount:
    """Open connections of one listener, against ``--http-max-connections``; and whether
    the listener drains (a connection made then drains at once)."""

    __slots__ = ("draining", "limit", "open")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.draining = False


class JsonErrorsHandler(RequestHandler):
    """aiohttp's protocol, answering what it cannot parse in Triton's JSON (431 for a
    request line or head over the limit), refusing a chunk over the body limit (413 and
    close, :class:`GuardedParser`), counting its connection; draining when the server
    stops (:meth:`drain`)."""

    __slots__ = (
        "_count",
        "_draining",
        "_guard",
        "_head_limit",
        "_heard",
        "_idle_timer",
        "_lingering",
    )

    def __init__(
        self, manager: web.Server, count: ConnectionCount, head_limit: int, input_limit: int
    ) -> None:
        super().__init__(
            manager,
            loop=asyncio.get_running_loop(),
            access_log=None,  # type: ignore[arg-type]  # aiohttp's way to turn it off
            max_line_size=head_limit,
            max_field_size=head_limit,
        )
        self._guard: GuardedParser | None = None
        parser = getattr(self, "_parser", None)
        if _ErrInfo is not None and isinstance(parser, HttpRequestParser):
            self._guard = GuardedParser(parser, RequestFraming(head_limit, input_limit))
            self._parser = self._guard  # type: ignore[assignment]  # feed_data and its calls
        elif not _unguarded_warned:
            _warn_unguarded()
        self._count = count
        self._head_limit = head_limit
        self._draining = False
        #: Bytes came since :meth:`_wait_idle`.
        self._heard = False
        self._idle_timer: asyncio.TimerHandle | None = None
        #: The transport :meth:`_linger` took from aiohttp.
        self._lingering: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._count.open += 1
        super().connection_made(transport)
        if self._count.draining:  # accepted as the listener closed
            self.drain()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._count.open -= 1
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._heard = True
        super().data_received(data)

    def drain(self) -> None:
        """The server is stopping: the answer that leaves no request queued says
        ``Connection: close``, and the connection closes after it (staged,
        :meth:`_linger`); idle, it waits for a request (:meth:`_wait_idle`)."""
        if self._draining or self.transport is None:
            return
        self._draining = True
        if not self._busy():
            self._wait_idle()

    def _busy(self) -> bool:
        """A request is being read (as far as :class:`GuardedParser` follows the bytes),
        answered, or waits (aiohttp's own state)."""
        framing = self._guard.framing if self._guard is not None else None
        reading = framing is not None and not (framing.in_head and framing.head_fed == 0)
        return reading or self._request_in_progress or bool(self._messages)

    def _wait_idle(self) -> None:
        """Draining with nothing to answer: close in DRAIN_IDLE_S unless a request comes
        meanwhile (its client may be sending it already)."""
        self._heard = False
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = self._loop.call_later(DRAIN_IDLE_S, self._close_if_idle)

    def _close_if_idle(self) -> None:
        self._idle_timer = None
        if not self._heard and not self._busy():
            self.force_close()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, LineTooLong):
            status, text = 431, head_too_large(self._head_limit)
        elif status in (413, 431) and message:  # refused by GuardedParser
            text = message
        elif status >= 500:
            log.error("HTTP request failed", exc_info=exc)
            text = "internal server error"
        else:
            text = f"malformed HTTP request: {message or status}"
        if request.writer.output_size > 0:  # the answer began: nothing more can be said
            raise ConnectionError("the response was already started")
        response = web.Response(
            status=status,
            body=orjson.dumps({"error": text}),
            # said even when aiohttp answers in HTTP/1.0 (a request it could not parse)
            headers={"Content-Type": "application/json", "Connection": "close"},
        )
        response.force_close()
        return response

    async def finish_response(
        self, request: BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        guard = self._guard
        if guard is not None and request.content is guard.refused:  # chunk over the limit
            resp.force_close()
        begun = resp.prepared  # a streamed answer: its head went out already
        if self._draining and not self._messages and not begun:
            resp.force_close()
        answered = await super().finish_response(request, resp, start_time)
        if not resp.keep_alive and (self._draining or (guard is not None and guard.done)):
            self._linger()
        elif self._draining and not self._messages:  # begun before the drain
            self._wait_idle()
        return answered

    async def shutdown(self, timeout: float | None = 15.0) -> None:
        """aiohttp's shutdown; then a lingering transport (no longer aiohttp's) closes."""
        await super().shutdown(timeout)
        if self._lingering is not None:
            self._lingering.close()

    def abort(self) -> None:
        """Cut the connection, lingering or not."""
        for transport in (self.transport, self._lingering):
            if transport is not None:
                transport.abort()

    def _linger(self) -> None:
        """After the answer to a refused request, or a draining connection's last answer:
        stop writing, and drop what the client still sends until it closes or LINGER_S
        pass (closing on unread bytes would reset the connection and lose the answer).
        aiohttp no longer sees the transport, nor parses what comes."""
        transport, self.transport = self.transport, None
        if transport is None:
            return
        self._lingering = transport
        self.close()
        if not transport.is_reading():
            transport.resume_reading()
        if transport.can_write_eof():  # not over TLS: the linger closes it
            transport.write_eof()
        self._loop.call_later(LINGER_S, transport.close)


class Refused(asyncio.Protocol):
    """A connection over ``--http-max-connections``: closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class GuardedSite(web.TCPSite):
    """A TCP site serving ``runner``'s application with :class:`JsonErrorsHandler`,
    ``--http-max-connections``, the head and body limits and an optional TLS context."""

    __slots__ = ("_count", "_head_limit", "_input_limit", "_protocol")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        max_connections: int,
        max_header_size: int,
        max_input_size: int,
        ssl_context: ssl.SSLContext | None = None,
        reuse_port: bool | None = None,
        backlog: int = 1024,
    ) -> None:
        super().__init__(
            runner, host, port, ssl_context=ssl_context, reuse_port=reuse_port, backlog=backlog
        )
        self._count = ConnectionCount(max_connections)
        self._head_limit = max_header_size
        self._input_limit = max_input_size
        self._protocol: Callable[[], asyncio.BaseProtocol] | None = None

    def drain(self) -> None:
        """Stop listening; every connection drains (:meth:`JsonErrorsHandler.drain`), and
        so does one accepted just before, as it is made."""
        self._count.draining = True
        if isinstance(self._server, asyncio.Server) and self._protocol is not None:
            stop_listening(self._server, self._protocol, self._ssl_context)
        server = self._runner.server
        for handler in server.connections if server is not None else ():
            if isinstance(handler, JsonErrorsHandler):
                handler.drain()

    async def drained(self, timeout: float) -> None:
        """Return once every connection closed; those still open after ``timeout``
        seconds (a request whose body never comes, a client that does not read) are cut,
        so that no handler is left waiting on its client (aiohttp's own shutdown would
        wait for it up to a minute)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._count.open and loop.time() < deadline:
            await asyncio.sleep(0.05)
        server = self._runner.server
        for handler in server.connections if server is not None else ():
            if isinstance(handler, JsonErrorsHandler):
                handler.abort()
        await asyncio.sleep(0)  # their connection_lost runs before aiohttp's shutdown

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        count, head_limit, input_limit = self._count, self._head_limit, self._input_limit

        def protocol() -> asyncio.BaseProtocol:
            if count.open >= count.limit:
                return Refused()
            return JsonErrorsHandler(server, count, head_limit, input_limit)

        self._protocol = protocol

        self._server = await asyncio.get_running_loop().create_server(
            protocol,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        self._bound_port = int(self._server.sockets[0].getsockname()[1])
