"""Running one RPC on the servicers outside grpc.aio: the path shared by Despina's own
HTTP/2 server (:mod:`despina_frontend_grpc.http2_server`) and the server-process side of
``--grpc-worker-processes`` (:mod:`despina_frontend_grpc.pool`).

The servicers are written against ``grpc.aio.ServicerContext``; here they get a
:class:`CallContext`: ``abort`` raises :class:`Aborted` (the call's status), ``write``
sends a stream message, ``invocation_metadata`` holds the call's metadata. Every call ends
with a status code and either the response bytes (unary, OK) or the status details.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from despina_frontend_grpc import wire
from despina_frontend_grpc.errors import UNPARSABLE, client_text

#: A stream message sink: takes serialized bytes, may return an awaitable (back-pressure).
Send = Callable[[bytes], Awaitable[Any] | None]
OK = 0
INTERNAL = grpc.StatusCode.INTERNAL.value[0]


class Aborted(Exception):
    """A call ended with a non-OK status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class CallContext:
    """The part of ``grpc.aio.ServicerContext`` the servicers use."""

    def __init__(self, metadata: tuple[tuple[str, Any], ...], send: Send | None = None) -> None:
        self.metadata = metadata
        self._send = send

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self.metadata

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        raise Aborted(code, details)

    async def write(self, message: Any) -> None:
        assert self._send is not None, "write() on a unary call"
        pending = self._send(message.SerializeToString())
        if pending is not None:
            await pending


def route_table(servicers: dict[str, Any]) -> dict[str, tuple[wire.Method, Any]]:
    """Method path -> (method, the servicer's bound handler), for every served RPC.

    ``servicers``: service name -> the object whose methods serve its RPCs."""
    return {m.path: (m, getattr(servicers[m.path.split("/")[1]], m.name)) for m in wire.METHODS}


def parse(method: wire.Method, data: bytes) -> Any:
    """The request message, or UNPARSABLE (the servicers answer Triton's text)."""
    try:
        return method.parse(data)
    except DecodeError:
        return UNPARSABLE


async def run_unary(
    handler: Callable[..., Awaitable[Any]], method: wire.Method, data: bytes, context: CallContext
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
    method: wire.Method,
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
