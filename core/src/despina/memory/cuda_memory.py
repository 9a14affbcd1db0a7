"""CUDA shared memory: device allocations a client shares through a CUDA IPC handle.

cupy is optional (``pip install 'despina[cuda]'``, the ``cupy-cuda12x`` wheel) and is
imported only by :func:`probe_cuda` (once, at server start) and when a handle is opened:
importing this module, the core or any plugin loads no CUDA library. The allocation size
comes from the driver (``cuMemGetAddressRange``, through ``libcuda`` itself).

A :class:`CudaRegion` copies windows of the allocation into new device arrays (inputs:
:meth:`CudaRegion.read_device`) or to host memory, and device arrays or host bytes into
them (outputs), on a stream of its own that each copy waits for. Nothing here has run on a
GPU yet (no GPU was lent to this project): tests run it on a cupy stand-in that keeps
"device" memory in host memory (``core/tests/standin_cuda``).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from despina.errors import InvalidArgument, NotFound
from despina.memory.device_arrays import DeviceArray

log = logging.getLogger("despina.cuda_memory")

#: sizeof(cudaIpcMemHandle_t).
IPC_HANDLE_SIZE = 64
#: How to get cupy, in the errors that say it is missing.
INSTALL_HINT = "pip install 'despina[cuda]'"


@dataclass(frozen=True)
class CudaSupport:
    """Whether this process can open CUDA IPC handles: the devices cupy sees, or why not."""

    devices: int = 0
    reason: str = ""

    @property
    def available(self) -> bool:
        return self.devices > 0

    def describe(self) -> str:
        """One line for the log."""
        if self.available:
            return f"CUDA shared memory available ({self.devices} CUDA device(s))"
        return f"CUDA shared memory unavailable: {self.reason}"


def probe_cuda() -> CudaSupport:
    """Import cupy and count its devices (this initialises the CUDA driver, once)."""
    if importlib.util.find_spec("cupy") is None:
        return CudaSupport(reason=f"cupy is not installed ({INSTALL_HINT})")
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - a broken CUDA install fails the import many ways
        cause = exc.__cause__ or exc  # cupy wraps the real failure in a long ImportError
        why = f"{type(cause).__name__}: {cause}".splitlines()[0]
        return CudaSupport(reason=f"cupy cannot be imported ({why}; {INSTALL_HINT})")
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        return CudaSupport(reason=f"cupy {cupy.__version__} sees no CUDA device ({exc})")
    if count == 0:
        return CudaSupport(reason=f"cupy {cupy.__version__} sees no CUDA device")
    return CudaSupport(devices=count)


class CudaRegion:
    """An opened IPC allocation on one device, ``byte_size`` bytes of it registered.

    Every copy and :meth:`close` hold the region's lock, so an unregister waits for a
    copy in flight before closing the handle; a copy after the close is NotFound.
    """

    kind = "cuda"

    def __init__(self, name: str, device_id: int, byte_size: int, pointer: int) -> None:
        import cupy

        self.name = name
        self.device_id = device_id
        self.byte_size = byte_size
        self._pointer = pointer
        self._runtime: Any = cupy.cuda.runtime
        self._device: Any = cupy.cuda.Device(device_id)
        with self._device:
            self._stream = self._runtime.streamCreateWithFlags(self._runtime.streamNonBlocking)
        self._lock = threading.Lock()
        self._closed = False
        #: Requests holding the region, and whether it was unregistered meanwhile (the
        #: registry's bookkeeping, under its lock).
        self.users = 0
        self.unregistering = False

    @classmethod
    def open(cls, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> CudaRegion:
        """Open ``raw_handle`` on ``device_id`` and check ``byte_size`` against the
        allocation; InvalidArgument with Triton's text when either fails (the cause is
        logged, not told to the client)."""
        import cupy

        runtime = cupy.cuda.runtime
        refused = InvalidArgument(f"failed to register shared memory region '{name}': invalid args")
        with cupy.cuda.Device(device_id):
            try:
                pointer = int(runtime.ipcOpenMemHandle(raw_handle))
            except runtime.CUDARuntimeError as exc:
                log.error("failed to open the CUDA IPC handle of region '%s': %s", name, exc)
                raise refused from None
            size = _allocation_size(pointer)
            if size is None or byte_size > size:
                log.error(
                    "CUDA shared memory region '%s': byte_size %d, allocation %s bytes",
                    name,
                    byte_size,
                    size,
                )
                runtime.ipcCloseMemHandle(pointer)
                raise refused
            try:
                return cls(name, device_id, byte_size, pointer)
            except runtime.CUDARuntimeError:
                runtime.ipcCloseMemHandle(pointer)
                raise

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def pointer(self, start: int) -> int:
        """The device address of byte ``start`` (for device-side consumers)."""
        return self._pointer + start

    def read(self, start: int, size: int) -> memoryview:
        """A host copy of ``size`` bytes from ``start`` (bounds checked by the caller)."""
        host = np.empty(size, dtype=np.uint8)
        if size:
            kind = self._runtime.memcpyDeviceToHost
            self._copy(host.ctypes.data, self.pointer(start), size, kind)
        return host.data

    def read_device(self, start: int, size: int, dtype: np.dtype[Any]) -> DeviceArray:
        """A flat array of ``dtype`` on the region's device holding a copy of ``size`` bytes
        from ``start`` (bounds checked by the caller; a multiple of the itemsize)."""
        import cupy

        with self._device:
            array = DeviceArray(cupy.empty(size // dtype.itemsize, dtype=dtype))
        if size:
            self._copy(array.pointer, self.pointer(start), size, self._runtime.memcpyDeviceToDevice)
        return array

    def write(self, start: int, data: bytes | memoryview | DeviceArray) -> None:
        """Copy ``data`` to ``start`` (bounds checked by the caller): host bytes, or a
        DeviceArray device to device; returns once the bytes are in place."""
        if isinstance(data, DeviceArray):
            if data.nbytes:
                kind = self._runtime.memcpyDeviceToDevice  # its data is ready (DeviceArray)
                self._copy(self.pointer(start), data.pointer, data.nbytes, kind)
            return
        host = np.frombuffer(data, dtype=np.uint8)
        if host.size:
            kind = self._runtime.memcpyHostToDevice
            self._copy(self.pointer(start), host.ctypes.data, host.size, kind)

    def close(self) -> None:
        """Close the IPC handle (after any copy in flight); idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with self._device:
                self._runtime.streamDestroy(self._stream)
                self._runtime.ipcCloseMemHandle(self._pointer)

    def _copy(self, dst: int, src: int, size: int, kind: int) -> None:
        """``cudaMemcpyAsync`` of ``kind`` on the region's stream, waited for."""
        runtime = self._runtime
        with self._lock:
            if self._closed:
                raise NotFound(f"Unable to find shared memory region: '{self.name}'")
            with self._device:
                runtime.memcpyAsync(dst, src, size, kind, self._stream)
                runtime.streamSynchronize(self._stream)


def _allocation_size(pointer: int) -> int | None:
    """Bytes of the allocation from ``pointer`` to its end, from the driver; None when
    the driver cannot tell (logged). The tests' cupy stand-in, which has no driver,
    answers for itself (``despina_allocation_size``)."""
    import cupy

    standin = getattr(cupy, "despina_allocation_size", None)
    if standin is not None:
        told: int | None = standin(pointer)
        return told
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        log.error("cannot load the CUDA driver library: %s", exc)
        return None
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    status = driver.cuMemGetAddressRange_v2(
        ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer)
    )
    if status != 0:
        log.error("cuMemGetAddressRange failed with CUresult %d", status)
        return None
    return int(size.value) - (pointer - int(base.value))
