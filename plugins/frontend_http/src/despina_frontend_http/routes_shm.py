"""System and CUDA shared memory: status, register, unregister (a CUDA registration is
refused where the server cannot open CUDA memory)."""

from __future__ import annotations

from base64 import b64decode
from typing import Any, TypeGuard

from despina import InvalidArgument

from despina_frontend_http.body import read_body
from despina_frontend_http.context import Context
from despina_frontend_http.responses import OK, Response, json_body, json_response
from despina_frontend_http.router import Request, Route

SYSTEM = "/v2/systemsharedmemory"
CUDA = "/v2/cudasharedmemory"


def routes(ctx: Context) -> list[Route]:
    host = ctx.host

    async def status(request: Request) -> Response:
        return json_response(host.system_shm_status(request.params.get("region", "")))

    async def register(request: Request) -> Response:
        region = request.params["region"]
        raw = read_body(request, 65536, ctx.host.request_bodies)
        body = json_body(raw, allow_empty=False, max_depth=ctx.max_json_depth)
        key, offset, size = body.get("key"), body.get("offset", 0), body.get("byte_size")
        if not isinstance(key, str) or not _is_int(offset) or not _is_int(size):
            raise InvalidArgument(
                "Unable to parse the shared memory registration: expected 'key' (string), "
                "'offset' and 'byte_size' (integers)"
            )
        await host.system_shm_register(region, key, offset, size)
        return OK

    async def unregister(request: Request) -> Response:
        await host.system_shm_unregister(request.params.get("region", ""))
        return OK

    async def cuda_status(request: Request) -> Response:
        return json_response(host.cuda_shm_status(request.params.get("region", "")))

    async def cuda_register(request: Request) -> Response:
        region = request.params["region"]
        raw = read_body(request, 65536, ctx.host.request_bodies)
        body = json_body(raw, allow_empty=False, max_depth=ctx.max_json_depth)
        if "raw_handle" not in body:
            raise InvalidArgument("Shared memory register request has no 'raw_handle' field")
        handle: Any = body["raw_handle"]
        b64 = handle.get("b64") if isinstance(handle, dict) else None
        device, size = body.get("device_id"), body.get("byte_size")
        if not isinstance(b64, str) or not _is_int(device) or not _is_int(size):
            raise InvalidArgument(
                "Unable to parse the CUDA shared memory registration: expected 'raw_handle' "
                "({\"b64\": string}), 'device_id' and 'byte_size' (integers)"
            )
        try:
            raw_handle = b64decode(b64, validate=True)
        except ValueError:  # binascii.Error, or characters outside ASCII
            raise InvalidArgument(
                "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"
            ) from None
        await host.cuda_shm_register(region, raw_handle, device, size)
        return OK

    async def cuda_unregister(request: Request) -> Response:
        await host.cuda_shm_unregister(request.params.get("region", ""))
        return OK

    group = "shared-memory"
    return [
        Route("GET", f"{SYSTEM}/status", status, group),
        Route("GET", f"{SYSTEM}/region/{{region}}/status", status, group),
        Route("POST", f"{SYSTEM}/region/{{region}}/register", register, group, True),
        Route("POST", f"{SYSTEM}/unregister", unregister, group, True),
        Route("POST", f"{SYSTEM}/region/{{region}}/unregister", unregister, group, True),
        Route("GET", f"{CUDA}/status", cuda_status, group),
        Route("GET", f"{CUDA}/region/{{region}}/status", cuda_status, group),
        Route("POST", f"{CUDA}/region/{{region}}/register", cuda_register, group, True),
        Route("POST", f"{CUDA}/unregister", cuda_unregister, group, True),
        Route("POST", f"{CUDA}/region/{{region}}/unregister", cuda_unregister, group, True),
    ]


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
