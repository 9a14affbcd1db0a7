"""The server-process side of ``--grpc-worker-processes``: starts the worker processes and
runs every call they forward on the same servicer as in-process serving.

A forwarded call runs through :mod:`despina_frontend_grpc.calls` with the metadata the
worker forwarded; its status and messages go back to the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from despina_frontend_grpc import calls, wire
from despina_frontend_grpc.options import GrpcOptions

log = logging.getLogger("despina.frontend.grpc")

#: Seconds a worker may take to start and bind before the frontend fails to start.
START_TIMEOUT = 60.0


class WorkerConnection(asyncio.Protocol):
    """One worker's connection: runs its calls, one task each."""

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.writer: wire.FrameWriter | None = None
        self.reader = wire.FrameReader(self._received)
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.inbox: dict[int, asyncio.Queue[Any]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.writer = wire.FrameWriter(transport)
        self.pool.connections.append(self)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        for task in self.tasks.values():
            task.cancel()
        if self in self.pool.connections:
            self.pool.connections.remove(self)
        if not self.pool.stopping:
            log.error("a gRPC worker process went away; %d remain", len(self.pool.connections))

    def send(self, kind: int, call: int, aux: int = 0, payload: bytes = b"") -> None:
        if self.writer is not None:
            self.writer.send(kind, call, aux, payload)

    def _received(self, kind: int, call: int, aux: int, payload: bytes) -> None:
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
        elif kind == wire.HELLO:
            self.pool.hello(aux, payload)

    def _start(self, call: int, work: Any) -> None:
        task = asyncio.create_task(work)
        self.tasks[call] = task
        task.add_done_callback(lambda _: self._finished(call))

    def _finished(self, call: int) -> None:
        self.tasks.pop(call, None)
        self.inbox.pop(call, None)

    async def _unary(self, call: int, method: wire.Method, payload: bytes) -> None:
        metadata, data = wire.unpack_metadata(payload)
        handler = self.pool.handler(method)
        code, reply = await calls.run_unary(handler, method, data, calls.CallContext(metadata))
        self.send(wire.REPLY, call, code, reply)

    async def _stream(self, call: int, method: wire.Method, payload: bytes) -> None:
        metadata, _ = wire.unpack_metadata(payload)
        inbox = self.inbox[call]

        def send(data: bytes) -> None:
            self.send(wire.STREAM_MESSAGE, call, 0, data)

        async def requests() -> AsyncIterator[bytes]:
            while (data := await inbox.get()) is not None:
                yield data

        context = calls.CallContext(metadata, send)
        handler = self.pool.handler(method)
        code, details = await calls.run_streaming(handler, method, requests(), context, send)
        self.send(wire.END, call, code, details.encode())


class WorkerPool:
    """N worker processes serving the gRPC port for one server's servicers."""

    def __init__(self, servicers: dict[str, Any], options: GrpcOptions) -> None:
        """``servicers``: service name -> the object whose methods serve its RPCs;
        ``options``: what the workers serve (their port is not 0)."""
        self._routes = calls.route_table(servicers)
        self.options = options
        self.connections: list[WorkerConnection] = []
        self.processes: list[asyncio.subprocess.Process] = []
        self.folder = Path(tempfile.mkdtemp(prefix="despina-grpc-"))
        self.server: asyncio.AbstractServer | None = None
        self.stopping = False
        self._hellos: asyncio.Queue[tuple[int, bytes]] = asyncio.Queue()

    def handler(self, method: wire.Method) -> Any:
        return self._routes[method.path][1]

    def hello(self, status: int, payload: bytes) -> None:
        self._hellos.put_nowait((status, payload))

    async def start(self, count: int) -> int:
        """Start ``count`` workers; return the bound port. OSError if one cannot bind."""
        if not self.options.reuse_port:
            _refuse_taken_port(self.options)
        socket_path = str(self.folder / "frontend.sock")
        loop = asyncio.get_running_loop()
        self.server = await loop.create_unix_server(lambda: WorkerConnection(self), socket_path)
        options = self.options.to_json()
        for _ in range(count):
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "despina_frontend_grpc.worker", socket_path, options
            )
            self.processes.append(process)
        port = 0
        try:
            for _ in range(count):
                status, payload = await asyncio.wait_for(self._hellos.get(), START_TIMEOUT)
                if status:
                    raise OSError(payload.decode())
                port = int(payload)
        except (OSError, TimeoutError) as exc:
            await self.stop()
            raise OSError(str(exc) or "gRPC worker processes did not start in time") from None
        return port

    async def stop(self) -> None:
        """Close the workers' connections (they stop serving and exit), then clean up."""
        self.stopping = True
        if self.server is not None:
            self.server.close()
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.close()
        for process in self.processes:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        self.processes.clear()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.folder)


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
