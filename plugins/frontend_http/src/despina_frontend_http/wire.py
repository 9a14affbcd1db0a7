"""What the HTTP worker processes and the server process say to each other: two frame
kinds on the core's frames (:class:`despina.FrameLink`; the pool's HELLO and DRAIN are the
core's too).

INFER (worker to server): aux is n, the payload n bytes of JSON ``[model, version,
header_length, forwarded]`` then the request body. REPLY (server to worker): aux is the
HTTP status, the payload ``<u32 inference header length>`` then the body (header length
0: the body is JSON only).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import orjson
from despina import Frame, FrameLink

INFER, REPLY = 1, 2
_HEADER_LENGTH = struct.Struct("<I")


def send_infer(link: FrameLink, call: int, meta: list[Any], body: bytes) -> None:
    """Send an INFER frame (the body is not copied)."""
    encoded = orjson.dumps(meta)
    link.send(INFER, call, len(encoded), encoded, body)


def parse_infer(frame: Frame) -> tuple[list[Any], memoryview]:
    """(meta, body) of an INFER frame; the body is a view of the payload (no copy)."""
    payload, n = frame.payload, frame.aux
    return orjson.loads(payload[:n]), payload[n:]


def send_reply(
    link: FrameLink, call: int, status: int, header_length: int, parts: Sequence[Any]
) -> None:
    """Send a REPLY frame; ``parts`` are bytes-like (header, then binary blobs)."""
    link.send(REPLY, call, status, _HEADER_LENGTH.pack(header_length), *parts)


def parse_reply(frame: Frame) -> tuple[int, int, bytes]:
    """(status, inference header length, body) of a REPLY frame."""
    (header_length,) = _HEADER_LENGTH.unpack_from(frame.payload)
    return frame.aux, header_length, bytes(frame.payload[_HEADER_LENGTH.size :])
