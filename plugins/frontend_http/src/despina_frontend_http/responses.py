"""Responses and their helpers: Triton's ``{"error": ...}`` JSON for every failure, and
request bodies read as JSON objects."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from despina import DespinaError, InvalidArgument

from despina_frontend_http.limits import check_json_depth
from despina_frontend_http.options import DEFAULT_MAX_JSON_DEPTH

log = logging.getLogger("despina.http")

JSON = "application/json"
JSON_HEADERS = {"Content-Type": JSON}


@dataclass(frozen=True, slots=True)
class Response:
    """A whole response. ``body`` is bytes, or buffers written one after the other (a
    binary inference answer: its JSON header, then its tensors, unjoined)."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes | Sequence[bytes | memoryview] = b""

    @property
    def parts(self) -> Sequence[bytes | memoryview]:
        """The body as buffers."""
        return (self.body,) if isinstance(self.body, bytes) else self.body

    def joined(self) -> bytes:
        """The body as one bytes object."""
        return self.body if isinstance(self.body, bytes) else b"".join(self.body)


def json_response(data: Any, status: int = 200) -> Response:
    """``data`` as a JSON body (orjson)."""
    return Response(status, JSON_HEADERS, orjson.dumps(data))


def error_response(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """Triton's error body ``{"error": message}`` (with ``headers`` added)."""
    if headers is None:
        return json_response({"error": message}, status)
    return Response(status, {**JSON_HEADERS, **headers}, orjson.dumps({"error": message}))


#: 200 with an empty body (health, load, unload, register, ...).
OK = Response()


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
