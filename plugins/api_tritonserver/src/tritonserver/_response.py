"""Inference responses: :class:`InferenceResponse` and the iterators ``infer`` and
``async_infer`` return.

A request is submitted on the server's loop, synchronously (an invalid request raises
from ``infer`` itself); a task there reads its Despina response stream and hands each
response, converted, to the iterator's queue and the caller's ``response_queue``. Every
request ends with a response whose ``final`` is true: a decoupled model's end comes as an
empty final response, as in Triton.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import despina
from despina import DespinaError, ResponseStream

from tritonserver._errors import InternalError, TritonError, triton_error
from tritonserver._model_ref import ModelRef
from tritonserver._tensor import Tensor

if TYPE_CHECKING:
    from tritonserver._request import InferenceRequest
    from tritonserver._running import RunningServer

#: The tasks reading response streams (held until done: the loop keeps weak references).
_PUMPS: set[asyncio.Task[None]] = set()


@dataclass
class InferenceResponse:
    """One response: ``outputs`` by name, or ``error`` set; ``final`` on the last."""

    model: ModelRef
    request_id: str | None = None
    parameters: dict[str, str | int | bool] = field(default_factory=dict)
    outputs: dict[str, Tensor] = field(default_factory=dict)
    error: TritonError | None = None
    classification_label: str | None = None
    final: bool = False


def _converted(
    model: ModelRef, request_id: str, response: despina.InferenceResponse, final: bool
) -> InferenceResponse:
    """Triton's response for a Despina one (``model``: the version that answered)."""
    result = InferenceResponse(model, request_id, final=final)
    if response.error is not None:
        result.error = triton_error(response.error)
        result.error.args += (result,)
        return result
    try:
        result.parameters = dict(response.parameters)
        result.outputs = {
            name: Tensor._from_output(array) for name, array in response.outputs.items()
        }
    except Exception as exc:  # noqa: BLE001 - reported on the response, as Triton does
        result.error = InternalError(f"Unexpected error in creating response object: {exc}")
    return result


async def _pump(
    model: ModelRef,
    request_id: str,
    stream: ResponseStream,
    deliver: Callable[[InferenceResponse], None],
) -> None:
    """Hand every response of ``stream`` to ``deliver``, the last one final."""
    final = False
    async for response in stream:
        final = response.final
        deliver(_converted(model, request_id, response, final))
    if not final:
        deliver(InferenceResponse(model, request_id, final=True))


def _submit(
    running: RunningServer,
    model: ModelRef,
    request: despina.InferenceRequest,
    deliver: Callable[[InferenceResponse], None],
) -> None:
    """Submit ``request`` on the server's loop and start reading its responses; raise
    (Triton's class) when the server refuses it."""
    accepted: concurrent.futures.Future[None] = concurrent.futures.Future()

    def on_loop() -> None:
        try:
            version, stream = running.host.submit(request)
        except DespinaError as exc:
            accepted.set_exception(triton_error(exc))
            return
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            accepted.set_exception(exc)
            return
        accepted.set_result(None)
        answered = model._answered_by(int(version.version))
        task = running.loop.create_task(_pump(answered, request.id, stream, deliver))
        _PUMPS.add(task)
        task.add_done_callback(_PUMPS.discard)

    running.loop.call_soon_threadsafe(on_loop)
    accepted.result()


class ResponseIterator:
    """The responses of one request, in order, for a ``for`` loop."""

    def __init__(
        self,
        model: ModelRef,
        request: despina.InferenceRequest,
        inference_request: InferenceRequest,
        raise_on_error: bool = False,
    ) -> None:
        self._model = model
        self._request = request
        self._raise_on_error = raise_on_error
        self._complete = False
        self._queue: queue.SimpleQueue[InferenceResponse] = queue.SimpleQueue()
        user_queue = inference_request.response_queue

        def deliver(response: InferenceResponse) -> None:
            self._queue.put(response)
            if user_queue is not None:
                user_queue.put_nowait(response)

        _submit(model._running, model, request, deliver)

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._complete:
            raise StopIteration
        response = self._queue.get()
        self._complete = response.final
        if response.error is not None and self._raise_on_error:
            raise response.error
        return response

    def cancel(self) -> None:
        """Cancel the request (the model sees it cancelled; responses end)."""
        self._model._running.loop.call_soon_threadsafe(self._request.cancel)


class AsyncResponseIterator:
    """The responses of one request, in order, for an ``async for`` loop on the loop
    that called ``async_infer``."""

    def __init__(
        self,
        model: ModelRef,
        request: despina.InferenceRequest,
        inference_request: InferenceRequest,
        raise_on_error: bool = False,
    ) -> None:
        self._model = model
        self._request = request
        self._raise_on_error = raise_on_error
        self._complete = False
        self._queue: asyncio.Queue[InferenceResponse] = asyncio.Queue()
        user_queue: Any = inference_request.response_queue
        caller_loop = asyncio.get_running_loop()

        def put(response: InferenceResponse) -> None:
            self._queue.put_nowait(response)
            if user_queue is not None:
                user_queue.put_nowait(response)

        def deliver(response: InferenceResponse) -> None:
            caller_loop.call_soon_threadsafe(put, response)

        _submit(model._running, model, request, deliver)

    def __aiter__(self) -> AsyncResponseIterator:
        return self

    async def __anext__(self) -> InferenceResponse:
        if self._complete:
            raise StopAsyncIteration
        response = await self._queue.get()
        self._complete = response.final
        if response.error is not None and self._raise_on_error:
            raise response.error
        return response

    def cancel(self) -> None:
        """Cancel the request (the model sees it cancelled; responses end)."""
        self._model._running.loop.call_soon_threadsafe(self._request.cancel)
