"""The SageMaker API as tritonserver's SageMaker server answers it: one handler matching
paths in its order (``/ping``, ``/invocations``, ``/models...``), the rest 400 with no
body. Inference is the HTTP frontend's v2 route (one codec), called with the model
SageMaker names and the request's binary-tensor size taken from SageMaker's
``Content-Type`` instead of ``Inference-Header-Content-Length``; bodies are neither
inflated nor compressed (tritonserver's SageMaker server ignores both encodings)."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from despina import DespinaError
from despina_frontend_http import (
    Context,
    Request,
    Response,
    Router,
    binary_header_length,
    error_response,
)

from despina_frontend_sagemaker.mme import MultiModel, is_oom
from despina_frontend_sagemaker.options import SageMakerOptions

if TYPE_CHECKING:
    from despina_frontend_http import StreamResponse

    Answer = Response | StreamResponse

log = logging.getLogger("despina.sagemaker")

#: SageMaker's binary+json content type; the JSON header's size follows ``=``.
BINARY_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
TARGET_MODEL = "x-amzn-sagemaker-target-model"
_MODELS = re.compile(r"/models(?:/)?([^/]+)?(/invoke)?")
#: Request headers the v2 route must not see: SageMaker's server reads no encodings and
#: takes the binary header size from the Content-Type alone.
_DROPPED = ("content-encoding", "accept-encoding", "inference-header-content-length")
#: Answered with no body, as tritonserver does.
BAD_REQUEST = Response(400)
NOT_FOUND = Response(404)
OK = Response(200)
_NOT_ALLOWED = error_response(405, "Method Not Allowed")


class SageMakerRouter(Router):
    """Every SageMaker route over ``ctx``'s host; v2 inference through ``v2``."""

    def __init__(self, ctx: Context, v2: Router, options: SageMakerOptions) -> None:
        super().__init__((), ctx.restrictions)
        self.ctx = ctx
        self.host = ctx.host
        self.v2 = v2
        self.options = options
        self.mme = MultiModel(ctx.host, options.mme_root)

    async def handle(self, request: Request) -> Answer:
        """The answer of tritonserver's SageMaker server to ``request``."""
        try:
            return await self._dispatch(request)
        except DespinaError as exc:
            return error_response(exc.http_status, str(exc))

    async def _dispatch(self, request: Request) -> Answer:
        path, method = request.path, request.method
        if path == "/ping":
            return self._ping(request)
        if path == "/invocations":
            return await self._invocations(request)
        found = _MODELS.fullmatch(path)
        if found is None:
            return BAD_REQUEST
        name = unquote(found[1] or "")
        action = found[2] or ""
        if method == "GET":
            self.restrictions.check("model-repository", request.headers)
            return self.mme.list() if not name else self.mme.get(name)
        if method == "POST" and action == "/invoke":
            return await self._invoke(request, name)
        if method == "POST":
            self.restrictions.check("model-repository", request.headers)
            return await self.mme.load(request.body, request.headers.get(TARGET_MODEL))
        if method == "DELETE":
            self.restrictions.check("model-repository", request.headers)
            return await self.mme.unload(name, request.headers.get(TARGET_MODEL))
        return BAD_REQUEST

    def _ping(self, request: Request) -> Response:
        self.restrictions.check("health", request.headers)
        if request.method != "GET":
            return _NOT_ALLOWED
        live = self.options.ping_mode == "live"
        healthy = self.host.live if live else self.host.ready
        return OK if healthy else BAD_REQUEST

    async def _invocations(self, request: Request) -> Answer:
        """``/invocations``: the default model's infer, generate or generate_stream."""
        model = self.options.default_model
        kind = self.options.inference_type
        if kind != "infer":
            return await self._v2(request, model, kind, _plain(request.headers))
        return await self._infer(request, model)

    async def _invoke(self, request: Request, name: str) -> Answer:
        """``POST /models/<name>/invoke``: a loaded multi-model endpoint model; its
        failures are 400 (507 when out of memory), as tritonserver answers them."""
        if not self.mme.loaded(name):
            return NOT_FOUND
        self.restrictions.check("inference", request.headers)
        target = request.headers.get(TARGET_MODEL) or name
        log.info("Invoking SageMaker TargetModel: %s", target)
        answer = await self._infer(request, target)
        if answer.status == 200 or not isinstance(answer, Response):
            return answer
        body = answer.joined()
        return Response(507 if is_oom(body.decode(errors="replace")) else 400, answer.headers, body)

    async def _infer(self, request: Request, model: str) -> Answer:
        headers = _plain(request.headers)
        try:
            size = binary_header_length(
                request.headers.get("content-type"), BINARY_MIME, len(request.body)
            )
        except ValueError as exc:
            self.host.inference_model(model)  # an unknown model is reported first
            return error_response(400, str(exc))
        if size is not None:
            headers["inference-header-content-length"] = size
        answer = await self._v2(request, model, "infer", headers)
        if answer.status != 200 or not isinstance(answer, Response):
            return answer
        size_header = answer.headers.get("Inference-Header-Content-Length")
        if size_header is None:
            return answer
        response_headers = {
            k: v
            for k, v in answer.headers.items()
            if k not in ("Inference-Header-Content-Length", "Content-Type")
        }
        response_headers["Content-Type"] = BINARY_MIME + size_header
        return Response(200, response_headers, answer.body)

    async def _v2(self, request: Request, model: str, kind: str, headers: dict[str, str]) -> Answer:
        """The HTTP frontend's ``/v2/models/<model>/<kind>`` route's answer to ``request``."""
        inner = Request(
            request.method,
            f"/v2/models/{quote(model, safe='')}/{kind}",
            headers,
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
