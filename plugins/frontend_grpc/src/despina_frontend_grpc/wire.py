"""What the gRPC worker processes and the server process say to each other.

With ``--grpc-worker-processes N`` the gRPC port is served by N worker processes (sharing
it through SO_REUSEPORT) that terminate HTTP/2 and forward every call, as the serialized
protobuf bytes, over a Unix socket to the server process, which owns every model and runs
the same servicer as in-process serving. A frame is a 13-byte header (kind, call id, aux,
payload length) and the payload.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import service_pb2

HEADER = struct.Struct("<BIiI")

# frame kinds: worker -> server
HELLO = 1  # aux: 0 bound, else failed (payload: reason)
CALL = 2  # a unary call; aux: method index; payload: metadata block + request bytes
OPEN = 3  # a streaming call opens; aux: method index; payload: metadata block
MESSAGE = 4  # a request message of an open stream
HALF_CLOSE = 5  # the client sent its last message
CANCEL = 6  # the client went away
# frame kinds: server -> worker
REPLY = 10  # unary result; aux: status code (0 OK); payload: response bytes or details
STREAM_MESSAGE = 11  # a response message of a stream
END = 12  # stream finished; aux: status code; payload: details

HEALTH_SERVICE = "grpc.health.v1.Health"


@dataclass(frozen=True)
class Method:
    """One forwarded RPC: its path, whether requests/responses stream, its request type."""

    path: str
    name: str
    request_streaming: bool
    response_streaming: bool
    parse: Callable[[bytes], Any]


def _methods() -> list[Method]:
    from grpc_health.v1 import health_pb2

    found = []
    for module in (service_pb2, health_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                request_class = getattr(module, method.input_type.name)
                found.append(
                    Method(
                        f"/{service.full_name}/{method.name}",
                        method.name,
                        method.client_streaming,
                        method.server_streaming,
                        request_class.FromString,
                    )
                )
    return found


#: Every forwarded RPC, indexed by the ``aux`` of CALL and OPEN frames.
METHODS: list[Method] = _methods()


def pack_metadata(pairs: Any) -> bytes:
    """Invocation metadata as a length-prefixed block (empty pairs: 4 bytes)."""
    text = "\0".join(f"{k}\0{v}" for k, v in pairs if isinstance(v, str)).encode()
    return struct.pack("<I", len(text)) + text


def unpack_metadata(payload: bytes) -> tuple[tuple[tuple[str, str], ...], bytes]:
    """(metadata pairs, rest of the payload) of a CALL or OPEN payload."""
    (size,) = struct.unpack_from("<I", payload)
    if not size:
        return (), payload[4:]
    items = payload[4 : 4 + size].decode().split("\0")
    return tuple(zip(items[::2], items[1::2], strict=True)), payload[4 + size :]


class FrameReader:
    """Splits a byte stream into frames and hands each to ``handle(kind, call, aux, payload)``."""

    def __init__(self, handle: Callable[[int, int, int, bytes], None]) -> None:
        self.handle = handle
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        offset, size = 0, len(buffer)
        while size - offset >= HEADER.size:
            kind, call, aux, length = HEADER.unpack_from(buffer, offset)
            end = offset + HEADER.size + length
            if end > size:
                break
            self.handle(kind, call, aux, bytes(buffer[offset + HEADER.size : end]))
            offset = end
        if offset:
            del buffer[:offset]


class FrameWriter:
    """Queues frames and writes them together once per event-loop iteration (one
    system call for all the replies that became ready in that iteration)."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.pending: list[bytes] = []

    def send(self, kind: int, call: int, aux: int = 0, payload: bytes = b"") -> None:
        if not self.pending:
            asyncio.get_running_loop().call_soon(self.flush)
        self.pending.append(HEADER.pack(kind, call, aux, len(payload)))
        self.pending.append(payload)

    def flush(self) -> None:
        data, self.pending = b"".join(self.pending), []
        if not self.transport.is_closing():
            self.transport.write(data)
