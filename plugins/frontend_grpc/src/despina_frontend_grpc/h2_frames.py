"""HTTP/2 framing (RFC 9113) and the HPACK (RFC 7541) encoding Despina's gRPC server sends.

Only what a gRPC server needs: frame headers, settings and the header blocks of
responses. Responses never use HPACK's dynamic table (every field is a static-table index
or a literal without indexing), so their encoding needs no per-connection state; request
header blocks are decoded with the ``hpack`` library.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME_HEADER_SIZE = 9

# frame types
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9

# flags
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

# settings identifiers
HEADER_TABLE_SIZE = 0x1
ENABLE_PUSH = 0x2
MAX_CONCURRENT_STREAMS = 0x3
INITIAL_WINDOW_SIZE = 0x4
MAX_FRAME_SIZE = 0x5
MAX_HEADER_LIST_SIZE = 0x6

# error codes
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB

DEFAULT_WINDOW = 65_535
DEFAULT_MAX_FRAME = 16_384
MAX_WINDOW = 2**31 - 1

_SETTING = struct.Struct(">HI")
_U32 = struct.Struct(">I")


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    """One frame: the 9-byte header and ``payload``."""
    size = len(payload)
    return (
        bytes((size >> 16 & 0xFF, size >> 8 & 0xFF, size & 0xFF, kind, flags))
        + _U32.pack(stream)
        + payload
    )


def settings_frame(values: Iterable[tuple[int, int]]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(key, value) for key, value in values))


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    """(identifier, value) pairs; ValueError when the length is not a multiple of 6."""
    if len(payload) % 6:
        raise ValueError("SETTINGS payload length is not a multiple of 6")
    return [_SETTING.unpack_from(payload, offset) for offset in range(0, len(payload), 6)]


def window_update(stream: int, increment: int) -> bytes:
    return frame(WINDOW_UPDATE, 0, stream, _U32.pack(increment))


def rst_stream(stream: int, code: int) -> bytes:
    return frame(RST_STREAM, 0, stream, _U32.pack(code))


def goaway(last_stream: int, code: int, debug: bytes = b"") -> bytes:
    return frame(GOAWAY, 0, 0, _U32.pack(last_stream) + _U32.pack(code) + debug)


def u32(data: bytes | bytearray | memoryview, offset: int = 0) -> int:
    """The 31-bit value at ``offset`` (the reserved high bit cleared)."""
    return int(_U32.unpack_from(data, offset)[0]) & 0x7FFF_FFFF


def header_frames(stream: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """A header block as HEADERS (+ CONTINUATION) frames of at most ``max_frame`` bytes."""
    end = END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return frame(HEADERS, END_HEADERS | end, stream, block)
    pieces = [block[i : i + max_frame] for i in range(0, len(block), max_frame)]
    out = [frame(HEADERS, end, stream, pieces[0])]
    out += [frame(CONTINUATION, 0, stream, piece) for piece in pieces[1:-1]]
    out.append(frame(CONTINUATION, END_HEADERS, stream, pieces[-1]))
    return b"".join(out)


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    """HPACK's prefixed integer; ``first`` holds the bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes) -> bytes:
    """A header field as a literal without indexing, new name, no Huffman coding."""
    return b"\x00" + _integer(len(name), 7, 0) + name + _integer(len(value), 7, 0) + value


#: A dynamic table size update to 0: starts a connection's first header block and the
#: first one after the peer changes SETTINGS_HEADER_TABLE_SIZE (our table stays empty).
TABLE_SIZE_ZERO = _integer(0, 5, 0x20)
#: ``:status: 200`` (static table index 8).
STATUS_200 = b"\x88"


def status(code: int) -> bytes:
    """``:status`` with any code (index 8's name, literal value)."""
    return b"\x08" + _integer(len(str(code)), 7, 0) + str(code).encode()
