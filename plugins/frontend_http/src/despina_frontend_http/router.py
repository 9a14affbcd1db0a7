"""A framework-free HTTP router: a request (method, path, headers, body) in, a response
out, or a streamed one (server-sent events).

Every v2/Triton route is a :class:`Route` in one table (:mod:`despina_frontend_http.v2`);
the HTTP port's front serves a :class:`Router` over its own HTTP/1.1 engine, and a host
with its own HTTP server (a Ray Serve replica) adapts its requests to :class:`Request` and
answers with what :meth:`Router.handle` returns. Plugins add routes through the
``despina_http_routes`` hook.

Patterns are paths whose ``{name}`` segments match one path segment and ``{name:regex}``
segments what the regex matches. A path matches with its percent-escapes decoded, except
``%2F`` and ``%25``, which stay inside their segment (``/v2/models/a%2Fb`` is model
``a/b``); parameters are fully decoded. A path that matches no route is Triton's 404
``{"error": "Not Found"}``, one matched only by routes of other methods its 405
``{"error": "Method Not Allowed"}``; a handler's
:class:`~despina.errors.DespinaError` is its status and ``{"error": text}``, any other
exception a logged 500.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from despina import BodyBudgetExhausted, BodyCharge

from despina_frontend_http.responses import Response, error_response, failure
from despina_frontend_http.restricted import Restrictions

#: Sent with a 503 refusing a body while others hold the request-body budget.
RETRY_AFTER = {"Retry-After": "1"}
_SEGMENT = re.compile(r"\{(\w+)(?::([^{}]*(?:\{[^{}]*\}[^{}]*)*))?\}")


def _always() -> bool:
    return True


@dataclass(slots=True)
class Request:
    """One HTTP request, read whole."""

    method: str
    #: The path as sent (percent-escaped), without the query.
    path: str
    #: Header names lower-cased; a repeated header's last value.
    headers: Mapping[str, str]
    body: bytes = b""
    #: What follows ``?`` in the target ("" without one).
    query: str = ""
    #: The client's address (host, port), when known.
    peer: tuple[str, int] | None = None
    #: Whether the request came over TLS.
    secure: bool = False
    #: The matched route's path parameters, percent-decoded (set by the router).
    params: dict[str, str] = field(default_factory=dict)
    #: Whether the client is still connected (a handler cancels work for one gone).
    connected: Callable[[], bool] = _always
    #: When the request's first byte came (``time.monotonic_ns``), or 0 when not timed.
    received_ns: int = 0
    #: When the request was read whole (``time.monotonic_ns``), or 0 when not known: an
    #: inference read before the server began stopping runs while it stops.
    read_ns: int = 0
    #: What the inflated body holds of the server-wide budget (set by
    #: :func:`~despina_frontend_http.body.read_body`; released once the handler returned).
    charge: BodyCharge | None = None

    @property
    def decoded_path(self) -> str:
        """:attr:`path` with its percent-escapes decoded."""
        return unquote(self.path)


@dataclass(slots=True)
class StreamResponse:
    """A response whose body comes as it is made (``Transfer-Encoding: chunked``). Whoever
    writes it closes ``chunks`` (``aclose``) when it stops early: the client went away."""

    status: int
    headers: Mapping[str, str]
    chunks: AsyncGenerator[bytes, None]


Answer = Response | StreamResponse
Handler = Callable[[Request], Awaitable[Answer]]


@dataclass(frozen=True, slots=True)
class Route:
    """``method`` requests whose path matches ``pattern`` are answered by ``handler``.

    ``api`` is the ``--http-restricted-api`` group (``""``: never restricted);
    ``changes_state``: the route changes the server (a model load, a registration, a
    settings update), which a host serving one replica of many refuses."""

    method: str
    pattern: str
    handler: Handler
    api: str = ""
    changes_state: bool = False


class _Compiled:
    """A route's pattern as a regex, and the literal prefix every match starts with."""

    __slots__ = ("prefix", "regex", "route")

    def __init__(self, route: Route) -> None:
        self.route = route
        first = _SEGMENT.search(route.pattern)
        self.prefix = route.pattern[: first.start()] if first else route.pattern
        parts: list[str] = []
        end = 0
        for segment in _SEGMENT.finditer(route.pattern):
            parts.append(re.escape(route.pattern[end : segment.start()]))
            parts.append(f"(?P<{segment[1]}>{segment[2] or '[^/]+'})")
            end = segment.end()
        parts.append(re.escape(route.pattern[end:]))
        self.regex = re.compile("".join(parts))


def match_path(path: str) -> str:
    """What routes match for the (percent-escaped) ``path``: its escapes decoded except
    ``%2F`` and ``%25``."""
    if "%" not in path:
        return path
    return "/".join(quote(unquote(part), safe="") for part in path.split("/"))


class Router:
    """Routes, matched in the order added (the first match answers)."""

    def __init__(
        self, routes: Sequence[Route] = (), restrictions: Restrictions | None = None
    ) -> None:
        #: The ``--http-restricted-api`` rules the routes' ``api`` groups are checked with.
        self.restrictions = restrictions if restrictions is not None else Restrictions({})
        self._routes: list[_Compiled] = []
        for route in routes:
            self.add(route)

    @property
    def routes(self) -> list[Route]:
        """Every route, in the order added."""
        return [compiled.route for compiled in self._routes]

    def add(self, route: Route) -> None:
        """Add ``route``; ValueError when one with its method and pattern is there."""
        if any(
            c.route.method == route.method and c.route.pattern == route.pattern
            for c in self._routes
        ):
            raise ValueError(f"route {route.method} {route.pattern} is already served")
        self._routes.append(_Compiled(route))

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | int:
        """The route answering ``method`` on ``path`` (percent-escaped) and its decoded
        parameters; else 405 when routes of other methods match the path, else 404."""
        safe = match_path(path)
        status = 404
        for compiled in self._routes:
            if not safe.startswith(compiled.prefix):
                continue
            found = compiled.regex.fullmatch(safe)
            if found is None:
                continue
            if compiled.route.method != method:
                status = 405
                continue
            params = {key: unquote(value) for key, value in found.groupdict().items()}
            return compiled.route, params
        return status

    async def handle(self, request: Request) -> Answer:
        """Answer ``request``: its route's handler (after the restricted-API check), or
        Triton's 404/405; errors as Triton's ``{"error": ...}`` (module doc)."""
        found = self.match(request.method, request.path)
        if isinstance(found, int):
            return _NOT_FOUND if found == 404 else _NOT_ALLOWED
        route, request.params = found
        try:
            if self.restrictions.rules:
                self.restrictions.check(route.api, request.headers)
            return await route.handler(request)
        except Exception as exc:  # noqa: BLE001 - answered in Triton's error format
            status, text = failure(exc, getattr(route.handler, "__name__", "route"))
            busy = status == 503 and isinstance(exc, BodyBudgetExhausted)
            return error_response(status, text, RETRY_AFTER if busy else None)
        finally:
            if request.charge is not None:
                request.charge.release()


_NOT_FOUND = error_response(404, "Not Found")
_NOT_ALLOWED = error_response(405, "Method Not Allowed")
