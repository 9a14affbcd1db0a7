"""``ModelInferRequest`` -> :class:`InferenceRequest` and :class:`InferenceResponse` ->
``ModelInferResponse``, with Triton's rules and error texts.

Input data comes, per tensor and in this order of precedence, from a shared-memory region
(tensor parameters ``shared_memory_region/offset/byte_size``), the typed ``contents`` or
the next ``raw_input_contents`` entry. Raw data becomes an array with ``numpy.frombuffer``
(no copy). Outputs always travel in ``raw_output_contents`` (as Triton sends them), or
into the requested shared-memory region, leaving an empty raw entry so indices line up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from despina import (
    DeviceArray,
    InferenceRequest,
    InferenceResponse,
    Internal,
    InvalidArgument,
    ModelSignature,
    RequestedOutput,
    SharedMemoryRegistry,
    checked_element_count,
    datatype_of,
    deserialize_bytes,
    find_dtype,
    grpc_service as service_pb2,
    repeated_tensor,
    serialize_bytes,
    validate_request,
)

from despina_frontend_grpc import parameters as params

#: Typed ``contents`` field of each datatype; FP16 and BF16 travel raw only (as Triton).
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
#: The datatype a ``contents`` field holds natively (for Triton's mismatch text).
FIELD_DATATYPE = {
    "bool_contents": "BOOL",
    "int_contents": "INT32",
    "int64_contents": "INT64",
    "uint_contents": "UINT32",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}
#: Numpy type of the values of each field, before narrowing to the tensor's type.
FIELD_DTYPE = {
    "bool_contents": np.bool_,
    "int_contents": np.int32,
    "int64_contents": np.int64,
    "uint_contents": np.uint32,
    "uint64_contents": np.uint64,
    "fp32_contents": np.float32,
    "fp64_contents": np.float64,
}

SHM_REGION = "shared_memory_region"
SHM_OFFSET = "shared_memory_offset"
SHM_SIZE = "shared_memory_byte_size"


class _SizeMismatch(InvalidArgument):
    """A tensor's data has the wrong byte size (reported after what Triton checks first)."""


class RequestDecoder:
    """Decodes one ModelInferRequest; the model's signature gives Triton's error texts."""

    def __init__(self, message: Any, shared_memory: SharedMemoryRegistry) -> None:
        self.message = message
        self.model = message.model_name
        self.rid = message.id or "<id_unknown>"
        self.shm = shared_memory

    def request(self, signature: ModelSignature) -> InferenceRequest:
        """The InferenceRequest; InvalidArgument/NotFound with Triton's texts.

        On a data size mismatch, what Triton reports first (unknown inputs, data types,
        shapes) is reported instead, found by validating a data-less stand-in request.
        """
        message = self.message
        try:
            inputs = self.inputs(signature.input_datatypes)
        except _SizeMismatch:
            validate_request(self._stand_in(signature.input_datatypes), signature)
            raise
        request = InferenceRequest(
            message.model_name,
            inputs,
            model_version=message.model_version,
            id=message.id,
            outputs=self.outputs() if message.outputs else None,
        )
        if message.parameters:
            params.apply_request_parameters(request, message.parameters)
        return request

    def inputs(self, expected_datatypes: Mapping[str, str]) -> dict[str, np.ndarray]:
        raw = self.message.raw_input_contents
        used = 0
        inputs: dict[str, np.ndarray] = {}
        for tensor in self.message.inputs:
            name = tensor.name
            if name in inputs:
                raise repeated_tensor("input", name, self.message.id)
            datatype = tensor.datatype
            dtype = self._dtype(name, datatype, expected_datatypes)
            shape = tuple(tensor.shape)
            count = checked_element_count(shape, dtype.itemsize, name, self.model, self.rid)
            if tensor.parameters and SHM_REGION in tensor.parameters:
                array = self._from_shared_memory(
                    name, datatype, dtype, shape, count, tensor.parameters
                )
            elif tensor.HasField("contents"):
                if raw:
                    raise InvalidArgument(
                        f"contents field must not be specified when using raw_input_contents "
                        f"for '{name}' for model '{self.model}'"
                    )
                array = self._from_contents(name, datatype, dtype, shape, count, tensor.contents)
            elif used < len(raw):
                array = self._from_buffer(name, datatype, dtype, shape, count, raw[used])
                used += 1
            else:
                raise InvalidArgument(
                    f"unable to find data for input tensor '{name}' for model '{self.model}' in request."
                )
            inputs[name] = array
        if used != len(raw):
            raise InvalidArgument(
                f"[request id: {self.rid}] expected {used} entries in raw_input_contents for "
                f"model '{self.model}', got {len(raw)}"
            )
        return inputs

    def _dtype(self, name: str, datatype: str, expected: Mapping[str, str]) -> np.dtype[Any]:
        """The numpy dtype of an input's datatype; InvalidArgument (Triton's texts) for a
        datatype that is not one."""
        dtype = find_dtype(datatype)
        if dtype is not None:
            return dtype
        if name not in expected:
            raise InvalidArgument(f"unexpected inference input '{name}' for model '{self.model}'")
        raise InvalidArgument(
            f"[request id: {self.rid}] inference input '{name}' data-type is '<invalid>', "
            f"but model '{self.model}' expects '{expected[name]}'"
        )

    def _stand_in(self, expected: Mapping[str, str]) -> InferenceRequest:
        """The request with zero-stride arrays of the declared types and shapes; the
        datatype or shape error of an input, as :meth:`inputs` gives it."""
        inputs = {}
        for t in self.message.inputs:
            dtype = self._dtype(t.name, t.datatype, expected)
            shape = tuple(t.shape)
            checked_element_count(shape, dtype.itemsize, t.name, self.model, self.rid)
            inputs[t.name] = np.broadcast_to(np.zeros((), dtype), shape)
        return InferenceRequest(self.model, inputs, id=self.message.id)

    def outputs(self) -> list[RequestedOutput]:
        requested = []
        for tensor in self.message.outputs:
            found = params.to_dict(tensor.parameters) if tensor.parameters else {}
            if SHM_REGION in found and SHM_SIZE not in found:
                raise InvalidArgument(
                    f"'{SHM_SIZE}' must be specified along with '{SHM_REGION}' parameter "
                    f"for tensor '{tensor.name}'"
                )
            requested.append(RequestedOutput(tensor.name, found))
        return requested

    def _from_buffer(
        self,
        name: str,
        datatype: str,
        dtype: np.dtype[Any],
        shape: tuple[int, ...],
        count: int,
        data: Any,
    ) -> np.ndarray:
        if datatype == "BYTES":
            array = deserialize_bytes(data)
            self._check_string_count(name, count, len(array))
            return array.reshape(shape)
        expected = count * dtype.itemsize
        if len(data) != expected:
            self._size_mismatch(name, expected, len(data))
        return np.frombuffer(data, dtype).reshape(shape)

    def _from_contents(
        self,
        name: str,
        datatype: str,
        dtype: np.dtype[Any],
        shape: tuple[int, ...],
        count: int,
        contents: Any,
    ) -> np.ndarray:
        field = CONTENTS_FIELD.get(datatype)
        present = [f.name for f, _ in contents.ListFields()]
        if field is None or any(p != field for p in present):
            given = FIELD_DATATYPE[present[0]] if present else datatype
            raise InvalidArgument(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{self.model}' of type '{given}', expected datatype '{datatype}'"
                + ("" if field else f"; {datatype} tensors must be sent in raw_input_contents")
            )
        values = getattr(contents, field)
        if datatype == "BYTES":
            self._check_string_count(name, count, len(values))
            array = np.empty(count, dtype=np.object_)
            array[:] = list(values)
            return array.reshape(shape)
        if len(values) != count:
            self._size_mismatch(name, count * dtype.itemsize, len(values) * dtype.itemsize)
        return np.array(values, dtype=FIELD_DTYPE[field]).astype(dtype, copy=False).reshape(shape)

    def _from_shared_memory(
        self,
        name: str,
        datatype: str,
        dtype: np.dtype[Any],
        shape: tuple[int, ...],
        count: int,
        parameters: Mapping[str, Any],
    ) -> np.ndarray:
        found = params.to_dict(parameters)
        if SHM_SIZE not in found:
            raise InvalidArgument(
                f"'{SHM_SIZE}' must be specified along with '{SHM_REGION}' parameter for tensor '{name}'"
            )
        region, offset, size = str(found[SHM_REGION]), found.get(SHM_OFFSET, 0), found[SHM_SIZE]
        if not isinstance(offset, int) or not isinstance(size, int):
            raise InvalidArgument(
                f"shared memory offset and byte size of input '{name}' must be integers"
            )
        window = self.shm.window(region, offset, size)
        if datatype == "BYTES":
            return self._from_buffer(name, datatype, dtype, shape, count, window.read())
        if size != count * dtype.itemsize:
            self._size_mismatch(name, count * dtype.itemsize, size)
        return window.tensor(dtype).reshape(shape)  # type: ignore[return-value]

    def _check_string_count(self, name: str, expected: int, got: int) -> None:
        where = f"for inference input '{name}' for model '{self.model}'"
        if got < expected:
            raise _SizeMismatch(
                f"[request id: {self.rid}] expected {expected} string elements {where}, got {got}"
            )
        if got > expected:
            raise _SizeMismatch(
                f"[request id: {self.rid}] unexpected number of string elements {got} {where}, "
                f"expecting {expected}"
            )

    def _size_mismatch(self, name: str, expected: int, got: int) -> None:
        raise _SizeMismatch(
            f"[request id: {self.rid}] input byte size mismatch for input '{name}' for model "
            f"'{self.model}'. Expected {expected}, got {got}"
        )


def raw_bytes(array: np.ndarray) -> bytes:
    """The wire bytes of an array: Triton's BYTES framing, else C-order element bytes."""
    if array.dtype.kind in ("O", "S", "U"):
        return serialize_bytes(array)
    return array.tobytes()


def encode_response(
    response: InferenceResponse, request: InferenceRequest, shm: SharedMemoryRegistry
) -> Any:
    """The ModelInferResponse of ``response``: the outputs ``request`` asked for, in the
    model's order (:meth:`InferenceRequest.selected_outputs`)."""
    message = service_pb2.ModelInferResponse(
        model_name=response.model_name, model_version=response.model_version, id=response.id
    )
    if response.parameters:
        params.fill(message.parameters, response.parameters)
    raw: list[bytes] = []
    for name, array, parameters in request.selected_outputs(response):
        message.outputs.add(name=name, datatype=datatype_of(array), shape=array.shape)
        if SHM_REGION in parameters:
            _write_shared_memory(shm, name, parameters, array)
            raw.append(b"")
        else:
            raw.append(raw_bytes(array))
    message.raw_output_contents.extend(raw)
    return message


def _write_shared_memory(
    shm: SharedMemoryRegistry,
    name: str,
    parameters: Mapping[str, Any],
    array: np.ndarray | DeviceArray,
) -> None:
    """Place an output in its region: a DeviceArray as it is (device to device into a CUDA
    region), a host array as its wire bytes."""
    data = array if isinstance(array, DeviceArray) else raw_bytes(array)
    needed = data.nbytes if isinstance(data, DeviceArray) else len(data)
    size = int(parameters[SHM_SIZE])
    if size < needed:
        raise Internal(
            f"shared memory size specified with the request for output '{name}' ({size} bytes) "
            f"should be at least {needed} bytes to hold the results"
        )
    shm.window(str(parameters[SHM_REGION]), int(parameters.get(SHM_OFFSET, 0)), size).write(data)
