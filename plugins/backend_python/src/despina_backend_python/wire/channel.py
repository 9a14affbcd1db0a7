"""Framing of control messages between the server and a model's child process.

A message is a small dict (operation, ids, shapes, shared-memory descriptors) encoded
with ``marshal`` (plain values only: loading one never runs code) behind a 4-byte
length; tensor data travels here only as the bytes of small fixed-size tensors, the
rest through shared memory (see :mod:`.shm`). The child side is blocking
and thread-safe; the server side parses what its asyncio protocol receives
(:class:`FrameBuffer`).
"""

from __future__ import annotations

import marshal
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

HEADER = struct.Struct("<I")


def encode(message: dict[str, Any]) -> bytes:
    data = marshal.dumps(message)
    return HEADER.pack(len(data)) + data


class FrameBuffer:
    """The server side's parser: bytes in (as they arrive), whole messages out."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The messages completed by ``data``, in order."""
        buffer = self._buffer
        if (  # the usual read: one whole message
            not buffer
            and len(data) > HEADER.size
            and HEADER.unpack_from(data)[0] == len(data) - HEADER.size
        ):
            return [marshal.loads(memoryview(data)[HEADER.size :])]
        buffer += data
        messages: list[dict[str, Any]] = []
        at, end = 0, len(buffer)
        while end - at >= HEADER.size:
            size = HEADER.unpack_from(buffer, at)[0]
            if end - at - HEADER.size < size:
                break
            start = at + HEADER.size
            messages.append(marshal.loads(buffer[start : start + size]))
            at = start + size
        del buffer[:at]
        return messages


#: What :meth:`BlockingChannel._next` returns when :meth:`BlockingChannel.wake` cut a
#: wait short.
_WOKEN: dict[str, Any] = {}


class BlockingChannel:
    """The child's end: ``send`` from any thread; messages are read by whichever thread
    is waiting for one (:meth:`pump_until`), so no reader thread sits between the
    socket and the thread that runs the model.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()
        self._buffer = bytearray()
        #: How long a read polls (yielding the CPU) before it blocks; see :meth:`_wait`
        #: (the stub sets it for each execute message).
        self.poll_s = 0.0
        self._turn = threading.Condition()
        self._reading = False
        self._wake_r, self._wake_w = os.pipe()

    def send(
        self, message: dict[str, Any], pack: Callable[[], dict[str, Any]] | None = None
    ) -> None:
        """Send ``message``; ``pack`` (writing tensors to shared memory) runs under the
        same lock so messages leave in the order their ring space was reserved."""
        with self._lock:
            if pack is not None:
                message = {**message, **pack()}
            self.sock.sendall(encode(message))

    def wake(self) -> None:
        """Make :meth:`pump_until` callers re-check their condition now (from any thread;
        for conditions that something other than a message makes true)."""
        os.write(self._wake_w, b"\0")

    def recv(self) -> dict[str, Any] | None:
        """The next message (None at end of stream); only one thread may call it at a
        time — outside start-up, use :meth:`pump_until`."""
        while (message := self._next()) is _WOKEN:
            pass
        return message

    def _next(self) -> dict[str, Any] | None:
        """The next message, None at end of stream, or _WOKEN (nothing consumed)."""
        filled = self._fill(HEADER.size)
        if filled is not True:
            return filled
        size = HEADER.size + HEADER.unpack_from(self._buffer)[0]
        filled = self._fill(size)
        if filled is not True:
            return filled
        message: dict[str, Any] = marshal.loads(self._buffer[HEADER.size : size])
        del self._buffer[:size]
        return message

    def _fill(self, size: int) -> dict[str, Any] | Literal[True] | None:
        """Read until the buffer holds ``size`` bytes: True; None at end of stream;
        _WOKEN when :meth:`wake` was called."""
        buffer = self._buffer
        while len(buffer) < size:
            if self._wake_r in self._wait():
                os.read(self._wake_r, 4096)
                return _WOKEN
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                return None
            buffer += chunk
        return True

    def _wait(self) -> list[Any]:
        """Block until the socket or the wake pipe is readable. Polls for ``poll_s``
        first, yielding the CPU between polls: a message that comes soon is picked up
        without the sender paying to wake a sleeping process (the largest cost of a
        round trip on virtual machines)."""
        sources: list[Any] = [self.sock, self._wake_r]
        if self.poll_s > 0:
            deadline = time.perf_counter() + self.poll_s
            while time.perf_counter() < deadline:
                ready: list[Any] = select.select(sources, (), (), 0)[0]
                if ready:
                    return ready
                os.sched_yield()
        return list(select.select(sources, (), ())[0])

    def pump_until(
        self, done: Callable[[], bool], route: Callable[[dict[str, Any] | None], None]
    ) -> None:
        """Return once ``done()``; meanwhile, whenever no other thread is reading, read
        the next message and ``route`` it (None at end of stream). One reader at a time,
        and a message is routed before the next is read: messages are handled in order.
        A condition made true by anything but a message needs :meth:`wake`.
        """
        while True:
            with self._turn:
                while self._reading and not done():
                    self._turn.wait()
                if done():
                    return
                self._reading = True
            try:
                message = self._next()
                if message is not _WOKEN:
                    route(message)
            finally:
                with self._turn:
                    self._reading = False
                    self._turn.notify_all()
