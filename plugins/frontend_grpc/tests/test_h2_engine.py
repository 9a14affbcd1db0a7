"""The HTTP/2 engine without I/O: real frame bytes in, the events its handler hears and
the frame bytes it queues out. No socket and no event loop: time is a fake clock."""

from __future__ import annotations

import struct
from typing import Any

import hpack
import pytest
from despina_frontend_grpc import h2_frames
from despina_frontend_grpc.connection_limits import ConnectionLimits
from despina_frontend_grpc.h2_engine import H2Engine, H2Error, H2Stream
from despina_frontend_grpc.h2_limits import (
    CONNECTION_WINDOW,
    FLOOD_WINDOW,
    GOAWAY_OPAQUE,
    KEEPALIVE_OPAQUE,
    MAX_CONTINUATIONS,
    MAX_CONTROL_FRAMES,
    MAX_FRAME,
    MAX_HEADER_BLOCK,
    MAX_RESETS,
    MAX_STREAM_ID,
    STREAM_WINDOW,
)

_U32 = struct.Struct(">I")
Frame = tuple[int, int, int, bytes]
HEADERS = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/pkg.Service/Method"),
    (":authority", "127.0.0.1"),
    ("content-type", "application/grpc"),
]


class Stream(H2Stream):
    __slots__ = ("hold",)

    def __init__(self, stream_id: int, send_window: int) -> None:
        super().__init__(stream_id, send_window)
        self.hold = False

    def holds_credit(self) -> bool:
        return self.hold


class Recorder:
    """A handler that records what it hears."""

    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def stream_opened(self, stream: Stream, headers: list[tuple[str, str]]) -> None:
        self.events.append(("opened", stream.id, headers))

    def stream_data(self, stream: Stream, data: bytes) -> None:
        self.events.append(("data", stream.id, data))

    def stream_ended(self, stream: Stream) -> None:
        self.events.append(("ended", stream.id))

    def stream_sent(self, stream: Stream) -> None:
        pass

    def stream_closed(self, stream: Stream, reset: bool) -> None:
        self.events.append(("closed", stream.id, reset))

    def drained(self) -> None:
        self.events.append(("drained",))

    def kinds(self) -> list[object]:
        return [event[0] for event in self.events]


class Peer:
    """An engine and the client side of its connection: HPACK encoding and a frame
    parser for what the engine queues."""

    def __init__(self, **limits: Any) -> None:
        self.now = 0.0
        self.handler = Recorder()
        policy = ConnectionLimits(max_receive=1 << 20, max_send=1 << 20, **limits)
        self.engine: H2Engine[Stream] = H2Engine(self.handler, Stream, policy, self.clock)
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()

    def clock(self) -> float:
        return self.now

    def connect(self, *frames: bytes) -> list[Frame]:
        """The preface, an empty SETTINGS and ``frames``; what the engine answers."""
        self.engine.start()
        self.read()
        self.send(h2_frames.PREFACE + h2_frames.settings_frame(()), *frames)
        return self.read()

    def send(self, *frames: bytes) -> H2Error | None:
        return self.engine.receive(b"".join(frames))

    def read(self) -> list[Frame]:
        """The frames the engine queued since the last read."""
        data, frames = self.engine.data_to_send(), []
        while data:
            size = int.from_bytes(data[:3], "big")
            sid = _U32.unpack_from(data, 5)[0] & 0x7FFF_FFFF
            frames.append((data[3], data[4], sid, data[9 : 9 + size]))
            data = data[9 + size :]
        return frames

    def block(self, headers: list[tuple[str, str]] = HEADERS) -> bytes:
        return bytes(self.encoder.encode(headers))

    def open(self, sid: int, end_stream: bool = False) -> bytes:
        flags = h2_frames.END_HEADERS | (h2_frames.END_STREAM if end_stream else 0)
        return h2_frames.frame(h2_frames.HEADERS, flags, sid, self.block())

    def stream(self, sid: int) -> Stream:
        return self.engine.streams[sid]


def goaway(frames: list[Frame]) -> tuple[int, int, bytes]:
    """(last stream, error code, debug) of the one GOAWAY among ``frames``."""
    (payload,) = [p for kind, _, _, p in frames if kind == h2_frames.GOAWAY]
    return _U32.unpack_from(payload)[0], _U32.unpack_from(payload, 4)[0], payload[8:]


def resets(frames: list[Frame]) -> dict[int, int]:
    return {sid: _U32.unpack(p)[0] for kind, _, sid, p in frames if kind == h2_frames.RST_STREAM}


def data_frames(frames: list[Frame]) -> list[tuple[int, bytes]]:
    return [(sid, p) for kind, _, sid, p in frames if kind == h2_frames.DATA]


def ping(opaque: bytes, ack: bool = False) -> bytes:
    return h2_frames.frame(h2_frames.PING, h2_frames.ACK if ack else 0, 0, opaque)


def test_start_advertises_settings_and_window() -> None:
    peer = Peer(max_concurrent_streams=7)
    peer.engine.start()
    settings, window = peer.read()
    assert settings[:3] == (h2_frames.SETTINGS, 0, 0)
    assert dict(h2_frames.parse_settings(settings[3])) == {
        h2_frames.MAX_CONCURRENT_STREAMS: 7,
        h2_frames.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
        h2_frames.MAX_FRAME_SIZE: MAX_FRAME,
        h2_frames.MAX_HEADER_LIST_SIZE: MAX_HEADER_BLOCK,
    }
    assert window == (
        h2_frames.WINDOW_UPDATE,
        0,
        0,
        _U32.pack(CONNECTION_WINDOW - h2_frames.DEFAULT_WINDOW),
    )


def test_preface_in_pieces_then_settings_acknowledged() -> None:
    peer = Peer()
    data = h2_frames.PREFACE + h2_frames.settings_frame(((h2_frames.INITIAL_WINDOW_SIZE, 100),))
    for byte in data:  # one byte at a time: the preface and the frame are reassembled
        assert peer.send(bytes((byte,))) is None
    assert peer.read() == [(h2_frames.SETTINGS, h2_frames.ACK, 0, b"")]
    assert peer.engine.peer_window == 100


def test_bad_preface_is_a_protocol_error() -> None:
    peer = Peer()
    error = peer.send(b"GET / HTTP/1.1\r\n")
    assert error is not None and error.code == h2_frames.PROTOCOL_ERROR
    assert goaway(peer.read()) == (0, h2_frames.PROTOCOL_ERROR, b"not an HTTP/2 preface")


def test_headers_over_continuations_and_padded_data() -> None:
    peer = Peer()
    peer.connect()
    block = peer.block()
    # HEADERS padded (3 bytes) with a priority block, then two CONTINUATION frames
    first = b"\x03" + b"\x00\x00\x00\x00\x10" + block[:5] + b"\x00" * 3
    peer.send(
        h2_frames.frame(h2_frames.HEADERS, h2_frames.PADDED | h2_frames.PRIORITY_FLAG, 1, first),
        h2_frames.frame(h2_frames.CONTINUATION, 0, 1, block[5:9]),
        h2_frames.frame(h2_frames.CONTINUATION, h2_frames.END_HEADERS, 1, block[9:]),
        h2_frames.frame(
            h2_frames.DATA, h2_frames.PADDED | h2_frames.END_STREAM, 1, b"\x02abc\x00\x00"
        ),
    )
    assert peer.handler.events == [
        ("opened", 1, HEADERS),
        ("data", 1, b"abc"),
        ("ended", 1),
    ]
    assert peer.stream(1).remote_closed
    assert peer.stream(1).unacked == 6  # padding counts against the window


def test_end_stream_on_headers_ends_the_stream() -> None:
    peer = Peer()
    peer.connect(peer.open(1, end_stream=True))
    assert peer.handler.events == [("opened", 1, HEADERS), ("ended", 1)]


def test_client_trailers_end_the_stream() -> None:
    peer = Peer()
    peer.connect(peer.open(1))
    trailers = h2_frames.frame(
        h2_frames.HEADERS, h2_frames.END_HEADERS | h2_frames.END_STREAM, 1, peer.block([("x", "y")])
    )
    assert peer.send(trailers) is None
    assert peer.handler.kinds() == ["opened", "ended"]


@pytest.mark.parametrize(
    ("frame", "code", "debug"),
    [
        (h2_frames.frame(h2_frames.DATA, 0, 0, b"x"), h2_frames.PROTOCOL_ERROR, "DATA on stream 0"),
        (h2_frames.frame(h2_frames.DATA, 0, 9, b"x"), h2_frames.PROTOCOL_ERROR, "DATA on an idle stream"),
        (h2_frames.frame(h2_frames.PUSH_PROMISE, 0, 1, b"\0" * 4), h2_frames.PROTOCOL_ERROR, "clients cannot push"),
        (h2_frames.goaway(0, 0)[:5] + b"\0\0\0\1" + h2_frames.goaway(0, 0)[9:], h2_frames.PROTOCOL_ERROR, "GOAWAY on a stream"),
        (h2_frames.frame(h2_frames.WINDOW_UPDATE, 0, 0, b"\0"), h2_frames.FRAME_SIZE_ERROR, "WINDOW_UPDATE of bad length"),
        (h2_frames.window_update(0, 0), h2_frames.PROTOCOL_ERROR, "WINDOW_UPDATE of 0"),
        (h2_frames.window_update(0, h2_frames.MAX_WINDOW), h2_frames.FLOW_CONTROL_ERROR, "connection window overflow"),
        (h2_frames.frame(h2_frames.SETTINGS, 0, 0, b"\0" * 5), h2_frames.FRAME_SIZE_ERROR, "SETTINGS payload length is not a multiple of 6"),
        (h2_frames.settings_frame(((h2_frames.MAX_FRAME_SIZE, 100),)), h2_frames.PROTOCOL_ERROR, "bad SETTINGS_MAX_FRAME_SIZE"),
        (h2_frames.settings_frame(((h2_frames.INITIAL_WINDOW_SIZE, 1 << 31),)), h2_frames.FLOW_CONTROL_ERROR, "initial window too large"),
        (h2_frames.frame(h2_frames.PING, 0, 1, b"\0" * 8), h2_frames.PROTOCOL_ERROR, "PING on a stream"),
        (h2_frames.frame(h2_frames.PING, 0, 0, b"\0" * 7), h2_frames.FRAME_SIZE_ERROR, "PING of bad length"),
        (h2_frames.rst_stream(5, 0), h2_frames.PROTOCOL_ERROR, "RST_STREAM on an idle stream"),
        (h2_frames.frame(h2_frames.DATA, h2_frames.PADDED, 1, b"\x05ab"), h2_frames.PROTOCOL_ERROR, "bad padding"),
        (b"\x10\x00\x01" + h2_frames.frame(h2_frames.DATA, 0, 1)[3:], h2_frames.FRAME_SIZE_ERROR, "frame larger than MAX_FRAME_SIZE"),
    ],
)  # fmt: skip
def test_connection_errors(frame: bytes, code: int, debug: str) -> None:
    peer = Peer()
    peer.connect(peer.open(1))
    error = peer.send(frame)
    assert error is not None and (error.code, str(error)) == (code, debug)
    assert goaway(peer.read()) == (1, code, debug.encode())


def test_new_stream_ids_must_grow_and_be_odd() -> None:
    peer = Peer()
    peer.connect(peer.open(3))
    error = peer.send(peer.open(1))
    assert error is not None and str(error) == "bad new stream id 1"
    peer = Peer()
    peer.connect()
    error = peer.send(peer.open(2))
    assert error is not None and str(error) == "bad new stream id 2"


def test_a_frame_between_headers_and_continuation_is_an_error() -> None:
    peer = Peer()
    peer.connect(h2_frames.frame(h2_frames.HEADERS, 0, 1, peer.block()[:3]))
    error = peer.send(ping(b"12345678"))
    assert error is not None and str(error) == "expected a CONTINUATION frame"


def test_continuation_flood_is_enhance_your_calm() -> None:
    peer = Peer()
    peer.connect(h2_frames.frame(h2_frames.HEADERS, 0, 1, peer.block()[:3]))
    empty = h2_frames.frame(h2_frames.CONTINUATION, 0, 1)
    assert peer.send(empty * MAX_CONTINUATIONS) is None
    error = peer.send(empty)
    assert error is not None and error.code == h2_frames.ENHANCE_YOUR_CALM
    assert str(error) == "too many CONTINUATION frames"


def test_header_block_too_large_and_hpack_bomb() -> None:
    peer = Peer()
    peer.connect()
    big = h2_frames.frame(
        h2_frames.HEADERS, h2_frames.END_HEADERS, 1, b"\0" * (MAX_HEADER_BLOCK + 1)
    )
    error = peer.send(big)
    assert error is not None and (error.code, str(error)) == (
        h2_frames.ENHANCE_YOUR_CALM,
        "header block too large",
    )
    # a small block that decodes to more than the header list limit
    peer = Peer()
    peer.connect()
    encoder = hpack.Encoder()
    first = bytes(encoder.encode([("bomb", "x" * 4000)]))  # indexed into the table
    again = bytes(encoder.encode([("bomb", "x" * 4000)])) * 20  # 20 one-byte references
    peer.send(h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, 1, first))
    error = peer.send(h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, 3, again))
    assert error is not None and (error.code, str(error)) == (
        h2_frames.ENHANCE_YOUR_CALM,
        "header list too large",
    )


def test_data_waits_for_the_clients_windows() -> None:
    peer = Peer()
    settings = h2_frames.settings_frame(((h2_frames.INITIAL_WINDOW_SIZE, 10),))
    peer.connect(settings, peer.open(1, end_stream=True))
    stream = peer.stream(1)
    peer.engine.send_headers(1, h2_frames.STATUS_200, end_stream=False)
    peer.engine.send_data(stream, [b"a" * 15, b"b" * 10])
    peer.engine.send_trailers(stream, h2_frames.literal(b"grpc-status", b"0"))
    frames = peer.read()
    assert [f[0] for f in frames] == [h2_frames.HEADERS, h2_frames.DATA]
    assert data_frames(frames) == [(1, b"a" * 10)]
    assert stream.outbox_size == 15 and peer.engine.blocked == {stream}
    peer.send(h2_frames.window_update(1, 12))
    assert data_frames(peer.read()) == [(1, b"a" * 5), (1, b"b" * 7)]
    # the client's larger initial window grows the stream's window by the difference
    peer.send(h2_frames.settings_frame(((h2_frames.INITIAL_WINDOW_SIZE, 20),)))
    frames = peer.read()
    assert data_frames(frames) == [(1, b"b" * 3)]
    kind, flags, sid, _ = frames[-1]
    assert (kind, flags & h2_frames.END_STREAM, sid) == (h2_frames.HEADERS, h2_frames.END_STREAM, 1)
    assert not resets(frames)  # the client had ended its side
    assert peer.handler.events[-1] == ("closed", 1, False)
    assert peer.engine.streams == {}


def test_an_empty_message_body_sends_no_zero_length_data_frame() -> None:
    """An empty message is its 5-byte prefix alone: gRPC clients end a connection that
    sends them zero-length DATA frames ("Too many zero length data frames")."""
    peer = Peer()
    peer.connect(peer.open(1, end_stream=True))
    stream = peer.stream(1)
    peer.engine.send_headers(1, h2_frames.STATUS_200, end_stream=False)
    peer.engine.send_data(stream, [b"\x00\x00\x00\x00\x00", b""])
    peer.engine.send_trailers(stream, h2_frames.literal(b"grpc-status", b"0"))
    assert data_frames(peer.read()) == [(1, b"\x00\x00\x00\x00\x00")]


def test_connection_window_and_peer_frame_size_bound_data() -> None:
    peer = Peer()
    settings = h2_frames.settings_frame(
        ((h2_frames.INITIAL_WINDOW_SIZE, 1 << 20), (h2_frames.MAX_FRAME_SIZE, 20_000))
    )
    peer.connect(settings, peer.open(1))
    peer.engine.send_data(peer.stream(1), [b"x" * 70_000])
    sizes = [len(p) for _, p in data_frames(peer.read())]
    assert sizes == [20_000, 20_000, 20_000, h2_frames.DEFAULT_WINDOW - 60_000]
    peer.send(h2_frames.window_update(0, 100_000))
    assert [len(p) for _, p in data_frames(peer.read())] == [70_000 - h2_frames.DEFAULT_WINDOW]


def test_ending_before_the_client_resets_its_side_and_ignores_late_frames() -> None:
    peer = Peer()
    peer.connect(peer.open(1))
    peer.engine.end_with_headers(peer.stream(1), h2_frames.status(415))
    assert resets(peer.read()) == {1: h2_frames.NO_ERROR}
    assert peer.handler.events[-1] == ("closed", 1, False)
    # frames the client sent before it saw the reset are no error
    assert peer.send(h2_frames.frame(h2_frames.DATA, h2_frames.END_STREAM, 1, b"late")) is None
    assert peer.send(peer.open(1)) is None
    assert peer.handler.kinds() == ["opened", "closed"]


def test_credit_returned_per_quarter_window_unless_held() -> None:
    peer = Peer()
    quarter = STREAM_WINDOW // 4
    peer.connect(peer.open(1), peer.open(3))
    peer.send(h2_frames.frame(h2_frames.DATA, 0, 1, b"x" * (quarter - 1)))
    assert peer.read() == []
    peer.send(h2_frames.frame(h2_frames.DATA, 0, 1, b"x"))
    assert peer.read() == [(h2_frames.WINDOW_UPDATE, 0, 1, _U32.pack(quarter))]
    held = peer.stream(3)
    held.hold = True
    peer.send(h2_frames.frame(h2_frames.DATA, 0, 3, b"y" * quarter))
    assert peer.read() == []
    held.hold = False
    peer.engine.return_credit(held)
    assert peer.read() == [(h2_frames.WINDOW_UPDATE, 0, 3, _U32.pack(quarter))]


def test_connection_credit_returned_per_half_window() -> None:
    peer = Peer()
    chunk = h2_frames.frame(h2_frames.DATA, 0, 1, b"z" * MAX_FRAME)
    peer.connect(peer.open(1))
    peer.stream(1).hold = True
    for _ in range(CONNECTION_WINDOW // 2 // MAX_FRAME - 1):
        peer.send(chunk)
    assert peer.read() == []
    peer.send(chunk)
    assert peer.read() == [(h2_frames.WINDOW_UPDATE, 0, 0, _U32.pack(CONNECTION_WINDOW // 2))]


def test_window_update_of_zero_on_a_stream_resets_it() -> None:
    peer = Peer()
    peer.connect(peer.open(1), peer.open(3))
    assert peer.send(h2_frames.window_update(1, 0)) is None
    assert peer.send(h2_frames.window_update(3, h2_frames.MAX_WINDOW)) is None
    assert resets(peer.read()) == {1: h2_frames.PROTOCOL_ERROR, 3: h2_frames.FLOW_CONTROL_ERROR}
    assert peer.handler.events[-2:] == [("closed", 1, True), ("closed", 3, True)]


def test_streams_beyond_the_limit_are_refused() -> None:
    peer = Peer(max_concurrent_streams=2)
    frames = peer.connect(peer.open(1), peer.open(3), peer.open(5))
    assert resets(frames) == {5: h2_frames.REFUSED_STREAM}
    assert sorted(peer.engine.streams) == [1, 3]


@pytest.mark.parametrize("window_passes", [False, True])
def test_rapid_reset_budget(window_passes: bool) -> None:
    peer = Peer()
    peer.connect()
    sid = 1
    for _ in range(MAX_RESETS):
        assert peer.send(peer.open(sid), h2_frames.rst_stream(sid, h2_frames.CANCEL)) is None
        sid += 2
    assert peer.handler.events[-1] == ("closed", sid - 2, True)
    if window_passes:
        peer.now += FLOOD_WINDOW
    error = peer.send(peer.open(sid), h2_frames.rst_stream(sid, h2_frames.CANCEL))
    if window_passes:
        assert error is None
    else:
        assert error is not None and (error.code, str(error)) == (
            h2_frames.ENHANCE_YOUR_CALM,
            "too many streams reset",
        )


def test_control_frame_flood_is_enhance_your_calm() -> None:
    peer = Peer(max_ping_strikes=0)
    peer.connect()  # its SETTINGS counted one control frame
    for _ in range(MAX_CONTROL_FRAMES - 1):
        assert peer.send(ping(b"flooding")) is None
    error = peer.send(h2_frames.frame(h2_frames.PRIORITY, 0, 1, b"\0" * 5))
    assert error is not None and (error.code, str(error)) == (
        h2_frames.ENHANCE_YOUR_CALM,
        "too many control frames",
    )


def test_ping_strikes_until_we_send_something() -> None:
    peer = Peer(max_ping_strikes=1, min_recv_ping_interval=300.0)
    peer.connect(peer.open(1))
    assert peer.send(ping(b"first...")) is None  # no earlier ping: no strike
    assert peer.read() == [(h2_frames.PING, h2_frames.ACK, 0, b"first...")]
    assert peer.send(ping(b"second..")) is None  # strike 1
    peer.engine.send_headers(1, h2_frames.STATUS_200, end_stream=False)  # strikes forgiven
    assert peer.send(ping(b"third...")) is None
    assert peer.send(ping(b"fourth..")) is None  # strike 1
    peer.now += 299.0
    error = peer.send(ping(b"fifth..."))  # strike 2
    assert error is not None and str(error) == "too_many_pings"
    assert goaway(peer.read())[1] == h2_frames.ENHANCE_YOUR_CALM


def test_keepalive_rules() -> None:
    peer = Peer(max_pings_without_data=2)
    peer.connect()
    assert not peer.engine.send_keepalive()  # no calls, and pings without calls not permitted
    peer.send(peer.open(1))
    assert peer.engine.send_keepalive()
    assert peer.read() == [(h2_frames.PING, 0, 0, KEEPALIVE_OPAQUE)]
    assert not peer.engine.send_keepalive()  # the first awaits its ACK
    peer.send(ping(KEEPALIVE_OPAQUE, ack=True))
    assert not peer.engine.keepalive_pending
    assert peer.engine.send_keepalive()
    peer.send(ping(KEEPALIVE_OPAQUE, ack=True))
    assert not peer.engine.send_keepalive()  # two pings without data
    peer.engine.send_headers(1, h2_frames.STATUS_200, end_stream=False)
    assert peer.engine.send_keepalive()


def test_two_step_goaway_drain() -> None:
    peer = Peer()
    peer.connect(peer.open(1, end_stream=True))
    assert peer.engine.drain()
    assert not peer.engine.drain()
    frames = peer.read()
    assert goaway(frames) == (MAX_STREAM_ID, h2_frames.NO_ERROR, b"")
    assert frames[-1] == (h2_frames.PING, 0, 0, GOAWAY_OPAQUE)
    peer.send(peer.open(3, end_stream=True))  # opened before the client saw the GOAWAY
    assert 3 in peer.engine.streams
    peer.send(ping(GOAWAY_OPAQUE, ack=True))
    assert goaway(peer.read()) == (3, h2_frames.NO_ERROR, b"")
    peer.send(peer.open(5))  # after the last GOAWAY: refused, to be retried elsewhere
    assert resets(peer.read()) == {5: h2_frames.REFUSED_STREAM}
    for sid in (1, 3):
        peer.engine.end_with_headers(peer.stream(sid), h2_frames.status(200))
    assert peer.handler.kinds()[-3:] == ["closed", "closed", "drained"]


def test_last_goaway_on_timeout_without_streams_drains_at_once() -> None:
    peer = Peer()
    peer.connect()
    peer.engine.drain()
    peer.read()
    peer.engine.last_goaway()  # the owner's timer: the PING was not acknowledged
    assert goaway(peer.read()) == (0, h2_frames.NO_ERROR, b"")
    assert peer.handler.events == [("drained",)]
    peer.engine.last_goaway()
    assert peer.read() == []


def test_nothing_is_read_once_closing() -> None:
    peer = Peer()
    peer.connect()
    peer.engine.closing = True
    assert peer.send(b"garbage that is no frame") is None
    assert peer.read() == []
