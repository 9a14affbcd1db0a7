"""KServe v2 REST and Triton's extensions for a replica behind Ray Serve's HTTP proxy: the
HTTP frontend's router (:func:`despina_frontend_http.serving_router`: every route
``despina serve`` answers, with its codec, limits, texts, ``--http-restricted-api`` and
``--http-header-forward-pattern``, and the routes plugins add), adapted to a request
Ray Serve hands over.

Routes that change the server (model load and unload, shared-memory registration, log and
trace setting updates) would change only the replica that answers: they are refused
(:mod:`despina_deploy_ray.replicated`). Statistics are this replica's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterable, Mapping

from despina import DespinaError, FrontendHost
from despina_frontend_http import (
    Context,
    Request,
    Response,
    Route,
    StreamResponse,
    error_response,
    read_limited,
    serving_router,
    v2_routes,
)

from despina_deploy_ray.replicated import MODEL_CONTROL, SETTINGS, SHARED_MEMORY, PerReplica

#: The refusal of a state-changing route, by its restricted-API group.
REFUSALS = {
    "model-repository": MODEL_CONTROL,
    "shared-memory": SHARED_MEMORY,
    "logging": SETTINGS,
    "trace": SETTINGS,
}


def per_replica(route: Route) -> Route:
    """``route``, or a refusal in its place when it changes the server."""
    if not route.changes_state:
        return route
    text = REFUSALS[route.api]

    async def refuse(request: Request) -> Response:
        raise PerReplica(text)

    return dataclasses.replace(route, handler=refuse)


class RestRoutes:
    """The v2 REST routes of one replica's server, with its ``--http-*`` options."""

    def __init__(self, host: FrontendHost) -> None:
        self.ctx = Context.from_options(host)
        self.router = serving_router(self.ctx, [per_replica(r) for r in v2_routes(self.ctx)])

    def close(self) -> None:
        """Release the compression threads (the replica is stopping)."""
        self.ctx.executor.shutdown(wait=False)

    async def handle(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: AsyncIterable[bytes],
        query: str = "",
    ) -> Response | StreamResponse:
        """Answer one request: ``path`` percent-escaped as sent, ``body`` its chunks (read
        within ``--http-max-input-size``, else the 413)."""
        try:
            data = await read_limited(body, self.ctx.max_input_size)
        except DespinaError as exc:
            return error_response(exc.http_status, str(exc))
        lowered = {name.lower(): value for name, value in headers.items()}
        return await self.router.handle(Request(method, path, lowered, data, query))
