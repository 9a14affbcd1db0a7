"""The shared-memory extensions: client-registered system (POSIX) and CUDA regions.

One registry holds both kinds under one name space, as Triton's manager does: a name is
registered once, of either kind; status and unregister by name see only their own kind
(a region of the other kind is NotFound in status and left alone by unregister).
Frontends read inputs from and write outputs to any region through :meth:`window`, whose
bounds check is the same for both kinds.

A region a request's outputs are bound to is held from admission until the frontend has
written the answer (:meth:`SharedMemoryRegistry.hold`). Unregistering a held region is
deferred, as newer Triton does (server #7743): the unregister succeeds at once, the region
stays registered (listed, usable) until its last holder releases it, and is then unmapped.
Inputs are copied out of their regions when a request is decoded, so they hold nothing. No shared memory of the server itself can ever be
registered by a client, whatever its key (:mod:`despina.memory.own_shm`), and error messages name
the region, never its key.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from despina.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied
from despina.memory.cuda_memory import IPC_HANDLE_SIZE, CudaRegion, CudaSupport, probe_cuda
from despina.memory.device_arrays import DeviceArray
from despina.memory.own_shm import INTERNAL_KEY_PREFIX, SHM_DIR, is_own

if TYPE_CHECKING:
    from despina.inference.request import RequestedOutput

_KIND_TEXT = {"system": "system", "cuda": "CUDA"}


@dataclass
class Region:
    """A registered system region: a window [offset, offset + byte_size) of a mapped key."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap
    #: Requests holding the region; an unregister while any does is deferred.
    users: int = 0
    #: Unregistered while held: removed when the last holder releases it.
    unregistering: bool = False
    kind = "system"

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }

    def read(self, start: int, size: int) -> memoryview:
        """A view (no copy) of ``size`` bytes from ``start`` of the window."""
        try:
            view = memoryview(self.mapping)
        except ValueError:  # unmapped by an unregister since the window was taken
            raise NotFound(f"Unable to find shared memory region: '{self.name}'") from None
        begin = self.offset + start
        return view[begin : begin + size]

    def write(self, start: int, data: bytes | memoryview) -> None:
        with self.read(start, len(data)) as view:
            view[:] = data

    def close(self) -> None:
        # A view still held by an in-flight tensor keeps the mapping open; it is
        # unmapped when the last view goes.
        with contextlib.suppress(BufferError):
            self.mapping.close()


@dataclass(slots=True)
class Window:
    """A bounds-checked range of one registered region, of either kind."""

    region: Region | CudaRegion
    start: int
    size: int

    def read(self) -> memoryview:
        """The range's bytes: a view of the mapping (no copy) for a system region, a host
        copy for a CUDA region."""
        return self.region.read(self.start, self.size)

    def tensor(self, dtype: np.dtype[Any]) -> np.ndarray | DeviceArray:
        """A copy of the range as a flat array of fixed-size ``dtype`` (the caller checked
        that :attr:`size` is a multiple of its itemsize): a host array from a system region,
        a DeviceArray on the region's device from a CUDA region (device to device, never
        through host memory). A copy because the client may rewrite or unregister the
        region while a model computes."""
        if isinstance(self.region, CudaRegion):
            return self.region.read_device(self.start, self.size, dtype)
        return np.frombuffer(self.read(), dtype=dtype).copy()

    def write(self, data: bytes | memoryview | DeviceArray) -> None:
        """Write ``data`` (at most :attr:`size` bytes, the caller checks) at the start: a
        DeviceArray device to device into a CUDA region, through one host copy into a
        system region."""
        if isinstance(self.region, CudaRegion):
            self.region.write(self.start, data)
        elif isinstance(data, DeviceArray):
            self.region.write(self.start, data.to_host().reshape(-1).view(np.uint8).data)
        else:
            self.region.write(self.start, data)


class RegionHold:
    """Regions held for one request; :meth:`release` once its answer is written."""

    __slots__ = ("_regions", "_registry")

    def __init__(self, registry: SharedMemoryRegistry, regions: list[Region | CudaRegion]) -> None:
        self._registry = registry
        self._regions = regions

    def release(self) -> None:
        """Release the regions (idempotent); one unregistered meanwhile is unmapped now if
        this was its last holder."""
        regions, self._regions = self._regions, []
        if regions:
            self._registry._release(regions)


def _server_own(name: str) -> InvalidArgument:
    """The refusal of a key naming the server's own shared memory (Triton's opening words,
    which its gRPC frontend answers for its Python backend's keys)."""
    return InvalidArgument(
        f"Invalid shared memory region: '{name}': its key names shared memory of the "
        "server itself, which clients cannot register"
    )


class SharedMemoryRegistry:
    """Registered system and CUDA shared-memory regions of one server (thread-safe)."""

    def __init__(self, allow_register: bool = True) -> None:
        self._regions: dict[str, Region | CudaRegion] = {}
        self._lock = threading.Lock()
        self._cuda: CudaSupport | None = None
        #: ``--allow-client-shm``: whether clients may register regions at all.
        self.allow_register = allow_register

    def cuda_support(self) -> CudaSupport:
        """Whether CUDA regions can be opened here (probed once, on first call)."""
        if self._cuda is None:
            self._cuda = probe_cuda()
        return self._cuda

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes of ``key`` from ``offset``; errors are the client's."""
        self._check_allowed(name)
        if offset < 0 or byte_size <= 0:
            raise InvalidArgument(f"invalid offset or byte size for shared memory region '{name}'")
        bare = key.lstrip("/")
        if bare.startswith(INTERNAL_KEY_PREFIX):
            raise _server_own(name)
        if not bare or "/" in bare or "\0" in bare or bare in (".", ".."):
            raise InvalidArgument(f"invalid key for shared memory region '{name}'")
        with self._lock:
            self._check_free(name)
            try:
                fd = os.open(os.path.join(SHM_DIR, bare), os.O_RDWR)
            except OSError:
                raise InvalidArgument(f"Unable to open shared memory region: '{name}'") from None
            try:
                st = os.fstat(fd)
                if is_own(st):
                    raise _server_own(name)
                size = st.st_size
                if offset + byte_size > size:
                    raise InvalidArgument(
                        f"shared memory region '{name}': offset + byte_size exceeds the region size"
                    )
                mapping = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            self._regions[name] = Region(name, key, offset, byte_size, mapping)

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        """Open the CUDA IPC handle ``raw_handle`` (a ``cudaIpcMemHandle_t``) on device
        ``device_id``, ``byte_size`` bytes of its allocation; errors are the client's,
        InvalidArgument (Triton's text) where this server cannot open CUDA memory."""
        self._check_allowed(name)
        support = self.cuda_support()
        if not support.available:
            raise InvalidArgument(
                f"failed to register CUDA shared memory region: '{name}', GPUs not supported "
                f"({support.reason})"
            )
        if byte_size <= 0:
            raise InvalidArgument(f"invalid byte size for shared memory region '{name}'")
        if not 0 <= device_id < support.devices:
            raise InvalidArgument(
                f"failed to register CUDA shared memory region '{name}': device_id {device_id} "
                f"is not a CUDA device of this server ({support.devices} visible)"
            )
        if len(raw_handle) != IPC_HANDLE_SIZE:
            raise InvalidArgument(
                f"'raw_handle' must be a cudaIpcMemHandle_t of {IPC_HANDLE_SIZE} bytes, "
                f"got {len(raw_handle)}"
            )
        with self._lock:
            self._check_free(name)
            self._regions[name] = CudaRegion.open(name, raw_handle, device_id, byte_size)

    def unregister(self, name: str = "", kind: str = "system") -> None:
        """Unregister region ``name`` of ``kind`` ("system" or "cuda"), or every region of
        that kind when ``name`` is empty; a name unknown or of the other kind is left
        alone, as Triton does. A region requests hold stays registered until the last of
        them releases it (newer Triton's deferred unregister)."""
        with self._lock:
            names = [name] if name else list(self._regions)
            for each in names:
                region = self._regions.get(each)
                if region is None or region.kind != kind:
                    continue
                if region.users:
                    region.unregistering = True
                else:
                    del self._regions[each]
                    region.close()

    def hold(self, outputs: Sequence[RequestedOutput]) -> RegionHold | None:
        """Hold the registered regions ``outputs`` are bound to until the returned hold is
        released (None when they name none); a region named but not registered is left
        for :meth:`window` to report."""
        for output in outputs:  # the common case, none bound, at a membership test each
            if "shared_memory_region" in output.parameters:
                break
        else:
            return None
        names = {
            str(name)
            for output in outputs
            if (name := output.parameters.get("shared_memory_region")) is not None
        }
        held = []
        with self._lock:
            for name in names:
                region = self._regions.get(name)
                if region is not None:
                    region.users += 1
                    held.append(region)
        return RegionHold(self, held) if held else None

    def _release(self, regions: list[Region | CudaRegion]) -> None:
        """One holder is done with ``regions``: unmap those unregistered meanwhile that
        no request holds any more."""
        closing = []
        with self._lock:
            for region in regions:
                region.users -= 1
                if not region.users and region.unregistering:
                    if self._regions.get(region.name) is region:
                        del self._regions[region.name]
                    closing.append(region)
        for region in closing:
            region.close()

    def unregister_all(self) -> None:
        """Unregister every region of both kinds (at server stop)."""
        with self._lock:
            regions, self._regions = list(self._regions.values()), {}
        for region in regions:
            region.close()

    def status(self, name: str = "", kind: str = "system") -> list[dict[str, Any]]:
        """Status of region ``name`` of ``kind`` (NotFound if unknown or of the other kind,
        Triton's texts) or of every region of that kind."""
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values() if r.kind == kind]
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find {kind} shared memory region: '{name}'")
            if region.kind != kind:
                raise NotFound(
                    f"The region named '{name}' is registered as {_KIND_TEXT[region.kind]} "
                    f"shared memory, not {_KIND_TEXT[kind]} shared memory"
                )
            return [region.status()]

    def window(self, name: str, offset: int, byte_size: int) -> Window:
        """The range of ``byte_size`` bytes at ``offset`` within region ``name`` (either
        kind). Raises NotFound for an unknown region and InvalidArgument when the range
        leaves the registered window (Triton's texts)."""
        with self._lock:
            region = self._regions.get(name)
        if region is None:
            raise NotFound(f"Unable to find shared memory region: '{name}'")
        if offset < 0 or byte_size < 0 or offset + byte_size > region.byte_size:
            raise InvalidArgument(f"Invalid offset + byte size for shared memory region: '{name}'")
        return Window(region, offset, byte_size)

    def all_cuda(self, outputs: Sequence[RequestedOutput]) -> bool:
        """Whether every one of ``outputs`` is bound to a registered CUDA region (so a GPU
        backend may answer them on the device, to be copied device to device)."""
        names = [output.parameters.get("shared_memory_region") for output in outputs]
        if None in names:  # the common case, without the lock
            return False
        with self._lock:
            regions = [self._regions.get(str(name)) for name in names]
        return all(region is not None and region.kind == "cuda" for region in regions)

    def _check_allowed(self, name: str) -> None:
        if not self.allow_register:
            raise PermissionDenied(
                "client shared memory is disabled; start the server with --allow-client-shm=true"
            )
        if not name:
            raise InvalidArgument("shared memory region name must not be empty")

    def _check_free(self, name: str) -> None:
        """AlreadyExists when ``name`` is registered, of either kind (hold the lock)."""
        if name in self._regions:
            raise AlreadyExists(f"shared memory region '{name}' already in manager")
