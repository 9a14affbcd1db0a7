""":class:`InferenceResponse` -> response body: JSON data, binary tensors, shared memory
(classified outputs arrive from the core as BYTES tensors). Binary outputs are returned as buffers over the arrays (no copy); the
caller writes them after the JSON header.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from despina import (
    DeviceArray,
    InferenceRequest,
    InferenceResponse,
    InvalidArgument,
    SharedMemoryRegistry,
    datatype_of,
    serialize_bytes,
)

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def encode_response(
    request: InferenceRequest,
    response: InferenceResponse,
    shm: SharedMemoryRegistry,
) -> tuple[bytes, list[memoryview | bytes]]:
    """Return the JSON header and the binary buffers that follow it (maybe none)."""
    binary_default = request.parameters.get("binary_data_output") is True
    outputs: list[dict[str, Any]] = []
    blobs: list[memoryview | bytes] = []
    for name, array, parameters in request.selected_outputs(response):
        outputs.append(_output(name, array, parameters, binary_default, shm, blobs))
    body: dict[str, Any] = {}
    if response.id:
        body["id"] = response.id
    body["model_name"] = response.model_name
    body["model_version"] = response.model_version
    if response.parameters:
        body["parameters"] = response.parameters
    body["outputs"] = outputs
    return orjson.dumps(body, option=_NUMPY), blobs


def _output(
    name: str,
    array: np.ndarray,
    params: dict[str, Any],
    binary_default: bool,
    shm: SharedMemoryRegistry,
    blobs: list[memoryview | bytes],
) -> dict[str, Any]:
    datatype = datatype_of(array)
    entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
    region = params.get("shared_memory_region")
    if region is not None:
        data = array if isinstance(array, DeviceArray) else _raw(array, datatype)
        needed = data.nbytes if isinstance(data, DeviceArray) else len(data)
        size = params.get("shared_memory_byte_size")
        offset = params.get("shared_memory_offset", 0)
        if not isinstance(size, int) or not isinstance(offset, int):
            raise InvalidArgument(f"invalid shared memory parameters for output '{name}'")
        window = shm.window(str(region), offset, size)
        if needed > size:
            raise InvalidArgument(
                f"shared memory size specified with the request for output '{name}' "
                f"({size} bytes) should be at least {needed} bytes to hold the results"
            )
        window.write(data)
        return entry  # as Triton: no "data" and no parameters for an output in shared memory
    if params.get("binary_data", binary_default) is True:
        data = _raw(array, datatype)
        entry["parameters"] = {"binary_data_size": len(data)}
        blobs.append(data)
        return entry
    entry["data"] = json_data(array, datatype)
    return entry


def _raw(array: np.ndarray, datatype: str) -> memoryview | bytes:
    if datatype == "BYTES":
        return serialize_bytes(array)
    if array.flags.c_contiguous and array.size and array.dtype.kind != "V":
        return array.data.cast("B")  # the quick way; no buffer for BF16 (kind "V")
    contiguous = np.ascontiguousarray(array)
    return contiguous.reshape(-1).view(np.uint8).data


def json_data(array: np.ndarray, datatype: str) -> Any:
    """The flat JSON data of ``array`` (strings for BYTES; BF16 as float32 values)."""
    if datatype == "BYTES":
        return [
            v.decode(errors="replace") if isinstance(v, bytes) else str(v)
            for v in array.reshape(-1).tolist()
        ]
    if datatype == "BF16":
        return array.astype(np.float32).reshape(-1)
    return np.ascontiguousarray(array).reshape(-1)
