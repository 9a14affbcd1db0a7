"""Following requests' framing with httptools (llhttp) for the limits a parser does not
apply by itself: request line plus headers over ``--http-max-header-size`` (all lines
together), and a chunked body whose chunks announce more than ``--http-max-input-size``.

httptools reports where a chunk's size line ends, not the size it states:
:class:`ChunkSizes` reads it from the bytes fed (Despina's front uses it in its own
parser callbacks). :class:`RequestFraming` is a second httptools parser following a
connection whose requests another parser reads (aiohttp's, see
:class:`~despina_frontend_http.aioserver.GuardedParser`): it says which request went
over which limit.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import httptools

#: A chunk-size line's hex digits (leading zeros stripped beforehand), then the line's end,
#: an extension or whitespace, or the end of the bytes read so far.
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]*)(?:[\t\r ;]|\Z)")
#: Bytes of a size line kept across reads: past 16 significant hex digits it is over any limit.
_LINE_KEPT = 32


class ChunkSizes:
    """What the chunks of a chunked body announce, for a parser that does not report a
    chunk's size (httptools): read from the bytes given to each ``feed_data``.

    Call :meth:`between` when a chunked message's head or a chunk ends (``on_headers_complete``,
    ``on_chunk_complete``), :meth:`header` at ``on_chunk_header``, :meth:`end` at
    ``on_message_complete``, and :meth:`announced` after each ``feed_data`` that left one of
    :attr:`reading` or :attr:`opened` set.
    """

    __slots__ = ("line", "mark", "opened", "reading")

    def __init__(self) -> None:
        #: A size line is being read (the parser is between two chunks).
        self.reading = False
        #: A size line ended in the bytes being fed, and its chunk has not.
        self.opened = False
        #: Body bytes received before the opened chunk.
        self.mark = 0
        #: The start of the size line being read, from earlier ``feed_data`` calls.
        self.line = b""

    def between(self) -> None:
        self.reading, self.opened, self.line = True, False, b""

    def header(self, received: int) -> None:
        """A size line ended; ``received`` body bytes came before its chunk."""
        self.reading, self.opened, self.mark = False, True, received

    def end(self) -> None:
        self.reading = self.opened = False

    def announced(self, data: bytes, received: int) -> int:
        """The body size announced so far (``received`` bytes came, all of ``data`` fed):
        the complete chunks and the one whose size line ended in ``data`` or is still
        being read, whatever of it came."""
        if self.reading:  # the line runs from the last line feed to the end of data
            start = data.rfind(b"\n") + 1
            self.line = (data[start:] if start else self.line + data).lstrip(b"0")[:_LINE_KEPT]
            return received + _chunk_size(self.line)
        self.opened = False  # what follows the size line's line feed is the chunk's data
        end = len(data) - (received - self.mark) - 1
        start = data.rfind(b"\n", 0, max(end, 0)) + 1
        line = data[start:end] if start else self.line + data[: max(end, 0)]
        return self.mark + _chunk_size(line.lstrip(b"0")[:_LINE_KEPT])


def _chunk_size(line: bytes) -> int:
    """The size a (partial) size line states; 0 for what is not a size line (a trailer)."""
    match = _SIZE_LINE.match(line)
    return int(match[1], 16) if match and match[1] else 0


class OverLimit(NamedTuple):
    """A request over a limit: ``status`` 431 (its head) or 413 (its body); ``number``
    counts the connection's requests from 1."""

    status: int
    number: int


class RequestFraming:
    """httptools following one connection's bytes, as they come, keeping only counts:
    :meth:`feed` says when a head that begins a read outgrows ``max_header_size``, or
    chunks announce a body over ``max_input_size``.

    No more bytes than its limit of a head that begins a read are let through; a head
    that begins after a request ended in the same read sets :attr:`pipelined`, and is
    left to the other parser's count (its own line by line count would cost httptools a
    callback and two ``bytes`` per header). Whether a body is chunked is known at its
    first chunk or body byte: until then, what follows the head is read as a size line
    (a ``Content-Length`` body's first byte ends that). It stops following
    (:attr:`parser` None) at an upgrade offer or bytes it cannot parse, which the other
    parser answers its own way.
    """

    __slots__ = (
        "chunk_seen",
        "chunks",
        "head_fed",
        "heads",
        "in_head",
        "max_header_size",
        "max_input_size",
        "parser",
        "pipelined",
        "read_start",
        "received",
    )

    def __init__(self, max_header_size: int, max_input_size: int) -> None:
        self.max_header_size = max_header_size
        self.max_input_size = max_input_size
        self.parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self.chunks = ChunkSizes()
        #: Heads read whole: the number of the request whose body is being read.
        self.heads = 0
        #: The parser is reading a request's line and headers (or waits for a request).
        self.in_head = True
        #: Bytes fed while :attr:`in_head`, since the head began.
        self.head_fed = 0
        #: No request ended yet in the read being fed.
        self.read_start = True
        #: A head began after a request ended in the same read (pipelining).
        self.pipelined = False
        #: The body being read has had a chunk.
        self.chunk_seen = False
        #: Body bytes of the request being read.
        self.received = 0

    def feed(self, data: bytes) -> OverLimit | None:
        """Follow ``data``; the first request it takes over a limit, else None (also once
        it stopped following). Not to be called again after a request over a limit."""
        if self.parser is None:
            return None
        self.read_start = True
        if self.in_head:
            room = self.max_header_size - self.head_fed
            if len(data) > room:
                heads = self.heads
                over = self._follow(data[:room])
                if over is not None or self.parser is None:
                    return over
                if self.in_head and self.heads == heads:  # the head outgrew its limit
                    return OverLimit(431, heads + 1)
                data = data[room:]
            else:
                self.head_fed += len(data)
        return self._follow(data)

    def _follow(self, data: bytes) -> OverLimit | None:
        """Feed httptools (:attr:`parser` is None after an upgrade offer or an error);
        the request whose chunks ``data`` took over the limit, if any."""
        assert self.parser is not None
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserUpgrade, httptools.HttpParserError):
            self.parser = None
            return None
        chunks = self.chunks
        if (chunks.reading or chunks.opened) and chunks.announced(
            data, self.received
        ) > self.max_input_size:
            return OverLimit(413, self.heads)
        return None

    # --- httptools callbacks

    def on_message_begin(self) -> None:
        if not self.read_start:
            self.pipelined = True

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.head_fed = 0
        self.heads += 1
        self.received = 0
        self.chunk_seen = False
        self.chunks.between()  # a size line, unless a Content-Length body begins

    def on_chunk_header(self) -> None:
        self.chunk_seen = True
        self.chunks.header(self.received)

    def on_chunk_complete(self) -> None:
        self.chunks.between()

    def on_body(self, body: bytes) -> None:
        self.received += len(body)
        if not self.chunk_seen:  # a Content-Length body
            self.chunks.end()

    def on_message_complete(self) -> None:
        self.in_head = True  # what follows is the next request's head
        self.read_start = False
        self.chunks.end()
