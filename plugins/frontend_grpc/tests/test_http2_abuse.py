"""Despina's own HTTP/2 server under attack (RFC 9113 section 10.5): floods of resets,
SETTINGS, PINGs and CONTINUATION frames, HPACK and gzip bombs, window overflows and too
many streams, each sent by a raw client over a real socket. Each attack gets its GOAWAY
(or its stream error) and the server goes on answering a tritonclient on a new connection.

The floods send a little more than the server's limits; ``DESPINA_H2_FLOOD_FULL=1`` sends
the full-size campaigns instead (10,000 rapid resets, 500,000 SETTINGS or PINGs, 100,000
CONTINUATION frames), and ``pytest -s`` prints how many frames went out before the GOAWAY
came back and how long that took.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import grpc
import hpack
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from despina.inference.request_bodies import INFLATE_STEP
from despina.testing import RunningServer
from despina_frontend_grpc import h2_frames
from despina_frontend_grpc.h2_limits import (
    MAX_CONCURRENT_STREAMS,
    MAX_CONTINUATIONS,
    MAX_CONTROL_FRAMES,
    MAX_HEADER_BLOCK,
    MAX_RESETS,
)

Serve = Callable[..., RunningServer]
INFER = "/inference.GRPCInferenceService/ModelInfer"
#: Seconds any single socket read may wait.
TIMEOUT = 10.0
FULL = os.environ.get("DESPINA_H2_FLOOD_FULL") == "1"
#: Frames sent between two looks for the server's GOAWAY.
BATCH = 100
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
_U32 = struct.Struct(">I")


def flood_size(full: int, limit: int) -> int:
    """The attack's size: ``full`` with DESPINA_H2_FLOOD_FULL=1, else just over ``limit``."""
    return full if FULL else limit + 2 * BATCH


def request_headers(*extra: tuple[str, str]) -> list[tuple[str, str]]:
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", INFER),
        (":authority", "127.0.0.1"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *extra,
    ]


@dataclass
class Flood:
    """How a flood went: frames sent until the GOAWAY was seen (or the connection
    broke), and the seconds that took."""

    sent: int
    seconds: float


class RawClient:
    """An HTTP/2 client of hand-built frames: what it sends is exactly what a test says;
    what comes back is kept as frames. It starts once the server's SETTINGS came and were
    acknowledged (the server's budget of control frames has counted two). It
    returns no credit: ``reads`` opens its windows to the maximum at the start instead."""

    def __init__(self, running: RunningServer, reads: bool = False) -> None:
        assert running.grpc_port is not None
        self.sock = socket.create_connection(("127.0.0.1", running.grpc_port), timeout=TIMEOUT)
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.buffer = bytearray()
        self.frames: list[tuple[int, int, int, bytes]] = []
        #: Stream -> the header fields the server sent on it (headers and trailers)
        self.fields: dict[int, dict[str, str]] = {}
        self.closed = False
        self.next_stream = 1
        if reads:
            windows = h2_frames.settings_frame(
                ((h2_frames.INITIAL_WINDOW_SIZE, h2_frames.MAX_WINDOW),)
            )
            windows += h2_frames.window_update(0, h2_frames.MAX_WINDOW - h2_frames.DEFAULT_WINDOW)
        else:
            windows = h2_frames.settings_frame(())
        self.sock.sendall(h2_frames.PREFACE + windows)
        self.read_until(lambda: bool(self.frames))  # the server's SETTINGS, acknowledged

    def block(self, *extra: tuple[str, str]) -> bytes:
        """A request header block (this connection's HPACK state)."""
        return bytes(self.encoder.encode(request_headers(*extra)))

    def new_stream(self) -> int:
        sid, self.next_stream = self.next_stream, self.next_stream + 2
        return sid

    def send(self, *frames: bytes) -> None:
        self.sock.sendall(b"".join(frames))

    def flood(self, frames: Iterable[bytes]) -> Flood:
        """Send ``frames`` in batches, looking for a GOAWAY after each; stop at the GOAWAY
        or when the server stops reading."""
        start = time.perf_counter()
        sent, batch = 0, []
        for data in frames:
            batch.append(data)
            if len(batch) < BATCH:
                continue
            try:
                self.send(*batch)
            except OSError:
                break
            sent += len(batch)
            batch.clear()
            self._poll()
            if self.goaway() is not None or self.closed:
                break
        else:
            if batch:
                try:
                    self.send(*batch)
                    sent += len(batch)
                except OSError:
                    pass
        self.read_until(lambda: self.goaway() is not None)
        return Flood(sent, time.perf_counter() - start)

    def _poll(self) -> None:
        while not self.closed and select.select([self.sock], [], [], 0)[0]:
            self._receive()

    def _receive(self) -> None:
        try:
            data = self.sock.recv(1 << 16)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return
        self.buffer += data
        while len(self.buffer) >= 9:
            size = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + size:
                break
            kind, flags = self.buffer[3], self.buffer[4]
            sid = _U32.unpack_from(self.buffer, 5)[0] & 0x7FFF_FFFF
            payload = bytes(self.buffer[9 : 9 + size])
            del self.buffer[: 9 + size]
            self.frames.append((kind, flags, sid, payload))
            if kind == h2_frames.HEADERS:  # the server splits no block we provoke here
                fields = self.fields.setdefault(sid, {})
                fields.update((str(k), str(v)) for k, v in self.decoder.decode(payload))
            elif kind == h2_frames.SETTINGS and not flags & h2_frames.ACK:
                self.sock.sendall(h2_frames.frame(h2_frames.SETTINGS, h2_frames.ACK, 0))

    def read_until(self, done: Callable[[], bool]) -> None:
        """Read until ``done()`` or the connection closes (each read within TIMEOUT)."""
        while not done() and not self.closed:
            self._receive()

    def read_to_close(self) -> None:
        """Read until the server closes the connection (failing after TIMEOUT)."""
        self.read_until(lambda: False)
        assert self.closed

    def goaway(self) -> int | None:
        """The error code of the server's GOAWAY, None before one came."""
        for kind, _, _, payload in self.frames:
            if kind == h2_frames.GOAWAY:
                return int(_U32.unpack_from(payload, 4)[0])
        return None

    def goaway_debug(self) -> bytes:
        return next(p[8:] for k, _, _, p in self.frames if k == h2_frames.GOAWAY)

    def goaway_last_stream(self) -> int:
        return next(
            int(_U32.unpack(p[:4])[0]) for k, _, _, p in self.frames if k == h2_frames.GOAWAY
        )

    def acks(self, kind: int) -> int:
        """How many SETTINGS or PING acknowledgements came."""
        return sum(1 for k, flags, _, _ in self.frames if k == kind and flags & h2_frames.ACK)

    def resets(self) -> dict[int, int]:
        """Stream -> error code of each RST_STREAM the server sent."""
        return {
            sid: int(_U32.unpack_from(payload)[0])
            for kind, _, sid, payload in self.frames
            if kind == h2_frames.RST_STREAM
        }

    def headers(self, sid: int) -> dict[str, str]:
        """The header fields the server sent on ``sid``, trailers included."""
        return self.fields.get(sid, {})

    def close(self) -> None:
        self.sock.close()


def assert_serves(running: RunningServer) -> None:
    """A tritonclient on a new connection gets add_sub's right answers."""
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        for _ in range(3):
            result = client.infer("add_sub", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + data)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), data - data)


def report(attack: str, flood: Flood, read: int) -> None:
    """Print the figures: ``read`` is the flood's frames the server read, the last
    answered with GOAWAY."""
    print(
        f"\n{attack}: GOAWAY answering frame {read} of the flood; the client had "
        f"sent {flood.sent} when it saw it, {flood.seconds * 1000:.0f} ms after its first"
    )


def goaway_after_flood(client: RawClient, frames: Iterable[bytes], code: int) -> Flood:
    flood = client.flood(frames)
    assert client.goaway() == code, client.frames[-3:]
    client.read_to_close()
    return flood


# --- floods


def test_rapid_reset_gets_goaway(serve: Serve, connect: Callable[..., RawClient]) -> None:
    running = serve()
    client = connect(running)

    def frames() -> Iterator[bytes]:
        for _ in range(flood_size(10_000, MAX_RESETS)):
            sid = client.new_stream()
            yield h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, sid, client.block())
            yield h2_frames.rst_stream(sid, h2_frames.CANCEL)

    flood = goaway_after_flood(client, frames(), h2_frames.ENHANCE_YOUR_CALM)
    assert client.goaway_debug() == b"too many streams reset"
    opened = (client.goaway_last_stream() + 1) // 2
    assert opened == MAX_RESETS + 1
    report("rapid reset (HEADERS + RST_STREAM pairs)", flood, 2 * opened)
    assert_serves(running)


def test_settings_flood_gets_goaway(serve: Serve, connect: Callable[..., RawClient]) -> None:
    running = serve()
    client = connect(running)
    settings = h2_frames.settings_frame(((h2_frames.ENABLE_PUSH, 0),))
    frames = (settings for _ in range(flood_size(500_000, MAX_CONTROL_FRAMES)))
    flood = goaway_after_flood(client, frames, h2_frames.ENHANCE_YOUR_CALM)
    assert client.goaway_debug() == b"too many control frames"
    # the budget also counted the client's first SETTINGS (acknowledged) and its ACK of
    # the server's; the frame past the budget got no ACK
    assert client.acks(h2_frames.SETTINGS) == MAX_CONTROL_FRAMES - 1
    report("SETTINGS flood", flood, client.acks(h2_frames.SETTINGS))
    assert_serves(running)


@pytest.mark.parametrize("strikes", [None, 0], ids=["ping-strikes-default", "ping-strikes-off"])
def test_ping_flood_gets_goaway(
    serve: Serve, connect: Callable[..., RawClient], strikes: int | None
) -> None:
    """With the default ping policy the third early PING is too many (tritonserver's
    ``--grpc-http2-max-ping-strikes=2``); without one, the control-frame budget ends it."""
    flags = () if strikes is None else (f"--grpc-http2-max-ping-strikes={strikes}",)
    running = serve(*flags)
    client = connect(running)
    ping = h2_frames.frame(h2_frames.PING, 0, 0, b"flooding")
    frames = (ping for _ in range(flood_size(500_000, MAX_CONTROL_FRAMES)))
    flood = goaway_after_flood(client, frames, h2_frames.ENHANCE_YOUR_CALM)
    answered = client.acks(h2_frames.PING)
    if strikes is None:
        assert client.goaway_debug() == b"too_many_pings"
        assert answered == 3
        report("PING flood (default ping strikes)", flood, answered + 1)
    else:
        assert client.goaway_debug() == b"too many control frames"
        assert answered == MAX_CONTROL_FRAMES - 2  # after its SETTINGS and SETTINGS ACK
        report("PING flood (--grpc-http2-max-ping-strikes=0)", flood, answered + 1)
    assert_serves(running)


def test_empty_continuation_flood_gets_goaway(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    running = serve()
    client = connect(running)
    sid = client.new_stream()
    empty = h2_frames.frame(h2_frames.CONTINUATION, 0, sid)

    def frames() -> Iterator[bytes]:
        yield h2_frames.frame(h2_frames.HEADERS, 0, sid, client.block())  # no END_HEADERS
        for _ in range(flood_size(100_000, MAX_CONTINUATIONS)):
            yield empty

    flood = goaway_after_flood(client, frames(), h2_frames.ENHANCE_YOUR_CALM)
    assert client.goaway_debug() == b"too many CONTINUATION frames"
    report("CONTINUATION flood (HEADERS, then empty frames)", flood, 1 + MAX_CONTINUATIONS + 1)
    assert_serves(running)


def test_header_block_over_the_limit_gets_goaway(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    running = serve()
    client = connect(running)
    sid = client.new_stream()
    piece = b"\0" * (MAX_HEADER_BLOCK // 4)  # never decoded: the size alone is refused
    client.send(
        h2_frames.frame(h2_frames.HEADERS, 0, sid, client.block()),
        *(h2_frames.frame(h2_frames.CONTINUATION, 0, sid, piece) for _ in range(5)),
    )
    client.read_to_close()
    assert client.goaway() == h2_frames.ENHANCE_YOUR_CALM
    assert client.goaway_debug() == b"header block too large"
    # one HEADERS frame over the limit, with END_HEADERS
    other = connect(running)
    big = other.block(("x-big", "v" * MAX_HEADER_BLOCK))
    other.send(h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, other.new_stream(), big))
    other.read_to_close()
    assert other.goaway() == h2_frames.ENHANCE_YOUR_CALM
    assert_serves(running)


def test_hpack_bomb_gets_goaway(serve: Serve, connect: Callable[..., RawClient]) -> None:
    """A 14 KB block whose 10,000 one-byte references to a 4 KB table entry decode to
    40 MB of headers: refused once past MAX_HEADER_BLOCK of decoded headers."""
    running = serve()
    client = connect(running)
    block = client.block(("x-bomb", "a" * 4000))  # the last field: dynamic index 62
    block += bytes((0x80 | 62,)) * 10_000
    start = time.perf_counter()
    client.send(
        h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, client.new_stream(), block)
    )
    client.read_to_close()
    seconds = time.perf_counter() - start
    assert client.goaway() == h2_frames.ENHANCE_YOUR_CALM
    assert client.goaway_debug() == b"header list too large"
    print(f"\nHPACK bomb ({len(block)} bytes -> 40 MB): GOAWAY in {seconds * 1000:.0f} ms")
    assert_serves(running)


# --- flow control and concurrency


def test_connection_window_overflow_is_flow_control_error(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    running = serve()
    client = connect(running)
    client.send(h2_frames.window_update(0, h2_frames.MAX_WINDOW))  # 65,535 + 2^31-1
    client.read_to_close()
    assert client.goaway() == h2_frames.FLOW_CONTROL_ERROR
    assert_serves(running)


def test_stream_window_overflow_is_a_stream_error(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    running = serve()
    client = connect(running)
    sid = client.new_stream()
    client.send(
        h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, sid, client.block()),
        h2_frames.window_update(sid, h2_frames.MAX_WINDOW),
    )
    client.read_until(lambda: sid in client.resets())
    assert client.resets()[sid] == h2_frames.FLOW_CONTROL_ERROR
    # a WINDOW_UPDATE of 0 on a stream is its PROTOCOL_ERROR
    zero = client.new_stream()
    client.send(
        h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, zero, client.block()),
        h2_frames.window_update(zero, 0),
    )
    client.read_until(lambda: zero in client.resets())
    assert client.resets()[zero] == h2_frames.PROTOCOL_ERROR
    # the connection goes on: a PING is answered
    client.send(h2_frames.frame(h2_frames.PING, 0, 0, b"still up"))
    client.read_until(lambda: any(f[0] == h2_frames.PING for f in client.frames))
    assert client.goaway() is None


def test_initial_window_setting_overflowing_a_stream_is_flow_control_error(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    running = serve()
    client = connect(running)
    sid = client.new_stream()
    client.send(
        h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, sid, client.block()),
        h2_frames.window_update(
            sid, h2_frames.MAX_WINDOW - h2_frames.DEFAULT_WINDOW
        ),  # at the maximum
        h2_frames.settings_frame(((h2_frames.INITIAL_WINDOW_SIZE, h2_frames.DEFAULT_WINDOW + 1),)),
    )
    client.read_to_close()
    assert client.goaway() == h2_frames.FLOW_CONTROL_ERROR
    assert_serves(running)


def test_streams_beyond_max_concurrent_streams_are_refused(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    running = serve()
    client = connect(running)
    kind, _, _, payload = client.frames[0]
    assert kind == h2_frames.SETTINGS
    assert (h2_frames.MAX_CONCURRENT_STREAMS, MAX_CONCURRENT_STREAMS) in h2_frames.parse_settings(
        payload
    )
    # streams left open (no END_STREAM): the one past the limit is refused
    opened = [client.new_stream() for _ in range(MAX_CONCURRENT_STREAMS + 1)]
    client.send(
        *(
            h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, sid, client.block())
            for sid in opened
        )
    )
    client.read_until(lambda: bool(client.resets()))
    assert client.resets() == {opened[-1]: h2_frames.REFUSED_STREAM}
    # once one ends, a new stream is served
    client.send(h2_frames.rst_stream(opened[0], h2_frames.CANCEL))
    sid = client.new_stream()
    message = grpc_message(add_sub_request())
    client.send(
        h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, sid, client.block()),
        h2_frames.frame(h2_frames.DATA, h2_frames.END_STREAM, sid, message),
    )
    client.read_until(lambda: "grpc-status" in client.headers(sid))
    assert client.headers(sid)["grpc-status"] == "0"
    # a client that keeps opening streams past the limit spends the reset budget
    more = (
        h2_frames.frame(
            h2_frames.HEADERS, h2_frames.END_HEADERS, client.new_stream(), client.block()
        )
        for _ in range(MAX_RESETS + 2 * BATCH)
    )
    flood = goaway_after_flood(client, more, h2_frames.ENHANCE_YOUR_CALM)
    assert client.goaway_debug() == b"too many stream errors"
    # the first takes the free slot; the budget counted one refused and one reset above
    refused = (client.goaway_last_stream() - sid) // 2 - 1
    assert refused == MAX_RESETS - 1
    report("streams past MAX_CONCURRENT_STREAMS", flood, refused)
    assert_serves(running)


# --- gzip bombs


def add_sub_request() -> bytes:
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name="add_sub")
    data = np.ones((1, 16), np.float32)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=data.shape)
        request.raw_input_contents.append(data.tobytes())
    return bytes(request.SerializeToString())


def grpc_message(data: bytes, compressed: bool = False) -> bytes:
    return bytes((compressed,)) + _U32.pack(len(data)) + data


def gzip_zeros(size: int) -> bytes:
    deflater = zlib.compressobj(9, wbits=31)
    return deflater.compress(bytes(size)) + deflater.flush()


#: The limit the bombs are sent to, and what they inflate to.
LIMIT = 4 << 20
INFLATED = 10 << 20


def send_gzip_call(client: RawClient, message: bytes) -> int:
    sid = client.new_stream()
    client.send(
        h2_frames.frame(
            h2_frames.HEADERS, h2_frames.END_HEADERS, sid, client.block(("grpc-encoding", "gzip"))
        ),
        *(
            h2_frames.frame(h2_frames.DATA, 0, sid, message[i : i + 16384])
            for i in range(0, len(message), 16384)
        ),
        h2_frames.frame(h2_frames.DATA, h2_frames.END_STREAM, sid),
    )
    return sid


def test_gzip_bomb_is_refused_while_inflating(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    running = serve(f"--grpc-max-message-size={LIMIT}")
    client = connect(running)
    # its gzip trailer claims 0 bytes: refused by inflating, not by the trailer's size
    bomb = gzip_zeros(INFLATED)[:-4] + bytes(4)
    assert len(bomb) < 16 << 10
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        sid = send_gzip_call(client, grpc_message(bomb, compressed=True))
        client.read_until(lambda: "grpc-status" in client.headers(sid))
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert client.headers(sid)["grpc-status"] == str(RESOURCE_EXHAUSTED)
    assert client.headers(sid)["grpc-message"] == "Decompressed message larger than max"
    print(
        f"\ngzip bomb ({len(bomb)} bytes -> {INFLATED >> 20} MiB, limit {LIMIT >> 20} MiB, "
        f"RESOURCE_EXHAUSTED in {seconds * 1000:.0f} ms, "
        f"Python heap peak +{peak / (1 << 20):.1f} MiB"
    )
    # the output stops one step past the limit (a step's output buffer, the reads'
    # buffers beside): not the bomb's 10 MiB, nor the limit twice (inflated, then copied
    # into one bytes object, as a single zlib call would)
    assert peak < LIMIT + 4 * INFLATE_STEP < 2 * LIMIT < INFLATED
    assert_serves(running)


def test_compressed_message_over_the_limit_on_the_wire(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    """The length prefix alone refuses it: the rest of the message is never sent."""
    running = serve(f"--grpc-max-message-size={LIMIT}")
    client = connect(running)
    prefix = b"\x01" + _U32.pack(LIMIT + 1)
    sid = send_gzip_call(client, prefix + gzip_zeros(1 << 20)[:1000])
    client.read_until(lambda: "grpc-status" in client.headers(sid))
    assert client.headers(sid)["grpc-status"] == str(RESOURCE_EXHAUSTED)
    assert client.headers(sid)["grpc-message"] == (
        f"Received message larger than max ({LIMIT + 1} vs. {LIMIT})"
    )
    assert_serves(running)


def gzipped_add_sub(rows: int) -> bytes:
    """An add_sub ModelInferRequest of ``rows`` x 16 FP32 twos per input, gzipped."""
    from tritonclient.grpc import service_pb2 as pb

    request = pb.ModelInferRequest(model_name="add_sub")
    data = np.full((rows, 16), 2.0, np.float32)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=data.shape)
        request.raw_input_contents.append(data.tobytes())
    deflater = zlib.compressobj(9, wbits=31)
    return deflater.compress(request.SerializeToString()) + deflater.flush()


def test_gzip_message_under_the_limit_is_served(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    """A compressed request inflating to several steps is served whole."""
    running = serve(f"--grpc-max-message-size={LIMIT}")
    client = connect(running, reads=True)
    from tritonclient.grpc import service_pb2 as pb

    rows = 3 * INFLATE_STEP // (2 * 16 * 4)  # two FP32 inputs: 3 inflate steps
    body = gzipped_add_sub(rows)
    sid = send_gzip_call(client, grpc_message(body, compressed=True))
    client.read_until(lambda: "grpc-status" in client.headers(sid))
    assert client.headers(sid)["grpc-status"] == "0"
    payload = b"".join(p for k, _, s, p in client.frames if k == h2_frames.DATA and s == sid)
    response = pb.ModelInferResponse.FromString(payload[5:])
    out = np.frombuffer(response.raw_output_contents[0], np.float32)
    assert out.shape == (rows * 16,) and (out == 4.0).all()
