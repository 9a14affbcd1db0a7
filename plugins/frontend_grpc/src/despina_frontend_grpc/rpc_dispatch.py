"""The RPCs served and running one of them on its servicer, for Despina's HTTP/2 server
(:mod:`despina_frontend_grpc.connection_calls`).

:data:`METHODS` lists every RPC of ``inference.GRPCInferenceService`` and
``grpc.health.v1.Health``. The servicers get a
:class:`~despina_frontend_grpc.servicer_context.ServicerContext`; here it is a
:class:`CallContext`: ``abort`` raises :class:`Aborted` (the call's status), ``write``
sends a stream message, ``invocation_metadata`` holds the call's metadata. Every call ends
with a status code and either the response bytes (unary, OK) or the status details.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from despina import grpc_service as service_pb2
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2

from despina_frontend_grpc.errors import UNPARSABLE, client_text
from despina_frontend_grpc.status import StatusCode

#: A stream message sink: takes serialized bytes, may return an awaitable (back-pressure).
Send = Callable[[bytes], Awaitable[Any] | None]
OK = 0
INTERNAL = StatusCode.INTERNAL.value[0]


class Aborted(Exception):
    """A call ended with a non-OK status."""

    def __init__(self, code: StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


@dataclass(frozen=True)
class Method:
    """One RPC: its path, whether requests/responses stream, its request type's parser."""

    path: str
    name: str
    request_streaming: bool
    response_streaming: bool
    parse: Callable[[bytes], Any]


def _methods() -> list[Method]:
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


#: Every RPC served.
METHODS: list[Method] = _methods()


class CallContext:
    """The :class:`~despina_frontend_grpc.servicer_context.ServicerContext` of a call on Despina's HTTP/2 server."""

    def __init__(self, metadata: tuple[tuple[str, Any], ...], send: Send | None = None) -> None:
        self.metadata = metadata
        self._send = send

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self.metadata

    async def abort(self, code: StatusCode, details: str = "") -> None:
        raise Aborted(code, details)

    async def write(self, message: Any) -> None:
        assert self._send is not None, "write() on a unary call"
        pending = self._send(message.SerializeToString())
        if pending is not None:
            await pending


def route_table(servicers: dict[str, Any]) -> dict[str, tuple[Method, Any]]:
    """Method path -> (method, the servicer's bound handler), for every served RPC.

    ``servicers``: service name -> the object whose methods serve its RPCs."""
    return {m.path: (m, getattr(servicers[m.path.split("/")[1]], m.name)) for m in METHODS}


def parse(method: Method, data: bytes) -> Any:
    """The request message, or UNPARSABLE (the servicers answer Triton's text)."""
    try:
        return method.parse(data)
    except DecodeError:
        return UNPARSABLE


async def run_unary(
    handler: Callable[..., Awaitable[Any]], method: Method, data: bytes, context: CallContext
) -> tuple[int, bytes]:
    """(status code, response bytes when OK else the details, UTF-8)."""
    try:
        response = await handler(parse(method, data), context)
    except Aborted as exc:
        return exc.code.value[0], exc.details.encode()
    except Exception as exc:  # noqa: BLE001 - reported to the client, logged by client_text
        return INTERNAL, client_text(exc).encode()
    return OK, response.SerializeToString()


async def run_streaming(
    handler: Callable[..., Any],
    method: Method,
    requests: AsyncIterator[bytes],
    context: CallContext,
    send: Send,
) -> tuple[int, str]:
    """Serve a streaming call: request-streaming handlers get every request, the others
    the first one; each response goes to ``send``. Returns (status code, details)."""

    async def parsed() -> AsyncIterator[Any]:
        async for data in requests:
            yield parse(method, data)

    try:
        if method.request_streaming:
            async for response in handler(parsed(), context):
                pending = send(response.SerializeToString())
                if inspect.isawaitable(pending):
                    await pending
        else:
            async for request in parsed():
                await handler(request, context)
                break
    except Aborted as exc:
        return exc.code.value[0], exc.details
    except Exception as exc:  # noqa: BLE001 - reported to the client, logged by client_text
        return INTERNAL, client_text(exc)
    return OK, ""
