"""Cancelling a request whose client went away, for frontends whose protocol library
reports a disconnect only when asked (aiohttp: the transport closing)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from despina.inference.request import InferenceRequest

#: Seconds between checks that a waiting client is still connected.
DISCONNECT_POLL_S = 0.1


class DisconnectWatch:
    """Once ``alive()`` turns false, cancels ``request`` (:meth:`InferenceRequest.cancel`)
    and the task that created the watch (it stops waiting for a model that may never
    answer a cancelled request); checks every :data:`DISCONNECT_POLL_S` until :meth:`close`."""

    __slots__ = ("alive", "handle", "loop", "request", "task")

    def __init__(self, request: InferenceRequest, alive: Callable[[], bool]) -> None:
        self.request = request
        self.alive = alive
        self.task = asyncio.current_task()
        self.loop = asyncio.get_running_loop()
        self.handle = self.loop.call_later(DISCONNECT_POLL_S, self._check)

    def _check(self) -> None:
        if self.alive():
            self.handle = self.loop.call_later(DISCONNECT_POLL_S, self._check)
            return
        self.request.cancel()
        if self.task is not None:
            self.task.cancel()

    def close(self) -> None:
        """Stop watching (the request ended)."""
        self.handle.cancel()
