"""Health, server/model metadata, model readiness, model config and statistics."""

from __future__ import annotations

from aiohttp import web
from despina import to_json_dict

from despina_frontend_http.context import ANY_PATH, Context, Route, versioned
from despina_frontend_http.responses import error_response, json_response, ok


def routes(ctx: Context) -> list[Route]:
    host = ctx.host

    async def live(request: web.Request) -> web.StreamResponse:
        return ok() if host.live else web.Response(status=400)

    async def ready(request: web.Request) -> web.StreamResponse:
        return ok() if host.ready else web.Response(status=400)

    async def metadata(request: web.Request) -> web.StreamResponse:
        return json_response(host.server_metadata())

    async def model_metadata(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        return json_response(host.model_metadata(info["model"], info.get("version", "")))

    async def model_ready(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        if host.model_ready(info["model"], info.get("version", "")):
            return ok()
        return error_response(400, "Model version not ready")

    async def model_config(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        return json_response(
            to_json_dict(host.model_config(info["model"], info.get("version", "")))
        )

    async def stats(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        model_stats = host.statistics(info.get("model", ""), info.get("version", ""))
        return json_response({"model_stats": model_stats})

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

    return [("*", ANY_PATH, "", unmatched)]
