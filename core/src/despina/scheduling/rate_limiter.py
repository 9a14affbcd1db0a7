"""Triton's rate limiter (``--rate-limit=execution_count``).

An instance whose ``instance_group`` has a ``rate_limiter`` runs a batch only once every
resource it names is available; resources are per device unless ``global``. Availability
comes from ``--rate-limit-resource=<name>:<count>[:<device>]``, else the largest count any
loaded instance asks for. When several instances wait, the one with the smallest
``executions x priority`` goes first (priority 2 gets half the turns of priority 1).
Runs on the event loop thread only.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from despina.serving.digits import ascii_digits

#: A resource key: (name, device) with device None for global resources.
ResourceKey = tuple[str, int | None]


@dataclass
class Needs:
    """What one instance needs to execute, and its share of turns."""

    resources: dict[ResourceKey, int]
    priority: int = 1
    executions: int = field(default=0, compare=False)


def parse_resource_flags(values: Sequence[str] | None) -> dict[ResourceKey, int]:
    """``name:count[:device]`` values -> available counts; ValueError for bad syntax."""
    limits: dict[ResourceKey, int] = {}
    for value in values or []:
        parts = value.split(":")
        if (
            len(parts) not in (2, 3)
            or not ascii_digits(parts[1])
            or (len(parts) == 3 and not ascii_digits(parts[2]))
        ):
            raise ValueError(
                f"--rate-limit-resource: expected <name>:<count>[:<device>], got '{value}'"
            )
        device = int(parts[2]) if len(parts) == 3 else None
        limits[(parts[0].lower(), device)] = int(parts[1])
    return limits


class RateLimiter:
    """Shared resource counts of one server."""

    def __init__(self, configured: dict[ResourceKey, int]) -> None:
        self._configured = configured
        self._available: dict[ResourceKey, int] = {}
        self._capacity: dict[ResourceKey, int] = {}
        self._waiting: list[tuple[int, int, Needs, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def register(self, needs: Needs) -> None:
        """Account for an instance's needs (sets default availability as Triton does)."""
        for key, count in needs.resources.items():
            configured = self._configured.get(key, self._configured.get((key[0], None)))
            capacity = (
                configured if configured is not None else max(count, self._capacity.get(key, 0))
            )
            grown = capacity - self._capacity.get(key, 0)
            self._capacity[key] = capacity
            self._available[key] = self._available.get(key, 0) + grown

    def _fits(self, needs: Needs) -> bool:
        return all(self._available.get(k, 0) >= n for k, n in needs.resources.items())

    @contextlib.asynccontextmanager
    async def slot(self, needs: Needs) -> AsyncIterator[None]:
        """Hold the instance's resources for one execution."""
        if not self._waiting and self._fits(needs):
            self._take(needs)
        else:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(
                self._waiting,
                (needs.executions * max(needs.priority, 1), next(self._order), needs, future),
            )
            self._wake()
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self._give_back(needs)
                raise
        try:
            yield
        finally:
            self._give_back(needs)

    def _take(self, needs: Needs) -> None:
        for key, count in needs.resources.items():
            self._available[key] -= count
        needs.executions += 1

    def _give_back(self, needs: Needs) -> None:
        for key, count in needs.resources.items():
            self._available[key] += count
        self._wake()

    def _wake(self) -> None:
        """Grant waiters in turn order while the head's resources are available."""
        while self._waiting:
            _, _, needs, future = self._waiting[0]
            if future.done():
                heapq.heappop(self._waiting)
                continue
            if not self._fits(needs):
                return
            heapq.heappop(self._waiting)
            self._take(needs)
            future.set_result(None)
