"""``despina_http_routes``: a plugin's routes are served on the HTTP port beside the v2
routes (with the router's 404/405, restricted-API groups and streams), and a plugin
claiming a route already served stops the start with an error naming it."""

from __future__ import annotations

import http.client
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest
from despina import FrontendHost, hookimpl
from despina.testing import RunningServer
from despina_frontend_http import Request, Response, Route, StreamResponse, json_response


class GreetingPlugin:
    """Adds ``GET /greeting/{name}`` (group ``metadata``) and a streamed ``/ticks``."""

    @hookimpl
    def despina_http_routes(self, host: FrontendHost) -> list[Route]:
        async def greet(request: Request) -> Response:
            return json_response({"hello": request.params["name"], "ready": host.ready})

        async def ticks(request: Request) -> StreamResponse:
            async def chunks() -> AsyncGenerator[bytes, None]:
                for i in range(3):
                    yield b"tick %d\n" % i

            return StreamResponse(200, {"Content-Type": "text/plain"}, chunks())

        return [
            Route("GET", "/greeting/{name}", greet, "metadata"),
            Route("GET", "/ticks", ticks),
        ]


class ClashingPlugin:
    @hookimpl
    def despina_http_routes(self) -> list[Route]:
        async def ready(request: Request) -> Response:
            return Response(200)

        return [Route("GET", "/v2/health/ready", ready)]


def get(running: RunningServer, path: str, headers: dict[str, str] | None = None) -> Any:
    connection = http.client.HTTPConnection("127.0.0.1", running.http_port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_plugin_routes_share_the_port(serve: Callable[..., RunningServer]) -> None:
    running = serve("--http-restricted-api=metadata:key=k", plugins=(GreetingPlugin(),))
    assert get(running, "/greeting/w%C3%B6rld", {"key": "k"}) == (
        200,
        '{"hello":"wörld","ready":true}'.encode(),
    )
    assert get(running, "/greeting/x") == (
        403,
        b'{"error":"This API is restricted, expecting header \'key\'"}',
    )
    assert get(running, "/ticks") == (200, b"tick 0\ntick 1\ntick 2\n")
    assert get(running, "/greeting") == (404, b'{"error":"Not Found"}')
    assert get(running, "/v2/health/ready") == (200, b"")


def test_a_plugin_route_served_already_stops_the_start(
    serve: Callable[..., RunningServer],
) -> None:
    with pytest.raises(ValueError, match=r"GET /v2/health/ready is already served"):
        serve(plugins=(ClashingPlugin(),))
