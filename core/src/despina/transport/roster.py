"""Which connections a listener keeps: its connection limit and handshake timeout shed
the connections that hold a place without using it, not the clients that come.

* A connection that has not completed its handshake (HTTP/2: the connection preface;
  HTTP/1.1: a first request head) within ``handshake_timeout`` seconds is closed.
* At the ``limit``, a new connection makes room: the oldest connection still in its
  handshake leaves, else the connection idle the longest (nothing in flight, nothing
  buffered either way, nothing heard from its client for the longest time), which
  leaves cleanly (:meth:`Member.evict`). Only when every connection is busy is the new
  one refused (its owner closes it at once).

Cost: per connection, two set operations and one ordered-dict entry while it shakes
hands; per request, the member's one timestamp store (:attr:`Member.heard`). The
handshake deadlines are checked by one timer per roster, at the oldest deadline
(expired connections close :data:`EXPIRE_BATCH` per loop step). The search for the
longest-idle connection scans the connections, only at the limit.
Counts of what was shed are logged at most once per :data:`REPORT_WINDOW`.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import logging
from typing import Generic, Protocol, TypeVar

#: Seconds between two reports of the connections shed.
REPORT_WINDOW = 10.0
#: Connections closed for their handshake timeout per step of the event loop.
EXPIRE_BATCH = 64


class Member(Protocol):
    """A connection, as the roster sees it."""

    #: The loop's time when the client last sent something (or connected).
    heard: float

    def idle(self) -> bool:
        """Nothing in flight and nothing buffered either way: leaving loses no request."""

    def evict(self) -> None:
        """Leave to make room: close now if the handshake is not complete, else cleanly
        (a request the client sends meanwhile is still answered)."""


M = TypeVar("M", bound=Member)


class Roster(Generic[M]):
    """The connections counted against one listener's limit; ``label`` and ``flag``
    name them and the limit's flag in the log."""

    def __init__(
        self, label: str, flag: str, limit: int, handshake_timeout: float, log: logging.Logger
    ) -> None:
        self.label = label
        self.flag = flag
        #: Connections served at once; 0: any number.
        self.limit = limit
        #: Seconds a connection may take for its handshake; 0: any time.
        self.handshake_timeout = handshake_timeout
        self.log = log
        self.counted: set[M] = set()
        #: Connections in their handshake -> their deadline, oldest first.
        self.pending: collections.OrderedDict[M, float] = collections.OrderedDict()
        self._sweep: asyncio.TimerHandle | None = None
        self._refused = self._evicted = self._expired = 0
        self._reported = float("-inf")

    def admit(self, member: M) -> bool:
        """Count a new connection in, making room at the limit; False when every
        connection is busy (the caller closes ``member``)."""
        if self.limit and len(self.counted) >= self.limit and not self.make_room(1):
            self._refused += 1
            self._report()
            return False
        self.counted.add(member)
        if self.handshake_timeout:
            loop = asyncio.get_running_loop()
            self.pending[member] = loop.time() + self.handshake_timeout
            if self._sweep is None:
                self._sweep = loop.call_at(self.pending[member], self._expire)
        return True

    def handshaken(self, member: M) -> None:
        """``member`` completed its handshake."""
        self.pending.pop(member, None)

    def leave(self, member: M) -> None:
        """``member`` closed (or was evicted)."""
        self.counted.discard(member)
        self.pending.pop(member, None)

    def make_room(self, count: int) -> int:
        """Evict up to ``count`` connections: those in their handshake first (oldest
        first), then the idle ones (idle the longest first); how many left."""
        evicted: list[M] = []
        while self.pending and len(evicted) < count:
            evicted.append(self.pending.popitem(last=False)[0])
        if len(evicted) < count:
            idle = (m for m in self.counted if m not in evicted and m.idle())
            evicted += heapq.nsmallest(count - len(evicted), idle, key=_heard)
        for member in evicted:
            self.leave(member)
            member.evict()
        if evicted:
            self._evicted += len(evicted)
            self._report()
        return len(evicted)

    def _expire(self) -> None:
        """Close the connections whose handshake deadline passed, EXPIRE_BATCH per loop
        step (a flood's thousands would hold the loop up); wait for the next deadline."""
        self._sweep = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        for _ in range(EXPIRE_BATCH):
            if not self.pending:
                break
            member, deadline = next(iter(self.pending.items()))
            if deadline > now:
                self._sweep = loop.call_at(deadline, self._expire)
                break
            self.leave(member)
            member.evict()
            self._expired += 1
        else:
            self._sweep = loop.call_at(now, self._expire)  # after the loop's other work
        self._report()

    def close(self) -> None:
        """The listener stops: no more handshake deadlines are checked."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None

    def _report(self) -> None:
        now = asyncio.get_running_loop().time()
        if now - self._reported < REPORT_WINDOW:
            return
        parts = []
        if self._expired:
            parts.append(
                f"{self._expired} closed without a handshake within {self.handshake_timeout:g} s"
            )
        if self._evicted:
            parts.append(f"{self._evicted} closed to admit new ones")
        if self._refused:
            parts.append(f"{self._refused} refused, every connection busy")
        if not parts:
            return
        self.log.warning(
            "%s connections since the last report: %s (%d open, %s=%d)",
            self.label,
            "; ".join(parts),
            len(self.counted),
            self.flag,
            self.limit,
        )
        self._refused = self._evicted = self._expired = 0
        self._reported = now


def _heard(member: Member) -> float:
    return member.heard
