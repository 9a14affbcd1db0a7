"""Checking what ``execute`` returned and turning it into server responses, and ending
the response streams a decoupled model left open at unload (both modes)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from despina import (
    InferenceRequest as CoreRequest,
    InferenceResponse as CoreResponse,
    Internal,
    InvalidArgument,
    Unavailable,
)

from despina_backend_python.hosting.loading import describe_exception


def execute_failed(instance_name: str, detail: str) -> Internal:
    """Triton's error for a failed ``execute`` (every request of the batch gets it)."""
    return Internal(
        f"Failed to process the request(s) for model '{instance_name}', message: {detail}"
    )


def exception_failed(instance_name: str, exc: BaseException) -> Internal:
    return execute_failed(instance_name, describe_exception(exc))


def collect(
    instance_name: str,
    result: Any,
    requests: Sequence[CoreRequest],
    decoupled: bool,
    convert: Callable[[Any, CoreRequest], CoreResponse],
    unanswered: Sequence[int] = (),
) -> list[CoreResponse] | None:
    """The server responses for ``result`` (what ``execute`` returned, checked by
    :func:`~despina_backend_python.hosting.returned.check_returned`).

    Decoupled models answer through their response senders: None. A default model's
    ``result`` is None or holds one item per request (else raises Internal with Triton's
    text); a None item means the request answers through its response sender, maybe
    later from another thread: then the returned responses are sent here and None is
    returned. The requests in ``unanswered`` (no response, no sender taken) fail.
    """
    if decoupled:
        return None
    if result is not None:
        if not isinstance(result, list | tuple):
            raise execute_failed(instance_name, "Expected a list in the execute return")
        if len(result) != len(requests):
            raise execute_failed(
                instance_name,
                "Number of InferenceResponse objects do not match the number of "
                f"InferenceRequest objects. InferenceRequest(s) size is:{len(requests)}, and "
                f"InferenceResponse(s) size is:{len(result)}\n",
            )
    for index in unanswered:
        requests[index].fail(
            execute_failed(instance_name, "execute() returned None without sending a response")
        )
    if result is None:
        return None
    if any(item is None for item in result):
        for item, request in zip(result, requests, strict=True):
            if item is not None:
                request.respond(convert(item, request), final=True)
        return None
    return [convert(item, request) for item, request in zip(result, requests, strict=True)]


def reschedule(
    instance_name: str,
    requests: Sequence[CoreRequest],
    indices: Iterable[int],
    logger: logging.Logger,
) -> None:
    """Release the requests at ``indices`` (those a successful ``execute`` rescheduled)
    to run again. Where the model's sequence batcher is not iterative the server refuses
    with Triton's error: logged as Triton logs it, and the request, which Triton leaves
    unanswered, fails with it."""
    for index in indices:
        request = requests[index]
        try:
            request.reschedule()
        except InvalidArgument as exc:
            logger.error("Failed to release request: %s", exc)
            request.fail(execute_failed(instance_name, str(exc)))


#: How often :func:`settle_streams` looks whether the open streams have ended.
SETTLE_POLL_S = 0.05


async def settle_streams(
    open_requests: Callable[[], Iterable[CoreRequest]], wait_s: float, model: str
) -> None:
    """At unload: wait up to ``wait_s`` for a decoupled model's open requests to get their
    final response (a request whose client is gone is not waited for), then end every
    one still open with UNAVAILABLE, so no client is left with a stream that never ends.
    ``open_requests()`` lists the requests whose final response has not been sent."""

    def still_open() -> list[CoreRequest]:
        return [r for r in open_requests() if r.stream is not None and not r.stream.done]

    deadline = time.monotonic() + wait_s
    try:
        while any(not r.cancelled for r in still_open()) and time.monotonic() < deadline:
            await asyncio.sleep(SETTLE_POLL_S)
    finally:
        for request in still_open():
            request.fail(Unavailable(f"model '{model}' was unloaded before the request completed"))
