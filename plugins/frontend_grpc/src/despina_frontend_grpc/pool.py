"""The server-process side of ``--grpc-worker-processes``: starts the core's
:class:`~despina.WorkerPool` with the gRPC worker, and runs every call a worker forwards
on the same servicer as in-process serving.

A forwarded call runs through :mod:`despina_frontend_grpc.calls` with the metadata the
worker forwarded; its status and messages go back to the worker.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from despina import Frame, FrameLink, WorkerPool

from despina_frontend_grpc import calls, wire
from despina_frontend_grpc.options import GrpcOptions

#: Seconds the calls in flight get when the workers drain (as in-process serving).
DRAIN_GRACE = 1.0


class ForwardedCalls:
    """The server's end of one worker: runs its calls, one task each."""

    def __init__(self, routes: dict[str, tuple[wire.Method, Any]], link: FrameLink) -> None:
        self.routes = routes
        self.link = link
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.inbox: dict[int, asyncio.Queue[memoryview | None]] = {}

    def frame_received(self, frame: Frame) -> None:
        kind, call, aux, payload = frame
        if kind == wire.CALL:
            self._start(call, self._unary(call, wire.METHODS[aux], payload))
        elif kind == wire.MESSAGE or kind == wire.HALF_CLOSE:
            inbox = self.inbox.get(call)
            if inbox is not None:
                inbox.put_nowait(payload if kind == wire.MESSAGE else None)
        elif kind == wire.OPEN:
            self.inbox[call] = asyncio.Queue()
            self._start(call, self._stream(call, wire.METHODS[aux], payload))
        elif kind == wire.CANCEL:
            task = self.tasks.get(call)
            if task is not None:
                task.cancel()

    def connection_lost(self) -> None:
        for task in self.tasks.values():
            task.cancel()

    def _start(self, call: int, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self.tasks[call] = task
        task.add_done_callback(lambda _: self._finished(call))

    def _finished(self, call: int) -> None:
        self.tasks.pop(call, None)
        self.inbox.pop(call, None)

    async def _unary(self, call: int, method: wire.Method, payload: memoryview) -> None:
        metadata, data = wire.unpack_metadata(payload)
        handler = self.routes[method.path][1]
        context = calls.CallContext(metadata)
        code, reply = await calls.run_unary(handler, method, bytes(data), context)
        self.link.send(wire.REPLY, call, code, reply)

    async def _stream(self, call: int, method: wire.Method, payload: memoryview) -> None:
        metadata, _ = wire.unpack_metadata(payload)
        inbox = self.inbox[call]

        def send(data: bytes) -> None:
            self.link.send(wire.STREAM_MESSAGE, call, 0, data)

        async def requests() -> AsyncIterator[bytes]:
            while (data := await inbox.get()) is not None:
                yield bytes(data)

        context = calls.CallContext(metadata, send)
        handler = self.routes[method.path][1]
        code, details = await calls.run_streaming(handler, method, requests(), context, send)
        self.link.send(wire.END, call, code, details.encode())


async def start_workers(
    servicers: dict[str, Any], options: GrpcOptions, exit_timeout: float
) -> tuple[WorkerPool, int]:
    """Start ``options.worker_processes`` workers serving ``servicers`` (service name ->
    the object whose methods serve its RPCs); the pool and the port. OSError when they
    cannot bind."""
    if options.port and not options.reuse_port:
        _refuse_taken_port(options)
    routes = calls.route_table(servicers)
    pool = WorkerPool(
        "gRPC",
        "despina_frontend_grpc.worker",
        [options.to_json()],
        lambda link: ForwardedCalls(routes, link),
        exit_timeout,
    )
    return pool, await pool.start(options.worker_processes, options.address, options.port)


def _refuse_taken_port(options: GrpcOptions) -> None:
    """OSError when something already accepts on the port: the workers bind with
    SO_REUSEPORT among themselves and would otherwise share it silently."""
    host = options.address
    host = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    try:
        with socket.create_connection((host, options.port), timeout=1):
            pass
    except OSError:
        return
    raise OSError(f"cannot bind gRPC to {options.address}:{options.port}: address in use")
