"""The routes an HTTP listener of Despina serves, each declared once: KServe v2 with
Triton's extensions (the ``routes_*`` modules), then the routes plugins add through the
``despina_http_routes`` hook."""

from __future__ import annotations

from typing import TYPE_CHECKING

from despina_frontend_http import (
    routes_admin,
    routes_generate,
    routes_infer,
    routes_meta,
    routes_shm,
)
from despina_frontend_http.context import Context
from despina_frontend_http.router import Route, Router

if TYPE_CHECKING:
    from despina import FrontendHost

#: The hook through which plugins add routes (declared by the core's hookspecs).
ROUTES_HOOK = "despina_http_routes"


def v2_routes(ctx: Context) -> list[Route]:
    """Every v2/Triton route, over ``ctx``'s host and options."""
    return [
        *routes_infer.routes(ctx),
        *routes_generate.routes(ctx),
        *routes_meta.routes(ctx),
        *routes_admin.routes(ctx),
        *routes_shm.routes(ctx),
    ]


def plugin_routes(host: FrontendHost) -> list[tuple[Route, str]]:
    """The routes plugins add (``despina_http_routes``), each with the plugin it came
    from; TypeError naming the plugin for an item that is not a :class:`Route`."""
    found = host.plugin_contributions(ROUTES_HOOK, host=host)
    for item, plugin in found:
        if not isinstance(item, Route):
            raise TypeError(f"{ROUTES_HOOK} of plugin {plugin} returned {item!r}, not a Route")
    return found


def serving_router(ctx: Context, v2: list[Route] | None = None) -> Router:
    """A router of ``v2`` (default: :func:`v2_routes`) and the plugins' routes, checking
    ``ctx``'s restricted APIs; ValueError naming the plugin whose route another serves."""
    router = Router(v2_routes(ctx) if v2 is None else v2, ctx.restrictions)
    for route, plugin in plugin_routes(ctx.host):
        try:
            router.add(route)
        except ValueError as exc:
            raise ValueError(f"plugin {plugin}: {exc}") from None
    return router
