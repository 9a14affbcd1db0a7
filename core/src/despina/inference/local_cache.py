"""The "local" response cache: an LRU in the server's memory (``--cache-config local,size=N``)."""

from __future__ import annotations

import logging
import sys
from collections import OrderedDict
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from despina.inference.response_cache import CachedResponse, ResponseCache
from despina.memory.device_arrays import DeviceArray
from despina.plugin.hookspecs import hookimpl
from despina.serving.digits import ascii_digits

log = logging.getLogger("despina.cache.local")

#: The bytes an output array takes in memory beyond its data (numpy's array header).
_ARRAY_HEADER = sys.getsizeof(np.empty(0))


class LocalCache:
    """An LRU of responses bounded by ``size`` bytes: each entry counts its key, its
    outputs' names and arrays (header and data). An entry larger than the cache is not
    kept (a warning: Triton's "Failed to insert key")."""

    name: ClassVar[str] = "local"

    def __init__(self, options: Mapping[str, str]) -> None:
        number = options.get("size", "")
        if options.keys() != {"size"} or not ascii_digits(number):
            given = ",".join(f"{k}={v}" for k, v in options.items())
            raise ValueError(f"--cache-config: expected local,size=<bytes>, got 'local,{given}'")
        self.capacity = int(number)
        self.used = 0
        self._entries: OrderedDict[bytes, CachedResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def start(self) -> None:
        """Nothing to connect."""

    async def stop(self) -> None:
        self._entries.clear()
        self.used = 0

    def lookup(self, key: bytes) -> CachedResponse | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def insert(
        self,
        key: bytes,
        outputs: Mapping[str, np.ndarray | DeviceArray],
        parameters: Mapping[str, object],
    ) -> None:
        """Keep a response (a private copy of its outputs) if it fits the budget."""
        copies = {name: _host_copy(array) for name, array in outputs.items()}
        nbytes = len(key) + sum(len(n) + _ARRAY_HEADER + _size(a) for n, a in copies.items())
        if key in self._entries:
            return
        if nbytes > self.capacity:
            log.warning(
                "Failed to insert key '%s' into the local response cache: the entry takes "
                "%d bytes, the cache holds %d",
                key.hex(),
                nbytes,
                self.capacity,
            )
            return
        while self.used + nbytes > self.capacity and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self.used -= evicted.nbytes
        self._entries[key] = CachedResponse(copies, dict(parameters), nbytes)
        self.used += nbytes


@hookimpl
def despina_response_caches() -> list[type[ResponseCache]]:
    return [LocalCache]


def _host_copy(array: np.ndarray | DeviceArray) -> np.ndarray:
    """A private host copy of an output (one copy for a DeviceArray too)."""
    return array.to_host() if isinstance(array, DeviceArray) else np.array(array, copy=True)


def _size(array: np.ndarray) -> int:
    if array.dtype == np.object_:
        return sum(len(item) if isinstance(item, bytes) else 64 for item in array.reshape(-1))
    return int(array.nbytes)
