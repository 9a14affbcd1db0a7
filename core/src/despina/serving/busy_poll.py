"""An event loop that polls briefly before sleeping (``--busy-poll-us``).

When the loop runs out of work it would block in ``epoll_wait`` and the next packet
would have to wake it: on virtual machines that wake-up (an idle vCPU halted and an
interrupt delivered to it) is one of the largest costs of a request at low
concurrency. A :class:`BusyPollSelector` first polls without blocking for up to
``busy_poll_us``, yielding the CPU between polls, and only then blocks. A server
without traffic stops spinning that long after its last event, so the CPU is spent
only while requests keep coming. The same trade-off as Linux's ``SO_BUSY_POLL``.

Off by default: on the shared 2-core VM a spinning loop (300 us) doubled the server's CPU
per request at concurrency 1 and bought no throughput, because the cycles it spins are
the ones the client and the model process need (``bench/results/perf_wave.md``). It pays
only with cores to spare beside the server, its clients and its model processes.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import time
from typing import Any

from despina.serving.event_loop import loop_class


class BusyPollSelector(selectors.DefaultSelector):
    """The platform's default selector, polled for ``poll_s`` before a blocking wait."""

    def __init__(self, poll_s: float) -> None:
        super().__init__()
        self.poll_s = poll_s

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return super().select(timeout)
        start = time.perf_counter()
        deadline = start + (self.poll_s if timeout is None else min(self.poll_s, timeout))
        while True:
            ready: list[tuple[selectors.SelectorKey, int]] = super().select(0)
            if ready:
                return ready
            if time.perf_counter() >= deadline:
                break
            os.sched_yield()
        if timeout is not None:
            timeout = max(0.0, timeout - (time.perf_counter() - start))
        return super().select(timeout)


def loop_factory(busy_poll_us: float) -> Any:
    """A ``loop_factory`` for :class:`asyncio.Runner`: when ``busy_poll_us`` is 0 the
    serving loop of :mod:`despina.serving.event_loop` (None: asyncio's default loop),
    else a selector loop that polls."""
    if busy_poll_us <= 0:
        return loop_class()
    poll_s = busy_poll_us / 1e6

    class BusyPollEventLoop(asyncio.SelectorEventLoop):
        def __init__(self) -> None:
            super().__init__(BusyPollSelector(poll_s))

    return BusyPollEventLoop
