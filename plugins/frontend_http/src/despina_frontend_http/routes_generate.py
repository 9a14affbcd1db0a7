"""``POST /v2/models/{m}[/versions/{v}]/generate`` and ``.../generate_stream``: Triton's
generate extension (conversions in :mod:`despina_frontend_http.generate`).

``/generate`` answers one JSON object, and needs the model to answer exactly once.
``/generate_stream`` answers ``text/event-stream``: one ``data: {...}\\n\\n`` event per
response of the model (decoupled models stream), an error response as
``data: {"error": ...}``; the status is the first response's (200, or its error's), and
a model that answers nothing gives an empty 200 stream. A request refused before it runs
gets a plain JSON error. A client that disconnects cancels its request.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from despina import (
    DespinaError,
    DisconnectWatch,
    InferenceRequest,
    InferenceResponse,
    InvalidArgument,
)

from despina_frontend_http.body import read_body
from despina_frontend_http.context import Context, versioned
from despina_frontend_http.generate import (
    NOT_ONE_RESPONSE,
    error_body,
    generate_body,
    generate_request,
    input_shapes,
)
from despina_frontend_http.responses import JSON_HEADERS, Response
from despina_frontend_http.router import Request, Route, StreamResponse

EVENT_STREAM_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8"}


async def _responses(
    ctx: Context, request: InferenceRequest, http: Request
) -> AsyncGenerator[InferenceResponse, None]:
    """The model's responses to ``request``, cancelled when ``http``'s client goes away or
    the consumer stops early."""
    watch = DisconnectWatch(request, http.connected)
    try:
        async for response in ctx.host.infer_stream(request):
            yield response
    finally:  # also on CancelledError and when the consumer stops (a failed write)
        watch.close()
        if not request.stream or not request.stream.done:
            request.cancel()


def sse_event(request: InferenceRequest, response: InferenceResponse) -> bytes:
    """One server-sent event: the response, or its error (also one met converting it: the
    stream has started, so an error can only be an event)."""
    error = response.error
    if error is None:
        try:
            return b"data: " + generate_body(request, response) + b"\n\n"
        except DespinaError as exc:
            error = exc
    return b"data: " + error_body(str(error)) + b"\n\n"


def routes(ctx: Context) -> list[Route]:
    limit = ctx.max_input_size

    def parse(http: Request) -> InferenceRequest:
        params = http.params
        name, version = params["model"], params.get("version", "")
        shapes = input_shapes(ctx.host.model_metadata(name, version))
        body = read_body(http, limit, ctx.host.request_bodies)
        return generate_request(body, name, version, shapes, ctx.max_json_depth)

    async def generate(http: Request) -> Response:
        request = parse(http)
        responses = _responses(ctx, request, http)
        try:
            answers = [r async for r in responses]
        finally:
            await responses.aclose()  # cancels the request when this handler is cancelled
        if len(answers) != 1:
            raise InvalidArgument(NOT_ONE_RESPONSE)
        if answers[0].error is not None:
            raise answers[0].error
        return Response(200, JSON_HEADERS, generate_body(request, answers[0]))

    async def generate_stream(http: Request) -> StreamResponse:
        request = parse(http)
        responses = _responses(ctx, request, http)
        try:
            first = await anext(responses, None)
        except BaseException:
            await responses.aclose()
            raise
        status = 200 if first is None or first.error is None else first.error.http_status

        async def events() -> AsyncGenerator[bytes, None]:
            try:
                if first is not None:
                    yield sse_event(request, first)
                async for response in responses:
                    yield sse_event(request, response)
            finally:
                await responses.aclose()  # cancels the request unless it ended

        return StreamResponse(status, EVENT_STREAM_HEADERS, events())

    return [
        *(Route("POST", path, generate, "inference") for path in versioned("/generate")),
        *(
            Route("POST", path, generate_stream, "inference")
            for path in versioned("/generate_stream")
        ),
    ]
