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
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

from despina.errors import InvalidArgument
from despina.serving.digits import ascii_digits

log = logging.getLogger("despina.rate_limiter")

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
        #: The needs of every instance loaded, registered and not yet released.
        self._registered: list[Needs] = []
        self._waiting: list[tuple[int, int, Needs, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self._wake_pending = False
        #: Futures of :meth:`until_fits` callers, resolved at each :meth:`_wake`.
        self._watchers: list[asyncio.Future[None]] = []

    def register(self, needs: Needs) -> None:
        """Account for a new instance's needs: a resource not given with
        ``--rate-limit-resource`` is as available as the most any instance loaded asks
        for (Triton's default). InvalidArgument (Triton's texts), changing nothing, when a
        resource is global here and device-specific in an instance registered (or the
        other way round), or, with resources given, when one the instance needs is given
        less, or not at all."""
        for name, device in needs.resources:
            if any(
                other == name and (on is None) != (device is None)
                for one in self._registered
                for other, on in one.resources
            ):
                raise InvalidArgument(
                    f'Resource "{name}" is present as both global and device-specific '
                    "resource in the model configuration."
                )
        if self._configured:
            for (name, device), count in needs.resources.items():
                limit = self._explicit(name, device)
                if limit < count:
                    raise InvalidArgument(
                        f'Resource count for "{name}" is limited to {limit} which will '
                        "prevent scheduling of one or more model instances, the minimum "
                        f"required count is {count}"
                    )
        self._registered.append(needs)
        self._resize(needs.resources)

    def release(self, needs: Needs) -> None:
        """Forget an instance unloaded (or removed by an instance update): what it alone
        asked for most is no longer available. An execution it still runs gives its
        resources back as usual."""
        if any(one is needs for one in self._registered):
            self._registered = [one for one in self._registered if one is not needs]
            self._resize(needs.resources)

    def _explicit(self, name: str, device: int | None) -> int:
        """The count ``--rate-limit-resource`` gives resource ``name`` on ``device`` (a
        global resource: the most given on any device), 0 when not given. The flag's
        names are lower case (Triton lowers the flag); a config's keep their case."""
        counts = [
            count
            for (given, on), count in self._configured.items()
            if given == name.lower() and (device is None or on in (device, None))
        ]
        return max(counts, default=0)

    def _resize(self, keys: Mapping[ResourceKey, int]) -> None:
        """Set the capacity of ``keys`` from the instances registered (or the counts
        given), keeping what executions hold taken; log the map at verbose level, as
        Triton does."""
        for key in keys:
            if self._configured:
                capacity = self._explicit(*key)
            else:
                wanted = (one.resources.get(key, 0) for one in self._registered)
                capacity = max(wanted, default=0)
            grown = capacity - self._capacity.get(key, 0)
            self._capacity[key] = capacity
            self._available[key] = self._available.get(key, 0) + grown
        if log.isEnabledFor(logging.DEBUG):
            rows = [
                f"Device: {'GLOBAL' if device is None else device}\\t\\tResource: {name}"
                f"\\t Count: {count}"
                for (name, device), count in sorted(
                    self._capacity.items(), key=lambda item: (str(item[0][1]), item[0][0])
                )
            ]
            log.debug("Max Resource Map===> %s", "; ".join(rows))
        self._wake()

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

    async def until_fits(self, needs: Needs) -> None:
        """Return once the instance's resources are available (nothing is taken): a
        batcher forms its batch only then, as Triton's waits for a free payload slot."""
        while not self._fits(needs):
            watcher: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._watchers.append(watcher)
            await watcher

    def _take(self, needs: Needs) -> None:
        for key, count in needs.resources.items():
            self._available[key] -= count
        needs.executions += 1

    def _give_back(self, needs: Needs) -> None:
        """Return an execution's resources; the waiters are granted on the loop's next
        turn, so that the instance that just finished, whose scheduler asks again at once
        when it has more requests, waits in turn order too (Triton's schedulers stage
        their next batch with the limiter while an execution runs)."""
        for key, count in needs.resources.items():
            self._available[key] += count
        if not self._wake_pending:
            self._wake_pending = True
            asyncio.get_running_loop().call_soon(self._wake_soon)

    def _wake_soon(self) -> None:
        self._wake_pending = False
        self._wake()

    def _wake(self) -> None:
        """Grant waiters in turn order while the head's resources are available; the
        :meth:`until_fits` callers look again (on a later turn, after the grants)."""
        watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            if not watcher.done():
                watcher.set_result(None)
        while self._waiting:
            *_, needs, future = self._waiting[0]
            if future.done():
                heapq.heappop(self._waiting)
                continue
            if not self._fits(needs):
                return
            heapq.heappop(self._waiting)
            self._take(needs)
            future.set_result(None)
