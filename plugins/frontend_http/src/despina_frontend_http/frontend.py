"""The HTTP/REST frontend on the Despina server's event loop: Despina's HTTP/1.1 front
(:mod:`~despina_frontend_http.front`) on the port, relaying what it does not answer
itself to the aiohttp application built here."""

from __future__ import annotations

import logging
import re
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, ClassVar

from aiohttp import web

from despina_frontend_http import (
    routes_admin,
    routes_generate,
    routes_infer,
    routes_meta,
    routes_shm,
)
from despina_frontend_http.context import Context
from despina_frontend_http.front import Front
from despina_frontend_http.options import HTTP_OPTIONS, HttpOptions
from despina_frontend_http.responses import endpoint
from despina_frontend_http.restricted import Restrictions

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.http")


def build_app(context: Context) -> web.Application:
    """The aiohttp application with every endpoint (also usable without a socket). Its
    parser bounds each head line by ``--http-max-header-size`` (the front bounds their
    sum), so that no line the front let through is refused by aiohttp's own default."""
    limit = context.max_header_size
    app = web.Application(
        client_max_size=context.max_input_size,
        handler_args={"max_line_size": limit, "max_field_size": limit},
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

    ``--http-port 0`` binds an ephemeral port; :attr:`port` is the port bound.
    """

    name: ClassVar[str] = "http"

    def __init__(self, host: FrontendHost) -> None:
        self.host = host
        #: The port :meth:`start` bound; None before, and when HTTP is not served.
        self.port: int | None = None
        self._front: Front | None = None
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

    def drain(self) -> None:
        """The server begins to stop: close the listening socket; every answer from now
        on says ``Connection: close`` and closes its connection; an idle connection waits
        :data:`~despina_frontend_http.front.DRAIN_IDLE_S` for a request its client may be
        sending."""
        if self._front is not None:
            self._front.drain()

    async def stop(self) -> None:
        """Drain unless draining; once the connections closed (those still open after
        :data:`~despina_frontend_http.front.CLOSE_WAIT_S` are cut), close the application."""
        if self._front is not None:
            await self._front.stop()
            self._front = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
