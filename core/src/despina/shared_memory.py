"""The system shared-memory extension: client-registered POSIX shared-memory regions.

Frontends register regions by name and read inputs from / write outputs into them. Every
access is checked against the registered window (offset + byte size) before any read or
write. Keys of Despina's own internal regions can never be registered by a client, and
error messages name the region, never its key.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from dataclasses import dataclass
from typing import Any

from despina.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied

#: Prefix of the shared-memory keys Despina creates for itself (e.g. the Python backend).
INTERNAL_KEY_PREFIX = "despina_internal"

_SHM_DIR = "/dev/shm"


@dataclass
class Region:
    """A registered region: a window [offset, offset + byte_size) of a mapped key."""

    name: str
    key: str
    offset: int
    byte_size: int
    mapping: mmap.mmap

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }


class SharedMemoryRegistry:
    """Registered system shared-memory regions of one server (thread-safe)."""

    def __init__(self, allow_register: bool = True) -> None:
        self._regions: dict[str, Region] = {}
        self._lock = threading.Lock()
        #: ``--allow-client-shm``: whether clients may register regions at all.
        self.allow_register = allow_register

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes of ``key`` from ``offset``; errors are the client's."""
        if not self.allow_register:
            raise PermissionDenied(
                "client shared memory is disabled; start the server with --allow-client-shm=true"
            )
        if not name:
            raise InvalidArgument("shared memory region name must not be empty")
        if offset < 0 or byte_size <= 0:
            raise InvalidArgument(f"invalid offset or byte size for shared memory region '{name}'")
        bare = key.lstrip("/")
        if not bare or "/" in bare or bare in (".", ".."):
            raise InvalidArgument(f"invalid key for shared memory region '{name}'")
        if bare.startswith(INTERNAL_KEY_PREFIX):
            raise PermissionDenied(f"shared memory region '{name}' cannot be registered")
        with self._lock:
            if name in self._regions:
                raise AlreadyExists(f"shared memory region '{name}' already in manager")
            try:
                fd = os.open(os.path.join(_SHM_DIR, bare), os.O_RDWR)
            except OSError:
                raise InvalidArgument(f"Unable to open shared memory region: '{name}'") from None
            try:
                size = os.fstat(fd).st_size
                if offset + byte_size > size:
                    raise InvalidArgument(
                        f"shared memory region '{name}': offset + byte_size exceeds the region size"
                    )
                mapping = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            self._regions[name] = Region(name, key, offset, byte_size, mapping)

    def unregister(self, name: str = "") -> None:
        """Unregister ``name``, or every region when ``name`` is empty (as Triton)."""
        with self._lock:
            names = [name] if name else list(self._regions)
            for each in names:
                region = self._regions.pop(each, None)
                if region is not None:
                    # A view still held by an in-flight tensor keeps the mapping open;
                    # it is unmapped when the last view goes.
                    with contextlib.suppress(BufferError):
                        region.mapping.close()

    def unregister_all(self) -> None:
        self.unregister("")

    def status(self, name: str = "") -> list[dict[str, Any]]:
        """Status of ``name`` (NotFound if unknown) or of every region."""
        with self._lock:
            if name:
                region = self._regions.get(name)
                if region is None:
                    raise NotFound(f"Unable to find system shared memory region: '{name}'")
                return [region.status()]
            return [r.status() for r in self._regions.values()]

    def view(self, name: str, offset: int, byte_size: int) -> memoryview:
        """A writable view of ``byte_size`` bytes at ``offset`` within the region's window.

        Raises NotFound for an unknown region and InvalidArgument when the range leaves
        the registered window.
        """
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise NotFound(f"Unable to find system shared memory region: '{name}'")
            if offset < 0 or byte_size < 0 or offset + byte_size > region.byte_size:
                raise InvalidArgument(
                    f"Invalid offset + byte size for shared memory region: '{name}'"
                )
            start = region.offset + offset
            return memoryview(region.mapping)[start : start + byte_size]
