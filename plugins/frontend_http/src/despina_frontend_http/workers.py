"""``--http-worker-processes N``: N processes parse HTTP on the shared port (SO_REUSEPORT)
and forward to this process, which keeps the models, the statistics and shared memory.

This process serves the full application on a private Unix socket (proxied endpoints) and
takes INFER frames on another; both live in a 0700 temporary folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

from aiohttp import web

from despina_frontend_http.context import Context
from despina_frontend_http.link import WorkerConnection
from despina_frontend_http.options import HttpOptions


class WorkerPool:
    """Starts the worker processes and the sockets they use; ``stop`` ends them."""

    def __init__(self, ctx: Context, app: web.Application, count: int) -> None:
        self.ctx = ctx
        self.app = app
        self.count = count
        self.folder = Path(tempfile.mkdtemp(prefix="despina-http-"))
        self.runner: web.AppRunner | None = None
        self.link: asyncio.base_events.Server | None = None
        self.connections: list[WorkerConnection] = []
        self.processes: list[asyncio.subprocess.Process] = []

    async def start(self, options: HttpOptions) -> None:
        """Start the workers; OSError if one cannot bind the port or start in time."""
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.runner.setup()
        proxy = str(self.folder / "app.sock")
        await web.UnixSite(self.runner, proxy).start()
        hello: asyncio.Queue[int] = asyncio.Queue()

        def connection() -> WorkerConnection:
            made = WorkerConnection(self.ctx, hello)
            self.connections.append(made)
            return made

        link = str(self.folder / "link.sock")
        self.link = await asyncio.get_running_loop().create_unix_server(connection, link)
        worker_options = json.dumps(options.worker_settings())
        for _ in range(self.count):
            self.processes.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "despina_frontend_http.worker",
                    link,
                    proxy,
                    worker_options,
                )
            )
        await self._wait_hello(hello)

    async def _wait_hello(self, hello: asyncio.Queue[int]) -> None:
        exits = [asyncio.ensure_future(p.wait()) for p in self.processes]
        try:
            for _ in range(self.count):
                got = asyncio.ensure_future(hello.get())
                done, _ = await asyncio.wait(
                    [got, *exits], timeout=60, return_when=asyncio.FIRST_COMPLETED
                )
                if got not in done:
                    got.cancel()
                    raise OSError("an HTTP worker process failed to start (see its error above)")
        finally:
            for waiter in exits:
                waiter.cancel()

    async def stop(self) -> None:
        """Close the link (workers exit), wait for them, remove the sockets."""
        if self.link is not None:
            self.link.close()
        for connection in self.connections:
            if connection.transport is not None:
                connection.transport.close()
        for process in self.processes:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self.runner is not None:
            await self.runner.cleanup()
        shutil.rmtree(self.folder, ignore_errors=True)
