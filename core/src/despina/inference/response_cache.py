"""The response cache contract (``response_cache { enable: true }`` in a model's config).

Enabled server-wide by ``--cache-config <name>,<key>=<value>`` (repeatable; the older
``--response-cache-byte-size N`` means ``local,size=N``): ``<name>`` picks one
:class:`ResponseCache` class of those plugins provide (``despina_response_caches``; the
core's is "local", :mod:`despina.inference.local_cache`) and its options go to it. The key
(:func:`cache_key`) hashes the model, version, every input's name, datatype, shape and
bytes, and the requested outputs; a hit answers the request without running the model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from despina.inference.request import InferenceRequest
from despina.inference.tensors import serialize_bytes
from despina.memory.device_arrays import DeviceArray, to_host


@dataclass
class CachedResponse:
    """A stored response: its outputs (host arrays), parameters, and the outputs' bytes."""

    outputs: dict[str, np.ndarray]
    parameters: dict[str, object]
    nbytes: int


class ResponseCache(Protocol):
    """A response cache (``despina_response_caches``), made as ``Cache(options)`` with the
    ``<key>=<value>`` options of its ``--cache-config <name>,...`` flags (raise ValueError
    with the reason for a bad one), started before the models load and stopped after they
    unload. Called on the event loop thread only."""

    name: ClassVar[str]

    def __init__(self, options: Mapping[str, str]) -> None: ...

    async def start(self) -> None:
        """Get ready (connect); raising refuses the server's start-up with the message."""
        ...

    async def stop(self) -> None: ...

    def lookup(self, key: bytes) -> CachedResponse | Awaitable[CachedResponse | None] | None:
        """The response stored under ``key`` or None, at once (a cache in this process),
        or an awaitable of it (a cache over the network: it never raises and resolves
        within the cache's own timeouts, an error being a miss)."""
        ...

    def insert(
        self,
        key: bytes,
        outputs: Mapping[str, np.ndarray | DeviceArray],
        parameters: Mapping[str, object],
    ) -> None:
        """Store a response without blocking (a network cache writes in the background
        and may drop the write); the outputs are not the cache's to keep: copy them."""
        ...


def parse_cache_config(
    values: Sequence[str] | None, legacy_size: int | None
) -> tuple[str, dict[str, str]] | None:
    """The cache the ``--cache-config`` values name (``<name>,<key>=<value>``, repeatable)
    with its options; without them ``local`` of ``--response-cache-byte-size`` bytes, or
    None (no cache). Raises ValueError (Triton's texts) for both flags given, a malformed
    value or two different caches."""
    if not values:
        return ("local", {"size": str(legacy_size)}) if legacy_size else None
    if legacy_size is not None:
        raise ValueError(
            "Incompatible flags --response-cache-byte-size and --cache-config both provided. "
            "Please provide one or the other."
        )
    names: list[str] = []
    options: dict[str, str] = {}
    for value in values:
        name, _, setting = value.partition(",")
        key, equals, option = setting.partition("=")
        if not name or not key or not equals:
            raise ValueError(f"--cache-config: expected <cache>,<key>=<value>, got '{value}'")
        if names and name != names[0]:
            raise ValueError(
                "found multiple cache configurations, but only a single cache is currently "
                f"supported: '{names[0]}' and '{name}'"
            )
        names.append(name)
        options[key] = option
    return names[0], options


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
