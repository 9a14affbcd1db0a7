"""``POST /v2/models/{m}[/versions/{v}]/infer``: the inference endpoint.

:func:`start_infer` (decode and submit) and :func:`finish_infer` (wait and encode) are the
protocol-independent part: the front's fast path (:mod:`despina_frontend_http.h1_server`)
answers with them directly, the route here (compressed bodies or answers, requests
waiting their turn, hosts other than the front) through the router.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, NamedTuple

from despina import (
    DisconnectWatch,
    InferenceRequest,
    InferenceResponse,
    ModelVersion,
    ResponseStream,
    Unsupported,
    check_forwarded_header,
)

from despina_frontend_http.body import accepted_encoding, compress, read_body
from despina_frontend_http.context import Context, versioned
from despina_frontend_http.decode import decode_request
from despina_frontend_http.encode import encode_response
from despina_frontend_http.responses import JSON_HEADERS, Response
from despina_frontend_http.router import Request, Route


class Started(NamedTuple):
    """A submitted inference: the request, its model and the stream its answer comes on."""

    request: InferenceRequest
    model: ModelVersion
    stream: ResponseStream


def start_infer(
    ctx: Context,
    name: str,
    version: str,
    body: bytes,
    header_length: str | None,
    forwarded: Mapping[str, str] | None,
    headers: Mapping[str, str] | None = None,
    received_ns: int = 0,
    read_ns: int = 0,
) -> Started:
    """Decode and submit a request (a cheap model may have answered it already: its
    stream has then :attr:`~despina.inference.request.ResponseStream.ended`). Raises DespinaError
    with Triton's status and text for a request that cannot run. While tracing is on, the
    request may get a trace (``headers``' ``traceparent`` continues the client's;
    ``received_ns``: when its first byte came, else when it was decoded); whoever writes
    the answer then calls :func:`trace_sending` and :func:`trace_sent`. ``read_ns``: when
    the request was read whole (``time.monotonic_ns``, 0: not known); one read before the
    server began stopping runs while it stops, any other is refused then."""
    host = ctx.host
    # unknown model/version: before the body
    model = host.inference_model(name, version, received_ns=read_ns)
    if model.decoupled:
        raise Unsupported("HTTP end point doesn't support models with decoupled transaction policy")
    request = decode_request(
        body,
        header_length,
        name,
        version,
        host.shared_memory,
        ctx.layouts,
        ctx.max_json_depth,
        ctx.max_outputs,
    )
    if forwarded:
        for key, value in forwarded.items():
            request.parameters.setdefault(key, value)
    if host.tracer.active:
        traceparent = headers.get("traceparent", "") if headers is not None else ""
        trace = request.trace = host.tracer.sample(name, traceparent)
        if trace is not None:
            trace.received("HTTP", received_ns or request.received_ns)
    try:
        model, stream = host.submit(request, streaming=False, model=model, received_ns=read_ns)
    except BaseException:
        request.release_regions()
        raise
    return Started(request, model, stream)


def trace_sending(started: Started) -> None:
    """The answer of a traced request is about to be written."""
    if started.request.trace is not None:
        started.request.trace.sending("HTTP")


def trace_sent(started: Started) -> None:
    """The answer of a traced request was written (or failed): the trace is complete."""
    if started.request.trace is not None:
        started.request.trace.sent("HTTP")


def encode_outcome(
    ctx: Context, started: Started, response: InferenceResponse | None
) -> tuple[bytes, list[Any]]:
    """The JSON header and binary buffers answering a started request with its last
    response; raises its error. The request's shared-memory regions are released."""
    request, model, _ = started
    host = ctx.host
    try:
        return encode_response(request, host.outcome(model, response), host.shared_memory)
    finally:
        request.release_regions()


async def finish_infer(
    ctx: Context, started: Started, alive: Callable[[], bool] | None = None
) -> tuple[bytes, list[Any]]:
    """Wait for a started request's answer and encode it. ``alive`` tells whether the
    client is still connected: once it is not, or if this coroutine is cancelled, the
    request is cancelled (dropped from the queue, flagged for a running backend)."""
    request, _, stream = started
    watch = DisconnectWatch(request, alive) if alive is not None else None
    try:
        response = await stream.last()
    except asyncio.CancelledError:
        request.cancel()
        request.release_regions()
        raise
    finally:
        if watch is not None:
            watch.close()
    return encode_outcome(ctx, started, response)


def forwarded_headers(ctx: Context, headers: Mapping[str, str]) -> dict[str, str] | None:
    """The request headers ``--http-header-forward-pattern`` selects (lower-cased keys);
    InvalidArgument for one naming a reserved parameter key."""
    if ctx.forward is None:
        return None
    forwarded = {k.lower(): v for k, v in headers.items() if ctx.forward(k)}
    for key in forwarded:
        check_forwarded_header(key)
    return forwarded


def plain_parts(header: bytes, blobs: Sequence[Any]) -> tuple[dict[str, str], list[Any]]:
    """The headers and body parts of an uncompressed inference response."""
    if blobs:
        headers = {
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(header)),
        }
    else:
        headers = dict(JSON_HEADERS)
    return headers, [header, *blobs]


async def response_parts(
    header: bytes, blobs: Sequence[Any], accept_encoding: str | None, executor: Executor
) -> tuple[dict[str, str], list[Any]]:
    """The headers and body parts of an inference response: JSON alone, or the JSON
    header and binary buffers; one compressed part when the client accepts gzip/deflate."""
    headers, parts = plain_parts(header, blobs)
    encoding = accepted_encoding(accept_encoding)
    if encoding is not None:
        headers["Content-Encoding"] = encoding
        parts = [await compress(parts, encoding, executor)]
    return headers, parts


def routes(ctx: Context) -> list[Route]:
    limit = ctx.max_input_size

    async def infer(request: Request) -> Response:
        params = request.params
        headers = request.headers
        started = start_infer(
            ctx,
            params["model"],
            params.get("version", ""),
            read_body(request, limit, ctx.host.request_bodies),
            headers.get("inference-header-content-length"),
            forwarded_headers(ctx, headers),
            headers,
            request.received_ns,
            request.read_ns,
        )
        header, blobs = await finish_infer(ctx, started, request.connected)
        trace_sending(started)
        try:
            response_headers, parts = await response_parts(
                header, blobs, headers.get("accept-encoding"), ctx.executor
            )
        finally:
            trace_sent(started)
        return Response(200, response_headers, parts)

    return [Route("POST", path, infer, "inference") for path in versioned("/infer")]
