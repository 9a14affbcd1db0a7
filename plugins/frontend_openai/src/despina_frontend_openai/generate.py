"""Running one generation on a model: its responses as they come, cancelled when the
client goes away or the reader stops early, timed for the frontend's metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable

from despina import DespinaError, FrontendHost, InferenceRequest, InferenceResponse

from despina_frontend_openai.catalog import Entry, Lora
from despina_frontend_openai.errors import OpenAIError
from despina_frontend_openai.metrics import Metrics

#: Seconds between checks that a waiting client is still connected.
DISCONNECT_POLL_S = 0.1


class DisconnectWatch:
    """Once ``alive()`` turns false, cancels ``request`` and the task that made the watch
    (which may be waiting for a model that never answers a cancelled request)."""

    def __init__(self, request: InferenceRequest, alive: Callable[[], bool]) -> None:
        self.request = request
        self.alive = alive
        self.task = asyncio.current_task()
        self.loop = asyncio.get_running_loop()
        self.handle = self.loop.call_later(DISCONNECT_POLL_S, self._check)

    def _check(self) -> None:
        if self.alive():
            self.handle = self.loop.call_later(DISCONNECT_POLL_S, self._check)
            return
        self.request.cancel()
        if self.task is not None:
            self.task.cancel()

    def close(self) -> None:
        self.handle.cancel()


async def responses(
    host: FrontendHost,
    entry: Entry,
    request: InferenceRequest,
    alive: Callable[[], bool],
    metrics: Metrics,
    lora: Lora | None = None,
) -> AsyncGenerator[InferenceResponse, None]:
    """Every response of ``request`` on ``entry``'s model; an error response raises
    OpenAIError (Despina's status). The request is cancelled unless it ended."""
    try:
        _, stream = host.submit(request, streaming=True, model=entry.model)
    except DespinaError as exc:
        raise OpenAIError.of(exc) from None
    if lora is not None:
        lora.registered = True
    name = entry.model.name
    watch = DisconnectWatch(request, alive)
    start = last = time.perf_counter()
    first = True
    try:
        async for response in stream:
            if response.error is not None:
                if lora is not None:
                    lora.registered = False
                raise OpenAIError.of(response.error)
            now = time.perf_counter()
            (metrics.ttft if first else metrics.itl)[name].observe(
                (now - (start if first else last)) * 1e3
            )
            first, last = False, now
            count = response.outputs.get("num_output_tokens")
            if count is not None and count.size:
                metrics.tokens[name] += int(count.reshape(-1)[0])
            yield response
    finally:  # also on CancelledError and when the reader stops (a failed write)
        watch.close()
        if not stream.done:
            request.cancel()
