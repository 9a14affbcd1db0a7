"""What the gRPC worker processes and the server process say to each other.

With ``--grpc-worker-processes N`` the gRPC port is served by N worker processes (sharing
it through SO_REUSEPORT) that terminate HTTP/2 and forward every call, as the serialized
protobuf bytes, to the server process, which owns every model and runs the same servicer
as in-process serving. The frames, the pool and the HELLO/DRAIN handshake are the core's
(:class:`despina.WorkerPool`); this module holds the gRPC frame kinds and payloads.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import service_pb2

# frame kinds: worker -> server
CALL = 1  # a unary call; aux: method index; payload: metadata block + request bytes
OPEN = 2  # a streaming call opens; aux: method index; payload: metadata block
MESSAGE = 3  # a request message of an open stream
HALF_CLOSE = 4  # the client sent its last message
CANCEL = 5  # the client went away
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


_SIZE = struct.Struct("<I")


def pack_metadata(pairs: Any) -> bytes:
    """Invocation metadata as a length-prefixed block (empty pairs: 4 bytes)."""
    text = "\0".join(f"{k}\0{v}" for k, v in pairs if isinstance(v, str)).encode()
    return _SIZE.pack(len(text)) + text


def unpack_metadata(payload: memoryview) -> tuple[tuple[tuple[str, str], ...], memoryview]:
    """(metadata pairs, rest of the payload: a view) of a CALL or OPEN payload."""
    (size,) = _SIZE.unpack_from(payload)
    start = _SIZE.size
    if not size:
        return (), payload[start:]
    items = str(payload[start : start + size], "utf-8").split("\0")
    return tuple(zip(items[::2], items[1::2], strict=True)), payload[start + size :]
