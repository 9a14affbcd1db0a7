"""Despina's own gRPC server: HTTP/2 on an asyncio Protocol, one task per call.

grpc.aio spends ~190 µs of the event loop's time on every call (its C core hands each
event to Python through a poller thread and several callbacks); parsing frames here costs
a fraction of that. The server implements what gRPC clients use of HTTP/2: prior-knowledge
cleartext or TLS with ALPN ``h2``, settings, flow control both ways, header blocks split
over CONTINUATION frames, padding, PING, RST_STREAM and GOAWAY; and of gRPC: unary and
streaming calls, message compression (gzip, deflate), ``grpc-timeout`` deadlines, the
keepalive and ping-abuse rules of tritonserver's ``--grpc-*`` flags, maximum connection
age, message size limits, restricted protocols and graceful shutdown. Abuse of HTTP/2
itself (floods of resets, SETTINGS, PINGs or CONTINUATION frames, HPACK bombs, too many
streams) meets the limits below: GOAWAY, and the connection closes. A connection past
``--grpc-max-connections`` is closed as soon as it is accepted, before any frame, as
grpc.aio does (a GOAWAY would make grpc clients retry at once, in a tight loop; a closed
connection makes them back off), and logged at most once per :data:`FLOOD_WINDOW`.

A compressed request message inflates on the event loop for its first
:data:`INLINE_INFLATE` bytes of output; a larger one finishes inflating in a worker
thread (zlib releases the GIL), checked against the size limit step by step as before,
so a compression bomb holds up only its own call, not the other clients'. While it
inflates its stream's credit is held back, and the call's later messages wait behind it.

Flow control: a stream's credit is returned as its bytes arrive, except while a streaming
call has :data:`INBOX_LIMIT` messages its handler has not taken (then a client that sends
without reading is held back); responses wait for the client's credit.

Graceful shutdown (RFC 9113 section 6.8; :meth:`Http2GrpcServer.drain` as the server stops,
and at ``--grpc-max-connection-age``) takes two GOAWAYs: the first names the largest
stream id and comes with a PING; calls the client opened meanwhile are served. Once the
PING is acknowledged (the client has seen the first GOAWAY) or :data:`GOAWAY_PING_TIMEOUT`
passed, the second names the last stream opened, and a stream opened after it is refused
with RST_STREAM REFUSED_STREAM (gRPC clients retry such a call elsewhere). Frames are read
throughout; once the calls finished, the server half-closes and lets the client close.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import random
import ssl
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
import hpack
from despina import stop_listening

from despina_frontend_grpc import calls, grpc_framing as framing, http2, wire
from despina_frontend_grpc.errors import INTERNAL_TEXT
from despina_frontend_grpc.header_cache import CachingDecoder

log = logging.getLogger("despina.frontend.grpc")

#: Receive window of each stream and (enlarged at once) of the connection.
STREAM_WINDOW = 1 << 22
CONNECTION_WINDOW = 1 << 24
#: Largest frame we accept, advertised in our SETTINGS.
MAX_FRAME = 1 << 20
#: Largest request header block (all fragments) and decoded header list
#: (SETTINGS_MAX_HEADER_LIST_SIZE): a larger one, or an HPACK block that decodes to more
#: (an "HPACK bomb"), is a connection error ENHANCE_YOUR_CALM.
MAX_HEADER_BLOCK = 1 << 16

# Limits on HTTP/2 abuse (RFC 9113 section 10.5), per connection. A client past one gets
# GOAWAY and the connection closes; the numbers are far above what a gRPC client sends.
#: SETTINGS_MAX_CONCURRENT_STREAMS (default of ``--grpc-max-concurrent-streams``): a
#: stream opened beyond it is refused (RST_STREAM REFUSED_STREAM); grpc clients queue
#: their calls instead of opening it.
MAX_CONCURRENT_STREAMS = 1024
#: Connections served at once (default of ``--grpc-max-connections``); one accepted
#: beyond it is closed at once.
MAX_CONNECTIONS = 1024
#: CONTINUATION frames one header block may take (a block of MAX_HEADER_BLOCK bytes needs
#: at most 4 at the smallest frame size); beyond it: ENHANCE_YOUR_CALM (the CONTINUATION
#: flood, CVE-2024-27316, sends empty ones).
MAX_CONTINUATIONS = 16
#: The window, in seconds, over which the budgets below are counted.
FLOOD_WINDOW = 10.0
#: Streams reset in FLOOD_WINDOW: RST_STREAM from the client on a stream still open here
#: ("rapid reset", CVE-2023-44487), and our RST_STREAMs answering the client's stream
#: errors (refused streams, bad WINDOW_UPDATEs); beyond it: ENHANCE_YOUR_CALM.
MAX_RESETS = 1000
#: Frames that carry no request data in FLOOD_WINDOW: SETTINGS, PING, PRIORITY,
#: RST_STREAM on a stream already closed, empty DATA, GOAWAY and unknown frame types
#: (SETTINGS and PING floods make us answer each, CVE-2019-9512/9515); beyond it:
#: ENHANCE_YOUR_CALM. Legitimate clients send a few per call at most (BDP pings).
MAX_CONTROL_FRAMES = 1000
#: Messages a streaming call may hold untaken before its credit stops being returned.
INBOX_LIMIT = 64
#: Response bytes a streaming call may queue before its next write waits.
OUTBOX_LIMIT = 1 << 22
#: The opaque data of our keepalive PINGs.
KEEPALIVE_OPAQUE = b"despina!"
#: The opaque data of the PING sent with the first GOAWAY of a graceful shutdown.
GOAWAY_OPAQUE = b"goaway!!"
#: Seconds to wait for that PING's acknowledgement before the second GOAWAY.
GOAWAY_PING_TIMEOUT = 1.0
#: Seconds a connection that half-closed after its last GOAWAY waits for the client to
#: close, dropping what it still sends.
LINGER_S = 5.0
#: The largest stream id, named by the first GOAWAY of a graceful shutdown.
MAX_STREAM_ID = (1 << 31) - 1
#: Output bytes of a compressed message inflated on the event loop; the rest of a larger
#: one inflates in a worker thread (one of :data:`INFLATE_THREADS`).
INLINE_INFLATE = 1 << 20
INFLATE_THREADS = min(4, os.cpu_count() or 1)

Route = tuple[wire.Method, Callable[..., Any]]

#: gRPC status numbers for the trailers, by grpc.StatusCode name.
_OK = grpc.StatusCode.OK.value[0]
_DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
_RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
_UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
_INTERNAL = grpc.StatusCode.INTERNAL.value[0]
_INVALID = grpc.StatusCode.INVALID_ARGUMENT.value[0]


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-connection settings, from the ``--grpc-*`` flags (times in seconds)."""

    max_receive: int
    max_send: int
    zlib_level: int = 0
    keepalive_time: float = 7200.0
    keepalive_timeout: float = 20.0
    permit_without_calls: bool = False
    max_pings_without_data: int = 2
    min_recv_ping_interval: float = 300.0
    max_ping_strikes: int = 2
    max_connection_age: float | None = None
    max_connection_age_grace: float | None = None
    #: SETTINGS_MAX_CONCURRENT_STREAMS, advertised and enforced.
    max_concurrent_streams: int = MAX_CONCURRENT_STREAMS
    #: Connections served at once by the server; 0: no limit.
    max_connections: int = MAX_CONNECTIONS


class Stream:
    """One call: what has arrived, what waits to be sent, and its task."""

    __slots__ = (
        "body",
        "deadline",
        "encoding",
        "finished",
        "gzip",
        "headers_sent",
        "id",
        "inbox",
        "inflating",
        "messages",
        "metadata",
        "outbox",
        "outbox_size",
        "remote_closed",
        "route",
        "send_window",
        "task",
        "trailers",
        "unacked",
        "writable",
    )

    def __init__(self, stream_id: int, send_window: int) -> None:
        self.id = stream_id
        self.route: Route | None = None
        self.metadata: tuple[tuple[str, Any], ...] = ()
        self.encoding: str | None = None
        self.gzip = False
        self.body = bytearray()
        self.messages: list[bytes] = []
        self.inbox: asyncio.Queue[bytes | None] | None = None
        self.task: asyncio.Task[None] | None = None
        self.send_window = send_window
        self.outbox: collections.deque[memoryview] = collections.deque()
        self.outbox_size = 0
        self.writable: asyncio.Event | None = None
        self.trailers: bytes | None = None
        self.headers_sent = False
        self.remote_closed = False
        self.finished = False
        self.unacked = 0
        self.deadline: asyncio.TimerHandle | None = None
        #: The request message inflating in a worker thread; later messages wait for it.
        self.inflating: framing.Inflation | None = None


class ConnectionError_(Exception):
    """A connection-level protocol error: GOAWAY with ``code``, then close."""

    def __init__(self, code: int, debug: str) -> None:
        super().__init__(debug)
        self.code = code


class Budget:
    """A count of events allowed ``limit`` times per :data:`FLOOD_WINDOW` seconds.

    O(1) and allocation-free per event: the clock is read once per ``limit`` events,
    when the count runs out; if the window that count began has not passed, the budget
    is spent. (The window starts at the last reading, at or before its first event, so
    a client is never refused at a rate below ``limit`` per window.)
    """

    __slots__ = ("clock", "left", "limit", "since")

    def __init__(self, limit: int, clock: Callable[[], float]) -> None:
        self.limit = self.left = limit
        self.clock = clock
        self.since = clock()

    def spend(self) -> bool:
        """Count one event; False when it is one too many."""
        self.left -= 1
        if self.left >= 0:
            return True
        now = self.clock()
        if now - self.since < FLOOD_WINDOW:
            return False
        self.left, self.since = self.limit - 1, now
        return True


class Connection(asyncio.Protocol):
    """One client connection."""

    def __init__(self, server: Http2GrpcServer) -> None:
        self.server = server
        self.limits = server.limits
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.preface_seen = False
        self.decoder = CachingDecoder(MAX_HEADER_BLOCK)
        self.streams: dict[int, Stream] = {}
        self.blocked: set[Stream] = set()
        self.last_stream = 0
        #: Streams we recently ended with RST_STREAM: frames the client sent before it saw
        #: the reset are ignored (RFC 9113 section 5.1), not a connection error.
        self.reset_sent: collections.deque[int] = collections.deque(maxlen=256)
        self.continuing: tuple[int, bool, bytearray] | None = None
        self.continuations = 0
        self.resets = Budget(MAX_RESETS, self.loop.time)
        self.control_frames = Budget(MAX_CONTROL_FRAMES, self.loop.time)
        self.peer_window = http2.DEFAULT_WINDOW
        self.peer_max_frame = http2.DEFAULT_MAX_FRAME
        self.send_window = http2.DEFAULT_WINDOW
        self.recv_unacked = 0
        self.table_update_due = True
        self.paused = False
        self.closing = False
        #: The first GOAWAY of a graceful shutdown went out (:meth:`drain`).
        self.draining = False
        #: The last GOAWAY went out: streams opened after it are refused.
        self.goaway_sent = False
        self.out: list[bytes | memoryview] = []
        self.flush_scheduled = False
        self.ping_strikes = 0
        self.last_ping_received = float("-inf")
        self.pings_without_data = 0
        self.timers: list[asyncio.TimerHandle] = []
        self.keepalive_timer: asyncio.TimerHandle | None = None
        self.ping_ack_timer: asyncio.TimerHandle | None = None
        #: Tasks waiting for a message inflating in a worker thread.
        self.inflations: set[asyncio.Task[None]] = set()

    # --- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        limits = self.limits
        if limits.max_connections and len(self.server.connections) >= limits.max_connections:
            self.closing = True
            transport.close()
            self.server.connection_refused()
            return
        self.server.connections.add(self)
        self._write(
            http2.settings_frame(
                (
                    (http2.MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams),
                    (http2.INITIAL_WINDOW_SIZE, STREAM_WINDOW),
                    (http2.MAX_FRAME_SIZE, MAX_FRAME),
                    (http2.MAX_HEADER_LIST_SIZE, MAX_HEADER_BLOCK),
                )
            )
            + http2.window_update(0, CONNECTION_WINDOW - http2.DEFAULT_WINDOW)
        )
        self.keepalive_timer = self.loop.call_later(limits.keepalive_time, self._keepalive)
        if limits.max_connection_age is not None:
            age = limits.max_connection_age * random.uniform(0.9, 1.1)
            self.timers.append(self.loop.call_later(age, self._age_out))
        if self.server.draining:  # accepted as the listener closed
            self.drain()
        self._flush()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        buffer = self.buffer
        buffer += data
        try:
            if not self.preface_seen:
                if len(buffer) < len(http2.PREFACE):
                    if not http2.PREFACE.startswith(bytes(buffer)):
                        raise ConnectionError_(http2.PROTOCOL_ERROR, "not an HTTP/2 preface")
                    return
                if not buffer.startswith(http2.PREFACE):
                    raise ConnectionError_(http2.PROTOCOL_ERROR, "not an HTTP/2 preface")
                del buffer[: len(http2.PREFACE)]
                self.preface_seen = True
            self._frames()
        except ConnectionError_ as exc:
            self._fail(exc.code, str(exc))
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        for timer in (*self.timers, self.keepalive_timer, self.ping_ack_timer):
            if timer is not None:
                timer.cancel()
        for stream in list(self.streams.values()):
            self._forget(stream)
            if stream.task is not None:
                stream.task.cancel()
        for task in list(self.inflations):
            task.cancel()
        self.server.connection_closed()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        for stream in list(self.streams.values()):
            self._update_writable(stream)

    # --- reading frames

    def _frames(self) -> None:
        buffer = self.buffer
        offset, size = 0, len(buffer)
        while size - offset >= http2.FRAME_HEADER_SIZE and not self.closing:
            length = buffer[offset] << 16 | buffer[offset + 1] << 8 | buffer[offset + 2]
            if length > MAX_FRAME:
                raise ConnectionError_(http2.FRAME_SIZE_ERROR, "frame larger than MAX_FRAME_SIZE")
            end = offset + http2.FRAME_HEADER_SIZE + length
            if end > size:
                break
            kind, flags = buffer[offset + 3], buffer[offset + 4]
            stream_id = http2.u32(buffer, offset + 5)
            with memoryview(buffer) as view:  # one copy of the payload, not two
                payload = bytes(view[offset + http2.FRAME_HEADER_SIZE : end])
            offset = end
            self._frame(kind, flags, stream_id, payload)
        del buffer[:offset]

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self.continuing is not None and kind != http2.CONTINUATION:
            raise ConnectionError_(http2.PROTOCOL_ERROR, "expected a CONTINUATION frame")
        if kind == http2.DATA:
            self._on_data(flags, stream_id, payload)
        elif kind == http2.HEADERS:
            self._on_headers(flags, stream_id, payload)
        elif kind == http2.CONTINUATION:
            self._on_continuation(flags, stream_id, payload)
        elif kind == http2.SETTINGS:
            self._on_settings(flags, stream_id, payload)
        elif kind == http2.WINDOW_UPDATE:
            self._on_window_update(stream_id, payload)
        elif kind == http2.PING:
            self._on_ping(flags, stream_id, payload)
        elif kind == http2.RST_STREAM:
            self._on_reset(stream_id, payload)
        elif kind == http2.PUSH_PROMISE:
            raise ConnectionError_(http2.PROTOCOL_ERROR, "clients cannot push")
        elif kind == http2.GOAWAY and stream_id:
            raise ConnectionError_(http2.PROTOCOL_ERROR, "GOAWAY on a stream")
        else:  # PRIORITY, GOAWAY from the client (it opens no more streams), unknown types
            self._control_frame()

    def _on_data(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError_(http2.PROTOCOL_ERROR, "DATA on stream 0")
        if not payload and not flags & http2.END_STREAM:
            self._control_frame()
        self.recv_unacked += len(payload)
        if self.recv_unacked >= CONNECTION_WINDOW // 2:
            self._write(http2.window_update(0, self.recv_unacked))
            self.recv_unacked = 0
        stream = self.streams.get(stream_id)
        if stream is None or stream.remote_closed:
            if stream_id > self.last_stream:
                raise ConnectionError_(http2.PROTOCOL_ERROR, "DATA on an idle stream")
            return  # a stream we already answered or reset
        stream.unacked += len(payload)
        data = _unpad(flags, payload)
        if not stream.finished:
            stream.body += data
            self._take_messages(stream)
        if flags & http2.END_STREAM:
            self._end_of_requests(stream)
        else:
            self._return_credit(stream)

    def _on_headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        if not stream_id:
            raise ConnectionError_(http2.PROTOCOL_ERROR, "HEADERS on stream 0")
        data = _unpad(flags, payload)
        if flags & http2.PRIORITY_FLAG:
            data = data[5:]
        if len(data) > MAX_HEADER_BLOCK:
            raise ConnectionError_(http2.ENHANCE_YOUR_CALM, "header block too large")
        end_stream = bool(flags & http2.END_STREAM)
        if flags & http2.END_HEADERS:
            self._header_block(stream_id, end_stream, data)
        else:
            self.continuing = (stream_id, end_stream, bytearray(data))
            self.continuations = 0

    def _on_continuation(self, flags: int, stream_id: int, payload: bytes) -> None:
        if self.continuing is None or self.continuing[0] != stream_id:
            raise ConnectionError_(http2.PROTOCOL_ERROR, "unexpected CONTINUATION frame")
        self.continuations += 1
        if self.continuations > MAX_CONTINUATIONS:
            raise ConnectionError_(http2.ENHANCE_YOUR_CALM, "too many CONTINUATION frames")
        block = self.continuing[2]
        block += payload
        if len(block) > MAX_HEADER_BLOCK:
            raise ConnectionError_(http2.ENHANCE_YOUR_CALM, "header block too large")
        if flags & http2.END_HEADERS:
            end_stream = self.continuing[1]
            self.continuing = None
            self._header_block(stream_id, end_stream, bytes(block))

    def _header_block(self, stream_id: int, end_stream: bool, block: bytes) -> None:
        try:
            headers = self.decoder.decode(block)
        except hpack.OversizedHeaderListError:
            raise ConnectionError_(http2.ENHANCE_YOUR_CALM, "header list too large") from None
        except hpack.HPACKError as exc:
            raise ConnectionError_(http2.COMPRESSION_ERROR, f"bad header block: {exc}") from None
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client end its requests
            if not end_stream:
                raise ConnectionError_(http2.PROTOCOL_ERROR, "trailers without END_STREAM")
            if not stream.remote_closed:
                self._end_of_requests(stream)
            return
        if stream_id % 2 == 0 or stream_id <= self.last_stream:
            if stream_id in self.reset_sent:
                return
            raise ConnectionError_(http2.PROTOCOL_ERROR, f"bad new stream id {stream_id}")
        self.last_stream = stream_id
        if len(self.streams) >= self.limits.max_concurrent_streams:
            self._reset_for_client(stream_id, http2.REFUSED_STREAM)
            return
        if self.goaway_sent:  # opened after the last GOAWAY: the client retries it elsewhere
            self._write(http2.rst_stream(stream_id, http2.REFUSED_STREAM))
            self.reset_sent.append(stream_id)
            return
        self._open(stream_id, headers, end_stream)

    def _on_settings(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise ConnectionError_(http2.PROTOCOL_ERROR, "SETTINGS on a stream")
        self._control_frame()
        if flags & http2.ACK:
            return
        try:
            values = http2.parse_settings(payload)
        except ValueError as exc:
            raise ConnectionError_(http2.FRAME_SIZE_ERROR, str(exc)) from None
        grown = False
        for key, value in values:
            if key == http2.HEADER_TABLE_SIZE:
                self.table_update_due = True
            elif key == http2.INITIAL_WINDOW_SIZE:
                if value > http2.MAX_WINDOW:
                    raise ConnectionError_(http2.FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self.peer_window
                self.peer_window = value
                for stream in self.streams.values():
                    stream.send_window += delta
                    if stream.send_window > http2.MAX_WINDOW:
                        raise ConnectionError_(http2.FLOW_CONTROL_ERROR, "stream window overflow")
                grown = grown or delta > 0
            elif key == http2.MAX_FRAME_SIZE:
                if not http2.DEFAULT_MAX_FRAME <= value <= 0xFFFFFF:
                    raise ConnectionError_(http2.PROTOCOL_ERROR, "bad SETTINGS_MAX_FRAME_SIZE")
                self.peer_max_frame = value
            elif key == http2.ENABLE_PUSH and value > 1:
                raise ConnectionError_(http2.PROTOCOL_ERROR, "bad SETTINGS_ENABLE_PUSH")
        self._write(http2.frame(http2.SETTINGS, http2.ACK, 0))
        if grown:
            self._pump_blocked()

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionError_(http2.FRAME_SIZE_ERROR, "WINDOW_UPDATE of bad length")
        increment = http2.u32(payload)
        if not stream_id:
            if not increment:
                raise ConnectionError_(http2.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self.send_window += increment
            if self.send_window > http2.MAX_WINDOW:
                raise ConnectionError_(http2.FLOW_CONTROL_ERROR, "connection window overflow")
            self._pump_blocked()
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        stream.send_window += increment
        if not increment or stream.send_window > http2.MAX_WINDOW:
            # RFC 9113 6.9: a stream error, PROTOCOL_ERROR for 0, else FLOW_CONTROL_ERROR
            code = http2.FLOW_CONTROL_ERROR if increment else http2.PROTOCOL_ERROR
            self._reset_for_client(stream_id, code)
            self._cancel(stream)
            return
        self._pump(stream)

    def _on_ping(self, flags: int, stream_id: int, payload: bytes) -> None:
        if stream_id:
            raise ConnectionError_(http2.PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise ConnectionError_(http2.FRAME_SIZE_ERROR, "PING of bad length")
        self._control_frame()
        if flags & http2.ACK:
            if payload == KEEPALIVE_OPAQUE and self.ping_ack_timer is not None:
                self.ping_ack_timer.cancel()
                self.ping_ack_timer = None
            elif payload == GOAWAY_OPAQUE:
                self._last_goaway()
            return
        limits = self.limits
        now = self.loop.time()
        idle = not self.streams and not limits.permit_without_calls
        interval = 7200.0 if idle else limits.min_recv_ping_interval
        if now - self.last_ping_received < interval:
            self.ping_strikes += 1
        self.last_ping_received = now
        if limits.max_ping_strikes and self.ping_strikes > limits.max_ping_strikes:
            raise ConnectionError_(http2.ENHANCE_YOUR_CALM, "too_many_pings")
        self._write(http2.frame(http2.PING, http2.ACK, 0, payload))

    def _on_reset(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ConnectionError_(http2.FRAME_SIZE_ERROR, "RST_STREAM of bad length")
        if not stream_id or stream_id > self.last_stream:
            raise ConnectionError_(http2.PROTOCOL_ERROR, "RST_STREAM on an idle stream")
        stream = self.streams.get(stream_id)
        if stream is None:
            self._control_frame()
        elif not self.resets.spend():
            raise ConnectionError_(http2.ENHANCE_YOUR_CALM, "too many streams reset")
        else:
            self._cancel(stream)

    def _control_frame(self) -> None:
        """Count a frame that carries no request data (see :data:`MAX_CONTROL_FRAMES`)."""
        if not self.control_frames.spend():
            raise ConnectionError_(http2.ENHANCE_YOUR_CALM, "too many control frames")

    def _reset_for_client(self, stream_id: int, code: int) -> None:
        """RST_STREAM ``code`` for the client's stream error, counted as a reset (see
        :data:`MAX_RESETS`)."""
        if not self.resets.spend():
            raise ConnectionError_(http2.ENHANCE_YOUR_CALM, "too many stream errors")
        self._write(http2.rst_stream(stream_id, code))
        self.reset_sent.append(stream_id)

    # --- calls

    def _open(self, stream_id: int, headers: list[tuple[str, str]], end_stream: bool) -> None:
        stream = Stream(stream_id, self.peer_window)
        stream.remote_closed = end_stream
        self.streams[stream_id] = stream
        fields = dict(headers)
        if fields.get(":method") != "POST":
            self._refuse(stream, 405)
            return
        if not fields.get("content-type", "").startswith("application/grpc"):
            self._refuse(stream, 415)
            return
        stream.metadata = framing.call_metadata(headers)
        encoding = fields.get("grpc-encoding")
        if encoding not in (None, "identity", "gzip", "deflate"):
            self._finish(
                stream,
                12,
                f"Compression algorithm '{encoding}' is not supported",
                framing.ACCEPT_ENCODING,
            )
            return
        stream.encoding = encoding
        stream.gzip = bool(self.limits.zlib_level) and "gzip" in fields.get(
            "grpc-accept-encoding", ""
        )
        path = fields.get(":path", "")
        route = self.server.routes.get(path)
        if route is None:
            self._finish(stream, _UNIMPLEMENTED, "Method not found!")
            return
        refusal = self.server.refusal(path, stream.metadata)
        if refusal is not None:
            self._finish(stream, _UNAVAILABLE, refusal)
            return
        stream.route = route
        timeout = fields.get("grpc-timeout")
        if timeout is not None:
            seconds = framing.timeout_seconds(timeout)
            if seconds is None:
                self._finish(stream, _INVALID, f"malformed grpc-timeout '{timeout}'")
                return
            stream.deadline = self.loop.call_later(seconds, self._expire, stream)
        method = route[0]
        if method.request_streaming or method.response_streaming:
            stream.inbox = asyncio.Queue()
            self._run(stream, self._streaming(stream))
        if end_stream:
            self._end_of_requests(stream)

    def _take_messages(self, stream: Stream) -> None:
        """Hand the stream's complete request messages to its call; a compressed one
        that is large once inflated finishes inflating in a worker thread
        (:meth:`_inflate`), and the messages after it wait in ``stream.body``."""
        if stream.inflating is not None or stream.finished:
            return
        try:
            messages, pending = framing.take_messages(
                stream.body, self.limits.max_receive, stream.encoding, INLINE_INFLATE
            )
        except framing.MessageError as exc:
            self._finish(stream, exc.code.value[0], exc.details)
            return
        self._deliver(stream, messages)
        if pending is not None:
            stream.inflating = pending
            task = self.loop.create_task(self._inflate(stream, pending))
            self.inflations.add(task)
            task.add_done_callback(self.inflations.discard)

    def _deliver(self, stream: Stream, messages: list[bytes]) -> None:
        if stream.inbox is not None:
            for message in messages:
                stream.inbox.put_nowait(message)
        else:
            stream.messages += messages

    async def _inflate(self, stream: Stream, inflation: framing.Inflation) -> None:
        """Finish inflating a message off the event loop, then go on with the stream."""
        try:
            whole = await self.loop.run_in_executor(self.server.inflater(), inflation.finish)
        except framing.MessageError as exc:
            stream.inflating = None
            self._finish(stream, exc.code.value[0], exc.details)
            return
        except Exception:  # a bug here fails this call, not the connection
            log.exception("inflating a gRPC message failed")
            stream.inflating = None
            self._finish(stream, _INTERNAL, INTERNAL_TEXT)
            return
        stream.inflating = None
        if not whole or stream.finished:  # cancelled, reset, expired or connection gone
            return
        self._deliver(stream, [inflation.result()])
        self._take_messages(stream)
        if stream.inflating is None and not stream.finished:
            if stream.remote_closed:
                self._requests_ended(stream)
            else:
                self._return_credit(stream)
        self._flush_soon()

    def _end_of_requests(self, stream: Stream) -> None:
        stream.remote_closed = True
        if stream.finished:  # answered already; trailers may wait for credit
            return
        if stream.inflating is None:  # else _inflate goes on once the message is whole
            self._requests_ended(stream)

    def _requests_ended(self, stream: Stream) -> None:
        if stream.body:
            self._finish(stream, _INVALID, "the request ended inside a message")
        elif stream.inbox is not None:
            stream.inbox.put_nowait(None)
        elif len(stream.messages) != 1:
            self._finish(
                stream,
                _INVALID,
                f"a unary call needs one request message, got {len(stream.messages)}",
            )
        else:
            self._run(stream, self._unary(stream, stream.messages.pop()))

    def _run(self, stream: Stream, call: Any) -> None:
        stream.task = task = self.loop.create_task(call)

        def done(_: Any) -> None:
            if not task.cancelled() and task.exception() is not None:
                log.error("gRPC call failed", exc_info=task.exception())
                self._finish(stream, _INTERNAL, INTERNAL_TEXT)

        task.add_done_callback(done)

    async def _unary(self, stream: Stream, data: bytes) -> None:
        assert stream.route is not None
        method, handler = stream.route
        context = calls.CallContext(stream.metadata)
        code, reply = await calls.run_unary(handler, method, data, context)
        if code != calls.OK:
            self._finish(stream, code, reply.decode())
        elif self._send_message(stream, reply) is not False:
            self._finish(stream, _OK, "")

    async def _streaming(self, stream: Stream) -> None:
        assert stream.route is not None and stream.inbox is not None
        method, handler = stream.route
        inbox = stream.inbox

        async def requests() -> Any:
            while (data := await inbox.get()) is not None:
                self._return_credit(stream)
                self._flush_soon()
                yield data

        def send(data: bytes) -> Awaitable[Any] | None:
            if self._send_message(stream, data) is False:
                raise calls.Aborted(
                    grpc.StatusCode.RESOURCE_EXHAUSTED, _too_large(len(data), self.limits.max_send)
                )
            if stream.writable is not None and not stream.writable.is_set():
                return stream.writable.wait()
            return None

        context = calls.CallContext(stream.metadata, send)
        code, details = await calls.run_streaming(handler, method, requests(), context, send)
        self._finish(stream, code, details)

    def _expire(self, stream: Stream) -> None:
        stream.deadline = None
        if stream.finished:
            return
        self._finish(stream, _DEADLINE_EXCEEDED, "Deadline Exceeded")
        if stream.task is not None:
            stream.task.cancel()
        self._flush_soon()

    def _refuse(self, stream: Stream, status: int) -> None:
        """Answer a request that is not gRPC with a bare HTTP status."""
        stream.finished = True
        self._send_headers(stream.id, http2.status(status), end_stream=True)
        self._closed_locally(stream)

    # --- sending

    def _send_headers(self, stream_id: int, block: bytes, end_stream: bool) -> None:
        if self.table_update_due:
            block = http2.TABLE_SIZE_ZERO + block
            self.table_update_due = False
        self._write(http2.header_frames(stream_id, block, end_stream, self.peer_max_frame))
        self._sent_something()

    def _send_message(self, stream: Stream, data: bytes) -> bool | None:
        """Queue one response message; False when it is over the size limit."""
        if stream.finished:
            return None
        if len(data) > self.limits.max_send:
            self._finish(stream, _RESOURCE_EXHAUSTED, _too_large(len(data), self.limits.max_send))
            return False
        if not stream.headers_sent:
            block = framing.GZIP_RESPONSE_HEADERS if stream.gzip else framing.RESPONSE_HEADERS
            self._send_headers(stream.id, block, end_stream=False)
            stream.headers_sent = True
        for part in framing.frame_message(data, self.limits.zlib_level, stream.gzip):
            stream.outbox.append(memoryview(part))
            stream.outbox_size += len(part)
        self._pump(stream)
        self._flush_soon()
        return None

    def _finish(self, stream: Stream, code: int, details: str, extra: bytes = b"") -> None:
        """End a call with its status (after the messages still waiting for credit)."""
        if stream.finished:
            return
        stream.finished = True
        if stream.inflating is not None:
            stream.inflating.cancel()
        if stream.deadline is not None:
            stream.deadline.cancel()
            stream.deadline = None
        if code == 0 and stream.headers_sent:
            block = framing.OK_TRAILERS
        else:
            block = framing.trailers(code, details, stream.headers_sent, extra)
        if stream.headers_sent:
            stream.trailers = block
            self._pump(stream)
        else:
            self._send_headers(stream.id, block, end_stream=True)
            self._closed_locally(stream)
        self._flush_soon()

    def _pump(self, stream: Stream) -> None:
        """Send what the windows allow of a stream's queue, then its trailers."""
        outbox = stream.outbox
        while outbox and self.send_window > 0 and stream.send_window > 0:
            chunk = outbox[0]
            size = min(len(chunk), self.send_window, stream.send_window, self.peer_max_frame)
            if size == len(chunk):
                outbox.popleft()
            else:
                outbox[0] = chunk[size:]
                chunk = chunk[:size]
            self._write(_data_header(size, stream.id))
            self._write(chunk)
            self.send_window -= size
            stream.send_window -= size
            stream.outbox_size -= size
        if outbox:
            self.blocked.add(stream)
        else:
            self.blocked.discard(stream)
            if stream.trailers is not None:
                block, stream.trailers = stream.trailers, None
                self._send_headers(stream.id, block, end_stream=True)
                self._closed_locally(stream)
        self._sent_something()
        self._update_writable(stream)

    def _pump_blocked(self) -> None:
        for stream in list(self.blocked):
            if self.send_window <= 0:
                break
            self._pump(stream)
        self._flush_soon()

    def _update_writable(self, stream: Stream) -> None:
        full = self.paused or stream.outbox_size > OUTBOX_LIMIT
        if full and stream.writable is None:
            stream.writable = asyncio.Event()
        elif not full and stream.writable is not None:
            stream.writable.set()
            stream.writable = None

    def _return_credit(self, stream: Stream) -> None:
        if stream.remote_closed or stream.unacked < STREAM_WINDOW // 4:
            return
        if stream.inflating is not None:  # held back until the message is whole
            return
        if stream.inbox is not None and stream.inbox.qsize() >= INBOX_LIMIT:
            return
        self._write(http2.window_update(stream.id, stream.unacked))
        stream.unacked = 0

    def _closed_locally(self, stream: Stream) -> None:
        """Our END_STREAM went out: stop the client's sending if it has not finished."""
        if not stream.remote_closed:
            self._write(http2.rst_stream(stream.id, http2.NO_ERROR))
            self.reset_sent.append(stream.id)
        self._forget(stream)

    def _forget(self, stream: Stream) -> None:
        stream.finished = True
        if stream.inflating is not None:
            stream.inflating.cancel()
        self.streams.pop(stream.id, None)
        self.blocked.discard(stream)
        if stream.deadline is not None:
            stream.deadline.cancel()
        if stream.writable is not None:
            stream.writable.set()
        if self.goaway_sent and not self.streams:
            self._half_close()

    def _cancel(self, stream: Stream) -> None:
        self._forget(stream)
        if stream.task is not None:
            stream.task.cancel()

    def _sent_something(self) -> None:
        self.ping_strikes = 0
        self.last_ping_received = float("-inf")
        self.pings_without_data = 0

    # --- output

    def _write(self, data: bytes | memoryview) -> None:
        self.out.append(data)

    def _flush_soon(self) -> None:
        if not self.flush_scheduled and self.out:
            self.flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self.flush_scheduled = False
        if self.out and self.transport is not None and not self.transport.is_closing():
            data = b"".join(self.out)
            self.out = []
            self.transport.write(data)
        else:
            self.out = []

    def _close(self) -> None:
        self._flush()
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def _half_close(self) -> None:
        """After the last GOAWAY and the last call: send what is queued and our end of
        the stream; drop what the client still sends until it closes or LINGER_S pass
        (closing on unread bytes would reset the connection and could lose the end of
        the answers)."""
        if self.closing:
            return
        transport = self.transport
        if transport is None or not transport.can_write_eof():  # TLS: a plain close
            self._close()
            return
        self._flush()
        self.closing = True
        transport.write_eof()
        self.timers.append(self.loop.call_later(LINGER_S, transport.close))

    def _fail(self, code: int, debug: str) -> None:
        """A connection error: GOAWAY with ``code``, close after what is queued."""
        log.warning("gRPC connection closed: %s", debug)
        self._write(http2.goaway(self.last_stream, code, debug.encode()))
        self._close()

    # --- connection lifetime

    def _keepalive(self) -> None:
        """Every ``keepalive_time``: PING a connection with calls (or any, when permitted);
        no ACK within ``keepalive_timeout`` closes it."""
        limits = self.limits
        self.keepalive_timer = self.loop.call_later(limits.keepalive_time, self._keepalive)
        if self.ping_ack_timer is not None or not (self.streams or limits.permit_without_calls):
            return
        if (
            limits.max_pings_without_data
            and self.pings_without_data >= limits.max_pings_without_data
        ):
            return
        self.pings_without_data += 1
        self._write(http2.frame(http2.PING, 0, 0, KEEPALIVE_OPAQUE))
        self._flush()
        self.ping_ack_timer = self.loop.call_later(limits.keepalive_timeout, self._close)

    def _age_out(self) -> None:
        self.drain()
        grace = self.limits.max_connection_age_grace
        if grace is not None:
            self.timers.append(self.loop.call_later(grace, self.abort_calls))

    def drain(self) -> None:
        """Begin a graceful shutdown: GOAWAY naming the largest stream id, and a PING
        whose acknowledgement (or GOAWAY_PING_TIMEOUT) brings the last GOAWAY."""
        if self.draining or self.closing:
            return
        self.draining = True
        self._write(http2.goaway(MAX_STREAM_ID, http2.NO_ERROR))
        self._write(http2.frame(http2.PING, 0, 0, GOAWAY_OPAQUE))
        self._flush()
        self.timers.append(self.loop.call_later(GOAWAY_PING_TIMEOUT, self._last_goaway))

    def _last_goaway(self) -> None:
        """GOAWAY naming the last stream opened: the calls started finish, a stream
        opened after it is refused; the connection half-closes after the last call."""
        if self.goaway_sent or self.closing:
            return
        self.goaway_sent = True
        self._write(http2.goaway(self.last_stream, http2.NO_ERROR))
        if not self.streams:
            self._half_close()
        else:
            self._flush()

    def abort_calls(self) -> None:
        """End every call still running with UNAVAILABLE, and close."""
        for stream in list(self.streams.values()):
            self._finish(stream, _UNAVAILABLE, "the server is shutting down")
            self._cancel(stream)
        self._close()


def _unpad(flags: int, payload: bytes) -> bytes:
    if not flags & http2.PADDED:
        return payload
    if not payload or payload[0] >= len(payload):
        raise ConnectionError_(http2.PROTOCOL_ERROR, "bad padding")
    return payload[1 : len(payload) - payload[0]]


def _data_header(size: int, stream_id: int) -> bytes:
    return bytes(
        (size >> 16 & 0xFF, size >> 8 & 0xFF, size & 0xFF, http2.DATA, 0)
    ) + stream_id.to_bytes(4, "big")


def _too_large(size: int, limit: int) -> str:
    return f"Sent message larger than max ({size} vs. {limit})"


class Http2GrpcServer:
    """Listens on one address and serves the routes' RPCs on every connection."""

    def __init__(
        self,
        routes: dict[str, Route],
        limits: ConnectionLimits,
        restrictions: dict[str, tuple[str, str]],
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.routes = routes
        self.limits = limits
        self.restrictions = restrictions
        self.ssl_context = ssl_context
        self.connections: set[Connection] = set()
        self.listener: asyncio.Server | None = None
        #: Set by :meth:`drain`: a connection made after it drains at once.
        self.draining = False
        self._idle = asyncio.Event()
        self._inflater: ThreadPoolExecutor | None = None
        self._refused = 0
        self._refused_logged = float("-inf")

    def inflater(self) -> ThreadPoolExecutor:
        """The threads that inflate large compressed messages (started on first use)."""
        if self._inflater is None:
            self._inflater = ThreadPoolExecutor(
                INFLATE_THREADS, thread_name_prefix="despina-grpc-inflate"
            )
        return self._inflater

    def refusal(self, path: str, metadata: tuple[tuple[str, Any], ...]) -> str | None:
        """Why a restricted method may not be called with this metadata, or None."""
        rule = self.restrictions.get(path)
        if rule is None:
            return None
        header, expected = rule
        if any(k == header and v == expected for k, v in metadata):
            return None
        return f"This protocol is restricted, expecting header '{header}'"

    async def start(self, host: str, port: int, reuse_port: bool) -> int:
        """Bind and listen; the bound port. OSError when the address cannot be bound."""
        loop = asyncio.get_running_loop()
        self.listener = await loop.create_server(
            lambda: Connection(self),
            host.strip("[]") or None,
            port,
            ssl=self.ssl_context,
            reuse_port=reuse_port or None,
            backlog=1024,
        )
        return int(self.listener.sockets[0].getsockname()[1])

    def connection_refused(self) -> None:
        """Count a connection closed for ``--grpc-max-connections``; log the count at
        most once per :data:`FLOOD_WINDOW`."""
        self._refused += 1
        now = asyncio.get_running_loop().time()
        if now - self._refused_logged >= FLOOD_WINDOW:
            log.warning(
                "gRPC connections refused: %d since the last report, %d open "
                "(--grpc-max-connections=%d)",
                self._refused,
                len(self.connections),
                self.limits.max_connections,
            )
            self._refused, self._refused_logged = 0, now

    def connection_closed(self) -> None:
        if not self.connections:
            self._idle.set()

    def drain(self) -> None:
        """Stop listening; every connection begins its graceful shutdown
        (:meth:`Connection.drain`), and so does one accepted just before, as it is made."""
        self.draining = True
        if self.listener is not None:
            stop_listening(self.listener, lambda: Connection(self), self.ssl_context)
        for connection in list(self.connections):
            connection.drain()

    async def stop(self, grace: float) -> None:
        """:meth:`drain` unless draining; calls still running get ``grace`` seconds, then
        UNAVAILABLE."""
        self.drain()
        await asyncio.sleep(0)  # a socket accepted just before reaches connection_made
        if self.connections:
            self._idle.clear()
            try:
                await asyncio.wait_for(self._idle.wait(), grace)
            except TimeoutError:
                for connection in list(self.connections):
                    connection.abort_calls()
                await self._closed_within(1.0)
        if self.listener is not None:
            await self.listener.wait_closed()
        if self._inflater is not None:
            # inflations still running were cancelled with their connections: each
            # stops after its current step
            self._inflater.shutdown(wait=False, cancel_futures=True)
            self._inflater = None

    async def _closed_within(self, seconds: float) -> None:
        """Wait for the connections to close; drop those still open after ``seconds``
        (a client that reads nothing would hold a closing transport open for ever)."""
        try:
            await asyncio.wait_for(self._idle.wait(), seconds)
        except TimeoutError:
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.abort()
            await asyncio.sleep(0)  # their connection_lost runs before the loop may stop


def tls_context(cert: str, key: str, root: str | None, mutual: bool) -> ssl.SSLContext:
    """A server TLS context offering ALPN ``h2``; client certificates required when
    ``mutual`` (checked against ``root``), requested and checked when only ``root`` is
    given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["h2"])
    if root:
        context.load_verify_locations(root)
        context.verify_mode = ssl.CERT_REQUIRED if mutual else ssl.CERT_OPTIONAL
    return context
