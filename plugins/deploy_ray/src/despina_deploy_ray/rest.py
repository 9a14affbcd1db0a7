"""KServe v2 REST answered from a :class:`~despina.FrontendHost`, for a replica behind Ray
Serve's HTTP proxy: health, server and model metadata, model readiness and config, and
inference (JSON and the binary tensor extension, decoded and encoded by the HTTP frontend's
codec, so bodies and error texts are the ones ``despina serve`` gives).

Framework-free: :meth:`RestRoutes.handle` takes the method, path, inference header length
and body and returns status, headers and body; the replica adapts Starlette to it.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import orjson
from despina import DespinaError, FrontendHost, Unsupported, to_json_dict
from despina_frontend_http.decode import HeaderLayouts, decode_request
from despina_frontend_http.encode import encode_response

HEADER_LENGTH = "inference-header-content-length"
_MODEL_PATH = re.compile(
    r"^/v2/models/(?P<model>[^/]+)(?:/versions/(?P<version>[^/]+))?(?P<tail>/ready|/config|/infer)?$"
)
_JSON = {"content-type": "application/json"}


class Reply(NamedTuple):
    """An HTTP answer: status, headers, body."""

    status: int
    headers: dict[str, str]
    body: bytes


def json_reply(data: object, status: int = 200) -> Reply:
    return Reply(status, dict(_JSON), orjson.dumps(data))


def error_reply(status: int, message: str) -> Reply:
    """Triton's error body: ``{"error": message}``."""
    return json_reply({"error": message}, status)


_EMPTY_OK = Reply(200, {}, b"")
_NOT_READY = Reply(400, {}, b"")


class RestRoutes:
    """The v2 REST routes of one replica's server."""

    def __init__(self, host: FrontendHost) -> None:
        self.host = host
        self._layouts = HeaderLayouts()

    async def handle(self, method: str, path: str, header_length: str | None, body: bytes) -> Reply:
        """Answer one request; a DespinaError becomes its status and ``{"error": ...}``."""
        try:
            return await self._route(method, path.rstrip("/") or "/", header_length, body)
        except DespinaError as exc:
            return error_reply(exc.http_status, str(exc))

    async def _route(self, method: str, path: str, header_length: str | None, body: bytes) -> Reply:
        host = self.host
        if path in ("/v2/health/live", "/v2/health/ready", "/v2"):
            if method != "GET":
                return error_reply(405, "Method Not Allowed")
            if path == "/v2":
                return json_reply(host.server_metadata())
            healthy = host.live if path.endswith("live") else host.ready
            return _EMPTY_OK if healthy else _NOT_READY
        match = _MODEL_PATH.match(path)
        if match is None:
            return error_reply(404, "Not Found")
        name, version, tail = match["model"], match["version"] or "", match["tail"] or ""
        if (method == "POST") != (tail == "/infer"):
            return error_reply(405, "Method Not Allowed")
        if tail == "/infer":
            return await self._infer(name, version, header_length, body)
        if tail == "/ready":
            ready = host.model_ready(name, version)
            return _EMPTY_OK if ready else error_reply(400, "Model version not ready")
        if tail == "/config":
            return json_reply(to_json_dict(host.model_config(name, version)))
        return json_reply(host.model_metadata(name, version))

    async def _infer(
        self, name: str, version: str, header_length: str | None, body: bytes
    ) -> Reply:
        host = self.host
        model = host.inference_model(name, version)
        if model.decoupled:
            raise Unsupported(
                "HTTP end point doesn't support models with decoupled transaction policy"
            )
        request = decode_request(
            body, header_length, name, version, host.shared_memory, self._layouts
        )
        response = await host.infer(request, model=model)
        header, blobs = encode_response(request, response, host.shared_memory)
        if not blobs:
            return Reply(200, dict(_JSON), header)
        headers = {"content-type": "application/octet-stream", HEADER_LENGTH: str(len(header))}
        return Reply(200, headers, b"".join([header, *blobs]))
