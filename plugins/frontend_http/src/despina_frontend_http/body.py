"""Request bodies within ``--http-max-input-size`` (inflated when they have a
``Content-Encoding``: gzip, deflate; identity is the body as is), and compressed
response bodies.

The front bounds what it receives by the limit before a body is whole; a body whose
inflated size passes the limit is refused with the 413 as soon as it does, before more is
inflated. An encoding that cannot be decoded, or data that is not valid, is the 400
"failed to read the request body: ..." (the text Despina answered when aiohttp inflated).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterable, Mapping, Sequence
from concurrent.futures import Executor

from despina import DespinaError, InvalidArgument

#: Bodies larger than this are (de)compressed in the executor, off the event loop.
OFFLOAD_BYTES = 256 * 1024
#: Output of one inflate step: a small compressed chunk never becomes much more than this
#: in memory before the limit is checked.
INFLATE_STEP = 1 << 18


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


def _undecodable(encoding: str) -> InvalidArgument:
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


def read_body(body: bytes, headers: Mapping[str, str], limit: int) -> bytes:
    """``body`` inflated per ``headers``' Content-Encoding (lower-cased names);
    PayloadTooLarge past ``limit`` bytes, inflated so far only."""
    coding = headers.get("content-encoding", "identity").strip().lower() or "identity"
    if coding == "identity":
        if len(body) > limit:
            raise too_large(limit)
        return body
    if coding not in ("gzip", "deflate"):
        raise _undecodable(coding)
    if not body:
        return body
    inflater = _Inflater(coding)
    pieces = inflater.inflate(body, limit, 0)
    inflater.finish()
    return b"".join(pieces)


async def read_limited(chunks: AsyncIterable[bytes], limit: int) -> bytes:
    """The bytes of ``chunks`` joined; PayloadTooLarge as soon as they pass ``limit`` (for
    a host reading a body from its own server)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        parts.append(chunk)
    return b"".join(parts)


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
