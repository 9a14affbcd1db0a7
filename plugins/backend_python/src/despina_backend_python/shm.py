"""Tensors across processes through POSIX shared memory, never pickled.

:meth:`Arena.pack` writes the tensors of one message into one fresh segment (64-byte
aligned; BYTES as a ``uint32`` length array plus the joined data) and returns its name
and small descriptors. :func:`unpack` maps the segment, unlinks its name at once and
returns numpy arrays backed by the mapping (no copy; the memory is freed when the
last array goes). Names start with the server's internal-key prefix, so clients can
never register them as their own regions. Server-independent (used by child processes).
"""

from __future__ import annotations

import glob
import itertools
import mmap
import os
from typing import Any

import numpy as np

from despina_backend_python.pb.types import (
    WIRE_TO_DTYPE,
    as_bytes_items,
    bytes_array,
    wire_datatype,
)

SHM_DIR = "/dev/shm"
_ALIGN = 64

#: (name, datatype, shape, offset, nbytes[, lengths_offset for BYTES])
Descriptor = tuple[Any, ...]


def _aligned(size: int) -> int:
    return (size + _ALIGN - 1) // _ALIGN * _ALIGN


class Arena:
    """Creates the segments of one side of one channel: ``<prefix>_<tag>_<n>``."""

    def __init__(self, prefix: str, tag: str) -> None:
        self.stem = f"{prefix}_{tag}_"
        self._counter = itertools.count()

    def pack(self, tensors: list[tuple[str, np.ndarray]]) -> tuple[str | None, list[Descriptor]]:
        """Write ``tensors`` into a new segment; (None, descriptors) when all are empty."""
        plan: list[tuple[Descriptor, Any]] = []
        offset = 0
        for name, array in tensors:
            datatype = wire_datatype(array)
            shape = tuple(int(d) for d in array.shape)
            if datatype == "BYTES":
                items = as_bytes_items(array)
                lengths = np.fromiter(map(len, items), dtype=np.uint32, count=len(items))
                data = b"".join(items)
                lengths_at = offset
                offset = _aligned(offset + lengths.nbytes)
                plan.append(((name, datatype, shape, offset, len(data), lengths_at), (lengths, data)))
                offset = _aligned(offset + len(data))
            else:
                plan.append(((name, datatype, shape, offset, array.nbytes), array))
                offset = _aligned(offset + array.nbytes)
        if offset == 0:
            return None, [desc for desc, _ in plan]
        segment = self.stem + str(next(self._counter))
        fd = os.open(os.path.join(SHM_DIR, segment), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, offset)
            mapping = mmap.mmap(fd, offset)
        finally:
            os.close(fd)
        try:
            for desc, payload in plan:
                _write(mapping, desc, payload)
        finally:
            mapping.close()
        return segment, [desc for desc, _ in plan]

    def cleanup(self) -> None:
        """Unlink every segment of this arena still present (the reader died first)."""
        for path in glob.glob(os.path.join(SHM_DIR, glob.escape(self.stem) + "*")):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _write(mapping: mmap.mmap, desc: Descriptor, payload: Any) -> None:
    if desc[1] == "BYTES":
        lengths, data = payload
        lengths_at, offset = desc[5], desc[3]
        mapping[lengths_at : lengths_at + lengths.nbytes] = lengths.tobytes()
        mapping[offset : offset + len(data)] = data
        return
    array: np.ndarray = payload
    if array.nbytes:
        target = np.ndarray(array.shape, array.dtype, buffer=mapping, offset=desc[3])
        np.copyto(target, array, casting="no")
        del target


def unpack(segment: str | None, descriptors: list[Descriptor]) -> list[tuple[str, np.ndarray]]:
    """The tensors of a message; maps ``segment`` and unlinks its name."""
    mapping: Any = b""
    if segment is not None:
        path = os.path.join(SHM_DIR, segment)
        fd = os.open(path, os.O_RDWR)
        try:
            mapping = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
            os.unlink(path)
    return [(desc[0], _read(mapping, desc)) for desc in descriptors]


def _read(mapping: Any, desc: Descriptor) -> np.ndarray:
    name, datatype, shape, offset, nbytes = desc[:5]
    count = 1
    for dim in shape:
        count *= dim
    if datatype == "BYTES":
        if count == 0:
            return np.empty(shape, dtype=np.object_)
        lengths = np.frombuffer(mapping, dtype=np.uint32, count=count, offset=desc[5])
        ends = np.cumsum(lengths, dtype=np.int64)
        data = mapping[offset : offset + nbytes]
        items = list(map(data.__getitem__, map(slice, (ends - lengths).tolist(), ends.tolist())))
        return bytes_array(items, shape)
    dtype = WIRE_TO_DTYPE[datatype]
    if count == 0:
        return np.empty(shape, dtype=dtype)
    return np.frombuffer(mapping, dtype=dtype, count=count, offset=offset).reshape(shape)
