"""Device buffers and streams for engines: the interface the backend uses, and its cupy
implementation (what runs on a real GPU).

The backend never touches CUDA itself: an instance asks a :class:`DeviceMemory` for a
stream, buffers, and the copies between host arrays and buffers. :class:`CupyMemory`
does that with cupy. A stand-in runtime used by tests brings its own host-memory
implementation (see :func:`despina_backend_trt.runtime.load_runtime`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np
    from despina import DeviceArray


class DeviceStream(Protocol):
    """A CUDA stream: ``handle`` is what ``execute_async_v3`` takes."""

    @property
    def handle(self) -> int: ...

    def synchronize(self) -> None: ...


class DeviceBuffer(Protocol):
    """``nbytes`` of device memory at address ``ptr``."""

    @property
    def ptr(self) -> int: ...

    @property
    def nbytes(self) -> int: ...


class DeviceMemory(Protocol):
    """What an instance needs of a device: all calls are made from the instance's thread."""

    def compute_capability(self, device_id: int) -> tuple[int, int]:
        """(major, minor) of GPU ``device_id``."""
        ...

    def on_device(self, device_id: int) -> AbstractContextManager[Any]:
        """A context in which ``device_id`` is the current CUDA device."""
        ...

    def stream(self, device_id: int) -> DeviceStream:
        """A new non-blocking stream on ``device_id``."""
        ...

    def allocate(self, device_id: int, nbytes: int) -> DeviceBuffer:
        """``nbytes`` (at least 1) of memory on ``device_id``."""
        ...

    def upload(self, buffer: DeviceBuffer, array: np.ndarray, stream: DeviceStream) -> None:
        """Queue a copy of C-contiguous ``array`` into ``buffer`` on ``stream``."""
        ...

    def download(
        self,
        buffer: DeviceBuffer,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        stream: DeviceStream,
    ) -> np.ndarray:
        """A host array filled from ``buffer`` by a copy queued on ``stream``: valid once
        the stream is synchronized."""
        ...

    def copy_in(self, buffer: DeviceBuffer, source: DeviceArray, stream: DeviceStream) -> None:
        """Queue a device-to-device copy of ``source`` (its data ready: DeviceArray
        producers wait for their work) into ``buffer`` on ``stream``."""
        ...

    def download_device(
        self,
        buffer: DeviceBuffer,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        stream: DeviceStream,
    ) -> DeviceArray:
        """A new DeviceArray on the current device filled from ``buffer`` by a copy
        queued on ``stream``: valid once the stream is synchronized."""
        ...


class CupyMemory:
    """:class:`DeviceMemory` through cupy (buffers from cupy's memory pool)."""

    def __init__(self) -> None:
        import cupy

        self.cupy: Any = cupy

    def compute_capability(self, device_id: int) -> tuple[int, int]:
        text = str(self.cupy.cuda.Device(device_id).compute_capability)  # e.g. "86"
        return int(text[:-1]), int(text[-1])

    def on_device(self, device_id: int) -> AbstractContextManager[Any]:
        device: AbstractContextManager[Any] = self.cupy.cuda.Device(device_id)
        return device

    def stream(self, device_id: int) -> DeviceStream:
        with self.cupy.cuda.Device(device_id):
            return _CupyStream(self.cupy.cuda.Stream(non_blocking=True))

    def allocate(self, device_id: int, nbytes: int) -> DeviceBuffer:
        with self.cupy.cuda.Device(device_id):
            return _CupyBuffer(self.cupy.cuda.alloc(max(nbytes, 1)), max(nbytes, 1))

    def upload(self, buffer: DeviceBuffer, array: np.ndarray, stream: DeviceStream) -> None:
        assert isinstance(buffer, _CupyBuffer) and isinstance(stream, _CupyStream)
        buffer.memory.copy_from_host_async(array.ctypes.data, array.nbytes, stream.stream)

    def download(
        self,
        buffer: DeviceBuffer,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        stream: DeviceStream,
    ) -> np.ndarray:
        import numpy as np

        assert isinstance(buffer, _CupyBuffer) and isinstance(stream, _CupyStream)
        out = np.empty(shape, dtype)
        if out.nbytes:
            buffer.memory.copy_to_host_async(out.ctypes.data, out.nbytes, stream.stream)
        return out

    def copy_in(self, buffer: DeviceBuffer, source: DeviceArray, stream: DeviceStream) -> None:
        assert isinstance(buffer, _CupyBuffer) and isinstance(stream, _CupyStream)
        if source.nbytes:
            buffer.memory.copy_from_device_async(source.data.data, source.nbytes, stream.stream)

    def download_device(
        self,
        buffer: DeviceBuffer,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        stream: DeviceStream,
    ) -> DeviceArray:
        from despina import DeviceArray

        assert isinstance(buffer, _CupyBuffer) and isinstance(stream, _CupyStream)
        out = self.cupy.empty(shape, dtype)
        if out.nbytes:
            out.data.copy_from_device_async(buffer.memory, out.nbytes, stream.stream)
        return DeviceArray(out)


class _CupyStream:
    def __init__(self, stream: Any) -> None:
        self.stream = stream

    @property
    def handle(self) -> int:
        return int(self.stream.ptr)

    def synchronize(self) -> None:
        self.stream.synchronize()


class _CupyBuffer:
    def __init__(self, memory: Any, nbytes: int) -> None:
        self.memory = memory
        self._nbytes = nbytes

    @property
    def ptr(self) -> int:
        return int(self.memory.ptr)

    @property
    def nbytes(self) -> int:
        return self._nbytes
