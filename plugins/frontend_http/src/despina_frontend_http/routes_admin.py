"""Model repository (index, load, unload), logging and trace settings."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from despina import InvalidArgument

from despina_frontend_http.body import read_body
from despina_frontend_http.context import Context
from despina_frontend_http.responses import OK, Response, json_body, json_response
from despina_frontend_http.router import Request, Route

#: Body limit of the control endpoints other than load (which carries model files).
SMALL_BODY = 1 << 20


def routes(ctx: Context) -> list[Route]:
    host = ctx.host

    def body_of(request: Request, limit: int = SMALL_BODY) -> dict[str, Any]:
        body = read_body(request, min(limit, ctx.max_input_size), host.request_bodies)
        return json_body(body, max_depth=ctx.max_json_depth)

    async def index(request: Request) -> Response:
        options = body_of(request)
        ready = options.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidArgument("Unable to parse 'ready': expected a boolean")
        return json_response(host.repository_index(ready_only=ready))

    async def load(request: Request) -> Response:
        name = request.params["model"]
        params = _parameters(body_of(request, ctx.max_input_size))
        config = params.pop("config", None)
        if config is not None and not isinstance(config, str):
            raise InvalidArgument("Unable to parse 'config': expected a JSON string")
        await host.load(name, config, _file_overrides(params))
        return OK

    async def unload(request: Request) -> Response:
        name = request.params["model"]
        params = _parameters(body_of(request))
        dependents = params.get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidArgument("Unable to parse 'unload_dependents': expected a boolean")
        await host.unload(name, unload_dependents=dependents)
        return OK

    async def logging_get(request: Request) -> Response:
        return json_response(await host.log_settings())

    async def logging_set(request: Request) -> Response:
        return json_response(await host.log_settings(body_of(request)))

    async def trace_get(request: Request) -> Response:
        return json_response(trace_json(await host.trace_settings(request.params.get("model", ""))))

    async def trace_set(request: Request) -> Response:
        model = request.params.get("model", "")
        changes = body_of(request)
        return json_response(trace_json(await host.trace_settings(model, changes)))

    return [
        Route("POST", "/v2/repository/index", index, "model-repository"),
        Route("POST", "/v2/repository/models/{model}/load", load, "model-repository", True),
        Route("POST", "/v2/repository/models/{model}/unload", unload, "model-repository", True),
        Route("GET", "/v2/logging", logging_get, "logging"),
        Route("POST", "/v2/logging", logging_set, "logging", True),
        Route("GET", "/v2/trace/setting", trace_get, "trace"),
        Route("POST", "/v2/trace/setting", trace_set, "trace", True),
        Route("GET", "/v2/models/{model}/trace/setting", trace_get, "trace"),
        Route("POST", "/v2/models/{model}/trace/setting", trace_set, "trace", True),
    ]


def trace_json(values: dict[str, list[str]]) -> dict[str, Any]:
    """Triton's trace JSON: ``trace_level`` a list, every other setting a string."""
    return {k: v if k == "trace_level" else (v[0] if len(v) == 1 else v) for k, v in values.items()}


def _parameters(body: dict[str, Any]) -> dict[str, Any]:
    params = body.get("parameters", {})
    if not isinstance(params, dict):
        raise InvalidArgument("Unable to parse 'parameters': expected a JSON object")
    return dict(params)


def _file_overrides(params: dict[str, Any]) -> dict[str, bytes]:
    """``{"file:1/model.py": base64}`` -> ``{"1/model.py": bytes}``."""
    files: dict[str, bytes] = {}
    for key, value in params.items():
        if not key.startswith("file:"):
            continue
        if not isinstance(value, str):
            raise InvalidArgument(f"Unable to parse '{key}': expected a base64 string")
        try:
            files[key.removeprefix("file:")] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument(f"Unable to parse '{key}': invalid base64") from None
    return files
