"""TEST-ONLY stand-in for cupy, for machines with no GPU. It is NOT a GPU and proves
nothing about CUDA: it lets the device-tensor paths of Despina (DeviceArray, CUDA shared
memory, the Python backend's GPU tensors) run their logic where no GPU exists.

"Device" memory is host memory: every allocation is a file in /dev/shm mapped into the
process, and a pointer is that mapping's host address. A CUDA IPC handle is the file's
name, so a handle made in one process opens in another, and, as with CUDA, not in the
process that made it. Arrays refuse implicit conversion to numpy and report DLPack device
(kDLCUDA, id), as cupy's do. Only the parts of cupy's API that Despina and its tests call
exist. A process uses it when this directory is first on its ``sys.path`` (PYTHONPATH for
child processes); ``cuda_standin.py`` beside it installs it for a test.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np

__version__ = "0.0-standin"
#: Marks this module as the stand-in (tests and logs read it).
DESPINA_STANDIN = True

_DEVICES = int(os.environ.get("DESPINA_STANDIN_GPUS", "2"))
_HANDLE_SIZE = 64
_PREFIX = "despina_standin_cuda_"
_names = itertools.count()
_state = threading.local()


class _Allocation:
    """A mapped /dev/shm file: one device allocation (or one opened IPC handle)."""

    def __init__(self, name: str, size: int, device_id: int, create: bool) -> None:
        path = f"/dev/shm/{name}"
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            self.size = os.fstat(fd).st_size
            self.mapping = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        self.name = name
        self.device_id = device_id
        self.owned = create
        self.buffer = (ctypes.c_uint8 * self.size).from_buffer(self.mapping)
        self.base = ctypes.addressof(self.buffer)
        _live[self.base] = self
        self._finalizer = weakref.finalize(self, _release, self.base, path if create else None)

    def close(self) -> None:
        self._finalizer()


#: Every allocation alive in this process, by base address (arrays keep theirs alive).
_live: weakref.WeakValueDictionary[int, _Allocation] = weakref.WeakValueDictionary()


def _allocate(nbytes: int, device_id: int) -> _Allocation:
    """A new allocation of ``nbytes`` (at least 1) on ``device_id``."""
    return _Allocation(f"{_PREFIX}{os.getpid()}_{next(_names)}", max(nbytes, 1), device_id, True)


def _release(base: int, path: str | None) -> None:
    _live.pop(base, None)
    if path is not None:
        with suppress(FileNotFoundError):
            os.unlink(path)


def _find(pointer: int) -> tuple[_Allocation, int]:
    """The allocation holding ``pointer`` and the pointer's offset in it."""
    for base, allocation in list(_live.items()):
        if base <= pointer < base + max(allocation.size, 1):
            return allocation, pointer - base
    raise cuda.runtime.CUDARuntimeError("cudaErrorInvalidValue: not a device pointer")


def _host_view(pointer: int, nbytes: int) -> np.ndarray:
    """A uint8 host view of ``nbytes`` of device memory at ``pointer``."""
    _find(pointer)
    if nbytes == 0:
        return np.empty(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(pointer))


def _current() -> int:
    return int(getattr(_state, "device", 0))


class _Flags:
    def __init__(self, array: np.ndarray) -> None:
        self.c_contiguous = bool(array.flags.c_contiguous)


class _Pointer:
    """``ndarray.data``: the device address."""

    def __init__(self, ptr: int, owner: Any) -> None:
        self.ptr = ptr
        self.mem = owner


class ndarray:
    """A device array: a numpy view of an allocation's mapping, kept out of numpy's reach."""

    def __init__(
        self,
        shape: Sequence[int] | None = None,
        dtype: Any = float,
        memptr: MemoryPointer | None = None,
        *,
        _view: np.ndarray | None = None,
        _owner: Any = None,
        _device: int | None = None,
    ) -> None:
        if _view is None:  # cupy.ndarray(shape, dtype, memptr): over existing device memory
            assert shape is not None and memptr is not None
            dt = np.dtype(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            raw = _host_view(memptr.ptr, count * dt.itemsize)
            _view = raw.view(dt).reshape(tuple(shape))
            _owner, _device = memptr, memptr.device_id
        self._view = _view
        self._owner = _owner
        self._device = _current() if _device is None else _device

    shape = property(lambda self: self._view.shape)
    dtype = property(lambda self: self._view.dtype)
    ndim = property(lambda self: self._view.ndim)
    size = property(lambda self: self._view.size)
    nbytes = property(lambda self: self._view.nbytes)
    flags = property(lambda self: _Flags(self._view))
    device = property(lambda self: cuda.Device(self._device))

    @property
    def data(self) -> _Pointer:
        return _Pointer(int(self._view.ctypes.data), self._owner)

    def get(self) -> np.ndarray:
        return self._view.copy()

    def reshape(self, *shape: Any) -> ndarray:
        return ndarray(_view=self._view.reshape(*shape), _owner=self._owner, _device=self._device)

    def __getitem__(self, key: Any) -> ndarray:
        return ndarray(_view=self._view[key], _owner=self._owner, _device=self._device)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._view[key] = value._view if isinstance(value, ndarray) else value

    def __len__(self) -> int:
        return len(self._view)

    def __iter__(self) -> Iterator[Any]:
        raise TypeError("stand-in cupy arrays are not iterable on the host")

    def __add__(self, other: Any) -> ndarray:
        return _binary(self, other, np.add)

    def __sub__(self, other: Any) -> ndarray:
        return _binary(self, other, np.subtract)

    def __eq__(self, other: Any) -> ndarray:  # type: ignore[override]
        return _binary(self, other, np.equal)

    def copy(self) -> ndarray:
        return asarray(self._view, _device=self._device)

    def astype(self, dtype: Any) -> ndarray:
        return asarray(self._view.astype(dtype), _device=self._device)

    def all(self) -> ndarray:
        return asarray(np.asarray(self._view.all()), _device=self._device)

    def __bool__(self) -> bool:
        return bool(self._view)

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return _capsule(self)

    def toDlpack(self) -> Any:
        return _capsule(self)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self._device)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.data.ptr, False),
            "strides": None if self._view.flags.c_contiguous else self._view.strides,
            "version": 3,
        }

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. "
            "Please use `.get()` to construct a NumPy array explicitly."
        )

    def __repr__(self) -> str:
        return (
            f"standin_cupy.ndarray(shape={self.shape}, dtype={self.dtype}, device={self._device})"
        )


def _binary(left: ndarray, right: Any, op: Any) -> ndarray:
    other = right._view if isinstance(right, ndarray) else right
    return asarray(op(left._view, other), _device=left._device)


class _DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class _DLDataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class _DLManagedTensor(ctypes.Structure):
    """DLPack's legacy ``DLManagedTensor`` (a ``DLTensor`` then the manager fields)."""

    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    )


_DL_CODES = {"i": 0, "u": 1, "f": 2, "b": 6, "c": 5}
_CAPSULE, _USED = b"dltensor", b"used_dltensor"
#: Exported capsules not consumed yet, by DLManagedTensor address: (struct, shape, array).
#: (A capsule never consumed keeps its entry: a test-only leak.)
_exported: dict[int, tuple[Any, Any, ndarray]] = {}
_capi = ctypes.pythonapi
_capi.PyCapsule_New.restype = ctypes.py_object
_capi.PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
_capi.PyCapsule_IsValid.restype = ctypes.c_int
_capi.PyCapsule_IsValid.argtypes = (ctypes.py_object, ctypes.c_char_p)
_capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capi.PyCapsule_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
_capi.PyCapsule_SetName.restype = ctypes.c_int
_capi.PyCapsule_SetName.argtypes = (ctypes.py_object, ctypes.c_char_p)


def _capsule(array: ndarray) -> Any:
    """A real DLPack capsule ("dltensor", device kDLCUDA) describing ``array``."""
    shape = (ctypes.c_int64 * max(array.ndim, 1))(*array.shape)
    strides = None
    if not array._view.flags.c_contiguous:
        strides = (ctypes.c_int64 * array.ndim)(
            *(s // array.dtype.itemsize for s in array._view.strides)
        )
    managed = _DLManagedTensor(
        data=array.data.ptr,
        device=_DLDevice(2, array._device),
        ndim=array.ndim,
        dtype=_DLDataType(_DL_CODES[array.dtype.kind], array.dtype.itemsize * 8, 1),
        shape=shape,
        strides=strides,
    )
    address = ctypes.addressof(managed)
    _exported[address] = (managed, (shape, strides), array)
    return _capi.PyCapsule_New(address, _CAPSULE, None)


def from_dlpack(source: Any) -> ndarray:
    """The stand-in array behind a stand-in capsule or ``__dlpack__`` object, consuming
    the capsule (renamed "used_dltensor", as DLPack consumers do); anything not in
    stand-in device memory is refused (as cupy refuses a host tensor)."""
    capsule = source
    if hasattr(source, "__dlpack__"):
        device = source.__dlpack_device__()
        if int(device[0]) != 2:
            raise RuntimeError(f"Unsupported device in DLTensor: {device}")
        capsule = source.__dlpack__()
    if type(capsule).__name__ != "PyCapsule":
        raise RuntimeError("stand-in cupy: not a DLPack capsule")
    if not _capi.PyCapsule_IsValid(capsule, _CAPSULE):
        raise RuntimeError("DLPack capsule was already consumed")
    entry = _exported.pop(_capi.PyCapsule_GetPointer(capsule, _CAPSULE), None)
    if entry is None:
        raise RuntimeError("stand-in cupy: not a stand-in device tensor")
    _capi.PyCapsule_SetName(capsule, _USED)
    return entry[2]


def asarray(source: Any, dtype: Any = None, *, _device: int | None = None) -> ndarray:
    """``source`` on the current device (the same object when it is already a device array)."""
    if isinstance(source, ndarray) and dtype is None:
        return source
    host = source._view if isinstance(source, ndarray) else np.asarray(source, dtype=dtype)
    out = empty(host.shape, host.dtype if dtype is None else dtype, _device=_device)
    out._view[...] = host
    return out


def concatenate(arrays: Sequence[ndarray], axis: int = 0) -> ndarray:
    return asarray(np.concatenate([a._view for a in arrays], axis=axis))


def ascontiguousarray(source: Any) -> ndarray:
    array = asarray(source)
    return array if array._view.flags.c_contiguous else asarray(array._view.copy())


def empty(shape: Any, dtype: Any = float, *, _device: int | None = None) -> ndarray:
    device = _current() if _device is None else _device
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    allocation = _allocate(count * dt.itemsize, device)
    raw = np.frombuffer(allocation.mapping, np.uint8, count * dt.itemsize)
    return ndarray(_view=raw.view(dt).reshape(shape), _owner=allocation, _device=device)


def zeros(shape: Any, dtype: Any = float) -> ndarray:
    array = empty(shape, dtype)
    array._view[...] = 0
    return array


def arange(*args: Any, dtype: Any = None) -> ndarray:
    return asarray(np.arange(*args, dtype=dtype))


def despina_allocation_size(pointer: int) -> int | None:
    """Bytes from ``pointer`` to the end of its allocation (what ``cuMemGetAddressRange``
    tells Despina on a GPU), or None."""
    try:
        allocation, offset = _find(pointer)
    except cuda.runtime.CUDARuntimeError:
        return None
    return allocation.size - offset


class UnownedMemory:
    """Device memory that something else owns: ``size`` bytes at ``ptr``."""

    def __init__(self, ptr: int, size: int, owner: Any, device_id: int = -1) -> None:
        self.ptr, self.size, self.owner = ptr, size, owner
        self.device_id = _current() if device_id < 0 else device_id


class MemoryPointer:
    def __init__(self, mem: Any, offset: int) -> None:
        self.mem = mem
        self.ptr = int(mem.ptr) + offset
        self.device_id = int(getattr(mem, "device_id", _current()))


class _Stream:
    def __init__(self, non_blocking: bool = False) -> None:
        self.ptr = id(self)

    def synchronize(self) -> None:
        """Copies are synchronous here."""

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class _Device:
    def __init__(self, device_id: int = 0) -> None:
        if not 0 <= device_id < _DEVICES:
            raise cuda.runtime.CUDARuntimeError("cudaErrorInvalidDevice: invalid device ordinal")
        self.id = device_id
        self.compute_capability = "90"
        self._saved: list[int] = []

    def __enter__(self) -> _Device:
        self._saved.append(_current())
        _state.device = self.id
        return self

    def __exit__(self, *exc: object) -> None:
        _state.device = self._saved.pop()

    def use(self) -> None:
        _state.device = self.id

    def synchronize(self) -> None:
        """Work is synchronous here."""


class _CUDARuntimeError(RuntimeError):
    pass


class _Runtime:
    CUDARuntimeError = _CUDARuntimeError
    memcpyHostToHost, memcpyHostToDevice, memcpyDeviceToHost = 0, 1, 2
    memcpyDeviceToDevice, memcpyDefault = 3, 4
    streamNonBlocking = 1
    cudaIpcMemLazyEnablePeerAccess = 1

    @staticmethod
    def getDeviceCount() -> int:
        return _DEVICES

    @staticmethod
    def getDevice() -> int:
        return _current()

    @staticmethod
    def malloc(size: int) -> int:
        allocation = _allocate(size, _current())
        _malloced[allocation.base] = allocation
        return allocation.base

    @staticmethod
    def free(pointer: int) -> None:
        allocation = _malloced.pop(pointer, None)
        if allocation is None:
            raise _CUDARuntimeError("cudaErrorInvalidValue: invalid argument")
        allocation.close()

    @staticmethod
    def ipcGetMemHandle(pointer: int) -> bytes:
        allocation, offset = _find(pointer)
        if offset or not allocation.owned:
            raise _CUDARuntimeError("cudaErrorInvalidValue: not the start of an own allocation")
        return allocation.name.encode().ljust(_HANDLE_SIZE, b"\0")

    @staticmethod
    def ipcOpenMemHandle(handle: bytes, flags: int = 1) -> int:
        name = bytes(handle).rstrip(b"\0").decode(errors="replace")
        if len(handle) != _HANDLE_SIZE or not name.startswith(_PREFIX):
            raise _CUDARuntimeError("cudaErrorInvalidValue: invalid argument")
        if name.split("_")[3] == str(os.getpid()):
            raise _CUDARuntimeError("cudaErrorInvalidContext: invalid device context")
        try:
            allocation = _Allocation(name, 0, _current(), False)
        except OSError:
            raise _CUDARuntimeError("cudaErrorInvalidValue: invalid argument") from None
        _opened[allocation.base] = allocation
        return allocation.base

    @staticmethod
    def ipcCloseMemHandle(pointer: int) -> None:
        allocation = _opened.pop(pointer, None)
        if allocation is None:
            raise _CUDARuntimeError("cudaErrorInvalidValue: invalid argument")
        allocation.close()

    @staticmethod
    def streamCreateWithFlags(flags: int) -> int:
        return 1

    @staticmethod
    def streamDestroy(stream: int) -> None:
        return None

    @staticmethod
    def streamSynchronize(stream: int) -> None:
        return None

    @staticmethod
    def memcpy(dst: int, src: int, size: int, kind: int) -> None:
        _Runtime._check(dst, src, size, kind)
        ctypes.memmove(dst, src, size)

    @staticmethod
    def memcpyAsync(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        _Runtime.memcpy(dst, src, size, kind)

    @staticmethod
    def _check(dst: int, src: int, size: int, kind: int) -> None:
        """Device ends must lie inside a live allocation, as CUDA would fault otherwise."""
        for pointer, on_device in ((src, kind in (2, 3)), (dst, kind in (1, 3))):
            if on_device and size:
                allocation, offset = _find(pointer)
                if offset + size > allocation.size:
                    raise _CUDARuntimeError("cudaErrorInvalidValue: copy past the allocation")


#: Allocations alive until closed: opened IPC handles, and ``runtime.malloc``'s.
_opened: dict[int, _Allocation] = {}
_malloced: dict[int, _Allocation] = {}


class cuda:
    Device = _Device
    Stream = _Stream

    @staticmethod
    def get_current_stream() -> _Stream:
        return _Stream()

    runtime = _Runtime
    UnownedMemory = UnownedMemory
    MemoryPointer = MemoryPointer

    @staticmethod
    @contextmanager
    def using_allocator(allocator: Any = None) -> Iterator[None]:
        yield
