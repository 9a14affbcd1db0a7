"""The HTTP/REST frontend on the Despina server's event loop: Despina's HTTP/1.1 front
relaying to an aiohttp application (default), aiohttp alone, or worker processes."""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ClassVar

from aiohttp import web
from despina import CORE

from despina_frontend_http import (
    routes_admin,
    routes_generate,
    routes_infer,
    routes_meta,
    routes_shm,
)
from despina_frontend_http.aioserver import CLOSE_WAIT_S, GuardedSite, handler_args
from despina_frontend_http.context import Context
from despina_frontend_http.front import Front
from despina_frontend_http.options import HTTP_OPTIONS, HttpOptions
from despina_frontend_http.responses import endpoint
from despina_frontend_http.restricted import Restrictions
from despina_frontend_http.workers import HttpWorkers

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.http")


def build_app(context: Context) -> web.Application:
    """The aiohttp application with every endpoint (also usable without a socket)."""
    app = web.Application(
        client_max_size=context.max_input_size,
        handler_args=handler_args(context.max_header_size),
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


def _service(options: HttpOptions) -> str:
    """The log's name for the service: Triton's ``HTTPService``, or ``HTTPSService``."""
    return "HTTPSService" if options.tls else "HTTPService"


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
        self._site: GuardedSite | None = None
        self._front: Front | None = None
        self._workers: HttpWorkers | None = None
        self._executor: ThreadPoolExecutor | None = None

    async def start(self) -> None:
        """Bind and serve; OSError when the port cannot be bound."""
        options = self.host.stash[HTTP_OPTIONS]
        if not options.allow_http:
            return
        pattern = options.header_forward_pattern
        self._executor = ThreadPoolExecutor(
            max_workers=options.thread_count, thread_name_prefix="despina-http"
        )
        context = Context(
            host=self.host,
            max_input_size=options.max_input_size,
            executor=self._executor,
            restrictions=Restrictions(options.restrictions),
            forward=re.compile(pattern, re.IGNORECASE) if pattern else None,
            max_header_size=options.max_header_size,
            max_json_depth=options.max_json_depth,
            max_outputs=options.max_outputs,
        )
        if options.worker_processes > 0:
            exit_timeout = float(self.host.stash[CORE].exit_timeout_secs)
            self._workers = HttpWorkers(context, build_app(context), options, exit_timeout)
            try:
                self.port = await self._workers.start()
            except OSError:
                await self.stop()
                raise
            log.info(
                "Started %s at %s:%d (%d worker processes)",
                _service(options),
                options.address,
                self.port,
                options.worker_processes,
            )
            return
        if options.stack == "despina":
            front = Front(context, build_app(context), options.max_connections)
            try:
                self.port = await front.start(
                    options.address, options.port, options.reuse_port, options.ssl_context
                )
            except OSError:
                self._executor.shutdown(wait=False)
                raise
            self._front = front
            log.info("Started %s at %s:%d", _service(options), options.address, self.port)
            return
        runner = web.AppRunner(build_app(context), access_log=None, handle_signals=False)
        await runner.setup()
        site = GuardedSite(
            runner,
            options.address,
            options.port,
            max_connections=options.max_connections,
            max_header_size=options.max_header_size,
            max_input_size=options.max_input_size,
            ssl_context=options.ssl_context,
            reuse_port=options.reuse_port or None,
        )
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            self._executor.shutdown(wait=False)
            raise
        self._runner, self._site = runner, site
        self.port = int(runner.addresses[0][1])
        log.info("Started %s at %s:%d", _service(options), options.address, self.port)

    def drain(self) -> None:
        """The server begins to stop: close the listening socket; every answer from now
        on says ``Connection: close`` and closes its connection; an idle connection waits
        DRAIN_IDLE_S for a request its client may be sending. Worker processes do the same
        (DRAIN), their requests in flight getting ``--exit-timeout-secs``."""
        if self._front is not None:
            self._front.drain()
        if self._site is not None:
            self._site.drain()
        if self._workers is not None:
            self._workers.pool.drain(self._workers.pool.exit_timeout)

    async def stop(self) -> None:
        """Drain unless draining; once the connections closed (those still open after
        CLOSE_WAIT_S are cut), close the application."""
        self.drain()
        if self._site is not None:
            await self._site.drained(CLOSE_WAIT_S)
            self._site = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._front is not None:
            await self._front.stop()
            self._front = None
        if self._workers is not None:
            await self._workers.stop()
            self._workers = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
