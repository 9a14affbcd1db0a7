"""System shared memory (status, register, unregister) and CUDA shared memory (no GPU
support: status lists nothing, register is refused)."""

from __future__ import annotations

from aiohttp import web
from despina.errors import InvalidArgument, NotFound, Unsupported

from despina_frontend_http.body import read_body
from despina_frontend_http.context import Context, Route
from despina_frontend_http.responses import json_body, json_response, ok

SYSTEM = "/v2/systemsharedmemory"
CUDA = "/v2/cudasharedmemory"


def routes(ctx: Context) -> list[Route]:
    shm = ctx.server.shared_memory

    async def status(request: web.Request) -> web.StreamResponse:
        return json_response(shm.status(request.match_info.get("region", "")))

    async def register(request: web.Request) -> web.StreamResponse:
        region = request.match_info["region"]
        body = json_body(await read_body(request, 65536), allow_empty=False)
        key, offset, size = body.get("key"), body.get("offset", 0), body.get("byte_size")
        if not isinstance(key, str) or not _is_int(offset) or not _is_int(size):
            raise InvalidArgument(
                "Unable to parse the shared memory registration: expected 'key' (string), "
                "'offset' and 'byte_size' (integers)"
            )
        shm.register(region, key, offset, size)
        return ok()

    async def unregister(request: web.Request) -> web.StreamResponse:
        shm.unregister(request.match_info.get("region", ""))
        return ok()

    async def cuda_status(request: web.Request) -> web.StreamResponse:
        region = request.match_info.get("region", "")
        if region:
            raise NotFound(f"Unable to find cuda shared memory region: '{region}'")
        return json_response([])

    async def cuda_register(request: web.Request) -> web.StreamResponse:
        raise Unsupported("CUDA shared memory is not supported: this server has no GPU support")

    async def cuda_unregister(request: web.Request) -> web.StreamResponse:
        return ok()

    group = "shared-memory"
    return [
        ("GET", f"{SYSTEM}/status", group, status),
        ("GET", f"{SYSTEM}/region/{{region}}/status", group, status),
        ("POST", f"{SYSTEM}/region/{{region}}/register", group, register),
        ("POST", f"{SYSTEM}/unregister", group, unregister),
        ("POST", f"{SYSTEM}/region/{{region}}/unregister", group, unregister),
        ("GET", f"{CUDA}/status", group, cuda_status),
        ("GET", f"{CUDA}/region/{{region}}/status", group, cuda_status),
        ("POST", f"{CUDA}/region/{{region}}/register", group, cuda_register),
        ("POST", f"{CUDA}/unregister", group, cuda_unregister),
        ("POST", f"{CUDA}/region/{{region}}/unregister", group, cuda_unregister),
    ]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
