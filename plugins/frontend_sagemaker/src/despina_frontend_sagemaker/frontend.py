"""The SageMaker frontend: its router served by the HTTP frontend's listener machinery on
a port of its own (``--sagemaker-port``), as tritonserver serves it."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, ClassVar

from despina_frontend_http import Context, Router, RouterListener, serve_router, v2_routes

from despina_frontend_sagemaker.options import SAGEMAKER_OPTIONS
from despina_frontend_sagemaker.routes import SageMakerRouter

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.sagemaker")


class SageMakerFrontend:
    """``name = "sagemaker"``; serves ``--sagemaker-address:--sagemaker-port`` with
    ``--allow-sagemaker=true``. ``--sagemaker-port 0`` binds an ephemeral port
    (:attr:`port`). Inference bodies are bounded by ``--http-max-input-size`` and the
    routes restricted by ``--http-restricted-api``, as tritonserver's are."""

    name: ClassVar[str] = "sagemaker"

    def __init__(self, host: FrontendHost) -> None:
        self.host = host
        #: The port :meth:`start` bound; None before, and when not allowed.
        self.port: int | None = None
        self.router: SageMakerRouter | None = None
        self._listener: RouterListener | None = None
        self._ctx: Context | None = None

    async def start(self) -> None:
        """Bind and serve; OSError when the port cannot be bound."""
        options = self.host.stash[SAGEMAKER_OPTIONS]
        if not options.allow:
            return
        # tritonserver's SageMaker server forwards no request headers to models
        ctx = self._ctx = dataclasses.replace(Context.from_options(self.host), forward=None)
        v2 = Router(v2_routes(ctx), ctx.restrictions)
        self.router = SageMakerRouter(ctx, v2, options)
        self._listener = await serve_router(
            self.router,
            self.host,
            options.address,
            options.port,
            max_input_size=ctx.max_input_size,
            max_header_size=ctx.max_header_size,
        )
        self.port = self._listener.port
        log.info("Started Sagemaker HTTPService at %s:%d", options.address, self.port)

    def drain(self) -> None:
        """Stop listening; open connections close after the answer they are owed."""
        if self._listener is not None:
            self._listener.drain()

    @property
    def settled(self) -> bool:
        """False while requests read before the stop are not answered."""
        return self._listener is None or self._listener.settled

    async def stop(self) -> None:
        """Close the listening socket and the connections."""
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
        if self._ctx is not None:
            self._ctx.executor.shutdown(wait=False)
            self._ctx = None
