"""The response cache (``response_cache { enable: true }`` in a model's config).

Enabled server-wide by ``--cache-config local,size=BYTES`` (or the older
``--response-cache-byte-size``). The key hashes the model, version, every input's name,
datatype, shape and bytes, and the requested outputs; a hit answers the request without
running the model. Entries are evicted least-recently-used when the byte budget is full.
Runs on the event loop thread only.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from despina.inference.request import InferenceRequest
from despina.inference.tensors import serialize_bytes
from despina.memory.device_arrays import DeviceArray, to_host
from despina.serving.digits import ascii_digits


@dataclass
class CachedResponse:
    outputs: dict[str, np.ndarray]
    parameters: dict[str, object]
    nbytes: int


def parse_cache_config(values: Sequence[str] | None, legacy_size: int | None) -> int:
    """The cache size in bytes from ``--cache-config`` values (``local,size=N``), else the
    legacy flag; 0 disables the cache. Raises ValueError for another cache or bad size."""
    size = int(legacy_size or 0)
    for value in values or []:
        name, _, setting = value.partition(",")
        key, _, number = setting.partition("=")
        if name != "local":
            raise ValueError(
                f"--cache-config: unknown cache '{name}'; Despina has the 'local' cache"
            )
        if key != "size" or not ascii_digits(number):
            raise ValueError(f"--cache-config: expected local,size=<bytes>, got '{value}'")
        size = int(number)
    return size


def cache_key(request: InferenceRequest, version: str) -> bytes:
    """A digest of everything that determines a response."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"{request.model_name}\0{version}\0".encode())
    for name in sorted(request.inputs):
        array = to_host(request.inputs[name])
        digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
        digest.update(
            serialize_bytes(array)
            if array.dtype == np.object_
            else np.ascontiguousarray(array).data
        )
    for output in sorted(request.outputs or [], key=lambda o: o.name):
        k = output.parameters.get("classification")
        digest.update(f"out\0{output.name}\0{k}\0".encode())
    return digest.digest()


class ResponseCache:
    """An LRU of responses bounded by the bytes of their output arrays."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.used = 0
        self._entries: OrderedDict[bytes, CachedResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: bytes) -> CachedResponse | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def store(
        self, key: bytes, outputs: dict[str, np.ndarray], parameters: dict[str, object]
    ) -> None:
        """Keep a response (a private copy of its outputs) if it fits the budget."""
        copies = {name: _host_copy(array) for name, array in outputs.items()}
        nbytes = sum(_size(a) for a in copies.values())
        if nbytes > self.capacity or key in self._entries:
            return
        while self.used + nbytes > self.capacity and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self.used -= evicted.nbytes
        self._entries[key] = CachedResponse(copies, dict(parameters), nbytes)
        self.used += nbytes


def _host_copy(array: np.ndarray | DeviceArray) -> np.ndarray:
    """A private host copy of an output (one copy for a DeviceArray too)."""
    return array.to_host() if isinstance(array, DeviceArray) else np.array(array, copy=True)


def _size(array: np.ndarray) -> int:
    if array.dtype == np.object_:
        return sum(len(item) if isinstance(item, bytes) else 64 for item in array.reshape(-1))
    return int(array.nbytes)
