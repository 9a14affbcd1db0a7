"""aiohttp's listening side with the frontend's limits (``--http-stack=aiohttp`` and the
worker processes): TLS, ``--http-max-connections``, ``--http-max-header-size`` and
Triton's ``{"error": ...}`` JSON for requests aiohttp cannot parse.

:class:`GuardedSite` is a ``TCPSite`` whose listener makes :class:`JsonErrorsHandler`
protocols, or, past the connection limit, a :class:`Refused` one that closes at once.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

log = logging.getLogger("despina.http")


def head_too_large(limit: int) -> str:
    """The 431 answer's text (both stacks)."""
    return (
        f"request line and headers exceed {limit} bytes; "
        "use --http-max-header-size to increase the limit"
    )


def handler_args(max_header_size: int) -> dict[str, int]:
    """aiohttp's parser settings for ``--http-max-header-size``: it bounds the request
    line and each header line (at most ``max_headers``, 128, of them)."""
    return {"max_line_size": max_header_size, "max_field_size": max_header_size}


class ConnectionCount:
    """Open connections of one listener, against ``--http-max-connections``."""

    __slots__ = ("limit", "open")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0


class JsonErrorsHandler(RequestHandler):
    """aiohttp's protocol, answering what it cannot parse in Triton's JSON (431 for a
    request line or header over the limit), counting its connection."""

    __slots__ = ("_count", "_head_limit")

    def __init__(self, manager: web.Server, count: ConnectionCount, head_limit: int) -> None:
        super().__init__(
            manager,
            loop=asyncio.get_running_loop(),
            access_log=None,  # type: ignore[arg-type]  # aiohttp's way to turn it off
            max_line_size=head_limit,
            max_field_size=head_limit,
        )
        self._count = count
        self._head_limit = head_limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._count.open += 1
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._count.open -= 1
        super().connection_lost(exc)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if isinstance(exc, LineTooLong):
            status, text = 431, head_too_large(self._head_limit)
        elif status >= 500:
            log.error("HTTP request failed", exc_info=exc)
            text = "internal server error"
        else:
            text = f"malformed HTTP request: {message or status}"
        if request.writer.output_size > 0:  # the answer began: nothing more can be said
            raise ConnectionError("the response was already started")
        response = web.Response(
            status=status,
            body=orjson.dumps({"error": text}),
            headers={"Content-Type": "application/json"},
        )
        response.force_close()
        return response


class Refused(asyncio.Protocol):
    """A connection over ``--http-max-connections``: closed as soon as it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class GuardedSite(web.TCPSite):
    """A TCP site serving ``runner``'s application with :class:`JsonErrorsHandler`,
    ``--http-max-connections`` and an optional TLS context."""

    __slots__ = ("_count", "_head_limit")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        *,
        max_connections: int,
        max_header_size: int,
        ssl_context: ssl.SSLContext | None = None,
        reuse_port: bool | None = None,
        backlog: int = 1024,
    ) -> None:
        super().__init__(
            runner, host, port, ssl_context=ssl_context, reuse_port=reuse_port, backlog=backlog
        )
        self._count = ConnectionCount(max_connections)
        self._head_limit = max_header_size

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        count, head_limit = self._count, self._head_limit

        def protocol() -> Any:
            if count.open >= count.limit:
                return Refused()
            return JsonErrorsHandler(server, count, head_limit)

        self._server = await asyncio.get_running_loop().create_server(
            protocol,
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        self._bound_port = int(self._server.sockets[0].getsockname()[1])
