"""A gRPC worker process: serves the gRPC port and forwards every call to the server.

Run by the core's :class:`~despina.WorkerPool` (``--grpc-worker-processes``) as ``python
-m despina_frontend_grpc.worker SOCKET PORT OPTIONS_JSON``: :func:`despina.run_worker`
connects, :class:`GrpcWorker` binds the port (SO_REUSEPORT, shared with its siblings) and
serves until the server drains the workers. Restricted protocols are checked here;
everything else runs in the server process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
from despina import Frame, FrameLink, run_worker

from despina_frontend_grpc import wire
from despina_frontend_grpc.options import GrpcOptions


class GrpcWorker:
    """grpc.aio serving the port; each call is forwarded over the link, replies are
    routed back by call id."""

    def __init__(self, link: FrameLink, args: list[str]) -> None:
        (options_json,) = args
        self.options = GrpcOptions.from_json(options_json)
        self.link = link
        self.forward_metadata = bool(self.options.header_forward_pattern)
        self.calls: dict[int, asyncio.Future[tuple[int, bytes]] | asyncio.Queue[Any]] = {}
        self.ids = itertools.count(1)
        self.server: grpc.aio.Server | None = None

    def frame_received(self, frame: Frame) -> None:
        kind, call, aux, payload = frame
        target = self.calls.get(call)
        if target is None:
            return
        if kind == wire.REPLY:
            assert isinstance(target, asyncio.Future)
            if not target.done():
                target.set_result((aux, bytes(payload)))
        else:
            assert isinstance(target, asyncio.Queue)
            target.put_nowait((kind, aux, bytes(payload)))

    def connection_lost(self) -> None:
        """Nothing to do: :meth:`drain` follows, cancelling the calls in flight."""

    async def start(self, port: int) -> int:
        """Bind ``port`` and serve every forwarded method; the port bound."""
        from despina_frontend_grpc.frontend import bind, create_server

        options = dataclasses.replace(self.options, port=port)
        server = create_server(options, share_port=True)
        handlers: dict[str, dict[str, grpc.RpcMethodHandler]] = {}
        for index, method in enumerate(wire.METHODS):
            service = method.path.split("/")[1]
            handlers.setdefault(service, {})[method.name] = self.handler(index, method)
        server.add_generic_rpc_handlers(
            tuple(grpc.method_handlers_generic_handler(s, h) for s, h in handlers.items())
        )
        bound = bind(server, options)
        await server.start()
        self.server = server
        return bound

    async def drain(self, grace: float) -> None:
        if self.server is not None:
            await self.server.stop(grace)

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
        call = next(self.ids)
        future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
        self.calls[call] = future
        try:
            link.send(wire.CALL, call, index, self.metadata(context), request)
            code, payload = await future
        except asyncio.CancelledError:
            link.send(wire.CANCEL, call)
            raise
        finally:
            del self.calls[call]
        if code:
            await context.abort(_status(code), payload.decode())
        return payload

    async def stream(
        self, index: int, requests: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        link = self.link
        call = next(self.ids)
        replies: asyncio.Queue[tuple[int, int, bytes]] = asyncio.Queue()
        self.calls[call] = replies
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
            del self.calls[call]
            if not ended:
                link.send(wire.CANCEL, call)


async def _once(request: bytes) -> AsyncIterator[bytes]:
    yield request


def _status(code: int) -> grpc.StatusCode:
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status
    return grpc.StatusCode.INTERNAL


def main(argv: list[str]) -> None:
    asyncio.run(run_worker(argv, GrpcWorker))


if __name__ == "__main__":
    main(sys.argv[1:])
