"""The HTTP/REST frontend on the Despina server's event loop: Despina's HTTP/1.1 front
(:mod:`~despina_frontend_http.h1_server`) on the port, answering through the router of the v2
routes and the plugins' (:func:`~despina_frontend_http.v2.serving_router`)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, ClassVar

from despina import AddressInUse

from despina_frontend_http.context import Context
from despina_frontend_http.h1_server import Front
from despina_frontend_http.options import HTTP_OPTIONS, HttpOptions
from despina_frontend_http.v2 import serving_router

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from despina import FrontendHost

log = logging.getLogger("despina.http")


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
        context = Context.from_options(self.host)
        self._executor = context.executor
        try:
            front = Front(
                context,
                serving_router(context),
                options.max_connections,
                options.handshake_timeout_secs,
            )
            self.port = await front.start(
                options.address, options.port, options.reuse_port, options.ssl_context
            )
        except BaseException as exc:
            self._executor.shutdown(wait=False)
            if isinstance(exc, AddressInUse):
                raise AddressInUse(exc.address, "HTTP") from None
            raise
        self._front = front
        log.info("Started %s at %s:%d", _service(options), options.address, self.port)

    def refuse_connections(self) -> None:
        """The server begins to stop (a ``HoldsConnections`` of the plugin ports, as
        Triton's HTTP service): close the listening socket; the open connections are
        served as before."""
        if self._front is not None:
            self._front.refuse_connections()

    @property
    def open_connections(self) -> int:
        """The connections open now: the server waits for their clients to close them
        before the models stop."""
        return 0 if self._front is None else len(self._front.connections)

    def drain(self) -> None:
        """The models are stopped: every answer from now on says ``Connection: close``
        and closes its connection; an idle connection waits
        :data:`~despina_frontend_http.h1_server.DRAIN_IDLE_S` for a request its client may be
        sending."""
        if self._front is not None:
            self._front.drain()

    @property
    def settled(self) -> bool:
        """Every request read is answered (:attr:`~despina_frontend_http.h1_server.Front.settled`):
        the server's stop waits for it before the models unload."""
        return self._front is None or self._front.settled

    async def stop(self) -> None:
        """Drain unless draining; once the connections closed (those still open after
        :data:`~despina_frontend_http.h1_server.CLOSE_WAIT_S` are cut), release the threads."""
        if self._front is not None:
            await self._front.stop()
            self._front = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None
