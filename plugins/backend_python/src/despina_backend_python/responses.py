"""Checking what ``execute`` returned and turning it into server responses (both modes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from despina.errors import Internal
from despina.inference import InferenceRequest as CoreRequest
from despina.inference import InferenceResponse as CoreResponse

from despina_backend_python.loading import describe_exception


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
) -> list[CoreResponse] | None:
    """The server responses for ``result`` (what ``execute`` returned).

    Decoupled models answer through their response senders: None. A default model that
    returned None must have sent every response through senders; requests still open
    fail. Otherwise ``result`` must hold one response per request; raises Internal with
    Triton's message when it does not.
    """
    if decoupled:
        return None
    if result is None:
        for request in requests:
            if request.stream is not None and not request.stream.done:
                request.fail(
                    execute_failed(
                        instance_name, "execute() returned None without sending a response"
                    )
                )
        return None
    if not isinstance(result, list | tuple):
        raise execute_failed(instance_name, "Expected a list in the execute return")
    if len(result) != len(requests):
        raise execute_failed(
            instance_name,
            "Number of InferenceResponse objects do not match the number of InferenceRequest "
            f"objects. InferenceRequest(s) size is:{len(requests)}, and InferenceResponse(s) "
            f"size is:{len(result)}\n",
        )
    return [convert(item, request) for item, request in zip(result, requests, strict=True)]
