"""How inference requests and their responses travel between two serving processes.

One frame: a 12-byte prefix (the JSON head's length, ``<I``; the payload's, ``<Q``), the
head (JSON), then the payload: every tensor's bytes one after the other, in the order
the head lists them (``[name, datatype, shape, nbytes]``), BYTES tensors in Triton's
length-prefixed layout. Every frame names the forwarded request it belongs to (``tag``,
unique on its connection), so one connection carries many requests at once: a request is
one frame (:func:`request_frame`), its answer frames of one response each
(:func:`response_frame`), the last one flagged final (its response may be None: a
decoupled model's final flag alone), and a client's cancellation one frame
(:func:`cancel_frame`). :func:`read_frame` reads any of them; :func:`request_of` and
:func:`response_of` decode its head and payload. Device arrays travel as host copies.
Both ends are processes of one server, started by one supervisor: a frame that does not
parse is a ValueError (or a KeyError / TypeError of its head).
"""

from __future__ import annotations

import asyncio
import json
import struct
from typing import Any

import numpy as np

from despina.errors import DespinaError, error_named
from despina.inference.request import (
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    SequenceFlags,
)
from despina.inference.tensors import datatype_of, deserialize_bytes, dtype_of, serialize_bytes
from despina.memory.device_arrays import to_host

_PREFIX = struct.Struct("<IQ")
#: The largest head a frame may have (a request's parameters and tensor list).
MAX_HEAD = 64 * 1024 * 1024
#: Output parameters that bind the output to a client's shared-memory region: the
#: forwarding process's frontend writes the output there, the owner answers the array.
_REGION_KEYS = ("shared_memory_region", "shared_memory_offset", "shared_memory_byte_size")

Tensors = list[list[Any]]


def request_frame(tag: int, request: InferenceRequest) -> list[bytes | memoryview]:
    """``request`` as frame ``tag``: its buffers, to write in order."""
    outputs = None
    if request.outputs is not None:
        outputs = [
            [o.name, {k: v for k, v in o.parameters.items() if k not in _REGION_KEYS}]
            for o in request.outputs
        ]
    tensors, payload = _tensors(request.inputs)
    head = {
        "tag": tag,
        "model": request.model_name,
        "version": request.model_version,
        "id": request.id,
        "correlation_id": request.correlation_id,
        "flags": int(request.flags),
        "priority": request.priority,
        "timeout_us": request.timeout_us,
        "received_ns": request.received_ns,
        "parameters": request.parameters,
        "outputs": outputs,
        "inputs": tensors,
    }
    return _frame(head, payload)


def request_of(head: dict[str, Any], payload: bytes) -> InferenceRequest:
    """The request a frame of :func:`request_frame` holds."""
    outputs = head["outputs"]
    return InferenceRequest(
        model_name=str(head["model"]),
        inputs=_arrays(head["inputs"], payload),
        model_version=str(head["version"]),
        id=str(head["id"]),
        outputs=None if outputs is None else [RequestedOutput(n, p) for n, p in outputs],
        parameters=dict(head["parameters"]),
        priority=int(head["priority"]),
        timeout_us=int(head["timeout_us"]),
        correlation_id=head["correlation_id"],
        flags=SequenceFlags(int(head["flags"])),
        received_ns=int(head["received_ns"]),
    )


def cancel_frame(tag: int) -> list[bytes | memoryview]:
    """Frame ``tag``'s request was cancelled by its client."""
    return _frame({"tag": tag, "cancel": True}, [])


def response_frame(
    tag: int, response: InferenceResponse | None, final: bool
) -> list[bytes | memoryview]:
    """One response to frame ``tag``'s request (None: the final flag alone)."""
    if response is None:
        return _frame({"tag": tag, "final": final, "response": None}, [])
    tensors, payload = _tensors(response.outputs)
    error = response.error
    described = {
        "id": response.id,
        "parameters": response.parameters,
        "error": None if error is None else [type(error).__name__, str(error)],
        "outputs": tensors,
    }
    return _frame({"tag": tag, "final": final, "response": described}, payload)


def response_of(head: dict[str, Any], payload: bytes) -> tuple[InferenceResponse | None, bool]:
    """The response a frame of :func:`response_frame` holds, and whether it is final."""
    described = head["response"]
    if described is None:
        return None, bool(head["final"])
    error: DespinaError | None = None
    if described["error"] is not None:
        error = error_named(*map(str, described["error"]))
    response = InferenceResponse(
        id=str(described["id"]),
        outputs=_arrays(described["outputs"], payload),
        parameters=dict(described["parameters"]),
        error=error,
    )
    return response, bool(head["final"])


def _frame(head: dict[str, Any], payload: list[bytes | memoryview]) -> list[bytes | memoryview]:
    text = json.dumps(head, separators=(",", ":")).encode()
    size = sum(len(part) for part in payload)
    return [_PREFIX.pack(len(text), size), text, *payload]


async def read_frame(reader: asyncio.StreamReader) -> tuple[dict[str, Any], bytes]:
    """The next frame's head and payload; IncompleteReadError when the connection closed
    first, ValueError for a frame that does not parse."""
    head_size, payload_size = _PREFIX.unpack(await reader.readexactly(_PREFIX.size))
    if head_size > MAX_HEAD:
        raise ValueError(f"a relayed frame's head of {head_size} bytes")
    head = json.loads(await reader.readexactly(head_size))
    if not isinstance(head, dict):
        raise ValueError("a relayed frame's head is not a JSON object")
    payload = await reader.readexactly(payload_size) if payload_size else b""
    return head, payload


def _tensors(arrays: dict[str, Any]) -> tuple[Tensors, list[bytes | memoryview]]:
    """Each array's ``[name, datatype, shape, nbytes]`` and its bytes."""
    described: Tensors = []
    payload: list[bytes | memoryview] = []
    for name, value in arrays.items():
        array = to_host(value)
        datatype = datatype_of(array)
        if datatype == "BYTES":
            data: bytes | memoryview = serialize_bytes(array)
        else:
            data = np.ascontiguousarray(array).reshape(-1).view(np.uint8).data
        described.append([name, datatype, list(array.shape), len(data)])
        payload.append(data)
    return described, payload


def _arrays(described: Tensors, payload: bytes) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    view = memoryview(payload)
    offset = 0
    for name, datatype, shape, nbytes in described:
        data = view[offset : offset + int(nbytes)]
        offset += int(nbytes)
        if datatype == "BYTES":
            count = int(np.prod(shape, dtype=np.int64))
            arrays[name] = deserialize_bytes(data, count).reshape(shape)
        else:
            arrays[name] = np.frombuffer(data, dtype_of(datatype)).reshape(shape)
    if offset != len(payload):
        raise ValueError("a relayed frame's tensors do not fill its payload")
    return arrays
