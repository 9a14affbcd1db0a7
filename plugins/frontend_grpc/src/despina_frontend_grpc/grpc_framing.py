"""gRPC over HTTP/2 as the protocol document defines it: length-prefixed messages,
message compression (inflated by :class:`despina.Inflation`), ``grpc-timeout``,
``grpc-message`` percent-encoding and the header blocks of responses and trailers.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from despina import (
    BodyBudgetExhausted,
    BodyCharge,
    BodyTooLarge,
    BodyUndecodable,
    Inflation,
    ascii_digits,
)

from despina_frontend_grpc import h2_frames
from despina_frontend_grpc.status import StatusCode

#: Request encodings this server decodes, as announced in ``grpc-accept-encoding``.
ACCEPTED_ENCODINGS = "identity,deflate,gzip"
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
#: Request headers that are protocol, not call metadata.
_RESERVED = frozenset({"content-type", "te", "grpc-timeout", "grpc-encoding"})


class MessageError(Exception):
    """A request message that cannot be read: ``code`` is the gRPC status to answer."""

    def __init__(self, code: StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


def take_messages(
    buffer: bytearray,
    max_size: int,
    encoding: str | None,
    inline_output: int | None,
    charge: BodyCharge | None,
) -> tuple[list[bytes], Inflation | None]:
    """Remove the complete messages at the start of ``buffer``: those ready (inflated,
    each step charged to ``charge``, which a call compressing with ``encoding`` has), and the first compressed one that did not finish
    inflating within ``inline_output`` bytes of output (None: no bound), to be finished
    with :func:`finish` (off the event loop); the messages after it stay in ``buffer``.

    Raises MessageError RESOURCE_EXHAUSTED for a message over ``max_size``: on the wire
    as soon as its length prefix is seen (before its bytes are buffered), once inflated as
    soon as the output passes ``max_size`` or its gzip trailer announces more, and when
    the budget cannot take an inflated step; INTERNAL for one that cannot be decompressed.
    """
    messages: list[bytes] = []
    pending: Inflation | None = None
    offset = 0
    while len(buffer) - offset >= 5:
        compressed = buffer[offset]
        size = int.from_bytes(buffer[offset + 1 : offset + 5], "big")
        if size > max_size:
            raise MessageError(
                StatusCode.RESOURCE_EXHAUSTED,
                f"Received message larger than max ({size} vs. {max_size})",
            )
        end = offset + 5 + size
        if end > len(buffer):
            break
        with memoryview(buffer) as view:
            data = bytes(view[offset + 5 : end])
        offset = end
        if not compressed:
            messages.append(data)
            continue
        if encoding not in ("gzip", "deflate") or charge is None:
            raise MessageError(
                StatusCode.INTERNAL, "a compressed message arrived without a grpc-encoding"
            )
        with refusals(encoding):
            inflation = Inflation(data, encoding, max_size, charge)
            whole = inflation.advance(inline_output)
        if whole:
            messages.append(inflation.result())
        else:
            pending = inflation
            break
    if offset:
        del buffer[:offset]
    return messages, pending


def finish(inflation: Inflation) -> bool:
    """Inflate the rest of a message (:meth:`despina.Inflation.finish`, in a worker
    thread); False when cancelled first. Raises MessageError as :func:`take_messages`."""
    with refusals(inflation.encoding):
        return inflation.finish()


@contextmanager
def refusals(encoding: str) -> Iterator[None]:
    """The inflater's refusals as the MessageError a call ends with."""
    try:
        yield
    except BodyTooLarge:
        # grpc.aio's answer to the same message
        raise MessageError(
            StatusCode.RESOURCE_EXHAUSTED, "Decompressed message larger than max"
        ) from None
    except BodyBudgetExhausted as exc:
        raise MessageError(StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
    except BodyUndecodable as exc:
        raise MessageError(
            StatusCode.INTERNAL, f"cannot decompress a {encoding} message: {exc}"
        ) from None


def frame_message(data: bytes, zlib_level: int, gzip: bool) -> tuple[bytes, bytes]:
    """A response message as (its 5-byte prefix, its bytes: gzip-compressed when
    ``gzip``); two parts, so the message itself is never copied to prepend the prefix."""
    if gzip:
        deflater = zlib.compressobj(zlib_level, wbits=31)
        data = deflater.compress(data) + deflater.flush()
        return b"\x01" + len(data).to_bytes(4, "big"), data
    return b"\x00" + len(data).to_bytes(4, "big"), data


def timeout_seconds(value: str) -> float | None:
    """Seconds of a ``grpc-timeout`` value (``"100m"``), None when malformed."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not ascii_digits(digits) or len(digits) > 8:
        return None
    return int(digits) * unit


def call_metadata(headers: list[tuple[str, str]]) -> tuple[tuple[str, Any], ...]:
    """The call's metadata as grpc.aio gives it: no pseudo or reserved headers;
    ``-bin`` values base64-decoded to bytes."""
    metadata: list[tuple[str, Any]] = []
    for name, value in headers:
        if name.startswith(":") or name in _RESERVED:
            continue
        if name.endswith("-bin"):
            metadata.append((name, base64.b64decode(value + "=" * (-len(value) % 4))))
        else:
            metadata.append((name, value))
    return tuple(metadata)


def percent_encode(text: str) -> bytes:
    """``grpc-message``'s encoding: bytes outside printable ASCII, and ``%``, as %XX."""
    return b"".join(
        bytes((b,)) if 0x20 <= b <= 0x7E and b != 0x25 else b"%%%02X" % b for b in text.encode()
    )


_CONTENT_TYPE = h2_frames.literal(b"content-type", b"application/grpc")
#: Response headers of a call answered with messages.
RESPONSE_HEADERS = h2_frames.STATUS_200 + _CONTENT_TYPE
GZIP_RESPONSE_HEADERS = RESPONSE_HEADERS + h2_frames.literal(b"grpc-encoding", b"gzip")
OK_TRAILERS = h2_frames.literal(b"grpc-status", b"0")


#: Added to the trailers refusing a request encoding: the encodings that would work.
ACCEPT_ENCODING = h2_frames.literal(b"grpc-accept-encoding", ACCEPTED_ENCODINGS.encode())


def trailers(code: int, details: str, headers_sent: bool, extra: bytes = b"") -> bytes:
    """The trailers of a finished call; a trailers-only response when no headers went out."""
    block = b"" if headers_sent else RESPONSE_HEADERS
    block += h2_frames.literal(b"grpc-status", str(code).encode())
    if details:
        block += h2_frames.literal(b"grpc-message", percent_encode(details))
    return block + extra
