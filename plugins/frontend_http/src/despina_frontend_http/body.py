"""Reading request bodies within a size limit, and compressing response bodies.

aiohttp decompresses ``Content-Encoding`` bodies incrementally (bounded chunks), and
:func:`read_body` stops as soon as the decompressed body passes the limit, so neither a
chunked nor a compressed body can grow past ``--http-max-input-size`` in memory.
Despina's front reads what size each chunk announces (:class:`ChunkSizes`), so a chunk
over the limit is refused before its bytes come.
"""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Sequence
from concurrent.futures import Executor

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from despina import DespinaError, InvalidArgument

#: Bodies larger than this are (de)compressed in the executor, off the event loop.
OFFLOAD_BYTES = 256 * 1024
#: A chunk-size line's hex digits (leading zeros stripped beforehand), then the line's end,
#: an extension or whitespace, or the end of the bytes read so far.
_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]*)(?:[\t\r ;]|\Z)")
#: Bytes of a size line kept across reads: past 16 significant hex digits it is over any limit.
_LINE_KEPT = 32


class PayloadTooLarge(DespinaError):
    """The request body is over ``--http-max-input-size``."""

    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"
    triton_code = "INVALID_ARG"


def too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body exceeds the maximum allowed size of {limit} bytes; "
        "use --http-max-input-size to increase the limit"
    )


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


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole (decompressed) body; PayloadTooLarge past ``limit`` bytes, read so far only."""
    length = request.content_length
    if length is not None and length > limit and "Content-Encoding" not in request.headers:
        raise too_large(limit)
    content = request.content
    try:
        first = await content.readany()
        size = len(first)
        if size > limit:
            raise too_large(limit)
        if not first or content.at_eof():
            return first
        chunks = [first]
        while chunk := await content.readany():
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
    except (HttpProcessingError, RequestPayloadError) as exc:
        detail = exc.message if isinstance(exc, HttpProcessingError) else str(exc)
        raise InvalidArgument(f"failed to read the request body: {detail.strip()}") from None
    return b"".join(chunks)


def accepted_encoding(header: str | None) -> str | None:
    """ "gzip" or "deflate" when the client's Accept-Encoding allows it (Triton's two)."""
    if not header:
        return None
    offered = {part.split(";")[0].strip().lower() for part in header.split(",")}
    for encoding in ("gzip", "deflate"):
        if encoding in offered:
            return encoding
    return None


def _compress(parts: Sequence[bytes | memoryview], encoding: str) -> bytes:
    compressor = zlib.compressobj(wbits=31 if encoding == "gzip" else 15)
    out = [compressor.compress(part) for part in parts]
    out.append(compressor.flush())
    return b"".join(out)


async def compress(parts: Sequence[bytes | memoryview], encoding: str, executor: Executor) -> bytes:
    """Compress ``parts`` as one body; large bodies are compressed in ``executor``."""
    if sum(len(p) for p in parts) < OFFLOAD_BYTES:
        return _compress(parts, encoding)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, _compress, parts, encoding)
