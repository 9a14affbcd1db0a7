"""One HTTP/1.1 server connection without I/O: bytes in, requests out, in order.

:class:`H1Engine` is given what a connection receives (:meth:`H1Engine.receive`) and
hands each request, parsed whole by httptools (llhttp), to its :class:`Handler`: at once
when nothing is ahead of it on the connection (:meth:`Handler.answer_at_once`), else in
turn (:meth:`Handler.answer_waiting`, then :meth:`H1Engine.next_waiting`), so answers
leave in request order (pipelining works). It keeps the connection's HTTP state: the
limits, keep-alive (``Connection: close``, HTTP/1.0), the refuse-then-linger close, the
drain, whether reading should pause; and it formats response heads. It does no I/O and
knows neither asyncio nor what a request asks for: the handler (the front's asyncio
protocol) writes, closes, pauses reading and keeps time. The handler is a plain callback
interface, called directly from the parser's callbacks: no event objects, no queue on
the way to the hot path.

Limits: a head (request line and headers together) over ``max_header_size`` is refused
(431) without more than the limit reaching the parser; a body over ``max_input_size``
(413) before it comes when its ``Content-Length`` or a chunk's size says so, else as it
passes the limit; a chunked body of more than :data:`MAX_CHUNKS` non-empty chunks (400,
newer Triton's cap and text, server #8770) before the next one is kept. ``Expect:
100-continue`` is answered before the body. A request that
does not parse is refused (400). A refusal before the body was read is answered in its
turn, then the connection stops writing and drops what the client still sends until it
closes (:meth:`Handler.linger`; closing on unread bytes would reset the connection and
lose the answer).

Draining (:meth:`H1Engine.drain`, as the server stops): the requests read meanwhile are
answered in turn (those read whole before the stop began run, :attr:`Incoming.read_ns`;
the server refuses later ones), the answer that leaves nothing read unanswered says
``Connection: close``, and the connection lingers after it. An idle
connection asks for a wait (:meth:`Handler.wait_idle`) for a request its client may be
sending already, then closes unless one began (:meth:`H1Engine.idle_over`).
"""

from __future__ import annotations

import collections
import http
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import httptools
import orjson
from despina import ascii_digits

from despina_frontend_http.framing import ChunkSizes

#: Requests a connection may have waiting before it stops reading.
MAX_WAITING = 16
#: Non-empty chunks a chunked request body may have (each is kept as one ``bytes``).
MAX_CHUNKS = 1 << 16
_TOO_MANY_CHUNKS = (
    f"Chunked request body exceeds maximum of {MAX_CHUNKS} non-empty chunks. "
    "Send fewer or larger HTTP chunks."
)
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_PHRASES = {status.value: status.phrase for status in http.HTTPStatus}
_UPGRADE_TOKENS = frozenset({b"upgrade", b"http2-settings"})
_JSON = {"Content-Type": "application/json"}


@dataclass(frozen=True, slots=True)
class Limits:
    """A listener's limits, and the texts refusing a request over them."""

    #: ``--http-max-header-size``: request line and headers together.
    max_header_size: int
    #: ``--http-max-input-size``: a request body.
    max_input_size: int
    #: The 431 answer's text.
    head_too_large: str
    #: The 413 answer's text.
    body_too_large: str


class Incoming:
    """One request as it is parsed."""

    __slots__ = (
        "begin_ns",
        "body",
        "chunk_count",
        "early_due",
        "head_bytes",
        "headers",
        "keep_alive",
        "method",
        "over_limit",
        "raw_headers",
        "read_ns",
        "refusal",
        "refusal_status",
        "size",
        "url",
        "version",
    )

    def __init__(self) -> None:
        self.url = b""
        self.raw_headers: list[tuple[bytes, bytes]] = []
        #: Header names lowercased; a repeated header's last value.
        self.headers: dict[str, str] = {}
        self.method = b""
        self.version = "1.1"
        self.keep_alive = True
        self.body: list[bytes] = []
        self.size = 0
        #: Chunk size lines read, the last (empty) chunk's included.
        self.chunk_count = 0
        self.head_bytes = 0
        #: The body is over the limit: refused (413), its bytes dropped.
        self.over_limit = False
        #: Answered before its body (413 or 100 Continue) once the requests ahead are.
        self.early_due = False
        #: Why the request could not be parsed (answered in its turn), else None.
        self.refusal: str | None = None
        #: The status answering :attr:`refusal`: 400, or 431 for a head over the limit.
        self.refusal_status = 400
        #: When its first byte came, taken only while tracing is on (else 0).
        self.begin_ns = 0
        #: When it was read whole, head and body (``time.monotonic_ns``; 0 until then):
        #: one read before the server began stopping runs (the server compares).
        self.read_ns = 0


class Answering(Protocol):
    """What answers a connection's requests now (a task, a pending answer)."""

    def cancel(self) -> object:
        """The connection is lost: stop answering."""


class Tracing(Protocol):
    """Whether requests are timed from their first byte (the server's tracer)."""

    active: bool


class Handler(Protocol):
    """What :class:`H1Engine` asks of the connection's owner. Each method is called
    from within an engine method (mostly :meth:`H1Engine.receive`)."""

    def send(self, parts: Sequence[bytes]) -> None:
        """Write ``parts`` to the client."""

    def close_now(self) -> None:
        """Close the connection (nothing is left unread that matters)."""

    def linger(self) -> None:
        """Stop writing (end the sending side where the transport can), read and drop
        what still comes, close when the client does or after a while."""

    def pause_reading(self) -> None:
        """Stop reading: too many requests wait."""

    def resume_reading(self) -> None:
        """Read again."""

    def wait_idle(self) -> None:
        """Call :meth:`H1Engine.idle_over` after the drain's idle wait (a pending call
        is replaced)."""

    def answer_at_once(self, incoming: Incoming) -> bool:
        """Nothing is ahead of ``incoming`` (read whole, within its limits): take it now,
        and answer it or set :attr:`H1Engine.answering`; False leaves it to wait in turn."""

    def answer_waiting(self) -> Answering:
        """Start answering the waiting requests (:meth:`H1Engine.next_waiting`) until
        none is left, then call :meth:`H1Engine.answer_early_due`; what answers them is
        :attr:`H1Engine.answering` until it sets that back to None."""


class H1Engine:
    """One connection's HTTP/1.1 state; ``handler`` does its I/O and answers."""

    def __init__(self, handler: Handler, limits: Limits, tracing: Tracing) -> None:
        self.handler = handler
        self.limits = limits
        self.max_header_size = limits.max_header_size
        self.max_input_size = limits.max_input_size
        self.tracing = tracing
        self.parser = httptools.HttpRequestParser(self)
        #: The request being parsed (or the last one parsed).
        self.current = Incoming()
        self.chunks = ChunkSizes()
        #: Requests read whole (or refused) and not answered, in order.
        self.waiting: collections.deque[Incoming] = collections.deque()
        #: What answers this connection's requests now, if anything.
        self.answering: Answering | None = None
        self.reading_paused = False
        #: The client reads slower than it is written to (set by the handler).
        self.write_blocked = False
        self.draining = False
        #: Bytes came since :meth:`_wait_idle`.
        self.heard = False
        #: A refusal ends the requests: what comes after it is dropped.
        self.parse_failed = False
        #: Closed, closing or lingering: nothing more is written.
        self.closed = False
        #: The parser is reading a request's line and headers (or waits for a request).
        self.in_head = True
        #: Bytes fed to the parser while :attr:`in_head`, since the head began.
        self.head_fed = 0
        #: A head passed the limit within a parser callback.
        self.head_over = False
        #: Heads read whole on this connection.
        self.heads = 0
        #: A request began and has not been read whole.
        self.mid_message = False

    # --- what the handler calls

    def receive(self, data: bytes) -> None:
        """Bytes from the client; ignored once closed or refused."""
        if self.closed or self.parse_failed:  # refused: dropped (see linger)
            return
        self.heard = True
        if self.in_head:  # a head being read: never more than the limit reaches the parser
            room = self.max_header_size - self.head_fed
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

    def lost(self) -> None:
        """The connection is gone: drop the waiting requests, cancel :attr:`answering`."""
        self.closed = True
        self.waiting.clear()
        if self.answering is not None:
            self.answering.cancel()

    def next_waiting(self) -> Incoming:
        """The first waiting request (there is one), taken from the queue; reading
        resumes when few are left."""
        incoming = self.waiting.popleft()
        if self.reading_paused and len(self.waiting) < MAX_WAITING // 2:
            self.reading_paused = False
            self.handler.resume_reading()
        return incoming

    def refuse(self, incoming: Incoming) -> None:
        """Answer a request refused in its turn (:attr:`Incoming.refusal`, or a body over
        the limit); after a refusal the connection lingers."""
        if incoming.refusal is not None:
            self.send_error(incoming, incoming.refusal_status, incoming.refusal)
            self.linger()
        else:
            self.send_error(incoming, 413, self.limits.body_too_large)

    def answer_early_due(self) -> None:
        """The requests ahead are answered: answer the one being read before its body,
        if it waits for that (:attr:`Incoming.early_due`)."""
        current = self.current
        if current.early_due and not self.closed:
            current.early_due = False
            self._answer_early(current)

    def answer_next(self) -> None:
        """The request answered outside :meth:`Handler.answer_waiting` is done (and
        :attr:`answering` None): start answering the ones that came meanwhile."""
        if self.waiting or self.current.early_due:
            self.answering = self.handler.answer_waiting()

    def stays_open(self, incoming: Incoming) -> bool:
        """Whether the answer to ``incoming`` leaves the connection open: the client keeps
        it alive, and it is not the last answer of a draining connection."""
        return incoming.keep_alive and not self.drained()

    def after_answer(self, stays_open: bool) -> bool:
        """After an answer that did (not ``stays_open``) or did not say ``Connection:
        close``: close then (lingering when draining); whether the connection closed.
        Draining, after an answer begun before the drain with nothing left to answer,
        wait as an idle connection does."""
        if not stays_open:
            if self.draining:
                self.linger()
            else:
                self.close()
            return True
        if self.drained():
            self._wait_idle()
        return False

    def head(
        self, incoming: Incoming, status: int, headers: Mapping[str, str], length: int | None
    ) -> bytes:
        """The head of the answer to ``incoming``: its HTTP version, ``headers``, a
        ``Content-Length``, and ``Connection: close`` when the connection closes after it
        (always after 413 and 431), ``Connection: keep-alive`` for HTTP/1.0 otherwise.
        A ``length`` of None is a body of unknown length: ``Transfer-Encoding: chunked``
        for HTTP/1.1; for HTTP/1.0 its end is the connection's (``Connection: close``)."""
        lines = [f"HTTP/{incoming.version} {status} {_PHRASES[status]}\r\n"]
        lines += [f"{key}: {value}\r\n" for key, value in headers.items()]
        if length is not None:
            lines.append(f"Content-Length: {length}\r\n")
        elif incoming.version != "1.0":
            lines.append("Transfer-Encoding: chunked\r\n")
        if (
            status in (413, 431)
            or not self.stays_open(incoming)
            or self.ends_stream(incoming, length)
        ):
            lines.append("Connection: close\r\n")
        elif incoming.version == "1.0":
            lines.append("Connection: keep-alive\r\n")
        lines.append("\r\n")
        return "".join(lines).encode("latin-1")

    def ends_stream(self, incoming: Incoming, length: int | None) -> bool:
        """Whether an answer of ``length`` (None: unknown) ends with the connection: one of
        unknown length to HTTP/1.0 (which has no chunked encoding)."""
        return length is None and incoming.version == "1.0"

    def send_error(self, incoming: Incoming, status: int, message: str) -> None:
        """Answer ``incoming`` with Triton's error body ``{"error": message}``."""
        if self.closed:
            return
        body = orjson.dumps({"error": message})
        self.handler.send([self.head(incoming, status, _JSON, len(body)), body])

    def drain(self) -> None:
        """The server is stopping: the requests read and arriving are answered, the last
        with ``Connection: close``, then the connection closes (lingering). An idle
        connection waits for one (:meth:`Handler.wait_idle`)."""
        if self.draining or self.closed:
            return
        self.draining = True
        if self.answering is None and not self.waiting:
            self._wait_idle()

    def drained(self) -> bool:
        """Closing at shutdown, and no request read is left to answer."""
        return self.draining and not self.waiting

    def idle_over(self) -> None:
        """The drain's idle wait passed: close unless a request began or is answered
        since it began."""
        if self.closed or self.heard or self.answering is not None or self.waiting:
            return
        if self.in_head and self.head_fed == 0:
            self.close()

    def close(self) -> None:
        """Close now."""
        self.closed = True
        self.handler.close_now()

    def linger(self) -> None:
        """Close after an answer the client may not have read yet: stop writing, drop
        what comes (reading again if paused) until the client closes."""
        self.closed = True
        if self.reading_paused:
            self.handler.resume_reading()
        self.handler.linger()

    # --- reading

    def _check_chunks(self, data: bytes) -> None:
        """After ``data`` was fed: 413 when the chunks announce a body over the limit."""
        chunks = self.chunks
        if chunks.reading or chunks.opened:
            incoming = self.current
            if chunks.announced(data, incoming.size) > self.max_input_size:
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
        self._bad_request(self.limits.head_too_large, 431)

    def _bad_request(self, message: str, status: int = 400) -> None:
        """A request that does not parse (400) or whose head is over the limit (431):
        answered after the answers before it, then the connection lingers."""
        incoming = Incoming()
        incoming.keep_alive = False
        incoming.refusal = message
        incoming.refusal_status = status
        self.parse_failed = True
        if self.answering is None and not self.waiting:
            self.refuse(incoming)
        else:
            self.waiting.append(incoming)

    def _count_head(self, size: int) -> None:
        self.current.head_bytes += size
        if self.current.head_bytes > self.max_header_size:
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
        self.receive(b"".join(head) + b"\r\n" + rest)

    def _too_large(self, incoming: Incoming) -> None:
        """``incoming``'s body is over the limit: refused (413) before the rest is read."""
        incoming.over_limit = True
        incoming.body.clear()
        self._early(incoming)

    def _too_many_chunks(self, incoming: Incoming) -> None:
        """``incoming``'s body has too many chunks: refused (400) before the rest is read,
        and the connection closes after the answer."""
        incoming.refusal = _TOO_MANY_CHUNKS
        incoming.keep_alive = False
        self._too_large(incoming)

    def _early(self, incoming: Incoming) -> None:
        """Answer ``incoming`` before its body (:meth:`_answer_early`): now, or once the
        requests before it are answered (responses stay in order)."""
        if self.answering is None and not self.waiting:
            self._answer_early(incoming)
        else:
            incoming.early_due = True

    def _answer_early(self, incoming: Incoming) -> None:
        """Before the body: refuse a body over the limit (413), else send 100 Continue."""
        if incoming.over_limit:
            if incoming.refusal is not None:
                self.send_error(incoming, incoming.refusal_status, incoming.refusal)
            else:
                self.send_error(incoming, 413, self.limits.body_too_large)
            self.linger()
        elif not self.closed:
            self.handler.send([_CONTINUE])

    def _wait_idle(self) -> None:
        """Draining with nothing to answer: close after the idle wait unless a request
        comes meanwhile (its client may be sending it already)."""
        self.heard = False
        self.handler.wait_idle()

    # --- httptools callbacks

    def on_message_begin(self) -> None:
        self.mid_message = True
        self.current = Incoming()
        self.in_head = True
        if self.tracing.active:
            self.current.begin_ns = time.monotonic_ns()

    def on_url(self, url: bytes) -> None:
        self.current.url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        current = self.current
        current.raw_headers.append((name, value))
        current.head_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if current.head_bytes > self.max_header_size:
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
        if length is not None and ascii_digits(length) and int(length) > self.max_input_size:
            incoming.over_limit = True
        expects = incoming.version == "1.1" and headers.get("expect", "").lower() == "100-continue"
        if incoming.over_limit or expects:
            self._early(incoming)

    def on_chunk_header(self) -> None:
        incoming = self.current
        self.chunks.header(incoming.size)
        incoming.chunk_count += 1
        # Only the last chunk is empty: a size line after MAX_CHUNKS + 1 of them shows
        # MAX_CHUNKS + 1 non-empty chunks.
        if incoming.chunk_count == MAX_CHUNKS + 2:
            self._too_many_chunks(incoming)

    def on_chunk_complete(self) -> None:
        self.chunks.between()

    def on_body(self, body: bytes) -> None:
        incoming = self.current
        if incoming.over_limit:
            return
        incoming.size += len(body)
        if incoming.size > self.max_input_size:
            self._too_large(incoming)
        else:
            incoming.body.append(body)

    def on_message_complete(self) -> None:
        self.mid_message = False
        self.in_head = True  # what follows is the next request's head
        self.chunks.end()
        incoming = self.current
        incoming.read_ns = time.monotonic_ns()
        incoming.early_due = False  # its body came: answered in turn
        if self.closed:
            return
        if (
            self.answering is None
            and not self.waiting
            and not self.write_blocked
            and not incoming.over_limit
            and not self.parser.should_upgrade()  # parsed again without the offer
            and self.handler.answer_at_once(incoming)
        ):
            return
        self.waiting.append(incoming)
        if len(self.waiting) >= MAX_WAITING and not self.reading_paused:
            self.reading_paused = True
            self.handler.pause_reading()
        if self.answering is None:
            self.answering = self.handler.answer_waiting()
