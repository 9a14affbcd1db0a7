"""The size a chunked body's chunks announce, for refusing one over
``--http-max-input-size`` before its bytes come.

httptools (llhttp) reports where a chunk's size line ends, not the size it states:
:class:`ChunkSizes` reads it from the bytes fed (the front's
:class:`~despina_frontend_http.h1_engine.H1Engine` calls it from its parser callbacks).
"""

from __future__ import annotations

import re

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
