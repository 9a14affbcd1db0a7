"""How a response is stored in Redis: Triton's entry layout, Despina's buffer.

An entry is a Redis hash, as Triton's redis cache writes it: per buffer ``<i>:b`` (the
bytes), ``<i>:s`` (their size), ``<i>:t`` (memory type, 0: CPU) and ``<i>:i`` (memory
type id). Despina writes one buffer: ``DSP1``, a little-endian u32 header length, a UTF-8
JSON header ``{"outputs": [[name, datatype, shape, nbytes], ...], "parameters": {...}}``,
then each output's bytes in order (BYTES as Triton's length-prefixed elements, others raw
little-endian C order). No pickle: an entry decodes to arrays and JSON values only.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping

import numpy as np
from despina import (
    CachedResponse,
    DespinaError,
    DeviceArray,
    datatype_of,
    deserialize_bytes,
    dtype_of,
    element_count,
    serialize_bytes,
)

MAGIC = b"DSP1"
_HEADER_LENGTH = struct.Struct("<I")


class EntryError(ValueError):
    """An entry that is not one Despina wrote (or was cut short)."""


def encode(
    outputs: Mapping[str, np.ndarray | DeviceArray], parameters: Mapping[str, object]
) -> dict[str, bytes]:
    """The Redis hash fields of a response."""
    header: list[list[object]] = []
    payloads: list[bytes] = []
    for name, output in outputs.items():
        array = output.to_host() if isinstance(output, DeviceArray) else output
        datatype = datatype_of(array)
        payload = (
            serialize_bytes(array)
            if datatype == "BYTES"
            else np.ascontiguousarray(array, dtype_of(datatype)).tobytes()
        )
        header.append([name, datatype, list(array.shape), len(payload)])
        payloads.append(payload)
    meta = json.dumps({"outputs": header, "parameters": dict(parameters)}).encode()
    buffer = b"".join([MAGIC, _HEADER_LENGTH.pack(len(meta)), meta, *payloads])
    return {"0:b": buffer, "0:s": str(len(buffer)).encode(), "0:t": b"0", "0:i": b"0"}


def decode(fields: Mapping[bytes | str, bytes | str]) -> CachedResponse:
    """The response in an entry's hash fields; EntryError when they are not Despina's."""
    buffer = fields.get(b"0:b")
    if not isinstance(buffer, bytes) or not buffer.startswith(MAGIC) or len(fields) != 4:
        raise EntryError("not an entry Despina wrote")
    data = memoryview(bytearray(buffer))  # writable arrays, one copy in all
    try:
        (length,) = _HEADER_LENGTH.unpack_from(data, len(MAGIC))
        start = len(MAGIC) + _HEADER_LENGTH.size
        meta = json.loads(bytes(data[start : start + length]))
        offset = start + length
        outputs: dict[str, np.ndarray] = {}
        for name, datatype, shape, nbytes in meta["outputs"]:
            count = element_count(shape)
            if datatype == "BYTES":
                array = deserialize_bytes(data[offset : offset + nbytes], count)
            else:
                dtype = dtype_of(datatype)
                if count * dtype.itemsize != nbytes:
                    raise ValueError(f"output '{name}' has {nbytes} bytes for {count} elements")
                array = np.frombuffer(data, dtype, count, offset)
            outputs[name] = array.reshape(shape)
            offset += nbytes
    except (DespinaError, KeyError, TypeError, ValueError, struct.error) as exc:
        raise EntryError(f"a damaged entry: {exc}") from None
    if offset != len(data):
        raise EntryError("a damaged entry: its size does not match its header")
    return CachedResponse(outputs, dict(meta["parameters"]), len(data))
