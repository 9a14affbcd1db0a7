"""The OpenAI-compatible frontend: its routes served by the HTTP frontend's listener
machinery, on its own port (``--openai-port``) or, with ``--openai-on-http-port``, on the
HTTP port beside the v2 routes (``despina_http_routes``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, ClassVar

from despina import CORE
from despina_frontend_http import OwnPortFrontend, Request, Route, Router

from despina_frontend_openai.catalog import Catalog
from despina_frontend_openai.errors import OpenAIError
from despina_frontend_openai.metrics import METRICS_PATH, Metrics
from despina_frontend_openai.options import OPENAI_OPTIONS, OpenAIOptions

if TYPE_CHECKING:
    from despina import FrontendHost

    from despina_frontend_openai.routes import Answer

log = logging.getLogger("despina.openai")

#: Where the generation metrics are on the HTTP port, whose ``/metrics`` is the
#: Prometheus exporter's (``--metrics-on-http-port``).
HTTP_PORT_METRICS_PATH = "/metrics/openai"
#: aiohttp's reasons, which the OpenAI port answered unmatched requests with.
_UNMATCHED = {404: "Not Found", 405: "Method Not Allowed"}


def openai_routes(host: FrontendHost, options: OpenAIOptions, metrics_path: str) -> list[Route]:
    """Every OpenAI endpoint over ``host``, the generation metrics at ``metrics_path``.
    The routes (pydantic schemas, tokenizers) are imported here, by a server that serves
    them: one that does not keeps 8 MiB less resident."""
    from despina_frontend_openai.routes import Context, routes

    catalog = Catalog(host, options, host.stash[CORE].model_repository)
    return routes(Context(host, options, catalog, Metrics()), metrics_path)


def http_port_routes(host: FrontendHost) -> list[Route]:
    """The routes to add to the HTTP port: none unless ``--allow-openai`` and
    ``--openai-on-http-port`` are true."""
    options = host.stash[OPENAI_OPTIONS]
    if not (options.allow and options.on_http_port):
        return []
    return openai_routes(host, options, HTTP_PORT_METRICS_PATH)


class OpenAIRouter(Router):
    """A router answering unmatched requests in OpenAI's error format (404, 405)."""

    async def handle(self, request: Request) -> Answer:
        """The route's answer (its handler answers its own failures), else the error."""
        found = self.match(request.method, request.path)
        if isinstance(found, int):
            return OpenAIError(_UNMATCHED[found], found).response()
        route, request.params = found
        return await route.handler(request)


class OpenAIFrontend(OwnPortFrontend):
    """``name = "openai"``; serves ``--openai-address:--openai-port`` with
    ``--allow-openai=true`` (unless ``--openai-on-http-port``). ``--openai-port 0`` binds
    an ephemeral port (:attr:`port`)."""

    name: ClassVar[str] = "openai"

    async def start(self) -> None:
        """Bind and serve; OSError when the port cannot be bound."""
        options = self.host.stash[OPENAI_OPTIONS]
        if not options.allow or options.on_http_port:
            return
        router = OpenAIRouter(openai_routes(self.host, options, METRICS_PATH))
        await self.listen(
            router,
            options.address,
            options.port,
            max_input_size=options.max_input_size,
            input_size_flag="--openai-max-input-size",
        )
        log.info("Started OpenAI-compatible frontend at %s:%d", options.address, self.port)
