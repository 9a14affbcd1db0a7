"""Reading request bodies within a size limit, and compressing response bodies.

The front bounds what it receives by ``--http-max-input-size`` (a chunk announcing more
is refused before its bytes come) and relays a body to the aiohttp application with a
``Content-Length``. aiohttp decompresses ``Content-Encoding`` bodies incrementally
(bounded chunks), and :func:`read_body` stops as soon as the decompressed body passes its
limit, so a compressed body cannot grow past it in memory either.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence
from concurrent.futures import Executor

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError
from despina import DespinaError, InvalidArgument

#: Bodies larger than this are (de)compressed in the executor, off the event loop.
OFFLOAD_BYTES = 256 * 1024


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
