"""The frame codec between a frontend's worker processes and the server process.

A frame is a 13-byte little-endian header, ``<u8 kind><u32 call id><i32 aux><u32 payload
length>``, then the payload. What ``kind`` and ``aux`` mean is the protocol's (a method
index, a status code, ...), except the pool's own kinds (see
:mod:`despina.transport.workers`). :func:`encode_frame` gives a frame as parts for
``writelines`` (the payload is never joined); :class:`FrameDecoder` turns the bytes
``data_received`` gets into frames whose payloads are views (no copy when a frame arrives
in one piece); :class:`FrameLink` is an asyncio protocol doing both on one connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

#: kind, call id, aux, payload length.
HEADER = struct.Struct("<BIiI")
#: The largest payload a decoder accepts by default: gRPC's largest message (2 GiB - 1).
MAX_PAYLOAD = 2**31 - 1

#: A part of a frame: bytes-like with 1-byte items (``len`` is its size in bytes).
Part = bytes | bytearray | memoryview

log = logging.getLogger("despina.transport")


class Frame(NamedTuple):
    """One decoded frame; ``payload`` is a read-only view valid as long as it is held."""

    kind: int
    call: int
    aux: int
    payload: memoryview


class FrameTooLarge(ValueError):
    """A frame header announced a payload above the decoder's bound; ``frames`` are the
    complete frames before it."""

    def __init__(self, message: str, frames: list[Frame]) -> None:
        super().__init__(message)
        self.frames = frames


def encode_frame(kind: int, call: int, aux: int = 0, parts: Sequence[Part] = ()) -> list[Part]:
    """The frame carrying ``parts`` as its payload: the header, then ``parts`` as given."""
    return [HEADER.pack(kind, call, aux, sum(map(len, parts))), *parts]


class FrameDecoder:
    """Incremental decoder: :meth:`feed` stream bytes, get every frame they complete.

    Bytes of an incomplete frame are kept until it completes (copied once then); a frame
    announcing more than ``max_payload`` bytes raises :class:`FrameTooLarge` (the stream
    cannot be resynchronised: close it; the decoder is of no further use)."""

    __slots__ = ("_buffer", "_need", "max_payload")

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self._buffer = bytearray()
        self._need = HEADER.size  # bytes the buffered frame needs before it is complete

    def feed(self, data: bytes) -> list[Frame]:
        """The frames ``data`` completes, in order (payloads view ``data``, or one copy of
        the bytes buffered before it)."""
        buffer = self._buffer
        if buffer:
            buffer += data
            if len(buffer) < self._need:
                return []
            data = bytes(buffer)
            buffer.clear()
        frames: list[Frame] = []
        view = memoryview(data)
        offset, size, head = 0, len(data), HEADER.size
        need = head
        unpack = HEADER.unpack_from
        while size - offset >= head:
            kind, call, aux, length = unpack(data, offset)
            if length > self.max_payload:
                message = f"frame of {length} bytes (at most {self.max_payload})"
                raise FrameTooLarge(message, frames)
            end = offset + head + length
            if end > size:
                need = head + length
                break
            frames.append(Frame(kind, call, aux, view[offset + head : end]))
            offset = end
        if offset < size:
            buffer += view[offset:]
        self._need = need
        return frames


class FrameHandler(Protocol):
    """What receives the frames of a :class:`FrameLink`."""

    def frame_received(self, frame: Frame) -> None:
        """One frame arrived (called in order, on the event loop)."""

    def connection_lost(self) -> None:
        """The connection closed; nothing more arrives and sends are dropped."""


class FrameLink(asyncio.Protocol):
    """One stream connection carrying frames, at either end.

    Arriving frames go to the handler ``make(link)`` returned; :meth:`send` queues a frame,
    and every frame queued in one event-loop iteration leaves in one ``writelines``."""

    def __init__(
        self, make: Callable[[FrameLink], FrameHandler], max_payload: int = MAX_PAYLOAD
    ) -> None:
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(max_payload)
        self._pending: list[Part] = []
        #: Done once the connection has closed.
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.handler = make(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameTooLarge as exc:
            log.error("closing a frame link: %s", exc)
            frames = exc.frames
            if self.transport is not None:
                self.transport.abort()
        receive = self.handler.frame_received
        for frame in frames:
            receive(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._pending.clear()
        self.handler.connection_lost()
        if not self.closed.done():
            self.closed.set_result(None)

    @property
    def connected(self) -> bool:
        """True until the connection closes or starts closing."""
        return self.transport is not None and not self.transport.is_closing()

    def send(self, kind: int, call: int, aux: int = 0, *parts: Part) -> None:
        """Queue a frame (dropped once the connection is closed); it leaves with the others
        queued in this event-loop iteration. ``parts`` must stay unchanged until then."""
        if self.transport is None:
            return
        pending = self._pending
        if not pending:
            asyncio.get_running_loop().call_soon(self._flush)
        pending += encode_frame(kind, call, aux, parts)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if pending and self.connected:
            assert self.transport is not None
            self.transport.writelines(pending)

    def close(self) -> None:
        """Write what is queued, then close (:attr:`closed` is done once it has)."""
        self._flush()
        if self.transport is not None:
            self.transport.close()
