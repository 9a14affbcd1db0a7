"""Response helpers and the endpoint wrapper: Triton's ``{"error": ...}`` JSON for every
failure, and the ``--http-restricted-api`` check before the handler runs."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web
from despina import DespinaError, InvalidArgument

from despina_frontend_http.limits import check_json_depth
from despina_frontend_http.plugin import DEFAULT_MAX_JSON_DEPTH
from despina_frontend_http.restricted import Restrictions

log = logging.getLogger("despina.http")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

JSON = "application/json"
_JSON_HEADERS = {"Content-Type": JSON}


def json_response(data: Any, status: int = 200) -> web.Response:
    """``data`` as a JSON body (orjson)."""
    return web.Response(body=orjson.dumps(data), status=status, headers=_JSON_HEADERS)


def error_response(status: int, message: str) -> web.Response:
    """Triton's error body ``{"error": message}``."""
    return json_response({"error": message}, status)


def ok() -> web.Response:
    """200 with an empty body (health, load, unload, register, ...)."""
    return web.Response(status=200)


def json_body(
    raw: bytes, allow_empty: bool = True, max_depth: int = DEFAULT_MAX_JSON_DEPTH
) -> dict[str, Any]:
    """A request's JSON object; InvalidArgument for malformed JSON, a non-object or JSON
    nested deeper than ``max_depth``."""
    if not raw.strip():
        if allow_empty:
            return {}
        raise InvalidArgument("failed to parse the request JSON buffer: the body is empty")
    check_json_depth(raw, max_depth)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument("failed to parse the request JSON buffer: expected a JSON object")
    return value


def failure(exc: Exception, where: str) -> tuple[int, str]:
    """(HTTP status, message) for a handler's exception: a DespinaError's own; anything
    else 500 with a text naming no internals (the traceback is logged, naming ``where``)."""
    if isinstance(exc, DespinaError):
        return exc.http_status, str(exc)
    log.error("HTTP handler %s failed", where, exc_info=exc)
    return 500, "internal server error"


def endpoint(group: str, restrictions: Restrictions) -> Callable[[Handler], Handler]:
    """Wrap a handler: restricted-API check, then DespinaError -> Triton's error JSON."""

    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                if restrictions.rules:
                    restrictions.check(group, request.headers)
                return await handler(request)
            except web.HTTPException:
                raise
            except Exception as exc:  # noqa: BLE001 - answered in Triton's error format
                return error_response(*failure(exc, handler.__name__))

        return run

    return wrap
