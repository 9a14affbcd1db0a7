"""Health, server/model metadata, model readiness, model config and statistics."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from despina.config import to_json_dict
from despina.errors import DespinaError, InvalidArgument

from despina_frontend_http.context import Context, Route, versioned
from despina_frontend_http.responses import error_response, json_response, ok


def routes(ctx: Context) -> list[Route]:
    server = ctx.server
    models = server.models

    async def live(request: web.Request) -> web.StreamResponse:
        return ok() if server.live else web.Response(status=400)

    async def ready(request: web.Request) -> web.StreamResponse:
        return ok() if server.ready else web.Response(status=400)

    async def metadata(request: web.Request) -> web.StreamResponse:
        return json_response(
            {"name": server.id, "version": server.version, "extensions": server.extensions}
        )

    async def model_metadata(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        return json_response(server.model_metadata(info["model"], info.get("version", "")))

    async def model_ready(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        try:
            models.get(info["model"], info.get("version", ""))
        except DespinaError:
            return error_response(400, "Model version not ready")
        return ok()

    async def model_config(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        model = models.get(info["model"], info.get("version", ""))
        return json_response(to_json_dict(model.config))

    async def stats(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        return json_response(
            {"model_stats": _stats(ctx, info.get("model", ""), info.get("version", ""))}
        )

    table: list[Route] = [
        ("GET", "/v2/health/live", "health", live),
        ("GET", "/v2/health/ready", "health", ready),
        ("GET", "/v2", "metadata", metadata),
        ("GET", "/v2/models/stats", "statistics", stats),
    ]
    for path in versioned(""):
        table.append(("GET", path, "metadata", model_metadata))
    for path in versioned("/ready"):
        table.append(("GET", path, "health", model_ready))
    for path in versioned("/config"):
        table.append(("GET", path, "model-config", model_config))
    for path in versioned("/stats"):
        table.append(("GET", path, "statistics", stats))
    return table


def fallback(ctx: Context) -> list[Route]:
    """Last route: a known path with a method it does not serve is Triton's 405
    ``{"error": "Method Not Allowed"}``; anything else its 404 ``{"error": "Not Found"}``."""

    async def unmatched(request: web.Request) -> web.StreamResponse:
        for resource in request.app.router.resources():
            match, allowed = await resource.resolve(request)
            if match is None and allowed:
                return error_response(405, "Method Not Allowed")
        return error_response(404, "Not Found")

    return [("*", "/{tail:.*}", "", unmatched)]


def _stats(ctx: Context, name: str, version: str) -> list[dict[str, Any]]:
    """Statistics of every ready version (of ``name``, or of ``version``), Triton's errors."""
    models = ctx.server.models
    if not name:
        return [v.stats.snapshot() for v in models.ready_versions()]
    entry = models.entries.get(name)
    ready = [v for _, v in sorted(entry.versions.items()) if v.ready] if entry else []
    if not ready:
        raise InvalidArgument(f"requested model '{name}' is not available")
    if version:
        ready = [v for v in ready if str(v.version) == version]
        if not ready:
            raise InvalidArgument(f"requested model version is not available for model '{name}'")
    return [v.stats.snapshot() for v in ready]
