"""Model repository (index, load, unload), logging and trace settings."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from aiohttp import web
from despina import InvalidArgument

from despina_frontend_http.body import read_body
from despina_frontend_http.context import Context, Route
from despina_frontend_http.responses import json_body, json_response, ok

#: Body limit of the control endpoints other than load (which carries model files).
SMALL_BODY = 1 << 20


def routes(ctx: Context) -> list[Route]:
    host = ctx.host

    async def body_of(request: web.Request, limit: int = SMALL_BODY) -> dict[str, Any]:
        body = await read_body(request, min(limit, ctx.max_input_size))
        return json_body(body, max_depth=ctx.max_json_depth)

    async def index(request: web.Request) -> web.StreamResponse:
        options = await body_of(request)
        ready = options.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidArgument("Unable to parse 'ready': expected a boolean")
        return json_response(host.repository_index(ready_only=ready))

    async def load(request: web.Request) -> web.StreamResponse:
        name = request.match_info["model"]
        params = _parameters(await body_of(request, ctx.max_input_size))
        config = params.pop("config", None)
        if config is not None and not isinstance(config, str):
            raise InvalidArgument("Unable to parse 'config': expected a JSON string")
        await host.load(name, config, _file_overrides(params))
        return ok()

    async def unload(request: web.Request) -> web.StreamResponse:
        name = request.match_info["model"]
        params = _parameters(await body_of(request))
        dependents = params.get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise InvalidArgument("Unable to parse 'unload_dependents': expected a boolean")
        await host.unload(name, unload_dependents=dependents)
        return ok()

    async def logging_get(request: web.Request) -> web.StreamResponse:
        return json_response(host.log_settings())

    async def logging_set(request: web.Request) -> web.StreamResponse:
        return json_response(host.log_settings(await body_of(request)))

    async def trace_get(request: web.Request) -> web.StreamResponse:
        return json_response(trace_json(host.trace_settings(request.match_info.get("model", ""))))

    async def trace_set(request: web.Request) -> web.StreamResponse:
        model = request.match_info.get("model", "")
        changes = await body_of(request)
        return json_response(trace_json(host.trace_settings(model, changes)))

    return [
        ("POST", "/v2/repository/index", "model-repository", index),
        ("POST", "/v2/repository/models/{model}/load", "model-repository", load),
        ("POST", "/v2/repository/models/{model}/unload", "model-repository", unload),
        ("GET", "/v2/logging", "logging", logging_get),
        ("POST", "/v2/logging", "logging", logging_set),
        ("GET", "/v2/trace/setting", "trace", trace_get),
        ("POST", "/v2/trace/setting", "trace", trace_set),
        ("GET", "/v2/models/{model}/trace/setting", "trace", trace_get),
        ("POST", "/v2/models/{model}/trace/setting", "trace", trace_set),
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
