"""The server side of one HTTP/2 connection, without I/O (RFC 9113).

:class:`H2Engine` takes the bytes a client sent (:meth:`H2Engine.receive`) and queues the
bytes to send in :attr:`H2Engine.out`, which its owner writes and empties. It knows
nothing of sockets, event loops or gRPC. It holds the HTTP/2 rules a gRPC server needs:
the prior-knowledge preface, frame parsing and validation, header blocks split over
CONTINUATION frames (decoded with HPACK), padding, settings, PING, RST_STREAM and GOAWAY,
flow control both ways, and the limits on abuse of :mod:`~despina_frontend_grpc.h2_limits`
(floods of resets, SETTINGS, PINGs or CONTINUATION frames, HPACK bombs, too many
streams): a connection error queues GOAWAY and :meth:`~H2Engine.receive` returns it, for
the owner to close the connection.

Events reach the layer above through direct calls of its :class:`H2Handler` methods
(no event objects: this is the per-call hot path), made while :meth:`~H2Engine.receive`
or the engine's send methods run. Streams are objects of the caller's subclass of
:class:`H2Stream` (one object per stream holds both layers' state).

Flow control: received bytes are acknowledged on the connection at once, and on their
stream once :data:`~despina_frontend_grpc.h2_limits.STREAM_WINDOW` / 4 arrived, unless
the stream :meth:`~H2Stream.holds_credit` (then its owner calls
:meth:`~H2Engine.return_credit` later). Data to send waits in its stream's queue for the
client's credit; the stream's final HEADERS (trailers) follow its queue.

Time comes from outside: the abuse budgets and the PING rules read the ``clock`` given;
keepalive and the graceful shutdown's timeout are timers of the owner, which calls
:meth:`~H2Engine.send_keepalive` and :meth:`~H2Engine.last_goaway`. Graceful shutdown
(RFC 9113 section 6.8) takes two GOAWAYs: :meth:`~H2Engine.drain` sends the first, naming
the largest stream id, with a PING; calls the client opened meanwhile are served. Once
the PING is acknowledged (the client has seen the first GOAWAY) or the owner's timeout
passed (:meth:`~H2Engine.last_goaway`), the second names the last stream opened, and a
stream opened after it is refused with RST_STREAM REFUSED_STREAM (gRPC clients retry such
a call elsewhere). Frames are read throughout; once no stream is left the handler hears
:meth:`~H2Handler.drained`.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

import hpack

from despina_frontend_grpc import h2_frames
from despina_frontend_grpc.h2_limits import (
    CONNECTION_WINDOW,
    GOAWAY_OPAQUE,
    IDLE_PING_INTERVAL,
    KEEPALIVE_OPAQUE,
    MAX_CONTINUATIONS,
    MAX_CONTROL_FRAMES,
    MAX_FRAME,
    MAX_HEADER_BLOCK,
    MAX_RESETS,
    MAX_STREAM_ID,
    RESETS_REMEMBERED,
    STREAM_WINDOW,
    Budget,
)
from despina_frontend_grpc.header_cache import CachingDecoder


class H2Error(Exception):
    """A connection-level protocol error: GOAWAY with ``code``, then close."""

    def __init__(self, code: int, debug: str) -> None:
        super().__init__(debug)
        self.code = code


class H2Stream:
    """One stream's HTTP/2 state; the layer above subclasses it for its own."""

    __slots__ = (
        "finished",
        "id",
        "outbox",
        "outbox_size",
        "remote_closed",
        "send_window",
        "trailers",
        "unacked",
    )

    def __init__(self, stream_id: int, send_window: int) -> None:
        self.id = stream_id
        self.send_window = send_window
        #: Data waiting for the client's credit, and its size in bytes.
        self.outbox: collections.deque[memoryview] = collections.deque()
        self.outbox_size = 0
        #: The final header block, sent once the outbox is empty.
        self.trailers: bytes | None = None
        #: The client's END_STREAM came.
        self.remote_closed = False
        #: Our side ended (or the stream is gone): nothing more is sent on it.
        self.finished = False
        #: Bytes received and not yet acknowledged with WINDOW_UPDATE.
        self.unacked = 0

    def holds_credit(self) -> bool:
        """True while the stream's received bytes must not be acknowledged yet."""
        return False


S = TypeVar("S", bound=H2Stream)
S_contra = TypeVar("S_contra", bound=H2Stream, contravariant=True)


class H2Handler(Protocol[S_contra]):
    """What the layer above hears, called while the engine runs."""

    def stream_opened(self, stream: S_contra, headers: list[tuple[str, str]]) -> None:
        """A new stream with its request headers (``remote_closed`` set by END_STREAM;
        :meth:`stream_ended` follows then)."""

    def stream_data(self, stream: S_contra, data: bytes) -> None:
        """DATA for a stream whose client has not ended it (padding removed)."""

    def stream_ended(self, stream: S_contra) -> None:
        """The client ended its side of the stream (``remote_closed`` is set)."""

    def stream_sent(self, stream: S_contra) -> None:
        """The engine sent what the windows allow of the stream's queue."""

    def stream_closed(self, stream: S_contra, reset: bool) -> None:
        """The stream is gone: ended both ways, or ``reset`` (by the client, for its
        stream error, or by :meth:`H2Engine.forget`)."""

    def drained(self) -> None:
        """The last GOAWAY went out and no stream is left."""


class PingPolicy(Protocol):
    """The stream limit and the PING rules (tritonserver's ``--grpc-*`` flags)."""

    @property
    def max_concurrent_streams(self) -> int: ...
    @property
    def permit_without_calls(self) -> bool: ...
    @property
    def max_pings_without_data(self) -> int: ...
    @property
    def min_recv_ping_interval(self) -> float: ...
    @property
    def max_ping_strikes(self) -> int: ...


class H2Engine(Generic[S]):
    """One connection's HTTP/2 state; streams are made by ``new_stream(id, window)``."""

    def __init__(
        self,
        handler: H2Handler[S],
        new_stream: Callable[[int, int], S],
        policy: PingPolicy,
        clock: Callable[[], float],
    ) -> None:
        self.handler = handler
        self.new_stream = new_stream
        self.policy = policy
        self.clock = clock
        #: Bytes to send, in order; the owner writes and empties it.
        self.out: list[bytes | memoryview] = []
        self.buffer = bytearray()
        self.preface_seen = False
        self.decoder = CachingDecoder(MAX_HEADER_BLOCK)
        self.streams: dict[int, S] = {}
        self.blocked: set[S] = set()
        self.last_stream = 0
        #: Streams we recently ended with RST_STREAM: frames the client sent before it saw
        #: the reset are ignored (RFC 9113 section 5.1), not a connection error.
        self.reset_sent: collections.deque[int] = collections.deque(maxlen=RESETS_REMEMBERED)
        self.continuing: tuple[int, bool, bytearray] | None = None
        self.continuations = 0
        self.resets = Budget(MAX_RESETS, clock)
        self.control_frames = Budget(MAX_CONTROL_FRAMES, clock)
        self.peer_window = h2_frames.DEFAULT_WINDOW
        self.peer_max_frame = h2_frames.DEFAULT_MAX_FRAME
        self.send_window = h2_frames.DEFAULT_WINDOW
        self.recv_unacked = 0
        self.table_update_due = True
        #: Set by the owner as the connection closes: no more frames are read.
        self.closing = False
        #: The first GOAWAY of a graceful shutdown went out (:meth:`drain`).
        self.draining = False
        #: The last GOAWAY went out: streams opened after it are refused.
        self.goaway_sent = False
        #: Our keepalive PING awaits its acknowledgement.
        self.keepalive_pending = False
        self.ping_strikes = 0
        self.last_ping_received = float("-inf")
        self.pings_without_data = 0

    def start(self) -> None:
        """Queue our SETTINGS and the connection window's enlargement."""
        self.out.append(
            h2_frames.settings_frame(
                (
                    (h2_frames.MAX_CONCURRENT_STREAMS, self.policy.max_concurrent_streams),
                    (h2_frames.INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                    (h2_frames.MAX_FRAME_SIZE, MAX_FRAME),
                    (h2_frames.MAX_HEADER_LIST_SIZE, MAX_HEADER_BLOCK),
                )
            )
            + h2_frames.window_update(0, CONNECTION_WINDOW - h2_frames.DEFAULT_WINDOW)
        )

    def data_to_send(self) -> bytes:
        """The bytes queued to send, emptying the queue."""
        data = b"".join(self.out)
        self.out = []
        return data

    # --- reading frames

    def receive(self, data: bytes) -> H2Error | None:
        """Read the client's bytes; a connection error is returned once its GOAWAY is
        queued (the owner closes the connection). Ignored once :attr:`closing`."""
        if self.closing:
            return None
        buffer = self.buffer
        buffer += data
        try:
            if not self.preface_seen:
                if len(buffer) < len(h2_frames.PREFACE):
                    if not h2_frames.PREFACE.startswith(bytes(buffer)):
                        raise H2Error(h2_frames.PROTOCOL_ERROR, "not an HTTP/2 preface")
                    return None
                if not buffer.startswith(h2_frames.PREFACE):
                    raise H2Error(h2_frames.PROTOCOL_ERROR, "not an HTTP/2 preface")
                del buffer[: len(h2_frames.PREFACE)]
                self.preface_seen = True
            self._frames()
        except H2Error as exc:
            self.out.append(h2_frames.goaway(self.last_stream, exc.code, str(exc).encode()))
            return exc
        return None

    def _frames(self) -> None:
        buffer = self.buffer
        offset, size = 0, len(buffer)
        while size - offset >= h2_frames.FRAME_HEADER_SIZE and not self.closing:
            length = buffer[offset] << 16 | buffer[offset + 1] << 8 | buffer[offset + 2]
            if length > MAX_FRAME:
                raise H2Error(h2_frames.FRAME_SIZE_ERROR, "frame larger than MAX_FRAME_SIZE")
            end = offset + h2_frames.FRAME_HEADER_SIZE + length
            if end > size:
                break
            kind, flags = buffer[offset + 3], buffer[offset + 4]
            stream_id = h2_frames.u32(buffer, offset + 5)
            with memoryview(buffer) as view:  # one copy of the payload, not two
                payload = bytes(view[offset + h2_frames.FRAME_HEADER_SIZE : end])
            offset = end
            self._frame(kind, flags, stream_id, payload)
        del buffer[:offset]

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self.continuing is not None and kind != h2_frames.CONTINUATION:
            raise H2Error(h2_frames.PROTOCOL_ERROR, "expected a CONTINUATION frame")
        if kind == h2_frames.DATA:
            self._on_data(flags, stream_id, payload)
        elif kind == h2_frames.HEADERS:
            self._on_headers(flags, stream_id, payload)
        elif kind == h2_frames.CONTINUATION:
            self._on_continuation(flags, stream_id, payload)
        elif kind == h2_frames.SETTINGS:
            self._on_settings(flags, stream_id, payload)
        elif kind == h2_frames.WINDOW_UPDATE:
            self._on_window_update(stream_id, payload)
        elif kind == h2_frames.PING:
            self._on_ping(flags, stream_id, payload)
        elif kind == h2_frames.RST_STREAM:
            self._on_reset(stream_id, payload)
        elif kind == h2_frames.PUSH_PROMISE:
            raise H2Error(h2_frames.PROTOCOL_ERROR, "clients cannot push")
        elif kind == h2_frames.GOAWAY and stream_id:
            raise H2Error(h2_frames.PROTOCOL_ERROR, "GOAWAY on a stream")
        else:  # PRIORITY, GOAWAY from the client (it opens no more streams), unknown types
            self._control_frame()

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise H2Error(h2_frames.PROTOCOL_ERROR, "DATA on stream 0")
        if not payload and not flags & h2_frames.END_STREAM:
            self._control_frame()
        self.recv_unacked += len(payload)
        if self.recv_unacked >= CONNECTION_WINDOW // 2:
            self.out.append(h2_frames.window_update(0, self.recv_unacked))
            self.recv_unacked = 0
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_closed:
            if stream_id > self.last_stream:
                raise H2Error(h2_frames.PROTOCOL_ERROR, "DATA on an idle stream")
            return  # a stream we already answered or reset
        stream.unacked += len(payload)
        self.handler.stream_data(stream, _unpad(flags, payload))
        if flags & h2_frames.END_STREAM:
            self._end_remote(stream)
        else:
            self.return_credit(stream)

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise H2Error(h2_frames.PROTOCOL_ERROR, "HEADERS on stream 0")
        data = _unpad(flags, payload)
        if flags & h2_frames.PRIORITY_FLAG:
            data = data[5:]
        if len(data) > MAX_HEADER_BLOCK:
            raise H2Error(h2_frames.ENHANCE_YOUR_CALM, "header block too large")
        end_stream = bool(flags & h2_frames.END_STREAM)
        if flags & h2_frames.END_HEADERS:
            self._header_block(stream_id, end_stream, data)
        else:
            self.continuing = (stream_id, end_stream, bytearray(data))
            self.continuations = 0

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self.continuing is None or self.continuing[0] != stream_id:
            raise H2Error(h2_frames.PROTOCOL_ERROR, "unexpected CONTINUATION frame")
        self.continuations += 1
        if self.continuations > MAX_CONTINUATIONS:
            raise H2Error(h2_frames.ENHANCE_YOUR_CALM, "too many CONTINUATION frames")
        block = self.continuing[2]
        block += payload
        if len(block) > MAX_HEADER_BLOCK:
            raise H2Error(h2_frames.ENHANCE_YOUR_CALM, "header block too large")
        if flags & h2_frames.END_HEADERS:
            end_stream = self.continuing[1]
            self.continuing = None
            self._header_block(stream_id, end_stream, bytes(block))

    def _header_block(self, stream_id: int, end_stream: bool, block: bytes) -> None:
        try:
            headers = self.decoder.decode(block)
        except hpack.OversizedHeaderListError:
            raise H2Error(h2_frames.ENHANCE_YOUR_CALM, "header list too large") from None
        except hpack.HPACKError as exc:
            raise H2Error(h2_frames.COMPRESSION_ERROR, f"bad header block: {exc}") from None
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client end its requests
            if not end_stream:
                raise H2Error(h2_frames.PROTOCOL_ERROR, "trailers without END_STREAM")
            if not stream.remote_closed:
                self._end_remote(stream)
            return
        if stream_id % 2 == 0 or stream_id <= self.last_stream:
            if stream_id in self.reset_sent:
                return
            raise H2Error(h2_frames.PROTOCOL_ERROR, f"bad new stream id {stream_id}")
        self.last_stream = stream_id
        if len(self.streams) >= self.policy.max_concurrent_streams:
            self._reset_for_client(stream_id, h2_frames.REFUSED_STREAM)
            return
        if self.goaway_sent:  # opened after the last GOAWAY: the client retries it elsewhere
            self.out.append(h2_frames.rst_stream(stream_id, h2_frames.REFUSED_STREAM))
            self.reset_sent.append(stream_id)
            return
        stream = self.new_stream(stream_id, self.peer_window)
        stream.remote_closed = end_stream
        self.streams[stream_id] = stream
        self.handler.stream_opened(stream, headers)
        if end_stream:
            self.handler.stream_ended(stream)

    def _end_remote(self, stream: S) -> None:
        stream.remote_closed = True
        self.handler.stream_ended(stream)

    def _on_settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise H2Error(h2_frames.PROTOCOL_ERROR, "SETTINGS on a stream")
        self._control_frame()
        if flags & h2_frames.ACK:
            return
        try:
            values = h2_frames.parse_settings(payload)
        except ValueError as exc:
            raise H2Error(h2_frames.FRAME_SIZE_ERROR, str(exc)) from None
        grown = False
        for key, value in values:
            if key == h2_frames.HEADER_TABLE_SIZE:
                self.table_update_due = True
            elif key == h2_frames.INITIAL_WINDOW_SIZE:
                if value > h2_frames.MAX_WINDOW:
                    raise H2Error(h2_frames.FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self.peer_window
                self.peer_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
                    if stream.send_window > h2_frames.MAX_WINDOW:
                        raise H2Error(h2_frames.FLOW_CONTROL_ERROR, "stream window overflow")
                grown = grown or delta > 0
            elif key == h2_frames.MAX_FRAME_SIZE:
                if not h2_frames.DEFAULT_MAX_FRAME <= value <= 0xFFFFFF:
                    raise H2Error(h2_frames.PROTOCOL_ERROR, "bad SETTINGS_MAX_FRAME_SIZE")
                self.peer_max_frame = value
            elif key == h2_frames.ENABLE_PUSH and value > 1:
                raise H2Error(h2_frames.PROTOCOL_ERROR, "bad SETTINGS_ENABLE_PUSH")
        self.out.append(h2_frames.frame(h2_frames.SETTINGS, h2_frames.ACK, 0))
        if grown:
            self._pump_blocked()

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise H2Error(h2_frames.FRAME_SIZE_ERROR, "WINDOW_UPDATE of bad length")
        increment = h2_frames.u32(payload)
        if not stream_id:
            if not increment:
                raise H2Error(h2_frames.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > h2_frames.MAX_WINDOW:
                raise H2Error(h2_frames.FLOW_CONTROL_ERROR, "connection window overflow")
            self._pump_blocked()
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        stream.send_window += increment
        if not increment or stream.send_window > h2_frames.MAX_WINDOW:
            # RFC 9113 6.9: a stream error, PROTOCOL_ERROR for 0, else FLOW_CONTROL_ERROR
            code = h2_frames.FLOW_CONTROL_ERROR if increment else h2_frames.PROTOCOL_ERROR
            self._reset_for_client(stream_id, code)
            self.forget(stream, reset=True)
            return
        self._pump(stream)

    def _on_ping(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise H2Error(h2_frames.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise H2Error(h2_frames.FRAME_SIZE_ERROR, "PING of bad length")
        self._control_frame()
        if flags & h2_frames.ACK:
            if payload == KEEPALIVE_OPAQUE:
                self.keepalive_pending = False
            elif payload == GOAWAY_OPAQUE:
                self.last_goaway()
            return
        policy = self.policy
        now = self.clock()
        idle = not self.streams and not policy.permit_without_calls
        interval = IDLE_PING_INTERVAL if idle else policy.min_recv_ping_interval
        if now - self.last_ping_received < interval:
            self.ping_strikes += 1
        self.last_ping_received = now
        if policy.max_ping_strikes and self.ping_strikes > policy.max_ping_strikes:
            raise H2Error(h2_frames.ENHANCE_YOUR_CALM, "too_many_pings")
        self.out.append(h2_frames.frame(h2_frames.PING, h2_frames.ACK, 0, payload))

    def _on_reset(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise H2Error(h2_frames.FRAME_SIZE_ERROR, "RST_STREAM of bad length")
        if not stream_id or stream_id > self.last_stream:
            raise H2Error(h2_frames.PROTOCOL_ERROR, "RST_STREAM on an idle stream")
        stream = self.streams.get(stream_id)
        if stream is None:
            self._control_frame()
        elif not self.resets.spend():
            raise H2Error(h2_frames.ENHANCE_YOUR_CALM, "too many streams reset")
        else:
            self.forget(stream, reset=True)

    def _control_frame(self) -> None:
        """Count a frame that carries no request data (see ``MAX_CONTROL_FRAMES``)."""
        if not self.control_frames.spend():
            raise H2Error(h2_frames.ENHANCE_YOUR_CALM, "too many control frames")

    def _reset_for_client(self, stream_id: int, code: int) -> None:
        """RST_STREAM ``code`` for the client's stream error, counted as a reset (see
        ``MAX_RESETS``)."""
        if not self.resets.spend():
            raise H2Error(h2_frames.ENHANCE_YOUR_CALM, "too many stream errors")
        self.out.append(h2_frames.rst_stream(stream_id, code))
        self.reset_sent.append(stream_id)

    # --- sending

    def send_headers(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        """Queue a header block (HPACK-encoded without the dynamic table) at once."""
        if self.table_update_due:
            block = h2_frames.TABLE_SIZE_ZERO + block
            self.table_update_due = False
        self.out.append(h2_frames.header_frames(stream_id, block, end_stream, self.peer_max_frame))
        self._sent_something()

    def end_with_headers(self, stream: S, block: bytes) -> None:
        """End the stream at once with a header block (END_STREAM), before any data."""
        self.send_headers(stream.id, block, end_stream=True)
        self._closed_locally(stream)

    def send_data(self, stream: S, parts: Iterable[bytes]) -> None:
        """Queue DATA on the stream; sent as the windows allow. Empty parts are left out:
        gRPC clients end the connection after a few zero-length DATA frames ("Too many
        zero length data frames"), which an empty message's body would make."""
        for part in parts:
            if part:
                stream.outbox.append(memoryview(part))
                stream.outbox_size += len(part)
        self._pump(stream)

    def send_trailers(self, stream: S, block: bytes) -> None:
        """End the stream with a header block once its queued DATA went out."""
        stream.trailers = block
        self._pump(stream)

    def _pump(self, stream: S) -> None:
        """Send what the windows allow of a stream's queue, then its trailers."""
        outbox = stream.outbox
        out = self.out
        while outbox and self.send_window > 0 and stream.send_window > 0:
            chunk = outbox[0]
            size = min(len(chunk), self.send_window, stream.send_window, self.peer_max_frame)
            if size == len(chunk):
                outbox.popleft()
            else:
                outbox[0] = chunk[size:]
                chunk = chunk[:size]
            out.append(_data_header(size, stream.id))
            out.append(chunk)
            self.send_window -= size
            stream.send_window -= size
            stream.outbox_size -= size
        if outbox:
            self.blocked.add(stream)
        else:
            self.blocked.discard(stream)
            if stream.trailers is not None:
                block, stream.trailers = stream.trailers, None
                self.send_headers(stream.id, block, end_stream=True)
                self._closed_locally(stream)
        self._sent_something()
        self.handler.stream_sent(stream)

    def _pump_blocked(self) -> None:
        for stream in list(self.blocked):
            if self.send_window <= 0:
                break
            self._pump(stream)

    def return_credit(self, stream: S) -> None:
        """Acknowledge the stream's received bytes once a quarter of its window arrived,
        unless the client ended it or it :meth:`~H2Stream.holds_credit`."""
        if stream.remote_closed or stream.unacked < STREAM_WINDOW // 4:
            return
        if stream.holds_credit():
            return
        self.out.append(h2_frames.window_update(stream.id, stream.unacked))
        stream.unacked = 0

    def _closed_locally(self, stream: S) -> None:
        """Our END_STREAM went out: stop the client's sending if it has not finished."""
        if not stream.remote_closed:
            self.out.append(h2_frames.rst_stream(stream.id, h2_frames.NO_ERROR))
            self.reset_sent.append(stream.id)
        self.forget(stream)

    def forget(self, stream: S, reset: bool = False) -> None:
        """Drop the stream (the handler hears :meth:`~H2Handler.stream_closed`)."""
        stream.finished = True
        self.streams.pop(stream.id, None)
        self.blocked.discard(stream)
        self.handler.stream_closed(stream, reset)
        if self.goaway_sent and not self.streams and not self.closing:
            self.handler.drained()

    def _sent_something(self) -> None:
        self.ping_strikes = 0
        self.last_ping_received = float("-inf")
        self.pings_without_data = 0

    # --- connection lifetime

    def send_keepalive(self) -> bool:
        """Queue a keepalive PING if the rules allow one now: none awaits its ACK, the
        connection has streams (or pings without calls are permitted), and fewer than
        ``max_pings_without_data`` went out since we last sent something."""
        policy = self.policy
        if self.keepalive_pending or not (self.streams or policy.permit_without_calls):
            return False
        if (
            policy.max_pings_without_data
            and self.pings_without_data >= policy.max_pings_without_data
        ):
            return False
        self.pings_without_data += 1
        self.keepalive_pending = True
        self.out.append(h2_frames.frame(h2_frames.PING, 0, 0, KEEPALIVE_OPAQUE))
        return True

    def drain(self) -> bool:
        """Begin a graceful shutdown: queue GOAWAY naming the largest stream id, and a
        PING whose acknowledgement brings :meth:`last_goaway`. False when already
        begun or closing (nothing queued)."""
        if self.draining or self.closing:
            return False
        self.draining = True
        self.out.append(h2_frames.goaway(MAX_STREAM_ID, h2_frames.NO_ERROR))
        self.out.append(h2_frames.frame(h2_frames.PING, 0, 0, GOAWAY_OPAQUE))
        return True

    def last_goaway(self) -> None:
        """Queue GOAWAY naming the last stream opened: the streams opened finish, one
        opened after it is refused; :meth:`~H2Handler.drained` once none is left."""
        if self.goaway_sent or self.closing:
            return
        self.goaway_sent = True
        self.out.append(h2_frames.goaway(self.last_stream, h2_frames.NO_ERROR))
        if not self.streams:
            self.handler.drained()


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & h2_frames.PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise H2Error(h2_frames.PROTOCOL_ERROR, "bad padding")
    return payload[1 : len(payload) - payload[0]]


def _data_header(size: int, stream_id: int) -> bytes:
    return bytes(
        (size >> 16 & 0xFF, size >> 8 & 0xFF, size & 0xFF, h2_frames.DATA, 0)
    ) + stream_id.to_bytes(4, "big")
