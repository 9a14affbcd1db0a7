"""Health, server/model metadata, model readiness, model config and statistics."""

from __future__ import annotations

from despina import to_json_dict

from despina_frontend_http.context import Context, versioned
from despina_frontend_http.responses import OK, Response, error_response, json_response
from despina_frontend_http.router import Request, Route

#: A health answer while the server or model is not: 400 with an empty body.
NOT_READY = Response(400)


def routes(ctx: Context) -> list[Route]:
    host = ctx.host

    async def live(request: Request) -> Response:
        return OK if host.live else NOT_READY

    async def ready(request: Request) -> Response:
        return OK if await host.ready_checked() else NOT_READY

    async def metadata(request: Request) -> Response:
        return json_response(host.server_metadata())

    async def model_metadata(request: Request) -> Response:
        info = request.params
        return json_response(host.model_metadata(info["model"], info.get("version", "")))

    async def model_ready(request: Request) -> Response:
        info = request.params
        if await host.model_ready_checked(info["model"], info.get("version", "")):
            return OK
        return error_response(400, "Model version not ready")

    async def model_config(request: Request) -> Response:
        info = request.params
        return json_response(
            to_json_dict(host.model_config(info["model"], info.get("version", "")))
        )

    async def stats(request: Request) -> Response:
        info = request.params
        model_stats = await host.model_statistics(info.get("model", ""), info.get("version", ""))
        return json_response({"model_stats": model_stats})

    table: list[Route] = [
        Route("GET", "/v2/health/live", live, "health"),
        Route("GET", "/v2/health/ready", ready, "health"),
        Route("GET", "/v2", metadata, "metadata"),
        Route("GET", "/v2/models/stats", stats, "statistics"),
    ]
    for path in versioned(""):
        table.append(Route("GET", path, model_metadata, "metadata"))
    for path in versioned("/ready"):
        table.append(Route("GET", path, model_ready, "health"))
    for path in versioned("/config"):
        table.append(Route("GET", path, model_config, "model-config"))
    for path in versioned("/stats"):
        table.append(Route("GET", path, stats, "statistics"))
    return table
