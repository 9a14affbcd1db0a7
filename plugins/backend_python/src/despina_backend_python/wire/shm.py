"""Tensors across processes, never pickled: small ones inside the message, the others
through POSIX shared memory.

Host tensors of a fixed-size datatype holding at most :data:`INLINE_LIMIT` bytes in all
travel inside the message itself (the common small request: placing them would cost more
than sending them). Otherwise each direction of a channel has a persistent :class:`Ring`
(created by the server, mapped by both sides): messages are written there and copied out
by the reader as soon as it reads the message, which frees the space. A message too
large for the ring gets a fresh segment of its own that the reader maps without copying
(the name is unlinked at once; the memory goes with the last array). BYTES tensors
travel as a ``uint32`` length array plus the joined data. Every name lies in the server's
private directory of ``/dev/shm`` and holds a secret token; every segment is created mode
0600, never over an existing one. A reader that finds a segment still named elsewhere once
it unlinked its own name (a hard link) reports its identity to :func:`set_link_handler`'s
handler, so the server refuses it to clients forever. Tensors in GPU memory (cupy arrays, or DeviceArrays)
cross by CUDA IPC instead (:mod:`.cuda_ipc`). Server-independent.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import mmap
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from despina_backend_python.pb.errors import TritonModelException
from despina_backend_python.pb.types import (
    FIXED_DTYPE_TO_WIRE,
    bytes_from_parts,
    bytes_payload,
    wire_datatype,
    wire_dtype,
)
from despina_backend_python.wire import cuda_ipc

SHM_DIR = "/dev/shm"
RING_BYTES = 8 << 20
#: Messages up to this size use the ring (and are copied once by the reader).
RING_MESSAGE_LIMIT = 1 << 20
#: A message's host tensors of at most this many bytes in all (none BYTES) are sent inline.
INLINE_LIMIT = 4096
_ALIGN = 64
_HEADER = 64

#: (name, datatype, shape, offset, nbytes[, lengths_offset for BYTES])
Descriptor = tuple[Any, ...]
#: (st_dev, st_ino) of a segment.
Identity = tuple[int, int]

#: The child's message naming a server segment it found hard-linked (``identity``).
LINKED_OP = "shm_linked"

_link_handler: list[Callable[[Identity], None]] = []


def set_link_handler(handler: Callable[[Identity], None]) -> None:
    """Call ``handler`` with the identity of every segment this process reads that still
    has another name after the reader unlinked its own (set once per process)."""
    _link_handler[:] = [handler]


def new_tag() -> str:
    """A fresh, unguessable stem for the segments of one model process."""
    # os.urandom is what secrets.token_hex reads; secrets itself would load hashlib and
    # OpenSSL (~4 MiB resident) into every model process for nothing else.
    return "py" + os.urandom(16).hex()


def _aligned(size: int) -> int:
    return (size + _ALIGN - 1) // _ALIGN * _ALIGN


class PoolExhausted(TritonModelException):
    """Shared memory has no room for a message: the request fails, no process does."""


def _map(name: str, size: int = 0) -> tuple[mmap.mmap, Identity]:
    """Map ``name`` (creating it, mode 0600 and never over an existing one, with ``size``
    bytes when size > 0); the mapping and the segment's identity.

    A new segment's pages are allocated before it is mapped: on a full ``/dev/shm`` (a
    container's 64 MB default) that raises :class:`PoolExhausted` here, where writing to
    a sparse mapping would kill the writing process with SIGBUS.
    """
    path = os.path.join(SHM_DIR, name)
    flags = os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT | os.O_EXCL if size else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if size:
            _allocate(fd, path, size)
        st = os.fstat(fd)
        return mmap.mmap(fd, size or st.st_size), (st.st_dev, st.st_ino)
    finally:
        os.close(fd)


def _take(name: str) -> mmap.mmap:
    """Map the segment ``name`` written for this process and unlink it; a segment that
    still has another name then goes to the link handler."""
    path = os.path.join(SHM_DIR, name)
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    try:
        os.unlink(path)
        st = os.fstat(fd)
        if st.st_nlink:
            for handler in _link_handler:
                handler((st.st_dev, st.st_ino))
        return mmap.mmap(fd, st.st_size)
    finally:
        os.close(fd)


def _allocate(fd: int, path: str, size: int) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        os.unlink(path)
        # Triton 2.51's opening words, which its tests and users grep for
        raise PoolExhausted(
            "Failed to increase the shared memory pool size for key "
            f"'{os.path.basename(path)}' to {size} bytes: {SHM_DIR} has no room "
            f"({exc.strerror}). In a container, give it more with '--shm-size' (docker) "
            "or a larger memory-backed emptyDir (Kubernetes)."
        ) from None


class Ring:
    """A circular buffer in one segment: one side writes, the other reads and releases.

    The header holds how far the reader has consumed; the writer never overwrites bytes
    the reader has not released. Writers must reserve and send in one critical section
    so messages arrive in reservation order.
    """

    def __init__(self, name: str, create: bool = False, capacity: int = RING_BYTES) -> None:
        self.name = name
        self.mapping, self.identity = _map(name, _HEADER + capacity if create else 0)
        self.capacity = len(self.mapping) - _HEADER
        self._consumed = np.ndarray((1,), np.uint64, buffer=self.mapping, offset=0)
        self._written = 0

    def reserve(self, size: int) -> tuple[int, int] | None:
        """(offset in the mapping, end position) of ``size`` free bytes, or None."""
        position = self._written % self.capacity
        skip = self.capacity - position if position + size > self.capacity else 0
        end = self._written + skip + size
        if end - int(self._consumed[0]) > self.capacity:
            return None
        offset = _HEADER + (self._written + skip) % self.capacity
        self._written = end
        return offset, end

    def release(self, end: int) -> None:
        self._consumed[0] = end

    def close(self) -> None:
        del self._consumed
        with contextlib.suppress(BufferError):
            self.mapping.close()


class Arena:
    """The writing side of one channel direction: the ring, else ``<prefix>/<tag>_<n>``
    (``prefix``: the private directory, relative to ``/dev/shm``)."""

    def __init__(self, prefix: str, tag: str, ring: Ring | None = None) -> None:
        self.stem = f"{prefix}/{tag}_"
        self.ring = ring
        self._counter = itertools.count()
        #: The device tensors sent and not yet copied by the receiver.
        self.exports = cuda_ipc.DeviceExports()

    def pack(self, tensors: list[tuple[str, np.ndarray]]) -> dict[str, Any]:
        """Write ``tensors``; the message fields: ``inline`` for small host tensors
        (:func:`_inline`), else ``shm``, ``ring`` and ``tensors`` (host tensors), and for
        device tensors ``cuda`` and ``ipc`` (:mod:`.cuda_ipc`)."""
        inline = _inline(tensors)
        if inline is not None:
            return {"shm": None, "ring": None, "inline": inline}
        plan, size, on_device = _plan(tensors)
        fields: dict[str, Any] = {"shm": None, "ring": None}
        if on_device:
            fields.update(self.exports.export(on_device))
        try:
            if size == 0:
                fields["tensors"] = [desc for desc, _ in plan]
                return fields
            spot = (
                self.ring.reserve(size)
                if self.ring is not None and size <= RING_MESSAGE_LIMIT
                else None
            )
            if spot is not None:
                assert self.ring is not None
                base, fields["ring"] = spot
                mapping = self.ring.mapping
            else:
                base, fields["shm"] = 0, self.stem + str(next(self._counter))
                mapping, _ = _map(fields["shm"], size)
            descs = [_shift(desc, base) for desc, _ in plan]
            try:
                for desc, (_, payload) in zip(descs, plan, strict=True):
                    _write(mapping, desc, payload)
            finally:
                if spot is None:
                    mapping.close()
            fields["tensors"] = descs
            return fields
        except BaseException:  # the message is not sent: nobody will copy the exports
            if on_device:
                self.exports.release(fields["ipc"])
            raise


def cleanup(stem: str) -> None:
    """Unlink every segment whose name starts with ``stem`` (its reader died first)."""
    for path in glob.glob(os.path.join(SHM_DIR, glob.escape(stem) + "*")):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _inline(
    tensors: list[tuple[str, np.ndarray]],
) -> list[tuple[str, str, tuple[int, ...], bytes]] | None:
    """``(name, datatype, shape, bytes)`` of each tensor when all are host arrays of a
    fixed-size datatype holding at most :data:`INLINE_LIMIT` bytes together; else None
    (the general path, which also refuses unsupported dtypes)."""
    out = []
    size = 0
    for name, array in tensors:
        if type(array) is not np.ndarray:
            return None
        datatype = FIXED_DTYPE_TO_WIRE.get(array.dtype)
        size += array.nbytes
        if datatype is None or size > INLINE_LIMIT:
            return None
        out.append((name, datatype, array.shape, array.tobytes()))
    return out


def _plan(
    tensors: list[tuple[str, np.ndarray]],
) -> tuple[list[tuple[Descriptor, Any]], int, list[tuple[int, str, Any]]]:
    """(descriptor and payload of each host tensor, their size, (position, name, array) of
    each device tensor)."""
    plan: list[tuple[Descriptor, Any]] = []
    on_device: list[tuple[int, str, Any]] = []
    offset = 0
    for name, array in tensors:
        if not isinstance(array, np.ndarray):
            on_device.append((len(plan) + len(on_device), name, array))
            continue
        datatype = wire_datatype(array)
        shape = array.shape  # a tuple of ints already (numpy, CuPy)
        if datatype == "BYTES":
            items, data = bytes_payload(array)
            lengths = np.fromiter(map(len, items), dtype=np.uint32, count=len(items))
            lengths_at = offset
            offset = _aligned(offset + lengths.nbytes)
            plan.append(((name, datatype, shape, offset, len(data), lengths_at), (lengths, data)))
            offset = _aligned(offset + len(data))
        else:
            plan.append(((name, datatype, shape, offset, array.nbytes), array))
            offset = _aligned(offset + array.nbytes)
    return plan, offset, on_device


def _shift(desc: Descriptor, base: int) -> Descriptor:
    if desc[1] == "BYTES":
        return (*desc[:3], desc[3] + base, desc[4], desc[5] + base)
    return (*desc[:3], desc[3] + base, desc[4])


def _write(mapping: mmap.mmap, desc: Descriptor, payload: Any) -> None:
    if desc[1] == "BYTES":
        lengths, data = payload
        lengths_at, offset = desc[5], desc[3]
        mapping[lengths_at : lengths_at + lengths.nbytes] = lengths.tobytes()
        mapping[offset : offset + len(data)] = data
        return
    array: np.ndarray = payload
    if not array.nbytes:
        return
    if array.flags.c_contiguous:  # its bytes as they are: ~0.1 µs, not ~1.4 for a view
        # an ndarray is a readable buffer; typeshed's mmap stub does not say so
        mapping[desc[3] : desc[3] + array.nbytes] = array  # type: ignore[call-overload]
        return
    target = np.ndarray(array.shape, array.dtype, buffer=mapping, offset=desc[3])
    np.copyto(target, array, casting="no")
    del target


def unpack(fields: dict[str, Any], ring: Ring | None = None) -> list[tuple[str, np.ndarray]]:
    """The tensors of a message written by :meth:`Arena.pack` (``ring``: the reader's
    view of the sender's ring, released once the data is copied out), device tensors
    copied into this process's GPU memory as cupy arrays: the reader then owes the sender
    :func:`~.cuda_ipc.done_message`."""
    inline = fields.get("inline")
    if inline is not None:  # writable arrays of their own, as those copied from the ring
        return [
            (name, np.frombuffer(bytearray(data), wire_dtype(datatype)).reshape(shape))
            for name, datatype, shape, data in inline
        ]
    if fields.get("cuda"):
        return _with_device(fields, ring)
    descs = fields["tensors"]
    if fields.get("ring") is not None:
        assert ring is not None
        out = [(desc[0], _read(ring.mapping, desc, copy=True)) for desc in descs]
        ring.release(fields["ring"])
        return out
    mapping: Any = b""
    if fields.get("shm") is not None:
        mapping = _take(fields["shm"])
    return [(desc[0], _read(mapping, desc, copy=False)) for desc in descs]


def _with_device(fields: dict[str, Any], ring: Ring | None) -> list[tuple[str, np.ndarray]]:
    """:func:`unpack` of a message with device tensors: the host ones, then the device
    ones put back in their places."""
    out = unpack({**fields, "cuda": None}, ring)
    for position, name, array in cuda_ipc.import_tensors(fields["cuda"]):
        out.insert(position, (name, array))
    return out


def _read(mapping: Any, desc: Descriptor, copy: bool) -> np.ndarray:
    datatype, shape, offset, nbytes = desc[1:5]
    count = 1
    for dim in shape:
        count *= dim
    if datatype == "BYTES":
        if count == 0:
            return np.empty(shape, dtype=np.object_)
        lengths = np.frombuffer(mapping, dtype=np.uint32, count=count, offset=desc[5])
        return bytes_from_parts(lengths, mapping[offset : offset + nbytes], shape)
    dtype = wire_dtype(datatype)
    if count == 0:
        return np.empty(shape, dtype=dtype)
    array = np.frombuffer(mapping, dtype=dtype, count=count, offset=offset).reshape(shape)
    return array.copy() if copy else array
