"""A request queue with priority levels, a size limit and queue timeouts.

Level 1 is the highest priority (Triton's convention); a request with priority 0 goes to
the default level. Requests whose timeout expires while queued are rejected when they
reach the head. All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from despina.errors import Cancelled, DespinaError, Unavailable
from despina.inference import InferenceRequest

Rejecter = Callable[[InferenceRequest, DespinaError], None]


class RequestQueue:
    """FIFO per priority level; ``get`` returns the oldest request of the best level."""

    def __init__(
        self,
        reject: Rejecter,
        levels: int = 1,
        default_level: int = 1,
        max_size: int = 0,
        default_timeout_us: int = 0,
        allow_timeout_override: bool = True,
    ) -> None:
        self._levels: list[deque[tuple[int, InferenceRequest]]] = [
            deque() for _ in range(max(levels, 1))
        ]
        self._default_level = min(max(default_level, 1), len(self._levels))
        self._max_size = max_size
        self._default_timeout_us = default_timeout_us
        self._allow_override = allow_timeout_override
        self._reject = reject
        self._size = 0
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return self._size

    def put(self, request: InferenceRequest) -> None:
        """Queue a request; raise Unavailable when the queue is full."""
        if self._max_size and self._size >= self._max_size:
            raise Unavailable("Exceeds maximum queue size")
        level = request.priority if 0 < request.priority <= len(self._levels) else 0
        if not level:
            level = self._default_level
        timeout_us = self._default_timeout_us
        if request.timeout_us and (self._allow_override or not timeout_us):
            timeout_us = request.timeout_us
        deadline = request.received_ns + timeout_us * 1000 if timeout_us else 0
        self._levels[level - 1].append((deadline, request))
        self._size += 1
        self._ready.set()

    def pop_nowait(self) -> InferenceRequest | None:
        """The next live request, or None; expired and cancelled ones are answered."""
        while self._size:
            for level in self._levels:
                if level:
                    deadline, request = level.popleft()
                    self._size -= 1
                    break
            if request.cancelled:
                self._reject(request, Cancelled("Request was cancelled"))
            elif deadline and time.monotonic_ns() > deadline:
                self._reject(request, Unavailable("Request timeout expired"))
            else:
                return request
        self._ready.clear()
        return None

    def peek(self) -> InferenceRequest | None:
        """The request ``pop_nowait`` would return next (after dropping dead ones)."""
        request = self.pop_nowait()
        if request is not None:
            self.push_front(request)
        return request

    def push_front(self, request: InferenceRequest) -> None:
        """Put a popped request back at the head of its level (its queue timeout no longer
        applies: it was already found live)."""
        level = request.priority if 0 < request.priority <= len(self._levels) else 0
        self._levels[(level or self._default_level) - 1].appendleft((0, request))
        self._size += 1
        self._ready.set()

    async def get(self) -> InferenceRequest:
        """Wait for and return the next live request."""
        while True:
            request = self.pop_nowait()
            if request is not None:
                return request
            await self._ready.wait()

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
        for level in self._levels:
            level.clear()
        self._size = 0
        self._ready.clear()
        return drained
