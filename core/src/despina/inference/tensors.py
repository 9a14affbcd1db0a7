"""Triton data types, numpy dtypes and the BYTES wire format.

Tensors are numpy arrays end to end. BYTES tensors are numpy ``object`` arrays of
``bytes``; BF16 uses ``ml_dtypes.bfloat16``, imported the first time a BF16 dtype is asked
for (:func:`find_dtype`): ml_dtypes holds about 2.5 MB of a process's resident memory that
a server without BF16 tensors never needs. The wire name of an array's type is
:func:`datatype_of`; config types (``TYPE_FP32``) map with :func:`config_to_datatype`.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from despina.errors import InvalidArgument

#: Triton wire datatype name -> numpy dtype. BF16 joins on first use: look dtypes up with
#: :func:`find_dtype` or :func:`dtype_of`, not in this table.
DATATYPE_TO_DTYPE: dict[str, np.dtype[Any]] = {
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

_DTYPE_TO_DATATYPE: dict[np.dtype[Any], str] = {v: k for k, v in DATATYPE_TO_DTYPE.items()}

#: Wire datatypes whose elements have a fixed size in bytes.
FIXED_SIZE: dict[str, int] = {
    **{k: v.itemsize for k, v in DATATYPE_TO_DTYPE.items() if k != "BYTES"},
    "BF16": 2,
}
#: Every wire datatype name.
DATATYPES: tuple[str, ...] = (*FIXED_SIZE, "BYTES")


def _add_bf16() -> np.dtype[Any]:
    """Import ml_dtypes and enter BF16 in both tables; return its dtype."""
    import ml_dtypes

    dtype: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    DATATYPE_TO_DTYPE["BF16"] = dtype
    _DTYPE_TO_DATATYPE[dtype] = "BF16"
    return dtype


def find_dtype(datatype: str) -> np.dtype[Any] | None:
    """The numpy dtype of a wire datatype, or None if there is no such datatype."""
    dtype = DATATYPE_TO_DTYPE.get(datatype)
    if dtype is None and datatype == "BF16":
        return _add_bf16()
    return dtype


def dtype_of(datatype: str) -> np.dtype[Any]:
    """Return the numpy dtype of a wire datatype; raise InvalidArgument if unknown."""
    dtype = find_dtype(datatype)
    if dtype is None:
        raise InvalidArgument(f"invalid datatype '{datatype}'")
    return dtype


def datatype_of(array: np.ndarray) -> str:
    """Return the wire datatype of an array; str/bytes arrays are BYTES."""
    kind = array.dtype.kind
    if kind in ("O", "S", "U"):
        return "BYTES"
    try:
        return _DTYPE_TO_DATATYPE[array.dtype]
    except KeyError:
        if array.dtype.name == "bfloat16" and find_dtype("BF16") == array.dtype:
            return "BF16"  # ml_dtypes made it before this module needed it
        raise InvalidArgument(f"unsupported numpy dtype {array.dtype}") from None


def config_to_datatype(config_type: str) -> str:
    """``TYPE_FP32`` -> ``FP32``; ``TYPE_STRING`` -> ``BYTES`` (Triton's naming)."""
    name = config_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def datatype_to_config(datatype: str) -> str:
    """``FP32`` -> ``TYPE_FP32``; ``BYTES`` -> ``TYPE_STRING``."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def element_count(shape: Sequence[int]) -> int:
    """Number of elements of a shape (1 for a scalar shape ``()``)."""
    count = 1
    for dim in shape:
        count *= dim
    return count


#: The most bytes a tensor's shape may span: numpy's limit (a signed 64-bit size).
MAX_TENSOR_BYTES = 2**63 - 1


def checked_element_count(
    shape: Sequence[int], itemsize: int, name: str, model: str, request_id: str = "<id_unknown>"
) -> int:
    """The element count of a request's ``shape`` for input ``name``, whose elements are
    ``itemsize`` bytes. InvalidArgument when a dimension is negative, or when the shape
    spans more than :data:`MAX_TENSOR_BYTES` (numpy counts a zero dimension as 1 here:
    no array of that shape can exist, not even an empty one). Both protocols call it
    before any array is made."""
    if shape and min(shape) > 0:  # the usual shape: its count spans count * itemsize
        count = math.prod(shape)
        if count * itemsize <= MAX_TENSOR_BYTES:
            return count
    count = 1
    span = itemsize
    for dim in shape:
        if dim < 0:
            problem = "dimensions must be >= 0"
            break
        count *= dim
        span *= dim or 1
    else:
        if span <= MAX_TENSOR_BYTES:
            return count
        problem = f"the tensor would span more than {MAX_TENSOR_BYTES} bytes"
    raise InvalidArgument(
        f"[request id: {request_id}] input '{name}' for model '{model}' has an invalid shape "
        f"{list(shape)}: {problem}"
    )


#: A BYTES element's length prefix.
_LENGTH = struct.Struct("<I")


#: A padded copy of BYTES elements (each as long as the longest) is used while it is at
#: most this many times the size of the elements themselves.
PADDED_BYTES_LIMIT = 4


def serialize_bytes(array: np.ndarray) -> bytes:
    """Encode a BYTES tensor as Triton does: each element a 4-byte LE length + bytes
    (elements that are not ``bytes`` as their ``str`` in UTF-8). In bulk, no Python
    call per element: numpy lays the elements out padded, one row per element behind
    its length, and keeps each row's used part; elements whose lengths differ too much
    for padding are joined once and the length prefixes inserted."""
    items = array.reshape(-1).tolist()
    if not items:
        return b""
    if not set(map(type, items)) <= {bytes}:
        items = [x if isinstance(x, bytes) else str(x).encode() for x in items]
    count = len(items)
    lengths = np.fromiter(map(len, items), dtype="<u4", count=count)
    width = int(lengths.max())
    if width and width * count <= PADDED_BYTES_LIMIT * (int(lengths.sum()) + count):
        rows = np.empty((count, 4 + width), dtype=np.uint8)
        rows[:, :4] = lengths.view(np.uint8).reshape(count, 4)
        rows[:, 4:] = np.array(items, dtype=f"S{width}").view(np.uint8).reshape(count, width)
        used = np.arange(4 + width) < lengths[:, None] + 4
        return rows[used].tobytes()
    starts = np.zeros(count, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    data = np.frombuffer(b"".join(items), dtype=np.uint8)
    return np.insert(data, np.repeat(starts, 4), lengths.view(np.uint8)).tobytes()


def deserialize_bytes(buffer: bytes | memoryview, count: int | None = None) -> np.ndarray:
    """Decode length-prefixed BYTES elements into a 1-D object array.

    Raises InvalidArgument when a length runs past the buffer or, with ``count``, when
    the number of elements differs. One pass of bytes slicing (~0.25 µs per element).
    """
    data = bytes(buffer)  # slicing bytes is cheaper than slicing a memoryview and copying
    items: list[bytes] = []
    append = items.append
    unpack = _LENGTH.unpack_from
    offset, end = 0, len(data)
    while offset < end:
        if offset + 4 > end:
            raise InvalidArgument("unexpected end of BYTES tensor data: incomplete length prefix")
        (length,) = unpack(data, offset)
        offset += 4
        following = offset + length
        if following > end:
            raise InvalidArgument("unexpected end of BYTES tensor data: element past the buffer")
        append(data[offset:following])
        offset = following
    if count is not None and len(items) != count:
        raise InvalidArgument(f"expected {count} BYTES elements, got {len(items)}")
    out = np.empty(len(items), dtype=np.object_)
    out[:] = items
    return out
