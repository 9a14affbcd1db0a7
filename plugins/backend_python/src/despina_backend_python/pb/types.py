"""Data types as Triton's Python backend names them, and BYTES helpers.

Wire names ("FP32", "BYTES"), config names ("TYPE_FP32", "TYPE_STRING"), Triton's
``TRITONSERVER_DataType`` numbers and numpy dtypes. BYTES tensors are numpy object arrays.
BF16's dtype comes from ml_dtypes, imported the first time BF16 is asked for (:func:`bf16`):
it holds about 2.5 MB of a model process's resident memory that models without BF16
tensors never need.
"""

from __future__ import annotations

import struct
from itertools import chain
from typing import Any

import numpy as np

#: Wire datatype -> numpy dtype; BF16 joins on first use (:func:`wire_dtype`).
WIRE_TO_DTYPE: dict[str, Any] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
_DTYPE_TO_WIRE = {dtype: name for name, dtype in WIRE_TO_DTYPE.items()}
#: Numpy dtype (native byte order) -> wire datatype, for every datatype but BYTES.
FIXED_DTYPE_TO_WIRE = {dtype: name for dtype, name in _DTYPE_TO_WIRE.items() if name != "BYTES"}

#: ``TRITONSERVER_DataType`` numbers, in Triton's order (0 is INVALID).
_TRITON_NUMBERS = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
    "BF16",
]

TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


def bf16() -> Any:
    """The numpy dtype of BF16 tensors, None where ml_dtypes is not installed (an
    execution environment without it). The first call imports ml_dtypes and enters BF16 in
    this module's tables."""
    dtype = WIRE_TO_DTYPE.get("BF16")
    if dtype is None:
        try:
            import ml_dtypes
        except ImportError:  # pragma: no cover - only in execution environments without it
            return None
        dtype = np.dtype(ml_dtypes.bfloat16)
        WIRE_TO_DTYPE["BF16"] = dtype
        _DTYPE_TO_WIRE[dtype] = FIXED_DTYPE_TO_WIRE[dtype] = "BF16"
        TRITON_STRING_TO_NUMPY["TYPE_BF16"] = dtype.type
    return dtype


def is_bf16(dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype`` is ml_dtypes' bfloat16 (a cheap test for every other dtype)."""
    return dtype.kind == "V" and dtype == bf16()


def wire_dtype(datatype: str) -> Any:
    """The numpy dtype of a wire datatype; KeyError when there is none."""
    dtype = WIRE_TO_DTYPE.get(datatype)
    if dtype is None:
        dtype = bf16() if datatype == "BF16" else None
        if dtype is None:
            raise KeyError(datatype)
    return dtype


def wire_datatype(array: np.ndarray) -> str:
    """The wire datatype of an array; object/bytes/str arrays are BYTES."""
    if array.dtype.kind in "OSU":
        return "BYTES"
    try:
        return _DTYPE_TO_WIRE[array.dtype]
    except KeyError:
        if is_bf16(array.dtype):  # made by the model before BF16 was asked for here
            return "BF16"
        raise TypeError(f"unsupported numpy dtype {array.dtype}") from None


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``numpy.float32`` (as Triton's helper)."""
    if triton_type_string == "TYPE_BF16":
        bf16()
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """A ``TRITONSERVER_DataType`` number -> numpy type (None when unknown)."""
    if 1 <= data_type <= len(_TRITON_NUMBERS):
        try:
            return wire_dtype(_TRITON_NUMBERS[data_type - 1]).type
        except KeyError:
            return None
    return None


def numpy_to_triton_type(data_type: Any) -> int | None:
    """A numpy type -> ``TRITONSERVER_DataType`` number (None when unsupported)."""
    if data_type in (np.object_, np.bytes_):
        return _TRITON_NUMBERS.index("BYTES") + 1
    dtype = np.dtype(data_type)
    name = _DTYPE_TO_WIRE.get(dtype) or ("BF16" if is_bf16(dtype) else None)
    return None if name is None else _TRITON_NUMBERS.index(name) + 1


def as_bytes_items(array: np.ndarray) -> list[bytes]:
    """The elements of a BYTES tensor as a flat list of ``bytes`` (C order).

    ``str`` elements are UTF-8 encoded, other objects are ``str()``-ed and encoded (as
    Triton does). Bulk conversions only; a per-element Python call happens only for
    arrays mixing bytes with other objects.
    """
    if array.dtype.kind == "U":
        array = np.char.encode(array, "utf-8")
    items: list[Any] = array.ravel(order="C").tolist()
    if array.dtype.kind == "S" or _all_bytes(items):
        return items
    return list(map(_to_bytes, items))


def _all_bytes(items: list[Any]) -> bool:
    return set(map(type, items)) <= {bytes}


def bytes_payload(array: np.ndarray) -> tuple[list[bytes], bytes]:
    """(elements as bytes, all elements joined) of a BYTES tensor, in bulk."""
    if array.dtype.kind == "O":
        items: list[Any] = array.ravel(order="C").tolist()
        try:
            return items, b"".join(items)  # fails fast unless every element is bytes
        except TypeError:
            pass
    converted = as_bytes_items(array)
    return converted, b"".join(converted)


def _to_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    return (item if isinstance(item, str) else str(item)).encode("utf-8")


def bytes_array(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    """An object array of ``shape`` holding ``items`` (one C-level copy of references)."""
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out.reshape(shape)


#: A padded copy of BYTES elements (each as long as the longest) is used while it is at
#: most this many times the size of the elements themselves.
PADDED_BYTES_LIMIT = 4


def bytes_from_parts(lengths: np.ndarray, data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """The object array of ``shape`` whose elements are ``data`` cut at ``lengths``
    (``uint32``, summing to ``len(data)``). In bulk where it can: numpy copies the
    elements into padded rows and makes each row a ``bytes`` (dropping the padding, so
    only when no element ends with a NUL byte); otherwise one slicing pass."""
    count = lengths.size
    ends = np.cumsum(lengths, dtype=np.int64)
    width = int(lengths.max()) if count else 0
    flat = np.frombuffer(data, dtype=np.uint8)
    dense = width and width * count <= PADDED_BYTES_LIMIT * (len(data) + count)
    if dense and flat[ends[lengths > 0] - 1].all():
        rows = np.zeros((count, width), dtype=np.uint8)
        rows[np.arange(width) < lengths[:, None]] = flat
        return rows.view(f"S{width}").reshape(shape).astype(np.object_)
    bounds: list[int] = ends.tolist()
    items = [data[start:end] for start, end in zip([0, *bounds[:-1]], bounds, strict=True)]
    return bytes_array(items, shape)


_LENGTH = struct.Struct("<I")
_PACK_LENGTH = _LENGTH.pack


def serialize_byte_tensor(input_tensor: np.ndarray) -> bytes | tuple[()] | None:
    """Triton's wire encoding of a BYTES tensor: each element a 4-byte LE length + data.

    Returns ``()`` for an empty tensor and None for a non-BYTES tensor (as Triton).
    """
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype.kind not in "OS":
        return None
    items = as_bytes_items(input_tensor)
    return b"".join(
        chain.from_iterable(zip(map(_PACK_LENGTH, map(len, items)), items, strict=True))
    )


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray:
    """Decode Triton's BYTES wire encoding into a 1-D object array (one pass of bytes
    slicing; a truncated buffer raises ``struct.error``)."""
    data = bytes(encoded_tensor)
    items: list[bytes] = []
    append = items.append
    unpack = _LENGTH.unpack_from
    offset, end = 0, len(data)
    while offset < end:
        (length,) = unpack(data, offset)
        offset += 4
        append(data[offset : offset + length])
        offset += length
    return bytes_array(items, (len(items),))
