"""``--http-worker-processes N``: N processes parse HTTP on the shared port (SO_REUSEPORT)
and forward to this process, which keeps the models, the statistics and shared memory.

The workers are the core's :class:`~despina.WorkerPool`; INFER frames reach
:class:`~despina_frontend_http.link.WorkerCalls`. This process also serves the full
application on a Unix socket in the pool's private folder (the endpoints the workers
proxy).
"""

from __future__ import annotations

import json

from aiohttp import web
from despina import WorkerPool

from despina_frontend_http.context import Context
from despina_frontend_http.link import WorkerCalls
from despina_frontend_http.options import HttpOptions

#: Seconds the calls in flight get when the workers drain (as the in-process front).
DRAIN_GRACE = 5.0


class HttpWorkers:
    """The worker processes and the proxied application; ``stop`` ends them."""

    def __init__(
        self, ctx: Context, app: web.Application, options: HttpOptions, exit_timeout: float
    ) -> None:
        self.options = options
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self.pool = WorkerPool(
            "HTTP",
            "despina_frontend_http.worker",
            [],
            lambda link: WorkerCalls(ctx, link),
            exit_timeout,
        )

    async def start(self) -> int:
        """Start the workers; the port they serve. OSError if one cannot bind it or start
        in time."""
        await self.runner.setup()
        proxy = str(self.pool.folder / "app.sock")
        await web.UnixSite(self.runner, proxy).start()
        self.pool.args = [proxy, json.dumps(self.options.worker_settings())]
        options = self.options
        return await self.pool.start(options.worker_processes, options.address, options.port)

    async def stop(self) -> None:
        """Drain the workers, then close the proxied application."""
        await self.pool.stop(DRAIN_GRACE)
        await self.runner.cleanup()
