"""A request body read chunk by chunk within ``--http-max-input-size``, inflated as it
comes when it has a ``Content-Encoding`` (gzip, deflate; identity is the body as is).

The limits and texts are the HTTP frontend's: a body whose (inflated) size passes the
limit is refused with its 413 as soon as it does, before more is read or inflated; an
encoding it cannot decode, or data that is not valid, is its 400 "failed to read the
request body: ...".
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterable

from despina import InvalidArgument
from despina_frontend_http.body import too_large

#: Output of one inflate step: a small compressed chunk never becomes much more than this
#: in memory before the limit is checked.
INFLATE_STEP = 1 << 18


def _undecodable(encoding: str) -> InvalidArgument:
    # the HTTP frontend's text (aiohttp's refusal wrapped by its body reader)
    return InvalidArgument(
        f"failed to read the request body: 400, message:\n  Can not decode content-encoding: "
        f"{encoding}"
    )


class _Inflater:
    """gzip or deflate (zlib-wrapped or raw, as HTTP clients send it), step by step."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._inflater: zlib._Decompress | None = (
            zlib.decompressobj(wbits=31) if encoding == "gzip" else None
        )

    def inflate(self, chunk: bytes, limit: int, size: int) -> list[bytes]:
        """The pieces ``chunk`` inflates to; PayloadTooLarge once ``size`` plus them pass
        ``limit``."""
        if self._inflater is None:  # deflate: a zlib header, else raw deflate
            raw = not chunk or (chunk[0] & 0x0F) != 8
            self._inflater = zlib.decompressobj(wbits=-15 if raw else 15)
        pieces: list[bytes] = []
        data: bytes = chunk
        try:
            while data:
                piece = self._inflater.decompress(data, INFLATE_STEP)
                size += len(piece)
                if size > limit:
                    raise too_large(limit)
                pieces.append(piece)
                data = self._inflater.unconsumed_tail
        except zlib.error:
            raise _undecodable(self.encoding) from None
        return pieces

    def finish(self) -> None:
        """InvalidArgument when the compressed data ended before its end."""
        if self._inflater is not None and not self._inflater.eof:
            raise _undecodable(self.encoding)


async def read_body(chunks: AsyncIterable[bytes], encoding: str | None, limit: int) -> bytes:
    """The whole body of ``chunks`` (inflated per ``encoding``, the request's
    Content-Encoding); PayloadTooLarge past ``limit`` bytes, read so far only."""
    coding = (encoding or "identity").strip().lower()
    if coding not in ("identity", "gzip", "deflate"):
        raise _undecodable(coding)
    inflater = _Inflater(coding) if coding != "identity" else None
    parts: list[bytes] = []
    size = 0
    received = False
    async for chunk in chunks:
        if not chunk:
            continue
        received = True
        pieces = [chunk] if inflater is None else inflater.inflate(chunk, limit, size)
        size += sum(len(piece) for piece in pieces)
        if size > limit:
            raise too_large(limit)
        parts.extend(pieces)
    if inflater is not None and received:
        inflater.finish()
    return b"".join(parts)
