"""gRPC over HTTP/2 as the protocol document defines it: length-prefixed messages,
message compression, ``grpc-timeout``, ``grpc-message`` percent-encoding and the header
blocks of responses and trailers.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import grpc
from despina import ascii_digits

from despina_frontend_grpc import http2

#: Request encodings this server decodes, as announced in ``grpc-accept-encoding``.
ACCEPTED_ENCODINGS = "identity,deflate,gzip"
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
#: Request headers that are protocol, not call metadata.
_RESERVED = frozenset({"content-type", "te", "grpc-timeout", "grpc-encoding"})


class MessageError(Exception):
    """A request message that cannot be read: ``code`` is the gRPC status to answer."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


def split_messages(buffer: bytearray, max_size: int, encoding: str | None) -> list[bytes]:
    """Remove and return the complete messages at the start of ``buffer`` (decompressed).

    Raises MessageError RESOURCE_EXHAUSTED for a message over ``max_size``: on the wire
    as soon as its length prefix is seen (before its bytes are buffered), once inflated as
    soon as the output passes ``max_size`` (see :func:`inflate`); INTERNAL for one that
    cannot be decompressed.
    """
    messages, pending = take_messages(buffer, max_size, encoding, None)
    assert pending is None
    return messages


def take_messages(
    buffer: bytearray, max_size: int, encoding: str | None, inline_output: int | None
) -> tuple[list[bytes], Inflation | None]:
    """Remove the complete messages at the start of ``buffer``: those ready (inflated),
    and the first compressed one that did not finish inflating within ``inline_output``
    bytes of output (None: no bound), to be finished with :meth:`Inflation.finish`
    (off the event loop); the messages after it stay in ``buffer``.

    Raises MessageError as :func:`split_messages` does.
    """
    messages: list[bytes] = []
    pending: Inflation | None = None
    offset = 0
    while len(buffer) - offset >= 5:
        compressed = buffer[offset]
        size = int.from_bytes(buffer[offset + 1 : offset + 5], "big")
        if size > max_size:
            raise MessageError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
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
        inflation = Inflation(data, encoding, max_size)
        if inflation.advance(inline_output):
            messages.append(inflation.result())
        else:
            pending = inflation
            break
    if offset:
        del buffer[:offset]
    return messages, pending


#: Output bytes inflated per step, and compressed bytes fed per step: a message is
#: checked against the size limit after every step, so one inflating past the limit (a
#: "zip bomb": 4 GiB of zeros are 4 MiB of gzip) costs the limit plus one step of memory
#: and stops there, and no step copies more than this much of the unconsumed input.
INFLATE_STEP = 1 << 18


class Inflation:
    """One gzip/deflate message inflating step by step (:data:`INFLATE_STEP`), checked
    against ``max_size`` after every step.

    :meth:`advance` may run on the event loop for a bounded amount of output and
    :meth:`finish` in a worker thread (zlib releases the GIL while it inflates);
    :meth:`cancel` (from any thread) makes a running :meth:`finish` stop after its
    current step.
    """

    __slots__ = (
        "_cancelled",
        "_chunk",
        "_done",
        "_encoding",
        "_full",
        "_inflater",
        "_input",
        "_max_size",
        "_pieces",
        "_start",
        "_total",
    )

    def __init__(self, data: bytes, encoding: str | None, max_size: int) -> None:
        if encoding == "gzip":
            self._inflater = zlib.decompressobj(wbits=31)
        elif encoding == "deflate":
            self._inflater = zlib.decompressobj()
        else:
            raise MessageError(
                grpc.StatusCode.INTERNAL, "a compressed message arrived without a grpc-encoding"
            )
        self._encoding = encoding
        self._input = data
        self._max_size = max_size
        self._start = 0  # of the next input step
        self._chunk: bytes | memoryview = b""  # what the last step left unconsumed
        self._full = False  # the last step's output was a whole step: more may be due
        self._pieces: list[bytes] = []
        self._total = 0
        self._done = False
        self._cancelled = False

    def cancel(self) -> None:
        """Stop inflating at the next step (the caller no longer wants the message)."""
        self._cancelled = True

    def finish(self) -> bool:
        """Inflate the rest; False when cancelled first. Raises MessageError."""
        return self.advance(None)

    def advance(self, output_budget: int | None) -> bool:
        """Inflate until the message is whole (True) or this call produced more than
        ``output_budget`` bytes (False; None: no budget) or was cancelled (False).

        Raises MessageError RESOURCE_EXHAUSTED as soon as the output passes ``max_size``
        (the rest is never inflated), INTERNAL for data that is not valid.
        """
        produced = 0
        data, step, inflater = self._input, INFLATE_STEP, self._inflater
        try:
            while not self._done:
                if self._cancelled or (output_budget is not None and produced > output_budget):
                    return False
                if not self._chunk and not self._full:
                    if self._start >= len(data):
                        self._done = True
                        break
                    self._chunk = memoryview(data)[self._start : self._start + step]
                    self._start += step
                piece = inflater.decompress(self._chunk, step)
                produced += len(piece)
                self._total += len(piece)
                if self._total > self._max_size:
                    self._pieces.clear()
                    # grpc.aio's answer to the same message
                    raise MessageError(
                        grpc.StatusCode.RESOURCE_EXHAUSTED, "Decompressed message larger than max"
                    )
                self._pieces.append(piece)
                self._chunk = inflater.unconsumed_tail
                self._full = len(piece) == step
        except zlib.error as exc:
            raise MessageError(
                grpc.StatusCode.INTERNAL, f"cannot decompress a {self._encoding} message: {exc}"
            ) from None
        return True

    def result(self) -> bytes:
        """The inflated message (once :meth:`advance` or :meth:`finish` returned True)."""
        pieces, self._pieces = self._pieces, []
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def inflate(data: bytes, encoding: str | None, max_size: int) -> bytes:
    """``data`` decompressed with ``encoding`` (gzip or deflate), incrementally.

    Raises MessageError RESOURCE_EXHAUSTED as soon as the output passes ``max_size`` (the
    rest is never inflated), INTERNAL when ``encoding`` is neither or ``data`` is not valid.
    """
    inflation = Inflation(data, encoding, max_size)
    inflation.advance(None)
    return inflation.result()


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


_CONTENT_TYPE = http2.literal(b"content-type", b"application/grpc")
#: Response headers of a call answered with messages.
RESPONSE_HEADERS = http2.STATUS_200 + _CONTENT_TYPE
GZIP_RESPONSE_HEADERS = RESPONSE_HEADERS + http2.literal(b"grpc-encoding", b"gzip")
OK_TRAILERS = http2.literal(b"grpc-status", b"0")


#: Added to the trailers refusing a request encoding: the encodings that would work.
ACCEPT_ENCODING = http2.literal(b"grpc-accept-encoding", ACCEPTED_ENCODINGS.encode())


def trailers(code: int, details: str, headers_sent: bool, extra: bytes = b"") -> bytes:
    """The trailers of a finished call; a trailers-only response when no headers went out."""
    block = b"" if headers_sent else RESPONSE_HEADERS
    block += http2.literal(b"grpc-status", str(code).encode())
    if details:
        block += http2.literal(b"grpc-message", percent_encode(details))
    return block + extra
