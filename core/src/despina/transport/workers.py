"""Worker processes serving a frontend's port, forwarding calls to the server process.

:class:`WorkerPool` (server process) listens on a Unix socket in a private 0700 folder and
starts N processes ``python -m MODULE SOCKET PORT ARGS...``; each connects once, binds
PORT with SO_REUSEPORT (shared by all of them) and says HELLO: bound, or failed with the
reason. From then on frames other than the pool's own go to the frontend's handler at
either end. :func:`run_worker` is a worker process's side of that life.

The pool's own frame kinds (a frontend uses kinds 1 to 239):

* ``HELLO`` (worker to server): aux 0 bound, the payload the port in ASCII; else failed,
  the payload the reason (UTF-8). A failed worker then waits for DRAIN.
* ``DRAIN`` (server to worker): stop accepting, let the calls in flight finish within
  aux milliseconds, close the link, exit.

A worker that goes away is not restarted: its port keeps being served by the others, and
the server logs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from despina.transport.frames import Frame, FrameHandler, FrameLink
from despina.transport.listen import reserve_port

HELLO = 255
DRAIN = 254
#: Seconds a worker may take to start and bind before the pool fails to start.
START_TIMEOUT = 60.0

log = logging.getLogger("despina.transport")


class Worker(FrameHandler, Protocol):
    """A frontend's serving in one worker process (built by :func:`run_worker`)."""

    async def start(self, port: int) -> int:
        """Bind ``port`` (SO_REUSEPORT) and serve; the port bound. OSError when it cannot."""

    async def drain(self, grace: float) -> None:
        """Stop accepting; return once the calls in flight finished, or after ``grace``
        seconds (the rest are cut)."""


class WorkerPool:
    """N worker processes serving one port; ``handler(link)`` serves each worker's frames
    in this process (one link per worker)."""

    def __init__(
        self,
        name: str,
        module: str,
        args: Sequence[str],
        handler: Callable[[FrameLink], FrameHandler],
        exit_timeout: float,
    ) -> None:
        """``name``: the service in messages (``gRPC``); ``module``: the worker's entry
        (``python -m module``), ``args`` its arguments after SOCKET and PORT;
        ``exit_timeout``: how long :meth:`stop` waits for the workers to exit."""
        self.name = name
        self.module = module
        self.args = list(args)
        self.handler = handler
        self.exit_timeout = exit_timeout
        #: A private folder (0700) for the pool's socket; a frontend may put its own there.
        self.folder = Path(tempfile.mkdtemp(prefix="despina-workers-"))
        self.links: list[FrameLink] = []
        self.processes: list[asyncio.subprocess.Process] = []
        self.stopping = False
        self._server: asyncio.AbstractServer | None = None
        self._hellos: asyncio.Queue[Frame] = asyncio.Queue()

    async def start(self, count: int, address: str, port: int) -> int:
        """Start ``count`` workers on ``address:port``, or for port 0 on one ephemeral port
        all of them share; return the port once every worker bound it. OSError saying why
        when one cannot bind, exits or is not ready within :data:`START_TIMEOUT` (the
        pool is stopped then)."""
        try:
            if port:
                return await self._start(count, port)
            try:
                reserved = reserve_port(address)
            except OSError as exc:
                host = f"[{address}]" if ":" in address and address[0] != "[" else address
                raise OSError(f"cannot bind {self.name} to {host}:0: {exc}") from None
            with reserved:
                return await self._start(count, int(reserved.getsockname()[1]))
        except BaseException:
            await self.stop(0.0)
            raise

    async def _start(self, count: int, port: int) -> int:
        path = str(self.folder / "link.sock")
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self._connection, path)
        for _ in range(count):
            self.processes.append(
                await asyncio.create_subprocess_exec(
                    sys.executable, "-m", self.module, path, str(port), *self.args
                )
            )
        exits = [asyncio.ensure_future(process.wait()) for process in self.processes]
        try:
            for _ in range(count):
                hello = asyncio.ensure_future(self._hellos.get())
                done, _ = await asyncio.wait(
                    [hello, *exits], timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
                )
                if hello not in done:
                    hello.cancel()
                    raise OSError(self._not_started(exits))
                frame = hello.result()
                if frame.aux:
                    raise OSError(str(frame.payload, "utf-8", "replace"))
                port = int(bytes(frame.payload))
        finally:
            for waiter in exits:
                waiter.cancel()
        return port

    def _not_started(self, exits: Sequence[asyncio.Future[int]]) -> str:
        for waiter in exits:
            if waiter.done() and not waiter.cancelled():
                return (
                    f"a {self.name} worker process exited with status {waiter.result()} "
                    "before it was ready (see its error above)"
                )
        return f"{self.name} worker processes did not start within {START_TIMEOUT:g} s"

    def _connection(self) -> FrameLink:
        return FrameLink(lambda link: _WorkerEnd(self, link))

    def drain(self, grace: float) -> None:
        """Send DRAIN (once): every worker stops accepting, gets ``grace`` seconds for its
        connections and calls in flight, then exits; :meth:`stop` waits for that."""
        if self.stopping:
            return
        self.stopping = True
        for link in self.links:
            link.send(DRAIN, 0, round(grace * 1000))

    async def stop(self, grace: float) -> None:
        """:meth:`drain` unless drained already, then wait for the workers; one still
        running after ``exit_timeout`` is killed. Then the socket and the folder go."""
        self.drain(grace)
        try:
            if self.processes:
                await asyncio.wait(
                    [asyncio.ensure_future(p.wait()) for p in self.processes],
                    timeout=self.exit_timeout,
                )
        finally:
            running = [p for p in self.processes if p.returncode is None]
            for process in running:
                log.warning("killing %s worker process %d", self.name, process.pid)
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            for process in running:
                await process.wait()
            if self._server is not None:
                self._server.close()
            for link in list(self.links):
                if link.transport is not None:
                    link.transport.abort()
            shutil.rmtree(self.folder, ignore_errors=True)


class _WorkerEnd:
    """The server's end of one worker's link: HELLO to the pool, the rest to the frontend."""

    def __init__(self, pool: WorkerPool, link: FrameLink) -> None:
        self.pool = pool
        self.link = link
        self.calls = pool.handler(link)
        pool.links.append(link)

    def frame_received(self, frame: Frame) -> None:
        if frame.kind != HELLO:
            self.calls.frame_received(frame)
            return
        if self.pool.stopping:  # connected late: its pool failed to start
            self.link.send(DRAIN, 0, 0)
        self.pool._hellos.put_nowait(frame)

    def connection_lost(self) -> None:
        self.calls.connection_lost()
        pool = self.pool
        pool.links.remove(self.link)
        if not pool.stopping:
            log.error("a %s worker process went away; %d remain", pool.name, len(pool.links))


class _ServerEnd:
    """A worker's end of its link: DRAIN to :func:`run_worker`, the rest to the worker."""

    def __init__(self, make: Callable[[FrameLink, list[str]], Worker], args: list[str]) -> None:
        self._make = make
        self._args = args
        #: The grace DRAIN gave, in seconds (0 when the server went away).
        self.drain: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    def attach(self, link: FrameLink) -> _ServerEnd:
        self.worker = self._make(link, self._args)
        return self

    def frame_received(self, frame: Frame) -> None:
        if frame.kind != DRAIN:
            self.worker.frame_received(frame)
        elif not self.drain.done():
            self.drain.set_result(frame.aux / 1000)

    def connection_lost(self) -> None:
        self.worker.connection_lost()
        if not self.drain.done():
            self.drain.set_result(0.0)


async def run_worker(argv: Sequence[str], make: Callable[[FrameLink, list[str]], Worker]) -> None:
    """A worker process's life, ``argv`` being what :class:`WorkerPool` gave it (SOCKET
    PORT ARGS...): connect, build ``make(link, ARGS)``, start it on PORT, say HELLO, serve
    until DRAIN (or until the server goes away), drain, close the link."""
    socket_path, port, *args = argv
    end = _ServerEnd(make, args)
    loop = asyncio.get_running_loop()
    try:
        _, link = await loop.create_unix_connection(lambda: FrameLink(end.attach), socket_path)
    except OSError:
        return  # the server went away before this worker started
    try:
        bound = await end.worker.start(int(port))
    except OSError as exc:
        link.send(HELLO, 0, 1, str(exc).encode())
        await end.drain
    else:
        link.send(HELLO, 0, 0, str(bound).encode())
        await end.worker.drain(await end.drain)
    link.close()
    await link.closed
