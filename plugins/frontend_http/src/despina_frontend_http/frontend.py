"""The HTTP/REST frontend on the Despina server's event loop: Despina's HTTP/1.1 front
relaying to an aiohttp application (default), aiohttp alone, or worker processes."""

from __future__ import annotations

import argparse
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ClassVar

from aiohttp import web
from despina import reserve_port

from despina_frontend_http import (
    routes_admin,
    routes_generate,
    routes_infer,
    routes_meta,
    routes_shm,
)
from despina_frontend_http.context import Context
from despina_frontend_http.front import Front
from despina_frontend_http.responses import endpoint
from despina_frontend_http.restricted import Restrictions
from despina_frontend_http.workers import WorkerPool

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.http")


def build_app(context: Context) -> web.Application:
    """The aiohttp application with every endpoint (also usable without a socket)."""
    app = web.Application(
        client_max_size=context.max_input_size, handler_args={"max_field_size": 65536}
    )
    table = [
        *routes_infer.routes(context),
        *routes_generate.routes(context),
        *routes_meta.routes(context),
        *routes_admin.routes(context),
        *routes_shm.routes(context),
        *routes_meta.fallback(context),
    ]
    for method, path, group, handler in table:
        app.router.add_route(method, path, endpoint(group, context.restrictions)(handler))
    return app


class HttpFrontend:
    """``name = "http"``; serves ``--http-address:--http-port`` unless ``--allow-http=false``.

    ``--http-port 0`` binds an ephemeral port (one for all worker processes); :attr:`port`
    is the port bound.
    """

    name: ClassVar[str] = "http"

    def __init__(self, host: FrontendHost) -> None:
        self.host = host
        #: The port :meth:`start` bound; None before, and when HTTP is not served.
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._front: Front | None = None
        self._pool: WorkerPool | None = None
        self._executor: ThreadPoolExecutor | None = None

    async def start(self) -> None:
        """Bind and serve; OSError when the port cannot be bound."""
        settings = self.host.settings
        if not settings.allow_http:
            return
        pattern = settings.http_header_forward_pattern
        self._executor = ThreadPoolExecutor(
            max_workers=max(int(settings.http_thread_count), 1), thread_name_prefix="despina-http"
        )
        context = Context(
            host=self.host,
            max_input_size=int(settings.http_max_input_size),
            executor=self._executor,
            restrictions=Restrictions(settings.http_restricted_api),
            forward=re.compile(pattern, re.IGNORECASE) if pattern else None,
        )
        if settings.http_worker_processes > 0:
            self._pool = WorkerPool(
                context, build_app(context), int(settings.http_worker_processes)
            )
            try:
                self.port = await self._start_workers(self._pool, settings)
            except OSError:
                await self.stop()
                raise
            log.info(
                "Started HTTPService at %s:%d (%d worker processes)",
                settings.http_address,
                self.port,
                settings.http_worker_processes,
            )
            return
        if settings.http_stack == "despina":
            front = Front(context, build_app(context))
            try:
                self.port = await front.start(
                    settings.http_address, int(settings.http_port), bool(settings.reuse_http_port)
                )
            except OSError:
                self._executor.shutdown(wait=False)
                raise
            self._front = front
            log.info("Started HTTPService at %s:%d", settings.http_address, self.port)
            return
        runner = web.AppRunner(build_app(context), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(
            runner,
            settings.http_address,
            int(settings.http_port),
            reuse_port=bool(settings.reuse_http_port) or None,
        )
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            self._executor.shutdown(wait=False)
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        log.info("Started HTTPService at %s:%d", settings.http_address, self.port)

    @staticmethod
    async def _start_workers(pool: WorkerPool, settings: argparse.Namespace) -> int:
        """Start the workers on the flags' port, or on one ephemeral port all of them share
        for port 0; the port."""
        port = int(settings.http_port)
        if port:
            await pool.start(settings)
            return port
        with reserve_port(settings.http_address) as reserved:
            port = int(reserved.getsockname()[1])
            await pool.start(argparse.Namespace(**{**vars(settings), "http_port": port}))
        return port

    async def stop(self) -> None:
        """Close the listening socket and the connections (in-flight requests finish first)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._front is not None:
            await self._front.stop()
            self._front = None
        if self._pool is not None:
            await self._pool.stop()
            self._pool = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
