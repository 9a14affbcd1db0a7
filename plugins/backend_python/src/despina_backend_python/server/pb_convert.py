"""Conversions between the server's requests/responses/errors and pb_utils objects.

Arrays are never copied: a pb Tensor wraps the request's numpy array, and response
arrays go to the server as they are (BYTES given as ``S``/``U`` arrays become object
arrays of ``bytes`` in bulk). GPU tensors are cupy arrays in pb_utils (a DeviceTensor)
and DeviceArrays in the server: the functions here wrap and unwrap them. A BLS
response's tensors go where the request's ``preferred_memory`` asks
(:func:`response_to_pb`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from despina import (
    DeviceArray,
    InferenceRequest as CoreRequest,
    InferenceResponse as CoreResponse,
    RequestedOutput,
    SequenceFlags,
    Trace,
    errors,
    repeated_tensor,
)

from despina_backend_python.pb import device, messages as pb
from despina_backend_python.pb.errors import TritonError, TritonModelException
from despina_backend_python.pb.tensor import DeviceTensor, Tensor
from despina_backend_python.pb.types import as_bytes_items, bytes_array
from despina_backend_python.wire import pb_codec
from despina_backend_python.wire.shm import Ring

#: Request parameters that belong to the protocol, not to the model (Triton drops them).
PROTOCOL_PARAMETERS = frozenset(
    {
        "binary_data_output",
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "triton_enable_empty_final_response",
    }
)

_CODE_TO_ERROR: dict[int, type[errors.DespinaError]] = {
    TritonError.NOT_FOUND: errors.NotFound,
    TritonError.INVALID_ARG: errors.InvalidArgument,
    TritonError.UNAVAILABLE: errors.Unavailable,
    TritonError.UNSUPPORTED: errors.Unsupported,
    TritonError.ALREADY_EXISTS: errors.AlreadyExists,
    TritonError.CANCELLED: errors.Cancelled,
    TritonError.UNKNOWN: errors.Unknown,
}


def error_to_core(error: TritonError) -> errors.DespinaError:
    """A pb TritonError as the server error of the same status."""
    return _CODE_TO_ERROR.get(error.code(), errors.Internal)(error.message())


def error_to_pb(error: errors.DespinaError) -> TritonError:
    code = getattr(TritonError, error.triton_code, TritonError.INTERNAL)
    return TritonError(str(error), code)


def model_parameters_json(parameters: dict[str, Any]) -> str:
    """A request's parameters as the model sees them (JSON, protocol keys removed)."""
    if not parameters:
        return "{}"
    kept = {k: v for k, v in parameters.items() if k not in PROTOCOL_PARAMETERS}
    return json.dumps(kept, separators=(",", ":"))  # compact, as Triton writes it


def output_array(tensor: Tensor) -> np.ndarray:
    """A response tensor's array as the server carries it (BYTES as object arrays of
    bytes; a GPU tensor as a DeviceArray)."""
    array = tensor._array
    if array.dtype.kind in "SU":
        return bytes_array(as_bytes_items(array), array.shape)
    if type(tensor) is DeviceTensor:
        return DeviceArray(array)  # type: ignore[return-value]  # a DeviceArray rides as one
    return array


def bls_input_array(tensor: Tensor) -> np.ndarray:
    """A BLS input tensor's array for the server (a GPU tensor as a DeviceArray)."""
    if type(tensor) is DeviceTensor:
        return DeviceArray(tensor._array)  # type: ignore[return-value]  # rides as one
    return tensor._array


def input_tensor(name: str, array: Any) -> Tensor:
    """A pb tensor over a request input that may be a DeviceArray (models taking device
    inputs)."""
    if type(array) is DeviceArray:
        return DeviceTensor._trusted(name, array.data)
    return Tensor._trusted(name, array)


def _placed(array: Any, preferred: pb.PreferredMemory | None) -> Any:
    """A BLS output where ``preferred`` asks for it (as Triton's BLS allocator): None
    keeps it where the model left it; CPU (or pinned) copies a device array to the host;
    GPU puts it on ``preferred_device_id`` (BYTES stay on the host). Without cupy, GPU
    means the host, as in a Triton build without GPU support."""
    if preferred is None:
        return array
    on_device = type(array) is DeviceArray
    if preferred.preferred_memory_type != pb.TRITONSERVER_MEMORY_GPU:
        return array.to_host() if on_device else array
    target = int(preferred.preferred_device_id)
    if on_device:
        return (
            array
            if array.device_id == target
            else DeviceArray(device.to_device(array.data, target))
        )
    if array.dtype == np.object_ or not _has_cupy():
        return array
    return DeviceArray(device.to_device(array, target))


def _has_cupy() -> bool:
    try:
        device.cupy()
    except TritonModelException:
        return False
    return True


def response_to_core(response: pb.InferenceResponse, wanted: list[str] | None) -> CoreResponse:
    """A model's response for the server; only ``wanted`` outputs (all when None)."""
    if not isinstance(response, pb.InferenceResponse):
        raise errors.Internal(
            f"Expected a pb_utils.InferenceResponse, got {type(response).__name__}"
        )
    text = response.parameters()
    params = {} if text == "{}" else json.loads(text)
    error = response.error()
    if error is not None:
        return CoreResponse(error=error_to_core(error), parameters=params)
    tensors = response.output_tensors()
    if wanted is not None:  # in the model's order, as Triton answers
        tensors = [t for t in tensors if t.name() in wanted]
    outputs = {t.name(): output_array(t) for t in tensors}
    return CoreResponse(outputs=outputs, parameters=params)


def responses_from_wire(message: dict[str, Any], ring: Ring | None) -> list[Any]:
    """The responses of an ``executed`` or ``send`` message
    (:func:`~despina_backend_python.wire.pb_codec.pack_responses`) as server responses,
    built from the message without pb objects (what :func:`response_to_core` makes of
    the model's, every output kept): None where the request answers through its sender,
    the type name of an item that was not an InferenceResponse."""
    on_device = bool(message.get("cuda"))  # device tensors come as cupy arrays

    def build(tensors: list[tuple[str, Any]], desc: dict[str, Any]) -> CoreResponse:
        text = desc["params"]
        params = {} if text == "{}" else json.loads(text)
        if desc["error"] is not None:
            message, code = desc["error"]
            return CoreResponse(
                error=_CODE_TO_ERROR.get(code, errors.Internal)(message), parameters=params
            )
        if on_device:
            tensors = [(n, a if type(a) is np.ndarray else DeviceArray(a)) for n, a in tensors]
        return CoreResponse(outputs=dict(tensors), parameters=params)

    return pb_codec.unpack_items(message, ring, build)


def requested_only(response: CoreResponse, wanted: list[str] | None) -> CoreResponse:
    """``response`` with only the ``wanted`` outputs (all when None), in its order."""
    if wanted is not None and response.error is None:
        response.outputs = {n: a for n, a in response.outputs.items() if n in wanted}
    return response


def response_to_pb(
    response: CoreResponse, preferred: pb.PreferredMemory | None = None
) -> pb.InferenceResponse:
    """A server response (BLS result) for the model, its outputs where ``preferred``
    asks (see :func:`_placed`)."""
    params = {k: v for k, v in response.parameters.items() if isinstance(v, bool | int | str)}
    if response.error is not None:
        return pb.InferenceResponse(error=error_to_pb(response.error), parameters=params)
    tensors = [
        input_tensor(name, _placed(array, preferred)) for name, array in response.outputs.items()
    ]
    return pb.InferenceResponse(output_tensors=tensors, parameters=params)


def request_to_core(request: pb.InferenceRequest) -> CoreRequest:
    """A BLS request built by a model, for ``Server.infer``; built with
    ``trace=request.trace()`` of a traced request (either mode), it is traced as that
    request's child. Its ``device_outputs`` follow ``preferred_memory`` (see
    :func:`_placed`). InvalidArgument (Triton's text) for two inputs of one name."""
    tensors = request.inputs()
    inputs = {t.name(): bls_input_array(t) for t in tensors}
    if len(inputs) != len(tensors):
        names = [t.name() for t in tensors]
        name = next(n for i, n in enumerate(names) if n in names[:i])
        raise repeated_tensor("input", name, request.request_id())
    version = request.model_version()
    flags = request.flags()
    parameters = json.loads(request.parameters())
    parent = request.trace()
    memory = request._preferred_memory
    return CoreRequest(
        model_name=request.model_name(),
        inputs=inputs,
        model_version=str(version) if version >= 0 else "",
        id=request.request_id(),
        outputs=[RequestedOutput(n) for n in request.requested_output_names()] or None,
        parameters=parameters,
        timeout_us=request.timeout(),
        correlation_id=request.correlation_id(),
        flags=SequenceFlags(flags & 3),
        trace=parent.child() if isinstance(parent, Trace) else None,
        # a GPU backend may answer on the device unless the model asked for CPU outputs
        device_outputs=memory is None or memory.preferred_memory_type == pb.TRITONSERVER_MEMORY_GPU,
    )


def request_fields(request: CoreRequest, all_outputs: list[str]) -> dict[str, Any]:
    """The scalar fields of a request as ``execute`` sees them."""
    return {
        "outputs": request.requested_output_names or list(all_outputs),
        "request_id": request.id,
        "correlation_id": request.correlation_id,
        "flags": int(request.flags),
        "parameters_json": model_parameters_json(request.parameters),
    }
