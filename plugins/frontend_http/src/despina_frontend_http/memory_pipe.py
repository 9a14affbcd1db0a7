"""An in-process, in-memory stream connection: two :class:`asyncio.Transport` ends joined
to each other, with a socket's semantics for the protocols on them.

:func:`connect` makes the pair and calls both protocols' ``connection_made`` at once.
What one end writes is appended to the other end's inbound buffer and handed to that
protocol's ``data_received`` from a loop callback (never from within ``write``), in order,
at most :data:`CHUNK` bytes a callback, and not while its reading is paused. An end's
write buffer is what its peer has not consumed yet; its protocol gets ``pause_writing``
past the high-water mark and ``resume_writing`` once the peer read it down to the low one.

``write_eof`` gives the peer ``eof_received`` after the bytes before it (the peer closes
when that returns a false value). ``close`` drops what the end had not read, stops its
writing and sends the peer that EOF; ``abort`` also drops what the peer had not read and
closes the peer with :class:`ConnectionResetError`. Each end's protocol gets
``connection_lost`` exactly once, from a loop callback. What an end writes once its peer
closed is dropped, as the write buffer of a connection whose peer went away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: Most bytes one ``data_received`` call gets.
CHUNK = 1 << 18
#: Default write-buffer limits (asyncio's).
HIGH_WATER = 1 << 16


class MemoryTransport(asyncio.Transport):
    """One end of a pipe made by :func:`connect`."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol: asyncio.Protocol,
        extra: Mapping[str, Any],
    ) -> None:
        super().__init__(dict(extra))
        self._loop = loop
        self._protocol = protocol
        self._peer: MemoryTransport | None = None
        self._inbound = bytearray()
        self._eof_due = False  # the peer's EOF, due after _inbound
        self._eof_written = False
        self._delivery_scheduled = False
        self._reading_paused = False
        self._writing_paused = False
        self._high = HIGH_WATER
        self._low = HIGH_WATER // 4
        self._closing = False
        self._lost = False

    # --- writing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._eof_written:
            raise RuntimeError("Cannot call write() after write_eof()")
        peer = self._peer
        if self._closing or not data or peer is None or peer._closing:
            return
        peer._inbound += data
        peer._schedule_delivery()
        if not self._writing_paused and len(peer._inbound) > self._high:
            self._writing_paused = True
            self._call_protocol(self._protocol.pause_writing)

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._closing or self._eof_written:
            return
        self._eof_written = True
        if self._peer is not None:
            self._peer._receive_eof()

    def get_write_buffer_size(self) -> int:
        peer = self._peer
        return 0 if peer is None or peer._closing else len(peer._inbound)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        size = self.get_write_buffer_size()
        if not self._writing_paused and size > high:
            self._writing_paused = True
            self._call_protocol(self._protocol.pause_writing)
        else:
            self._maybe_resume_writing()

    def _maybe_resume_writing(self) -> None:
        """The peer consumed (or dropped) bytes: resume writing at the low-water mark."""
        if self._writing_paused and self.get_write_buffer_size() <= self._low:
            self._writing_paused = False
            if not self._closing:
                self._call_protocol(self._protocol.resume_writing)

    # --- reading

    def is_reading(self) -> bool:
        return not self._reading_paused and not self._closing

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self) -> None:
        if self._reading_paused:
            self._reading_paused = False
            self._schedule_delivery()

    def _receive_eof(self) -> None:
        if not self._closing:
            self._eof_due = True
            self._schedule_delivery()

    def _schedule_delivery(self) -> None:
        if not self._delivery_scheduled and not self._reading_paused and not self._closing:
            self._delivery_scheduled = True
            self._loop.call_soon(self._deliver)

    def _deliver(self) -> None:
        """Hand the protocol one chunk (then the EOF after the last), then come again
        while there is more and reading is not paused."""
        self._delivery_scheduled = False
        if self._reading_paused or self._closing:
            return
        if self._inbound:
            data = bytes(self._inbound[:CHUNK])
            del self._inbound[:CHUNK]
            if self._peer is not None:
                self._peer._maybe_resume_writing()
            try:
                self._protocol.data_received(data)
            except Exception as exc:  # noqa: BLE001 - as asyncio's transports: abort
                self._fatal(exc, "protocol.data_received() call failed")
                return
            if self._inbound or self._eof_due:
                self._schedule_delivery()
        elif self._eof_due:
            self._eof_due = False
            try:
                keep_open = self._protocol.eof_received()
            except Exception as exc:  # noqa: BLE001 - as asyncio's transports: abort
                self._fatal(exc, "protocol.eof_received() call failed")
                return
            if not keep_open:
                self.close()

    # --- closing

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._shut(None)
        peer = self._peer
        if peer is not None and not self._eof_written:
            peer._receive_eof()

    def abort(self) -> None:
        if self._closing:
            return
        self._shut(None)
        peer = self._peer
        if peer is not None and not peer._closing:
            peer._shut(ConnectionResetError("the peer aborted the connection"))

    def _shut(self, exc: Exception | None) -> None:
        """Close this end: what it had not read is dropped, the peer's writes with it."""
        self._closing = True
        self._inbound.clear()
        self._eof_due = False
        if self._peer is not None:
            self._peer._maybe_resume_writing()
        self._loop.call_soon(self._connection_lost, exc)

    def _connection_lost(self, exc: Exception | None) -> None:
        if not self._lost:
            self._lost = True
            self._protocol.connection_lost(exc)

    def _fatal(self, exc: Exception, message: str) -> None:
        self._loop.call_exception_handler(
            {"message": message, "exception": exc, "transport": self, "protocol": self._protocol}
        )
        self.abort()

    def _call_protocol(self, callback: Callable[[], None]) -> None:
        """``pause_writing``/``resume_writing``, its failure reported as asyncio does."""
        try:
            callback()
        except Exception as exc:  # noqa: BLE001 - reported, the connection goes on
            self._loop.call_exception_handler(
                {
                    "message": f"protocol.{callback.__name__}() failed",
                    "exception": exc,
                    "transport": self,
                    "protocol": self._protocol,
                }
            )

    # --- the protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._protocol = protocol


def connect(
    a: asyncio.Protocol,
    b: asyncio.Protocol,
    a_extra: Mapping[str, Any] | None = None,
    b_extra: Mapping[str, Any] | None = None,
) -> tuple[MemoryTransport, MemoryTransport]:
    """Join ``a`` and ``b`` (on the running loop); their transports, whose
    ``get_extra_info`` answers from ``a_extra`` / ``b_extra`` (``socket`` is None)."""
    loop = asyncio.get_running_loop()
    ta = MemoryTransport(loop, a, a_extra or {})
    tb = MemoryTransport(loop, b, b_extra or {})
    ta._peer, tb._peer = tb, ta
    a.connection_made(ta)
    b.connection_made(tb)
    return ta, tb
