"""The Vertex AI routes as tritonserver's Vertex AI server answers them: the health route
(readiness), the prediction route (the default model's v2 inference, or with an
``X-Vertex-Ai-Triton-Redirect`` header the read-only v2 route it names: health, server and
model metadata, readiness, config, statistics, inference, shared-memory status, the
repository index, metrics), everything else 400 with no body. The v2 routes are the
HTTP frontend's (one codec); bodies are neither inflated nor compressed."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import quote

from despina import DespinaError
from despina_frontend_http import (
    Context,
    Request,
    Response,
    Router,
    binary_header_length,
    error_response,
)

from despina_frontend_vertex_ai.options import VertexOptions

if TYPE_CHECKING:
    from despina_frontend_http import StreamResponse

    Answer = Response | StreamResponse

#: Vertex AI's binary+json content type; the JSON header's size follows ``=``.
BINARY_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
REDIRECT = "x-vertex-ai-triton-redirect"
#: Request headers the v2 routes must not see (no encodings; the binary header size is
#: taken from the Content-Type alone).
_DROPPED = ("content-encoding", "accept-encoding", "inference-header-content-length")
BAD_REQUEST = Response(400)
FORBIDDEN = Response(403)
NOT_ALLOWED = Response(405)
_NOT_ALLOWED_JSON = error_response(405, "Method Not Allowed")
# tritonserver's route expressions
_SERVER = re.compile(r"/v2(?:/health/(live|ready))?")
_MODEL = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_REPOSITORY = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
_SYSTEM_SHM = re.compile(r"/v2/systemsharedmemory(?:/region/([^/]+))?/(status|register|unregister)")
_CUDA_SHM = re.compile(r"/v2/cudasharedmemory(?:/region/([^/]+))?/(status|register|unregister)")


class VertexRouter(Router):
    """The Vertex AI routes over ``ctx``'s host, v2 routes through ``v2``; ``metrics``
    gives the metrics page (None while metrics are off)."""

    def __init__(
        self,
        ctx: Context,
        v2: Router,
        options: VertexOptions,
        default_model: str,
        metrics: Callable[[], Awaitable[Response | None]],
    ) -> None:
        super().__init__((), ctx.restrictions)
        self.host = ctx.host
        self.v2 = v2
        self.default_model = default_model
        self.metrics = metrics
        self.health = re.compile(options.health_route)
        self.predict = re.compile(options.predict_route)

    async def handle(self, request: Request) -> Answer:
        """The answer of tritonserver's Vertex AI server to ``request``."""
        try:
            return await self._dispatch(request)
        except DespinaError as exc:
            return error_response(exc.http_status, str(exc))

    async def _dispatch(self, request: Request) -> Answer:
        path = request.path
        if self.health.fullmatch(path):
            self.restrictions.check("health", request.headers)
            if request.method != "GET":
                return _NOT_ALLOWED_JSON
            return Response(200) if self.host.ready else BAD_REQUEST
        if not self.predict.fullmatch(path):
            return BAD_REQUEST
        redirect = request.headers.get(REDIRECT)
        if redirect is None:
            return await self._infer(request, self.default_model, "")
        return await self._redirect(request, "/" + redirect)

    async def _redirect(self, request: Request, endpoint: str) -> Answer:
        """The v2 route ``endpoint`` names, if tritonserver forwards to it."""
        if request.method != "POST":
            return NOT_ALLOWED
        if endpoint == "/metrics":
            page = await self.metrics()
            return page if page is not None else BAD_REQUEST
        if endpoint == "/v2/models/stats":
            return await self._v2(request, "GET", endpoint)
        found = _MODEL.fullmatch(endpoint)
        if found is not None:
            model, version, kind = found[1], found[2] or "", found[3] or ""
            if kind == "infer":
                return await self._infer(request, model, version)
            if kind in ("", "ready", "config", "stats"):
                return await self._v2(request, "GET", endpoint)
        if _SERVER.fullmatch(endpoint):
            return await self._v2(request, "GET", endpoint)
        for shm in (_SYSTEM_SHM, _CUDA_SHM):
            found = shm.fullmatch(endpoint)
            if found is not None:  # status only: changes need the HTTP port
                return (
                    await self._v2(request, "GET", endpoint) if found[2] == "status" else FORBIDDEN
                )
        found = _REPOSITORY.fullmatch(endpoint)
        if found is not None:  # the index only: loads and unloads need the HTTP port
            return await self._v2(request, "POST", endpoint) if found[2] == "index" else FORBIDDEN
        return BAD_REQUEST

    async def _infer(self, request: Request, model: str, version: str) -> Answer:
        """v2 inference of ``model`` (the body as tritonserver's Vertex AI server reads it)."""
        headers = _plain(request.headers)
        try:
            size = binary_header_length(
                request.headers.get("content-type"), BINARY_MIME, len(request.body)
            )
        except ValueError as exc:
            self.host.inference_model(model, version)  # an unknown model is reported first
            return error_response(400, str(exc))
        if size is not None:
            headers["inference-header-content-length"] = size
        path = f"/v2/models/{quote(model, safe='')}"
        if version:
            path += f"/versions/{version}"
        return await self._v2(request, request.method, path + "/infer", headers)

    async def _v2(
        self, request: Request, method: str, path: str, headers: dict[str, str] | None = None
    ) -> Answer:
        inner = Request(
            method,
            path,
            _plain(request.headers) if headers is None else headers,
            request.body,
            "",
            request.peer,
            request.secure,
            connected=request.connected,
            received_ns=request.received_ns,
            read_ns=request.read_ns,
        )
        return await self.v2.handle(inner)


def _plain(headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` without the encodings and the v2 binary header size."""
    return {k: v for k, v in headers.items() if k not in _DROPPED}
