"""The OpenAI-compatible frontend: an aiohttp application on the server's event loop."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, ClassVar

from aiohttp import web
from despina import CORE, DespinaError

from despina_frontend_openai.catalog import Catalog
from despina_frontend_openai.errors import OpenAIError
from despina_frontend_openai.metrics import Metrics
from despina_frontend_openai.options import OPENAI_OPTIONS, OpenAIOptions, group_of
from despina_frontend_openai.routes import Context, Handler, routes

if TYPE_CHECKING:
    from despina import FrontendHost

log = logging.getLogger("despina.openai")


def _error_middleware(options: OpenAIOptions) -> web.middleware:  # type: ignore[valid-type]
    """Restricted groups answer 401 without their header; every error is OpenAI's JSON."""

    @web.middleware
    async def middleware(http: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            group = group_of(http.method, http.path)
            rule = options.restrictions.get(group) if group else None
            if rule is not None and not rule.allows(http.headers.get(rule.header)):
                raise OpenAIError(
                    f"This API is restricted, expecting header '{rule.header}' with valid value",
                    401,
                    code="invalid_auth",
                )
            return await handler(http)
        except OpenAIError as exc:
            return exc.response()
        except DespinaError as exc:
            return OpenAIError.of(exc).response()
        except web.HTTPException as exc:  # no route (404), wrong method (405), too large (413)
            if exc.status < 400:
                raise
            return OpenAIError(exc.reason, exc.status).response()
        except ConnectionError:  # the client went away mid-answer
            return web.Response(status=499)
        except Exception:
            log.exception("OpenAI request %s %s failed", http.method, http.path)
            return OpenAIError("internal server error", 500).response()

    return middleware


def build_app(host: FrontendHost, options: OpenAIOptions) -> web.Application:
    """The aiohttp application with every endpoint (also usable without a socket)."""
    app = web.Application(
        client_max_size=options.max_input_size, middlewares=[_error_middleware(options)]
    )
    catalog = Catalog(host, options, host.stash[CORE].model_repository)
    for method, path, handler in routes(Context(host, options, catalog, Metrics())):
        app.router.add_route(method, path, handler)
    return app


class OpenAIFrontend:
    """``name = "openai"``; serves ``--openai-address:--openai-port`` with
    ``--allow-openai=true``. ``--openai-port 0`` binds an ephemeral port (:attr:`port`)."""

    name: ClassVar[str] = "openai"

    def __init__(self, host: FrontendHost) -> None:
        self.host = host
        #: The port :meth:`start` bound; None before, and when the API is not served.
        self.port: int | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Bind and serve; OSError when the port cannot be bound."""
        options = self.host.stash[OPENAI_OPTIONS]
        if not options.allow:
            return
        runner = web.AppRunner(build_app(self.host, options), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, options.address, options.port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        log.info("Started OpenAI-compatible frontend at %s:%d", options.address, self.port)

    async def stop(self) -> None:
        """Close the listening socket and the connections."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
