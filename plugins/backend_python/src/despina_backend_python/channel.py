"""Framing of control messages between the server and a model's child process.

A message is a small dict (operation, ids, shapes, shared-memory descriptors) encoded
with ``marshal`` (plain values only: loading one never runs code) behind a 4-byte
length; tensor data never travels here (see :mod:`.shm`). The child
side is blocking and thread-safe; the server side uses asyncio streams.
"""

from __future__ import annotations

import asyncio
import marshal
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

HEADER = struct.Struct("<I")


def encode(message: dict[str, Any]) -> bytes:
    data = marshal.dumps(message)
    return HEADER.pack(len(data)) + data


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next message, or None at end of stream (the child exited)."""
    try:
        header = await reader.readexactly(HEADER.size)
        data = await reader.readexactly(HEADER.unpack(header)[0])
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    message: dict[str, Any] = marshal.loads(data)
    return message


class BlockingChannel:
    """The child's end: ``send`` from any thread, ``recv`` from one reader thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._lock = threading.Lock()
        self._file = sock.makefile("rb")

    def send(
        self, message: dict[str, Any], pack: Callable[[], dict[str, Any]] | None = None
    ) -> None:
        """Send ``message``; ``pack`` (writing tensors to shared memory) runs under the
        same lock so messages leave in the order their ring space was reserved."""
        with self._lock:
            if pack is not None:
                message = {**message, **pack()}
            self.sock.sendall(encode(message))

    def recv(self) -> dict[str, Any] | None:
        header = self._file.read(HEADER.size)
        if len(header) < HEADER.size:
            return None
        size = HEADER.unpack(header)[0]
        data = self._file.read(size)
        if len(data) < size:
            return None
        message: dict[str, Any] = marshal.loads(data)
        return message
