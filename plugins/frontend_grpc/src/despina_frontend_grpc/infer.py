"""ModelInfer and ModelStreamInfer: decode, run on the server, encode.

A stream carries any number of requests, each running as soon as it arrives. As Triton,
the answers of requests to non-decoupled models are written in the order the requests
were read (an answer ready early waits for those of the requests before it); a decoupled
model's responses are written as they come. A failing request
becomes a ``ModelStreamInferResponse`` with ``error_message`` (and the request's id) and
the stream stays open, as tritonclient expects; with Triton's ``triton_grpc_error: true``
header the first error instead ends the stream with its gRPC status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, NamedTuple

from despina import (
    DespinaError,
    InferenceRequest,
    InferenceResponse,
    Internal,
    Unsupported,
    check_forwarded_header,
    grpc_service as service_pb2,
    header_forward_matcher,
)

from despina_frontend_grpc import parameters as params
from despina_frontend_grpc.codec import RequestDecoder, encode_response
from despina_frontend_grpc.errors import UNPARSABLE, UNPARSABLE_TEXT, client_text, status_of
from despina_frontend_grpc.status import StatusCode

if TYPE_CHECKING:
    from despina import FrontendHost, ModelVersion

    from despina_frontend_grpc.servicer_context import ServicerContext

#: Requests of one stream running at once; further messages wait unread, so HTTP/2 flow
#: control holds back a client that sends without reading its responses.
MAX_STREAM_IN_FLIGHT = 1024


class Inference:
    """The inference RPCs of one server, with the frontend's settings applied."""

    def __init__(self, server: FrontendHost, header_pattern: str) -> None:
        self.server = server
        self.shm = server.shared_memory
        self.headers = header_forward_matcher(header_pattern)

    def build(
        self, message: Any, context: ServicerContext, streaming: bool
    ) -> tuple[ModelVersion, InferenceRequest]:
        """The model version and InferenceRequest of a ModelInferRequest (model looked up
        first, as Triton; UNAVAILABLE before that once the server is stopping), traced
        when the tracer samples it (the ``traceparent`` metadata continues the client's
        trace); whoever writes its answer then calls :func:`trace_sent`."""
        tracing = self.server.tracer.active
        read_ns = time.monotonic_ns() if tracing else 0
        model = self.server.inference_model(message.model_name, message.model_version)
        if model.decoupled and not streaming:
            raise Unsupported(
                "ModelInfer RPC doesn't support models with decoupled transaction policy"
            )
        assert model.signature is not None
        request = RequestDecoder(message, self.shm).request(model.signature)
        if self.headers is not None:
            for key, value in context.invocation_metadata() or ():
                if self.headers(key):
                    check_forwarded_header(key)
                    request.parameters[key] = value
        if tracing:
            metadata = dict(context.invocation_metadata() or ())
            trace = request.trace = self.server.tracer.sample(
                message.model_name, str(metadata.get("traceparent", ""))
            )
            if trace is not None:
                trace.received("GRPC", read_ns)
        return model, request

    async def infer(self, message: Any, context: ServicerContext) -> Any:
        """One request on a non-decoupled model; DespinaError for the caller to report."""
        model, request = self.build(message, context, streaming=False)
        try:
            response = await self.server.infer(request, model)
        except BaseException as exc:  # the answer is an error: nothing to write
            if isinstance(exc, asyncio.CancelledError):
                request.cancel()
            request.release_regions()
            raise
        finally:
            if request.trace is not None:
                request.trace.sending("GRPC")
        try:
            return encode_response(response, request, self.shm)
        finally:
            request.release_regions()
            trace_sent(request)

    async def stream(
        self, messages: AsyncIterator[Any], context: ServicerContext
    ) -> AsyncIterator[Any]:
        """Serve a bidirectional stream until the client closes its side and every
        request it sent has finished."""
        ready: asyncio.Queue[Any] = asyncio.Queue()
        running: set[asyncio.Task[None]] = set()

        async def read() -> None:
            previous: asyncio.Future[None] | None = None
            async for message in messages:
                while len(running) >= MAX_STREAM_IN_FLIGHT:
                    await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                turn = _Turn(ready.put_nowait, previous)
                previous = turn.done
                task = asyncio.create_task(self._one(message, context, turn))
                running.add(task)
                task.add_done_callback(running.discard)
            while running:
                await asyncio.gather(*running)
            ready.put_nowait(None)

        grpc_error = _grpc_error_mode(context)
        reader = asyncio.create_task(read())
        try:
            while (item := await ready.get()) is not None:
                if isinstance(item, _Failed):
                    if grpc_error:  # as Triton: the first error ends the stream
                        await context.abort(item.code, item.message.error_message)
                    item = item.message
                yield item
            await reader  # re-raises a failed read (the client broke the stream)
        finally:
            for task in (reader, *running):
                task.cancel()

    async def _one(self, message: Any, context: ServicerContext, turn: _Turn) -> None:
        """Run one streamed request, putting each response (or error) in its ``turn``."""
        try:
            await self._run(message, context, turn)
        finally:
            turn.end()

    async def _run(self, message: Any, context: ServicerContext, turn: _Turn) -> None:
        if message is UNPARSABLE:
            await turn.put(_error("", Internal(UNPARSABLE_TEXT)))
            return
        try:
            model, request = self.build(message, context, streaming=True)
        except Exception as exc:  # noqa: BLE001 - every failure is reported in the stream
            await turn.put(_error(message.id, exc))
            return
        if model.decoupled:
            turn.end()  # its responses go as they come and hold back no later answer
        empty_final = request.parameters.pop(params.EMPTY_FINAL, False) is True
        final_sent = False
        try:
            async for response in self.server.infer_stream(request):
                if response.final and request.trace is not None:
                    request.trace.sending("GRPC")
                await turn.put(self._stream_response(request, response))
                final_sent = response.final
                if final_sent:
                    turn.end()
        except asyncio.CancelledError:
            request.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is reported in the stream
            await turn.put(_error(message.id, exc))
            return
        finally:
            request.release_regions()
            trace_sent(request)
        if empty_final and not final_sent:
            empty = service_pb2.ModelInferResponse(id=request.id, model_name=request.model_name)
            empty.parameters[params.FINAL_FLAG].bool_param = True
            await turn.put(service_pb2.ModelStreamInferResponse(infer_response=empty))

    def _stream_response(self, request: InferenceRequest, response: InferenceResponse) -> Any:
        """The stream message of a response; every one carries Triton's final flag."""
        if response.error is not None:
            return _error(request.id, response.error)
        try:
            encoded = encode_response(response, request, self.shm)
        except DespinaError as exc:
            return _error(request.id, exc)
        encoded.parameters[params.FINAL_FLAG].bool_param = response.final
        return service_pb2.ModelStreamInferResponse(infer_response=encoded)


def trace_sent(request: InferenceRequest) -> None:
    """A traced request's answer is written (or failed): its trace is complete. (The
    gRPC server writes the message right after: GRPC_SEND_END is when it was queued.)"""
    if request.trace is not None:
        request.trace.sent("GRPC")


class _Turn:
    """One streamed request's place in the stream's order of answers: until :meth:`end`
    (its answer is put, or it turned out decoupled) :meth:`put` waits for the turn of the
    request read before it to end."""

    def __init__(self, put: Any, previous: asyncio.Future[None] | None) -> None:
        self._put = put
        self._previous = previous
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def put(self, item: Any) -> None:
        if not self.done.done() and self._previous is not None:
            await asyncio.shield(self._previous)
        self._put(item)

    def end(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class _Failed(NamedTuple):
    """A failed request's stream message and the gRPC status its error maps to."""

    message: Any
    code: StatusCode


def _error(request_id: str, exc: BaseException) -> _Failed:
    message = service_pb2.ModelStreamInferResponse(
        error_message=client_text(exc),
        infer_response=service_pb2.ModelInferResponse(id=request_id),
    )
    code = status_of(exc) if isinstance(exc, DespinaError) else StatusCode.INTERNAL
    return _Failed(message, code)


def _grpc_error_mode(context: ServicerContext) -> bool:
    """Triton's ``triton_grpc_error: true`` stream header: an error ends the stream with
    its gRPC status instead of an ``error_message`` inside it."""
    metadata = context.invocation_metadata() or ()
    return any(k == "triton_grpc_error" and str(v).lower() == "true" for k, v in metadata)
