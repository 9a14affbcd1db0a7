"""KServe v2 REST and Triton's extensions answered from a :class:`~despina.FrontendHost`,
for a replica behind Ray Serve's HTTP proxy, with the HTTP frontend's codec, limits and
texts (``despina serve``'s answers):

* health, server and model metadata, readiness, config, statistics (of this replica);
* ``/infer`` (JSON and binary tensors; ``Content-Encoding`` gzip/deflate bodies inflated
  within ``--http-max-input-size``; gzip/deflate answers per ``Accept-Encoding``),
  ``/generate`` and ``/generate_stream`` (server-sent events, decoupled models too);
* repository index, log and trace settings (read), shared-memory status;
* ``--http-restricted-api`` and ``--http-header-forward-pattern``.

Model load/unload, shared-memory registration and setting updates would change only the
replica that answers: they are refused (:mod:`despina_deploy_ray.replicated`).

Framework-free: :meth:`RestRoutes.handle` takes the method, path, headers (a
case-insensitive mapping) and the body's chunks, and returns a :class:`Reply` or a
:class:`StreamReply`; the replica adapts Starlette to it.
"""

from __future__ import annotations

import re
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
)
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import orjson
from despina import (
    DespinaError,
    FrontendHost,
    InferenceRequest,
    InferenceResponse,
    InvalidArgument,
    to_json_dict,
)
from despina_frontend_http.context import Context
from despina_frontend_http.generate import (
    NOT_ONE_RESPONSE,
    generate_body,
    generate_request,
    input_shapes,
)
from despina_frontend_http.options import HTTP_OPTIONS
from despina_frontend_http.responses import json_body
from despina_frontend_http.restricted import Restrictions
from despina_frontend_http.routes_admin import SMALL_BODY, trace_json
from despina_frontend_http.routes_generate import EVENT_STREAM_HEADERS, sse_event
from despina_frontend_http.routes_infer import (
    JSON_HEADERS,
    finish_infer,
    forwarded_headers,
    response_parts,
    start_infer,
    trace_sending,
    trace_sent,
)

from despina_deploy_ray.body import read_body
from despina_deploy_ray.replicated import MODEL_CONTROL, SETTINGS, SHARED_MEMORY, PerReplica

HEADER_LENGTH = "inference-header-content-length"


class Reply(NamedTuple):
    """An HTTP answer: status, headers, body."""

    status: int
    headers: dict[str, str]
    body: bytes


class StreamReply(NamedTuple):
    """An HTTP answer whose body comes as it is made (server-sent events)."""

    status: int
    headers: dict[str, str]
    chunks: AsyncIterator[bytes]


def json_reply(data: object, status: int = 200) -> Reply:
    return Reply(status, dict(JSON_HEADERS), orjson.dumps(data))


def error_reply(status: int, message: str) -> Reply:
    """Triton's error body: ``{"error": message}``."""
    return json_reply({"error": message}, status)


Headers = Mapping[str, str]
Chunks = AsyncIterable[bytes]
Handler = Callable[["re.Match[str]", Headers, Chunks], Awaitable["Reply | StreamReply"]]

_EMPTY_OK = Reply(200, {}, b"")
_NOT_READY = Reply(400, {}, b"")
_MODEL = r"/v2/models/(?P<model>[^/]+)"
_VERSIONED = _MODEL + r"(?:/versions/(?P<version>[0-9]+))?"
_TRACE = f"(?:/v2|{_MODEL})/trace/setting"
_SHM = r"/v2/(?:system|cuda)sharedmemory"


async def _responses(
    host: FrontendHost, request: InferenceRequest
) -> AsyncGenerator[InferenceResponse, None]:
    """The model's responses to ``request``; the request is cancelled when the consumer
    stops early (Ray Serve cancels a request whose client went away)."""
    try:
        async for response in host.infer_stream(request):
            yield response
    finally:
        if not request.stream or not request.stream.done:
            request.cancel()


class RestRoutes:
    """The v2 REST routes of one replica's server, with its ``--http-*`` options."""

    def __init__(self, host: FrontendHost) -> None:
        self.host = host
        options = host.stash[HTTP_OPTIONS]
        pattern = options.header_forward_pattern
        self.ctx = Context(
            host=host,
            max_input_size=options.max_input_size,
            executor=ThreadPoolExecutor(
                max_workers=options.thread_count, thread_name_prefix="despina-http"
            ),
            restrictions=Restrictions(options.restrictions),
            forward=re.compile(pattern, re.IGNORECASE) if pattern else None,
            max_header_size=options.max_header_size,
            max_json_depth=options.max_json_depth,
            max_outputs=options.max_outputs,
        )
        # (method, full-match pattern, restricted-API group, handler), first match wins
        self._routes: list[tuple[str, re.Pattern[str], str, Handler]] = [
            (method, re.compile(path), group, handler)
            for method, path, group, handler in (
                ("GET", "/v2/health/live", "health", self._live),
                ("GET", "/v2/health/ready", "health", self._ready),
                ("GET", "/v2", "metadata", self._server_metadata),
                ("GET", "/v2/models/stats", "statistics", self._statistics),
                ("GET", _VERSIONED, "metadata", self._model_metadata),
                ("GET", _VERSIONED + "/ready", "health", self._model_ready),
                ("GET", _VERSIONED + "/config", "model-config", self._model_config),
                ("GET", _VERSIONED + "/stats", "statistics", self._statistics),
                ("POST", _VERSIONED + "/infer", "inference", self._infer),
                ("POST", _VERSIONED + "/generate", "inference", self._generate),
                ("POST", _VERSIONED + "/generate_stream", "inference", self._generate_stream),
                ("POST", "/v2/repository/index", "model-repository", self._index),
                ("POST", "/v2/repository/models/[^/]+/(?:un)?load", "model-repository", _control),
                ("GET", "/v2/logging", "logging", self._log_settings),
                ("POST", "/v2/logging", "logging", _settings),
                ("GET", _TRACE, "trace", self._trace_settings),
                ("POST", _TRACE, "trace", _settings),
                (
                    "GET",
                    _SHM + "(?:/region/(?P<region>[^/]+))?/status",
                    "shared-memory",
                    self._shm_status,
                ),
                ("POST", _SHM + "(?:/region/[^/]+)?/(?:un)?register", "shared-memory", _shm),
            )
        ]

    def close(self) -> None:
        """Release the compression threads (the replica is stopping)."""
        self.ctx.executor.shutdown(wait=False)

    async def handle(
        self, method: str, path: str, headers: Headers, body: Chunks
    ) -> Reply | StreamReply:
        """Answer one request; a DespinaError becomes its status and ``{"error": ...}``,
        an unknown path 404, a known one with another method 405 (Triton's texts)."""
        path = path.rstrip("/") or "/"
        allowed = False
        for route_method, pattern, group, handler in self._routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if route_method != method:
                allowed = True
                continue
            try:
                if self.ctx.restrictions.rules:
                    self.ctx.restrictions.check(group, headers)
                return await handler(match, headers, body)
            except DespinaError as exc:
                return error_reply(exc.http_status, str(exc))
        return error_reply(405, "Method Not Allowed") if allowed else error_reply(404, "Not Found")

    # health, metadata, config, statistics
    async def _live(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        return _EMPTY_OK if self.host.live else _NOT_READY

    async def _ready(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        return _EMPTY_OK if self.host.ready else _NOT_READY

    async def _server_metadata(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        return json_reply(self.host.server_metadata())

    async def _model_metadata(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        return json_reply(self.host.model_metadata(*_model(match)))

    async def _model_ready(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        if self.host.model_ready(*_model(match)):
            return _EMPTY_OK
        return error_reply(400, "Model version not ready")

    async def _model_config(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        return json_reply(to_json_dict(self.host.model_config(*_model(match))))

    async def _statistics(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        """This replica's statistics (each replica counts what it served)."""
        return json_reply({"model_stats": self.host.statistics(*_model(match))})

    # inference
    async def _body(self, headers: Headers, body: Chunks, limit: int | None = None) -> bytes:
        """The request body, inflated, within ``limit`` (default ``--http-max-input-size``)."""
        size = self.ctx.max_input_size if limit is None else min(limit, self.ctx.max_input_size)
        return await read_body(body, headers.get("content-encoding"), size)

    async def _infer(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        ctx = self.ctx
        name, version = _model(match)
        data = await self._body(headers, body)
        started = start_infer(
            ctx,
            name,
            version,
            data,
            headers.get(HEADER_LENGTH),
            forwarded_headers(ctx, headers),
            headers,
        )
        header, blobs = await finish_infer(ctx, started)
        trace_sending(started)
        try:
            reply_headers, parts = await response_parts(
                header, blobs, headers.get("accept-encoding"), ctx.executor
            )
            return Reply(200, reply_headers, b"".join(parts))
        finally:
            trace_sent(started)

    async def _generate_request(
        self, match: re.Match[str], headers: Headers, body: Chunks
    ) -> InferenceRequest:
        name, version = _model(match)
        shapes = input_shapes(self.host.model_metadata(name, version))
        data = await self._body(headers, body)
        request: InferenceRequest = generate_request(
            data, name, version, shapes, self.ctx.max_json_depth
        )
        return request

    async def _generate(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        """``/generate``: the model must answer exactly once."""
        request = await self._generate_request(match, headers, body)
        responses = _responses(self.host, request)
        try:
            answers = [response async for response in responses]
        finally:
            await responses.aclose()
        if len(answers) != 1:
            raise InvalidArgument(NOT_ONE_RESPONSE)
        if answers[0].error is not None:
            raise answers[0].error
        return Reply(200, dict(JSON_HEADERS), generate_body(request, answers[0]))

    async def _generate_stream(
        self, match: re.Match[str], headers: Headers, body: Chunks
    ) -> StreamReply:
        """``/generate_stream``: one event per response; the status is the first
        response's (an empty 200 stream when the model answers nothing)."""
        request = await self._generate_request(match, headers, body)
        responses = _responses(self.host, request)
        try:
            first = await anext(responses, None)
        except BaseException:
            await responses.aclose()
            raise
        status = 200 if first is None or first.error is None else first.error.http_status

        async def events() -> AsyncIterator[bytes]:
            try:
                if first is not None:
                    yield sse_event(request, first)
                async for response in responses:
                    yield sse_event(request, response)
            finally:
                await responses.aclose()  # cancels the request unless it ended

        return StreamReply(status, dict(EVENT_STREAM_HEADERS), events())

    # repository, settings, shared memory
    async def _index(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        data = await self._body(headers, body, SMALL_BODY)
        options = json_body(data, max_depth=self.ctx.max_json_depth)
        ready = options.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidArgument("Unable to parse 'ready': expected a boolean")
        return json_reply(self.host.repository_index(ready_only=ready))

    async def _log_settings(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        return json_reply(self.host.log_settings())

    async def _trace_settings(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        model = match.groupdict().get("model") or ""
        return json_reply(trace_json(self.host.trace_settings(model)))

    async def _shm_status(self, match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
        region = match["region"] or ""
        if match.group(0).startswith("/v2/cuda"):
            return json_reply(self.host.cuda_shm_status(region))
        return json_reply(self.host.system_shm_status(region))


def _model(match: re.Match[str]) -> tuple[str, str]:
    """(model name, version or "") of a model route's match."""
    groups = match.groupdict()
    return groups.get("model") or "", groups.get("version") or ""


async def _control(match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
    raise PerReplica(MODEL_CONTROL)


async def _settings(match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
    raise PerReplica(SETTINGS)


async def _shm(match: re.Match[str], headers: Headers, body: Chunks) -> Reply:
    raise PerReplica(SHARED_MEMORY)
