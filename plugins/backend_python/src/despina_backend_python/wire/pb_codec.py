"""pb_utils requests and responses as channel messages: descriptors + one shm segment.

Server-independent (used by the child and by the server side).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from despina_backend_python.pb.errors import TritonError
from despina_backend_python.pb.messages import (
    InferenceRequest,
    InferenceResponse,
    ParentTrace,
    PreferredMemory,
)
from despina_backend_python.pb.tensor import Tensor, any_tensor
from despina_backend_python.wire.shm import Arena, Ring, unpack

T = TypeVar("T")


def tensor_maker(message: dict[str, Any]) -> Callable[[str, Any], Tensor]:
    """How to wrap the unpacked arrays of ``message`` as pb tensors (any_tensor only
    when it carried device tensors)."""
    return any_tensor if message.get("cuda") else Tensor._trusted


def pack_responses(arena: Arena, items: list[Any]) -> dict[str, Any]:
    """``{"shm", "responses"}`` for a list of InferenceResponse or None (other items are
    marked ``invalid`` with their type name, for the server to report)."""
    tensors: list[tuple[str, np.ndarray]] = []
    descs: list[dict[str, Any]] = []
    for item in items:
        if item is None:  # the request answers through its response sender
            descs.append({"none": True})
            continue
        if not isinstance(item, InferenceResponse):
            descs.append({"invalid": type(item).__name__})
            continue
        error = item.error()
        outputs = [] if error is not None else item.output_tensors()
        tensors.extend([(t._name, t._array) for t in outputs])
        descs.append(
            {
                "n": len(outputs),
                "error": None if error is None else (error.message(), error.code()),
                "params": item.parameters(),
            }
        )
    return {**arena.pack(tensors), "responses": descs}


def unpack_items(
    message: dict[str, Any],
    ring: Ring | None,
    build: Callable[[list[tuple[str, Any]], dict[str, Any]], T],
) -> list[T | str | None]:
    """The items of :func:`pack_responses`: None where the request answers through its
    response sender, the type name of an invalid item, else ``build(tensors, desc)`` of
    the response's ``(name, array)`` tensors and its descriptor (``error``, ``params``)."""
    tensors = unpack(message, ring)
    out: list[T | str | None] = []
    at = 0
    for desc in message["responses"]:
        if "none" in desc:
            out.append(None)
        elif "invalid" in desc:
            out.append(desc["invalid"])
        else:
            out.append(build(tensors[at : at + desc["n"]], desc))
            at += desc["n"]
    return out


def unpack_responses(
    message: dict[str, Any], ring: Ring | None
) -> list[InferenceResponse | str | None]:
    """The responses of :func:`pack_responses` as pb_utils objects (the type name for
    invalid items)."""
    make = tensor_maker(message)

    def build(tensors: list[tuple[str, Any]], desc: dict[str, Any]) -> InferenceResponse:
        error = None if desc["error"] is None else TritonError(*desc["error"])
        chunk = [make(name, array) for name, array in tensors]
        return InferenceResponse(chunk, error=error, parameters=desc["params"])

    return unpack_items(message, ring, build)


def request_fields(request: InferenceRequest) -> dict[str, Any]:
    """The scalar fields of a request (everything but its tensors)."""
    return {
        "model": request.model_name(),
        "version": request.model_version(),
        "outputs": request.requested_output_names(),
        "id": request.request_id(),
        "corr": request.correlation_id(),
        "flags": request.flags(),
        "params": request.parameters(),
        "timeout": request.timeout(),
        "trace": trace.token if isinstance(trace := request.trace(), ParentTrace) else None,
        "memory": None
        if (memory := request._preferred_memory) is None
        else (int(memory.preferred_memory_type), int(memory.preferred_device_id)),
    }


def pack_request(arena: Arena, request: InferenceRequest) -> dict[str, Any]:
    """A BLS request as a message body."""
    fields = arena.pack([(t.name(), t._array) for t in request.inputs()])
    return {**fields, "request": request_fields(request)}


def unpack_request(message: dict[str, Any], ring: Ring | None) -> InferenceRequest:
    """The BLS request of :func:`pack_request` (its trace: a :class:`ParentTrace` handle,
    for the server to resolve)."""
    fields = message["request"]
    make = tensor_maker(message)
    inputs = [make(name, array) for name, array in unpack(message, ring)]
    return InferenceRequest(
        model_name=fields["model"],
        inputs=inputs,
        requested_output_names=fields["outputs"],
        request_id=fields["id"],
        correlation_id=fields["corr"],
        model_version=fields["version"],
        flags=fields["flags"],
        timeout=fields["timeout"],
        parameters=fields["params"],
        trace=None if fields.get("trace") is None else ParentTrace(fields["trace"]),
        preferred_memory=None if fields["memory"] is None else PreferredMemory(*fields["memory"]),
    )
