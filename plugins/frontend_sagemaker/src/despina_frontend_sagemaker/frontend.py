"""The SageMaker frontend: its router served by the HTTP frontend's listener machinery on
a port of its own (``--sagemaker-port``), as tritonserver serves it."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, ClassVar

from despina_frontend_http import Context, OwnPortFrontend, Router, v2_routes

from despina_frontend_sagemaker.options import SAGEMAKER_OPTIONS
from despina_frontend_sagemaker.routes import SageMakerRouter

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.sagemaker")


class SageMakerFrontend(OwnPortFrontend):
    """``name = "sagemaker"``; serves ``--sagemaker-address:--sagemaker-port`` with
    ``--allow-sagemaker=true``. ``--sagemaker-port 0`` binds an ephemeral port
    (:attr:`port`). Inference bodies are bounded by ``--http-max-input-size`` and the
    routes restricted by ``--http-restricted-api``, as tritonserver's are."""

    name: ClassVar[str] = "sagemaker"

    def __init__(self, host: FrontendHost) -> None:
        super().__init__(host)
        self.router: SageMakerRouter | None = None

    async def start(self) -> None:
        """Bind and serve; OSError when the port cannot be bound."""
        options = self.host.stash[SAGEMAKER_OPTIONS]
        if not options.allow:
            return
        # tritonserver's SageMaker server forwards no request headers to models
        ctx = dataclasses.replace(Context.from_options(self.host), forward=None)
        v2 = Router(v2_routes(ctx), ctx.restrictions)
        self.router = SageMakerRouter(ctx, v2, options)
        await self.listen(
            self.router,
            options.address,
            options.port,
            ctx=ctx,
            max_input_size=ctx.max_input_size,
            max_header_size=ctx.max_header_size,
        )
        log.info("Started Sagemaker HTTPService at %s:%d", options.address, self.port)
