"""Running one generation on a model: its responses as they come, cancelled when the
client goes away or the reader stops early, timed for the frontend's metrics."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable

from despina import DespinaError, DisconnectWatch, FrontendHost, InferenceRequest, InferenceResponse

from despina_frontend_openai.catalog import Entry, Lora
from despina_frontend_openai.convert import count_of
from despina_frontend_openai.errors import OpenAIError
from despina_frontend_openai.metrics import Metrics


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
            count = count_of(response, "num_output_tokens")
            if count is not None:
                metrics.tokens[name] += count
            yield response
    finally:  # also on CancelledError and when the reader stops (a failed write)
        watch.close()
        if not stream.done:
            request.cancel()
