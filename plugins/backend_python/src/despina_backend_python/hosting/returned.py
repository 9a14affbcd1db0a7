"""What ``execute`` returned, checked against the requests' response senders as
Triton's stub checks it. Server-independent (runs in child processes too)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from despina_backend_python.pb.errors import TritonModelException
from despina_backend_python.pb.messages import (
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
)


class ReturnedError(Exception):
    """``execute`` returned what Triton refuses; the message is Triton's text."""


def check_returned(
    instance_name: str, requests: Sequence[InferenceRequest], result: Any, decoupled: bool
) -> tuple[list[int], list[int]]:
    """Check ``result`` (what ``execute`` returned for ``requests``).

    Raises ReturnedError when a decoupled model returned anything but None, a default
    model returned anything but None for a request it rescheduled, or a returned
    response is for a request whose sender already sent one (or its final flag).
    Returns two lists of indices of ``requests``: those of a default model that nothing
    can answer any more (neither rescheduled nor answered by a returned response, and
    their response sender never taken), and those the model rescheduled. A result that
    is not a list of one item per request is left to the caller.
    """
    if decoupled:
        if result is not None:
            raise ReturnedError(
                f"Python model '{instance_name}' is using the decoupled mode and the execute "
                "function must return None."
            )
        return [], _rescheduled(requests)
    items = [None] * len(requests) if result is None else result
    if not isinstance(items, list | tuple) or len(items) != len(requests):
        return [], _rescheduled(requests)
    unanswered: list[int] = []
    rescheduled: list[int] = []
    for index, (request, item) in enumerate(zip(requests, items, strict=True)):
        again = request._release_flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
        if again:
            rescheduled.append(index)
        if item is None:
            if request._sender is None and not again:
                unanswered.append(index)
            continue
        if again:
            raise ReturnedError(  # sic: Triton's spelling, which tests grep for
                "Expected a None object in the execute function return list for reschduled "
                f"request, found type '{type(item)}'."
            )
        if isinstance(item, InferenceResponse):  # the request's final send
            sender = request._sender
            if sender is None:  # none made for it: one taken later starts after this send
                request._returned = True
                continue
            try:
                sender.record(item, final=True)
            except TritonModelException as exc:
                raise ReturnedError(str(exc)) from None
    return unanswered, rescheduled


def _rescheduled(requests: Sequence[InferenceRequest]) -> list[int]:
    """The indices of the requests the model rescheduled."""
    flag = TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
    return [i for i, request in enumerate(requests) if request._release_flags & flag]


def close_senders(requests: Sequence[InferenceRequest]) -> None:
    """After a failed ``execute`` (the server answers every request with the error): a
    later ``send`` raises, as in Triton."""
    for request in requests:
        sender = request._sender
        if sender is None and request._responder is not None:  # not taken: nothing waits
            sender = request._sender = InferenceResponseSender(
                request._responder, request._returned
            )
        if sender is not None:
            sender.close()
