"""Frames between HTTP worker processes and the server process (one Unix socket each).

A frame is ``<u32 size><u32 call id><u8 kind>`` then ``size - 5`` payload bytes.
INFER payload: ``<u16 n>`` + n bytes of JSON ``[model, version, header_length, forwarded]``
+ the request body. REPLY payload: ``<u16 status><u32 inference header length>`` + body
(header length 0: the body is JSON only).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import orjson

HELLO, INFER, REPLY = 1, 2, 3
_HEAD = struct.Struct("<IIB")
_META = struct.Struct("<H")
_REPLY = struct.Struct("<HI")


def infer_frame(call_id: int, meta: list[Any], body: bytes) -> list[bytes]:
    """The parts of an INFER frame (written with ``writelines``, no join)."""
    encoded = orjson.dumps(meta)
    size = 5 + _META.size + len(encoded) + len(body)
    return [_HEAD.pack(size, call_id, INFER), _META.pack(len(encoded)), encoded, body]


def parse_infer(payload: memoryview) -> tuple[list[Any], memoryview]:
    """(meta, body) of an INFER payload; the body is a view of the payload (no copy)."""
    (n,) = _META.unpack_from(payload)
    meta = orjson.loads(payload[_META.size : _META.size + n])
    return meta, payload[_META.size + n :]


def reply_frame(call_id: int, status: int, header_length: int, parts: Sequence[Any]) -> list[Any]:
    """The parts of a REPLY frame; ``parts`` are bytes-like (header, then binary blobs)."""
    size = 5 + _REPLY.size + sum(len(p) for p in parts)
    return [_HEAD.pack(size, call_id, REPLY), _REPLY.pack(status, header_length), *parts]


def parse_reply(payload: memoryview) -> tuple[int, int, bytes]:
    """(status, inference header length, body) of a REPLY payload."""
    status, header_length = _REPLY.unpack_from(payload)
    return status, header_length, bytes(payload[_REPLY.size :])


def hello_frame(pid: int) -> bytes:
    return _HEAD.pack(5 + 4, 0, HELLO) + struct.pack("<I", pid)


class FrameReader:
    """Feeds stream bytes; calls ``on_frame(call_id, kind, payload)`` per complete frame."""

    def __init__(self, on_frame: Callable[[int, int, memoryview], None]) -> None:
        self._buffer = bytearray()
        self._on_frame = on_frame

    def feed(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        offset = 0
        while len(buffer) - offset >= 4:
            (size,) = struct.unpack_from("<I", buffer, offset)
            end = offset + 4 + size
            if end > len(buffer):
                break
            call_id, kind = struct.unpack_from("<IB", buffer, offset + 4)
            with memoryview(buffer) as view:
                payload = bytes(view[offset + 9 : end])
            self._on_frame(call_id, kind, memoryview(payload))
            offset = end
        if offset:
            del buffer[:offset]
