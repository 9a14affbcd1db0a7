"""A gRPC worker process: serves the gRPC port and forwards every call to the server.

Run as ``python -m despina_frontend_grpc.worker SOCKET OPTIONS_JSON`` by the frontend
(``--grpc-worker-processes``). It connects to the server's Unix socket, binds the port
(SO_REUSEPORT, shared with its siblings), reports HELLO, and serves until the server
closes the socket. Restricted protocols are checked here; everything else runs in the
server process.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc

from despina_frontend_grpc import wire
from despina_frontend_grpc.options import GrpcOptions


class ServerLink(asyncio.Protocol):
    """The connection to the server process: sends frames, routes replies by call id."""

    def __init__(self) -> None:
        self.writer: wire.FrameWriter | None = None
        self.reader = wire.FrameReader(self._received)
        self.calls: dict[int, asyncio.Future[tuple[int, bytes]] | asyncio.Queue[Any]] = {}
        self.ids = itertools.count(1)
        self.closed = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.writer = wire.FrameWriter(transport)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()

    def send(self, kind: int, call: int, aux: int = 0, payload: bytes = b"") -> None:
        assert self.writer is not None
        self.writer.send(kind, call, aux, payload)

    def _received(self, kind: int, call: int, aux: int, payload: bytes) -> None:
        target = self.calls.get(call)
        if target is None:
            return
        if kind == wire.REPLY:
            assert isinstance(target, asyncio.Future)
            if not target.done():
                target.set_result((aux, payload))
        else:
            assert isinstance(target, asyncio.Queue)
            target.put_nowait((kind, aux, payload))


class Forwarder:
    """grpc method handlers that forward each call over a :class:`ServerLink`."""

    def __init__(self, link: ServerLink, forward_metadata: bool) -> None:
        self.link = link
        self.forward_metadata = forward_metadata

    def metadata(self, context: grpc.aio.ServicerContext) -> bytes:
        return wire.pack_metadata(
            context.invocation_metadata() or () if self.forward_metadata else ()
        )

    def handler(self, index: int, method: wire.Method) -> grpc.RpcMethodHandler:
        if not method.request_streaming and not method.response_streaming:

            async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
                return await self.unary(index, request, context)

            return grpc.unary_unary_rpc_method_handler(unary)

        async def streaming(
            requests: Any, context: grpc.aio.ServicerContext
        ) -> AsyncIterator[bytes]:
            async for message in self.stream(index, requests, context):
                yield message

        if method.request_streaming:
            return grpc.stream_stream_rpc_method_handler(streaming)

        async def single(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
            async for message in streaming(_once(request), context):
                yield message

        return grpc.unary_stream_rpc_method_handler(single)

    async def unary(self, index: int, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        link = self.link
        call = next(link.ids)
        future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        link.calls[call] = future
        try:
            link.send(wire.CALL, call, index, self.metadata(context) + request)
            code, payload = await future
        except asyncio.CancelledError:
            link.send(wire.CANCEL, call)
            raise
        finally:
            del link.calls[call]
        if code:
            await context.abort(_status(code), payload.decode())
        return payload

    async def stream(
        self, index: int, requests: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        link = self.link
        call = next(link.ids)
        replies: asyncio.Queue[tuple[int, int, bytes]] = asyncio.Queue()
        link.calls[call] = replies
        link.send(wire.OPEN, call, index, self.metadata(context))

        async def pump() -> None:
            async for message in requests:
                link.send(wire.MESSAGE, call, 0, message)
            link.send(wire.HALF_CLOSE, call)

        pumping = asyncio.create_task(pump())
        ended = False
        try:
            while True:
                kind, aux, payload = await replies.get()
                if kind == wire.END:
                    ended = True
                    if aux:
                        await context.abort(_status(aux), payload.decode())
                    return
                yield payload
        finally:
            pumping.cancel()
            del link.calls[call]
            if not ended:
                link.send(wire.CANCEL, call)


async def _once(request: bytes) -> AsyncIterator[bytes]:
    yield request


def _status(code: int) -> grpc.StatusCode:
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status
    return grpc.StatusCode.INTERNAL


async def serve(socket_path: str, options: GrpcOptions) -> None:
    """Connect, bind, report HELLO, serve until the server closes the socket."""
    from despina_frontend_grpc.frontend import bind, create_server

    loop = asyncio.get_running_loop()
    _, link = await loop.create_unix_connection(ServerLink, socket_path)
    server = create_server(options, share_port=True)
    forwarder = Forwarder(link, bool(options.header_forward_pattern))
    handlers: dict[str, dict[str, grpc.RpcMethodHandler]] = {}
    for index, method in enumerate(wire.METHODS):
        service = method.path.split("/")[1]
        handlers.setdefault(service, {})[method.name] = forwarder.handler(index, method)
    server.add_generic_rpc_handlers(
        tuple(grpc.method_handlers_generic_handler(s, h) for s, h in handlers.items())
    )
    try:
        port = bind(server, options)
    except OSError as exc:
        link.send(wire.HELLO, 0, 1, str(exc).encode())
        await asyncio.sleep(0)  # let the frame go out
        return
    await server.start()
    link.send(wire.HELLO, 0, 0, str(port).encode())
    await link.closed.wait()
    await server.stop(grace=1.0)


def main(argv: list[str]) -> None:
    socket_path, options_json = argv
    asyncio.run(serve(socket_path, GrpcOptions.from_json(options_json)))


if __name__ == "__main__":
    main(sys.argv[1:])
