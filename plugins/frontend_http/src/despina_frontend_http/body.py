"""Request bodies within ``--http-max-input-size`` (inflated when they have a
``Content-Encoding``: gzip, deflate; identity is the body as is), and compressed
response bodies.

The front bounds what it receives by the limit before a body is whole; a compressed body
inflates with :class:`despina.Inflation` in bounded steps: one whose inflated size passes
the limit (or whose gzip trailer announces more) is refused with the 413 as soon as it
does, before more is inflated, and its inflated bytes count against the server-wide
``--max-inflight-request-bytes`` from the first step until the route's handler returns
(503 with ``Retry-After`` while other bodies hold the budget). An encoding that cannot be decoded, or data that is not valid, is the 400
"failed to read the request body: ..." (the text Despina answered when aiohttp inflated).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterable, Sequence
from concurrent.futures import Executor

from despina import (
    BodyBudget,
    BodyTooLarge,
    BodyUndecodable,
    DespinaError,
    InvalidArgument,
    inflate,
)

from despina_frontend_http.router import Request

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


def _undecodable(encoding: str) -> InvalidArgument:
    return InvalidArgument(
        f"failed to read the request body: 400, message:\n  Can not decode content-encoding: "
        f"{encoding}"
    )


def read_body(request: Request, limit: int, budget: BodyBudget) -> bytes:
    """The request's body inflated per its Content-Encoding; PayloadTooLarge past
    ``limit`` bytes (inflated so far only, or announced by a gzip trailer), the budget's
    BodyBudgetExhausted (503) or BodyOverBudget (413) when the server-wide budget cannot
    take it. The inflated bytes are charged to ``request.charge`` (which the router
    releases once the route's handler returned); an identity body is not charged."""
    body = request.body
    coding = request.headers.get("content-encoding", "identity").strip().lower() or "identity"
    if coding == "identity":
        if len(body) > limit:
            raise too_large(limit)
        return body
    if coding not in ("gzip", "deflate"):
        raise _undecodable(coding)
    if request.charge is None:
        request.charge = budget.charge()
    try:
        return inflate(body, coding, limit, request.charge)
    except BodyTooLarge:
        raise too_large(limit) from None
    except BodyUndecodable:
        raise _undecodable(coding) from None


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
