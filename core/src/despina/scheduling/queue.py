"""A request queue with priority levels and Triton's queue policies.

Level 1 is the highest priority (Triton's convention); a request with priority 0 (or out of
range) goes to the default level. Each level has a :class:`QueuePolicy`: a size limit (a
full level refuses with UNAVAILABLE "Exceeds maximum queue size"), a default timeout that
requests may override, and what happens on timeout: REJECT answers the request with an
error as its timeout passes (while every instance is busy too, as Triton's batcher), DELAY
moves it behind every live request of every level when it reaches the head.
All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from despina.errors import Cancelled, DespinaError, Unavailable
from despina.inference.request import InferenceRequest

Rejecter = Callable[[InferenceRequest, DespinaError], None]
#: Triton's text for a request refused by a full queue (UNAVAILABLE).
QUEUE_FULL = "Exceeds maximum queue size"
#: A caller of :meth:`RequestQueue.get` waiting for a request: its future, its ``defer``
#: and its ``owner``.
_Getter = tuple[asyncio.Future[None], Callable[[], bool] | None, Hashable]


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's ``ModelQueuePolicy`` for one priority level."""

    max_size: int = 0
    default_timeout_us: int = 0
    allow_timeout_override: bool = False
    delay_on_timeout: bool = False

    def deadline_ns(self, request: InferenceRequest) -> int:
        """Monotonic deadline of a request at this level, 0 for none."""
        timeout_us = self.default_timeout_us
        if request.timeout_us and (self.allow_timeout_override or not timeout_us):
            timeout_us = request.timeout_us
        return request.received_ns + timeout_us * 1000 if timeout_us else 0


class RequestQueue:
    """FIFO per priority level; ``get`` returns the oldest live request of the best level."""

    def __init__(
        self,
        reject: Rejecter,
        policies: Sequence[QueuePolicy] = (QueuePolicy(),),
        default_level: int = 1,
    ) -> None:
        self._policies = list(policies) or [QueuePolicy()]
        self._levels: list[deque[tuple[int, InferenceRequest]]] = [deque() for _ in self._policies]
        self._delayed: deque[InferenceRequest] = deque()
        self._default_level = min(max(default_level, 1), len(self._levels))
        self._reject = reject
        self._size = 0
        self._ready = asyncio.Event()  # for wait(); get() callers are woken one by one
        self._getters: deque[_Getter] = deque()
        #: Owners with a caller woken and not yet run (it takes a request when it runs).
        self._claimed: Counter[Hashable] = Counter()
        #: The loop of the first get() or timer, kept: asking for it costs a getpid() call.
        self._loop: asyncio.AbstractEventLoop | None = None
        #: The timer of :meth:`_expire` and the deadline it is set for.
        self._expiry: asyncio.TimerHandle | None = None
        self._expiry_ns = 0

    def __len__(self) -> int:
        return self._size

    def level_of(self, request: InferenceRequest) -> int:
        """The 1-based level a request is queued at."""
        return (
            request.priority if 0 < request.priority <= len(self._levels) else self._default_level
        )

    def put(self, request: InferenceRequest) -> None:
        """Queue a request; raise Unavailable when its level is full."""
        level = self.level_of(request)
        policy = self._policies[level - 1]
        if policy.max_size and len(self._levels[level - 1]) >= policy.max_size:
            raise Unavailable(QUEUE_FULL)
        deadline = policy.deadline_ns(request)
        self._levels[level - 1].append((deadline, request))
        self._size += 1
        if deadline and not policy.delay_on_timeout:
            self._watch(deadline)
        self._ready.set()
        self._wake_getter()

    def _watch(self, deadline_ns: int) -> None:
        """Have :meth:`_expire` run once ``deadline_ns`` (monotonic) passes, unless it runs
        no later already."""
        if self._expiry is not None:
            if self._expiry_ns <= deadline_ns:
                return
            self._expiry.cancel()
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        delay_s = max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9)
        self._expiry = self._loop.call_later(delay_s, self._expire)
        self._expiry_ns = deadline_ns

    def _expire(self) -> None:
        """Answer every queued request of a REJECT level whose timeout passed with
        "Request timeout expired"; watch the next deadline."""
        self._expiry = None
        now = time.monotonic_ns()
        expired: list[InferenceRequest] = []
        for index, level in enumerate(self._levels):
            if not self._policies[index].delay_on_timeout:
                kept = [entry for entry in level if not 0 < entry[0] < now]
                expired += [request for deadline, request in level if 0 < deadline < now]
                level.clear()
                level.extend(kept)
        self._size -= len(expired)
        if not self._size:
            self._ready.clear()
        for request in expired:
            self._reject(request, Unavailable("Request timeout expired"))
        upcoming = [
            deadline
            for index, level in enumerate(self._levels)
            if not self._policies[index].delay_on_timeout
            for deadline, _ in level
            if deadline
        ]
        if upcoming:
            self._watch(min(upcoming))

    def pop_nowait(self) -> InferenceRequest | None:
        """The next live request, or None; expired and cancelled ones are dealt with."""
        while self._size:
            request = self._pop_head()
            if request is not None:
                return request
        self._ready.clear()
        return None

    def _pop_head(self) -> InferenceRequest | None:
        """Pop one entry; return it if it may run now, else handle it and return None."""
        for index, level in enumerate(self._levels):
            if not level:
                continue
            deadline, request = level.popleft()
            if request.cancelled:
                self._size -= 1
                self._reject(request, Cancelled("Request was cancelled"))
                return None
            if deadline and time.monotonic_ns() > deadline:
                if self._policies[index].delay_on_timeout:
                    self._delayed.append(request)
                    return None
                self._size -= 1
                self._reject(request, Unavailable("Request timeout expired"))
                return None
            self._size -= 1
            return request
        self._size -= 1
        return self._delayed.popleft()

    def push_front(self, request: InferenceRequest) -> None:
        """Put a popped request back at the head of its level; it was found live, so its
        queue timeout no longer applies."""
        self._levels[self.level_of(request) - 1].appendleft((0, request))
        self._size += 1
        self._ready.set()
        self._wake_getter()

    def _wake_getter(self) -> None:
        """Wake one caller of :meth:`get` for a request just queued (waking them all
        would run every idle worker to find one request): the first that would not
        defer (an idle instance's) and whose owner has no caller woken already, else the
        first whose owner has none, else the first."""
        first = spare = idle = None
        for getter in self._getters:
            future, defer, owner = getter
            if future.done():  # cancelled: its caller removes it
                continue
            first = first or getter
            if owner is not None and owner in self._claimed:
                continue
            if defer is None or not defer():
                idle = getter
                break
            spare = spare or getter
        chosen = idle or spare or first
        if chosen is None:
            return
        self._getters.remove(chosen)
        if chosen[2] is not None:
            self._claimed[chosen[2]] += 1
        chosen[0].set_result(None)

    def _unclaim(self, owner: Hashable) -> None:
        if owner is not None:
            self._claimed[owner] -= 1
            if not self._claimed[owner]:
                del self._claimed[owner]

    async def get(
        self, defer: Callable[[], bool] | None = None, owner: Hashable = None
    ) -> InferenceRequest:
        """Wait for and return the next live request. Each queued request wakes one
        caller (:meth:`_wake_getter`); ``owner`` (an instance) keeps a second request from
        waking a second caller of an owner whose woken caller has not run yet. A caller
        for which ``defer()`` holds yields one loop turn before taking a queued request,
        so the caller woken by its arrival (an idle instance's) takes it first."""
        while True:
            if defer is not None and self._size and defer():
                await asyncio.sleep(0)
            request = self.pop_nowait()
            if request is not None:
                return request
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            getter: _Getter = (self._loop.create_future(), defer, owner)
            self._getters.append(getter)
            try:
                await getter[0]
            except asyncio.CancelledError:
                if getter[0].cancelled():
                    with contextlib.suppress(ValueError):
                        self._getters.remove(getter)
                else:  # woken for a request it will not take: pass it on
                    self._unclaim(owner)
                    if self._size:
                        self._wake_getter()
                raise
            self._unclaim(owner)

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a request to be queued; True if one is."""
        if self._size:
            return True
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    def drain(self) -> list[InferenceRequest]:
        """Remove and return every queued request."""
        drained = [request for level in self._levels for _, request in level]
        drained.extend(self._delayed)
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        for level in self._levels:
            level.clear()
        self._delayed.clear()
        self._size = 0
        self._ready.clear()
        return drained
