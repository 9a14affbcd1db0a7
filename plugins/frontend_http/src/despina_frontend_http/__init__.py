"""Despina's HTTP/REST frontend (KServe v2 + Triton extensions) on its own HTTP/1.1 front.

The public API, for hosts serving the v2 routes from their own HTTP server and for
plugins adding routes (the ``despina_http_routes`` hook): a framework-free router
(:mod:`despina_frontend_http.router`), the route table (:mod:`despina_frontend_http.v2`),
and a listener of its own for a router (:mod:`despina_frontend_http.listener`).
Every other module is internal.
"""

from despina_frontend_http.binary_content_type import binary_header_length
from despina_frontend_http.body import PayloadTooLarge, read_limited
from despina_frontend_http.context import Context
from despina_frontend_http.listener import OwnPortFrontend, RouterListener, serve_router
from despina_frontend_http.responses import Response, error_response, json_response
from despina_frontend_http.router import Handler, Request, Route, Router, StreamResponse
from despina_frontend_http.v2 import ROUTES_HOOK, plugin_routes, serving_router, v2_routes

__all__ = [
    "ROUTES_HOOK",
    "Context",
    "Handler",
    "OwnPortFrontend",
    "PayloadTooLarge",
    "Request",
    "Response",
    "Route",
    "Router",
    "RouterListener",
    "StreamResponse",
    "binary_header_length",
    "error_response",
    "json_response",
    "plugin_routes",
    "read_limited",
    "serve_router",
    "serving_router",
    "v2_routes",
]
