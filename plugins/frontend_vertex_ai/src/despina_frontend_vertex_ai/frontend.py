"""The Vertex AI frontend: its router served by the HTTP frontend's listener machinery on
a port of its own (``--vertex-ai-port``), as tritonserver serves it."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, ClassVar

from despina import InvalidArgument
from despina_frontend_http import (
    Context,
    OwnPortFrontend,
    Response,
    Router,
    v2_routes,
)

from despina_frontend_vertex_ai.options import VERTEX_OPTIONS, VertexOptions
from despina_frontend_vertex_ai.routes import VertexRouter

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.vertex_ai")


def default_model(host: FrontendHost, options: VertexOptions) -> str:
    """The model the prediction route runs: ``--vertex-ai-default-model``, which must be
    loaded, else the only ready model; InvalidArgument with tritonserver's texts."""
    if not options.predict_route:
        raise InvalidArgument("API_PREDICT_ROUTE is not defined for Vertex AI endpoint")
    if not options.health_route:
        raise InvalidArgument("AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint")
    ready = [row["name"] for row in host.repository_index(ready_only=True)]
    if not options.default_model:
        if len(ready) != 1:
            raise InvalidArgument(
                "Expect the model repository contains only a single model if default model "
                "is not specified"
            )
        return str(ready[0])
    if options.default_model not in ready:
        raise InvalidArgument(f"Expect the default model '{options.default_model}' is loaded")
    return options.default_model


async def metrics_page(host: FrontendHost) -> Response | None:
    """The metrics exporter's page, when despina-metrics-prometheus is installed and on."""
    try:
        from despina_metrics_prometheus import metrics_page as page
    except ImportError:
        return None
    return page(host)


class VertexAiFrontend(OwnPortFrontend):
    """``name = "vertex_ai"``; serves ``--vertex-ai-address:--vertex-ai-port`` with
    ``--allow-vertex-ai=true`` (the default under ``AIP_MODE=PREDICTION``).
    ``--vertex-ai-port 0`` binds an ephemeral port (:attr:`port`). Inference bodies are
    bounded by ``--http-max-input-size`` and the routes restricted by
    ``--http-restricted-api``, as tritonserver's are."""

    name: ClassVar[str] = "vertex_ai"

    def __init__(self, host: FrontendHost) -> None:
        super().__init__(host)
        #: The model the prediction route runs (set by :meth:`start`).
        self.default_model: str | None = None

    async def start(self) -> None:
        """Check the routes and the default model (InvalidArgument), bind and serve
        (OSError when the port cannot be bound)."""
        options = self.host.stash[VERTEX_OPTIONS]
        if not options.allow:
            return
        model = self.default_model = default_model(self.host, options)
        # tritonserver's Vertex AI server forwards no request headers to models
        ctx = dataclasses.replace(Context.from_options(self.host), forward=None)
        v2 = Router(v2_routes(ctx), ctx.restrictions)
        host = self.host

        async def metrics() -> Response | None:
            return await metrics_page(host)

        router = VertexRouter(ctx, v2, options, model, metrics)
        await self.listen(
            router,
            options.address,
            options.port,
            ctx=ctx,
            max_input_size=ctx.max_input_size,
            max_header_size=ctx.max_header_size,
        )
        log.info("Started Vertex AI HTTPService at %s:%d", options.address, self.port)
