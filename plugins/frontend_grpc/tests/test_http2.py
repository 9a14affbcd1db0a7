"""Despina's own HTTP/2 server at the protocol level: a pure-Python HTTP/2 client (``h2``)
on a raw socket, plus hand-built frames (CONTINUATION, padding) h2 would not send itself.

Every socket read has a timeout, so a server that stops answering fails a test instead
of hanging it.
"""

from __future__ import annotations

import gzip
import socket
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import hpack
import numpy as np
import pytest
from despina.testing import RunningServer
from grpc_health.v1 import health_pb2
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    ConnectionTerminated,
    DataReceived,
    PingAckReceived,
    ResponseReceived,
    StreamEnded,
    StreamReset,
    TrailersReceived,
)
from h2.settings import SettingCodes, Settings
from tritonclient.grpc import service_pb2 as pb

Serve = Callable[..., RunningServer]
INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
HEALTH = "/grpc.health.v1.Health/Check"
#: Seconds any single socket read may wait.
TIMEOUT = 10.0
FRAME = struct.Struct(">I")


def text(headers: Iterable[tuple[object, object]] | None) -> dict[str, str]:
    """A header list as a dict of str (h2 and hpack are configured to give str)."""
    return {str(k): str(v) for k, v in headers or ()}


@dataclass
class Reply:
    """What came back on one stream."""

    headers: dict[str, str] = field(default_factory=dict)
    trailers: dict[str, str] = field(default_factory=dict)
    data: bytearray = field(default_factory=bytearray)
    frame_sizes: list[int] = field(default_factory=list)
    ended: bool = False
    reset: int | None = None

    @property
    def grpc_status(self) -> int:
        """The call's status: from the trailers, or the headers of a trailers-only reply."""
        return int((self.trailers or self.headers)["grpc-status"])

    def messages(self) -> list[tuple[int, bytes]]:
        """(compressed flag, payload) of each length-prefixed gRPC message."""
        out, offset = [], 0
        while offset < len(self.data):
            size = FRAME.unpack_from(self.data, offset + 1)[0]
            out.append((self.data[offset], bytes(self.data[offset + 5 : offset + 5 + size])))
            offset += 5 + size
        assert offset == len(self.data)
        return out


class Client:
    """An h2 client connection; ``settings`` are its initial SETTINGS."""

    def __init__(
        self, running: RunningServer, settings: dict[SettingCodes, int] | None = None
    ) -> None:
        assert running.grpc_port is not None
        self.sock = socket.create_connection(("127.0.0.1", running.grpc_port), timeout=TIMEOUT)
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.local_settings = Settings(client=True, initial_values=settings)
        self.conn.initiate_connection()
        self.replies: dict[int, Reply] = {}
        self.raw = bytearray()
        self.pings: list[bytes] = []
        self.goaway: ConnectionTerminated | None = None
        self.closed = False
        #: False: bytes are only recorded in ``raw`` (h2 stops reading at a GOAWAY)
        self.parse = True
        self.flush()

    def flush(self) -> None:
        if data := self.conn.data_to_send():
            self.sock.sendall(data)

    def start(
        self,
        path: str,
        message: bytes | None,
        headers: Iterable[tuple[str, str]] = (),
        method: str = "POST",
        content_type: str = "application/grpc",
        compressed: bool = False,
        pad: int | None = None,
        end: bool = True,
    ) -> int:
        """Open a call; ``message`` None sends headers alone (END_STREAM on them), ``end``
        False leaves the request stream open after the message."""
        sid = self.conn.get_next_available_stream_id()
        fields = [
            (":method", method),
            (":scheme", "http"),
            (":path", path),
            (":authority", "127.0.0.1"),
            ("content-type", content_type),
            ("te", "trailers"),
            *headers,
        ]
        self.replies[sid] = Reply()
        self.conn.send_headers(sid, fields, end_stream=message is None)
        self.flush()
        if message is not None:
            body = bytes((compressed,)) + FRAME.pack(len(message)) + message
            self.send_body(sid, body, pad, end)
        return sid

    def send_body(self, sid: int, body: bytes, pad: int | None = None, end: bool = True) -> None:
        """Send ``body`` (END_STREAM at its end when ``end``) as the windows allow, reading
        meanwhile."""
        view = memoryview(body)
        overhead = 0 if pad is None else pad + 1
        while view:
            room = min(self.conn.local_flow_control_window(sid), self.conn.max_outbound_frame_size)
            room = min(room - overhead, len(view))
            if room <= 0:
                self.receive()
                continue
            self.conn.send_data(sid, bytes(view[:room]), end and room == len(view), pad)
            view = view[room:]
            self.flush()

    def receive(self) -> None:
        """One socket read (at most TIMEOUT seconds), its events recorded."""
        data = self.sock.recv(1 << 20)
        if not data:
            self.closed = True
            return
        self.raw += data
        if not self.parse:
            return
        for event in self.conn.receive_data(data):
            reply = self.replies.get(getattr(event, "stream_id", 0) or 0)
            if isinstance(event, ResponseReceived) and reply:
                reply.headers = text(event.headers)
            elif isinstance(event, TrailersReceived) and reply:
                reply.trailers = text(event.headers)
            elif isinstance(event, DataReceived) and reply:
                reply.data += event.data
                reply.frame_sizes.append(event.flow_controlled_length)
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, StreamEnded) and reply:
                reply.ended = True
            elif isinstance(event, StreamReset) and reply:
                reply.reset = event.error_code
            elif isinstance(event, PingAckReceived):
                self.pings.append(event.ping_data)
            elif isinstance(event, ConnectionTerminated):
                self.goaway = event
        self.flush()

    def wait(self, done: Callable[[], bool]) -> None:
        """Read until ``done()`` (or the server closes, failing the test)."""
        while not done():
            assert not self.closed, "the server closed the connection"
            self.receive()

    def collect(self, *sids: int) -> list[Reply]:
        """Read until every stream in ``sids`` has ended; their replies."""
        self.wait(lambda: all(self.replies[s].ended for s in sids))
        return [self.replies[s] for s in sids]

    def call(self, path: str, message: bytes, **kwargs: Any) -> Reply:
        return self.collect(self.start(path, message, **kwargs))[0]

    def ping(self, opaque: bytes) -> None:
        self.conn.ping(opaque)
        self.flush()
        self.wait(lambda: opaque in self.pings)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def connect() -> Iterator[Callable[..., Client]]:
    """``connect(running, settings)``: a Client closed after the test."""
    opened: list[Client] = []

    def factory(running: RunningServer, settings: dict[SettingCodes, int] | None = None) -> Client:
        opened.append(Client(running, settings))
        return opened[-1]

    yield factory
    for client in opened:
        client.close()


def tensor_request(model: str, datatype: str, *arrays: np.ndarray) -> bytes:
    """A serialized ModelInferRequest with the arrays as raw inputs (named for ``model``)."""
    names = ("INPUT0", "INPUT1") if model == "add_sub" else ("IN",)
    request = pb.ModelInferRequest(model_name=model)
    for name, array in zip(names, arrays, strict=True):
        request.inputs.add(name=name, datatype=datatype, shape=array.shape)
        request.raw_input_contents.append(array.tobytes())
    return bytes(request.SerializeToString())


def add_sub(value: float, rows: int = 1) -> bytes:
    """add_sub with INPUT0 = value and INPUT1 = 1, ``rows`` x 16."""
    a = np.full((rows, 16), value, np.float32)
    return tensor_request("add_sub", "FP32", a, np.ones_like(a))


def outputs(payload: bytes) -> dict[str, np.ndarray]:
    """A ModelInferResponse's raw outputs by name (FP32 or UINT8)."""
    response = pb.ModelInferResponse.FromString(payload)
    dtypes = {"FP32": np.float32, "UINT8": np.uint8}
    return {
        out.name: np.frombuffer(raw, dtypes[out.datatype]).reshape(out.shape)
        for out, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }


def assert_add_sub(reply: Reply, value: float, rows: int = 1) -> None:
    """An OK gRPC reply of add_sub(value): one message, value+1 and value-1."""
    assert reply.headers[":status"] == "200"
    assert reply.headers["content-type"] == "application/grpc"
    assert reply.grpc_status == 0, reply.trailers
    [(flag, payload)] = reply.messages()
    assert flag == 0
    result = outputs(payload)
    np.testing.assert_array_equal(result["OUTPUT0"], np.full((rows, 16), value + 1, np.float32))
    np.testing.assert_array_equal(result["OUTPUT1"], np.full((rows, 16), value - 1, np.float32))


def frames(data: bytes | bytearray) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, stream, payload) of each complete frame in ``data``."""
    out, offset = [], 0
    while offset + 9 <= len(data):
        size = int.from_bytes(data[offset : offset + 3], "big")
        kind, flags = data[offset + 3], data[offset + 4]
        stream = FRAME.unpack_from(data, offset + 5)[0] & 0x7FFF_FFFF
        out.append((kind, flags, stream, bytes(data[offset + 9 : offset + 9 + size])))
        offset += 9 + size
    return out


def raw_replies(data: bytes | bytearray) -> dict[int, Reply]:
    """Each stream's reply in a connection's raw bytes from the server (no padding or
    CONTINUATION expected), read without h2."""
    decoder = hpack.Decoder()
    replies: dict[int, Reply] = {}
    for kind, flags, sid, payload in frames(data):
        reply = replies.setdefault(sid, Reply())
        if kind == 0x0:
            reply.data += payload
        elif kind == 0x1:
            assert flags & 0x4  # END_HEADERS
            fields = text(decoder.decode(payload))
            if reply.headers:
                reply.trailers = fields
            else:
                reply.headers = fields
        reply.ended = reply.ended or (kind in (0x0, 0x1) and bool(flags & 0x1))
    return replies


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + FRAME.pack(stream) + payload


def test_unary_model_infer(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve())
    assert_add_sub(client.call(INFER, add_sub(3.0)), 3.0)


def test_fifty_concurrent_streams_on_one_connection(
    serve: Serve, connect: Callable[..., Client]
) -> None:
    client = connect(serve())
    sids = [client.start(INFER, add_sub(float(i))) for i in range(50)]
    for i, reply in enumerate(client.collect(*sids)):
        assert_add_sub(reply, float(i))


def test_tiny_client_window_gets_a_large_response(
    serve: Serve, connect: Callable[..., Client]
) -> None:
    client = connect(
        serve(),
        {SettingCodes.INITIAL_WINDOW_SIZE: 100, SettingCodes.MAX_FRAME_SIZE: 16384},
    )
    data = (np.arange(1 << 20) % 251).astype(np.uint8).reshape(1, -1)
    reply = client.call(INFER, tensor_request("echo_uint8", "UINT8", data))
    assert reply.grpc_status == 0
    # h2 raises FlowControlError if the server oversends; every DATA frame fit the window
    assert max(reply.frame_sizes) <= 100
    assert len(reply.frame_sizes) > (1 << 20) // 100
    [(_, payload)] = reply.messages()
    np.testing.assert_array_equal(outputs(payload)["OUT"], data)


def test_request_larger_than_the_stream_window(
    serve: Serve, connect: Callable[..., Client]
) -> None:
    client = connect(
        serve(),
        {SettingCodes.INITIAL_WINDOW_SIZE: 1 << 24, SettingCodes.MAX_FRAME_SIZE: 16384},
    )
    client.conn.increment_flow_control_window(1 << 24)
    rows = (8 << 20) // (2 * 16 * 4)  # two FP32 inputs of rows x 16: 8 MiB of tensors
    sid = client.start(INFER, add_sub(2.0, rows))
    reply = client.collect(sid)[0]
    assert max(reply.frame_sizes) <= 16384
    assert_add_sub(reply, 2.0, rows)
    # the server's 4 MiB stream window was refilled with WINDOW_UPDATEs on the stream
    assert any(kind == 0x8 and stream == sid for kind, _, stream, _ in frames(client.raw))


def test_continuation_frames_and_padding(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve())
    sid = client.conn.get_next_available_stream_id()
    client.replies[sid] = Reply()
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", INFER),
        (":authority", "127.0.0.1"),
        ("content-type", "application/grpc"),
        ("x-long-metadata", "v" * 300),
    ]
    # let h2 encode the block (its HPACK state stays right), then re-frame it by hand:
    # padded HEADERS with a priority, and two CONTINUATION frames
    client.conn.send_headers(sid, headers, priority_weight=16)
    [(kind, flags, _, payload)] = frames(client.conn.data_to_send())
    assert kind == 0x1 and flags & 0x20
    priority, block = payload[:5], payload[5:]
    third = len(block) // 3
    pad = 7
    client.sock.sendall(
        frame(0x1, 0x8 | 0x20, sid, bytes((pad,)) + priority + block[:third] + b"\0" * pad)
        + frame(0x9, 0, sid, block[third : 2 * third])
        + frame(0x9, 0x4, sid, block[2 * third :])
    )
    message = add_sub(5.0)
    client.send_body(sid, b"\0" + FRAME.pack(len(message)) + message, pad=20)  # h2 pads DATA
    assert_add_sub(client.collect(sid)[0], 5.0)
    # and the connection goes on with plain frames
    assert_add_sub(client.call(INFER, add_sub(6.0)), 6.0)


def test_server_splits_a_large_header_block(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve())
    name = "m" * 40_000  # its error text makes trailers over the 16 KiB MAX_FRAME_SIZE
    sid = client.start(INFER, pb.ModelInferRequest(model_name=name).SerializeToString())
    reply = client.collect(sid)[0]
    assert reply.grpc_status == 5  # NOT_FOUND
    assert name in reply.headers["grpc-message"]
    kinds = [kind for kind, _, stream, _ in frames(client.raw) if stream == sid]
    assert kinds[0] == 0x1 and kinds.count(0x9) >= 2


def test_ping_is_acknowledged_with_its_data(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve())
    client.ping(b"despina8")
    assert client.pings == [b"despina8"]


def test_reset_stream_leaves_the_connection_serving(
    serve: Serve, connect: Callable[..., Client]
) -> None:
    client = connect(serve())
    sleeping = client.start(INFER, tensor_request("sleep", "FP32", np.array([5.0], np.float32)))
    client.ping(b"received")  # the server has opened the call
    client.conn.reset_stream(sleeping, ErrorCodes.CANCEL)
    client.flush()
    assert_add_sub(client.call(INFER, add_sub(1.0)), 1.0)
    # after the sleep would have ended, nothing came for the reset stream, all else works
    later = client.start(INFER, tensor_request("sleep", "FP32", np.array([6.0], np.float32)))
    reply = client.collect(later)[0]
    assert reply.grpc_status == 0
    assert client.replies[sleeping] == Reply()
    assert client.goaway is None


def test_grpc_timeout_shorter_than_the_call(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve())
    request = tensor_request("sleep", "FP32", np.array([10.0], np.float32))
    reply = client.call(INFER, request, headers=[("grpc-timeout", "200m")])
    assert reply.headers[":status"] == "200"
    assert reply.grpc_status == 4
    assert reply.messages() == []
    assert_add_sub(client.call(INFER, add_sub(1.0)), 1.0)


def test_gzip_request_is_accepted(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve())
    message = gzip.compress(add_sub(4.0))
    reply = client.call(INFER, message, headers=[("grpc-encoding", "gzip")], compressed=True)
    assert_add_sub(reply, 4.0)


def test_unknown_request_encoding(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve())
    reply = client.call(INFER, add_sub(4.0), headers=[("grpc-encoding", "snappy")])
    assert reply.grpc_status == 12
    assert "snappy" in reply.headers["grpc-message"]
    assert "gzip" in reply.headers["grpc-accept-encoding"].split(",")


def test_compressed_response(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve("--grpc-infer-response-compression-level=high"))
    reply = client.call(INFER, add_sub(7.0), headers=[("grpc-accept-encoding", "identity,gzip")])
    assert reply.grpc_status == 0
    assert reply.headers["grpc-encoding"] == "gzip"
    [(flag, payload)] = reply.messages()
    assert flag == 1
    reply.data = bytearray(b"\0" + FRAME.pack(len(gzip.decompress(payload))))
    reply.data += gzip.decompress(payload)
    assert_add_sub(reply, 7.0)
    # a client that does not accept gzip gets plain messages
    assert_add_sub(client.call(INFER, add_sub(8.0)), 8.0)


def test_requests_that_are_not_served(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve())
    unknown = client.call("/inference.GRPCInferenceService/NoSuchMethod", add_sub(1.0))
    assert unknown.headers[":status"] == "200"
    assert unknown.grpc_status == 12
    get = client.collect(client.start(INFER, None, method="GET"))[0]
    assert get.headers[":status"] == "405"
    json = client.call(INFER, add_sub(1.0), content_type="application/json")
    assert json.headers[":status"] == "415"
    assert_add_sub(client.call(INFER, add_sub(1.0)), 1.0)


def test_message_over_the_size_limit(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve("--grpc-max-message-size=1000"))
    reply = client.call(INFER, add_sub(1.0, rows=20))
    assert reply.grpc_status == 8
    assert "larger than max" in reply.headers["grpc-message"]
    assert_add_sub(client.call(INFER, add_sub(1.0)), 1.0)


def test_frames_on_a_stream_the_server_reset_are_ignored(
    serve: Serve, connect: Callable[..., Client]
) -> None:
    client = connect(serve("--grpc-max-message-size=1000"))
    sid = client.start(INFER, add_sub(1.0, rows=20), end=False)  # still sending
    reply = client.collect(sid)[0]
    assert reply.grpc_status == 8
    client.wait(lambda: reply.reset is not None)
    assert reply.reset == 0  # RST_STREAM(NO_ERROR): stop sending
    # what the client sent before it saw the reset (h2 would not send it now)
    block = client.conn.encoder.encode([("x-trailer", "late")])
    client.sock.sendall(frame(0x0, 0, sid, b"late") + frame(0x1, 0x4 | 0x1, sid, block))
    assert_add_sub(client.call(INFER, add_sub(1.0)), 1.0)
    assert client.goaway is None


def test_not_http2_is_closed(serve: Serve, connect: Callable[..., Client]) -> None:
    running = serve()
    assert running.grpc_port is not None
    with socket.create_connection(("127.0.0.1", running.grpc_port), timeout=TIMEOUT) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = bytearray()
        while chunk := sock.recv(65536):
            received += chunk
    goaways = [payload for kind, _, _, payload in frames(received) if kind == 0x7]
    assert [FRAME.unpack_from(p, 4)[0] for p in goaways] == [0x1]  # PROTOCOL_ERROR
    assert_add_sub(connect(running).call(INFER, add_sub(2.0)), 2.0)


def test_stop_sends_goaway_and_answers_running_calls(
    serve: Serve, connect: Callable[..., Client]
) -> None:
    running = serve()
    client = connect(running)
    sleeping = client.start(INFER, tensor_request("sleep", "FP32", np.array([3.0], np.float32)))
    # a stream call whose client never half-closes: still open when the grace ends
    streaming = client.start(STREAM_INFER, add_sub(1.0), end=False)
    client.wait(lambda: bool(client.replies[streaming].data))
    client.parse = False
    stopper = threading.Thread(target=running.stop)
    stopper.start()
    try:
        client.wait(lambda: client.closed)
    finally:
        stopper.join(30)
    received = frames(client.raw)
    # graceful shutdown in two steps: GOAWAY naming the largest stream id with a PING,
    # then (no PING ack from this client: after a bounded wait) the last stream id
    first, goaway = [(i, p) for i, (k, _, _, p) in enumerate(received) if k == 0x7]
    assert FRAME.unpack_from(first[1]) == ((1 << 31) - 1,)
    assert received[first[0] + 1][0] == 0x6  # PING
    assert FRAME.unpack_from(goaway[1]) == (streaming,)  # last stream id
    assert FRAME.unpack_from(first[1], 4) == FRAME.unpack_from(goaway[1], 4) == (0,)  # NO_ERROR
    replies = raw_replies(client.raw)
    answered = replies[sleeping]
    assert answered.ended and answered.grpc_status == 0
    [(_, payload)] = answered.messages()
    assert outputs(payload)["OUT"].tolist() == [3.0]
    # the open stream had its response, then UNAVAILABLE after the GOAWAY and the grace
    cut = replies[streaming]
    [(_, payload)] = cut.messages()
    assert pb.ModelStreamInferResponse.FromString(payload).error_message == ""
    assert cut.ended and cut.grpc_status == 14
    assert "shutting down" in cut.trailers["grpc-message"]
    last = max(i for i, (k, _, sid, _) in enumerate(received) if k == 0x1 and sid == streaming)
    assert goaway[0] < last


def test_stop_refuses_streams_after_the_last_goaway(
    serve: Serve, connect: Callable[..., Client]
) -> None:
    """Graceful shutdown: after the first GOAWAY (largest stream id, with a PING) the
    server still reads; a call the client opened before it acknowledged the PING is
    served (the last GOAWAY names it) or, past the bounded wait for the acknowledgement,
    refused with REFUSED_STREAM, which a client may retry; a call opened after the last
    GOAWAY is refused. The running call is answered, then the connection closes. (The
    frontend's drain, which a stopping server runs once its models are stopped, is run
    here while a call runs.)"""
    running = serve()
    client = connect(running)
    sleeping = client.start(INFER, tensor_request("sleep", "FP32", np.array([5.0], np.float32)))
    client.ping(b"received")  # the server has opened the call
    client.parse = False  # from here the raw bytes; the server's PING is answered by hand
    grpc = next(f for f in running.server.frontends if f.name == "grpc")
    running.loop.call_soon_threadsafe(grpc.drain)
    stopper = threading.Thread(target=running.stop)
    stopper.start()
    try:

        def goaways() -> list[int]:
            return [FRAME.unpack_from(p)[0] for k, _, _, p in frames(client.raw) if k == 0x7]

        def pings() -> list[bytes]:
            return [p for k, f, _, p in frames(client.raw) if k == 0x6 and not f & 0x1]

        client.wait(lambda: bool(pings()))
        assert goaways() == [(1 << 31) - 1]
        racing = client.start(INFER, add_sub(1.0))  # sent before the PING's acknowledgement
        client.sock.sendall(frame(0x6, 0x1, 0, pings()[0]))
        client.wait(lambda: len(goaways()) == 2)
        late = client.start(INFER, add_sub(2.0))  # after the last GOAWAY
        client.wait(lambda: client.closed)
    finally:
        stopper.join(30)
    last = goaways()[1]
    assert last in (sleeping, racing)
    replies = raw_replies(client.raw)
    resets = {sid: FRAME.unpack_from(p)[0] for k, _, sid, p in frames(client.raw) if k == 0x3}
    # never served: REFUSED_STREAM, or, on a loaded machine, the connection closed (its
    # last call answered) before the server read it
    assert resets.get(late, 0x7) == 0x7
    assert late not in replies or not replies[late].headers
    if last == racing:  # served: run, or refused if the models had begun to stop by then
        reply = replies[racing]
        assert reply.grpc_status == 0 or (
            reply.grpc_status == 14
            and reply.headers["grpc-message"].startswith("Server is stopping")
        ), reply
    else:
        assert resets[racing] == 0x7
    assert replies[sleeping].ended and replies[sleeping].grpc_status == 0


def test_a_connection_queued_as_the_port_closes_is_served(serve: Serve) -> None:
    """A connection the kernel completed in the listener's queue, a call sent on it, as
    the drain closes the port (asyncio had not accepted it yet) is served, not reset."""
    running = serve()
    frontend = next(f for f in running.server.frontends if f.name == "grpc")

    async def connect_then_drain() -> tuple[Client, int]:
        client = Client(running)  # the loop is busy here: queued, not accepted yet
        sid = client.start(INFER, add_sub(4.0))
        frontend.http2_server.drain()
        return client, sid

    client, sid = running.call(connect_then_drain())
    try:
        client.parse = False  # raw: h2 would stop reading at the GOAWAY
        client.wait(lambda: client.closed)
    finally:
        client.close()
    assert_add_sub(raw_replies(client.raw)[sid], 4.0)
    assert [k for k, _, _, _ in frames(client.raw)].count(0x7) == 2  # the two GOAWAYs


def test_header_table_size_zero(serve: Serve, connect: Callable[..., Client]) -> None:
    running = serve()
    # from the start: h2 refuses a header block that leaves its table above 0
    client = connect(running, {SettingCodes.HEADER_TABLE_SIZE: 0})
    assert_add_sub(client.call(INFER, add_sub(1.0)), 1.0)
    # changed later: the next block opens with a dynamic table size update (0x20)
    other = connect(running)
    assert_add_sub(other.call(INFER, add_sub(1.0)), 1.0)
    other.conn.update_settings({SettingCodes.HEADER_TABLE_SIZE: 0})
    other.flush()
    sid = other.start(INFER, add_sub(2.0))
    assert_add_sub(other.collect(sid)[0], 2.0)
    blocks = [p for kind, _, s, p in frames(other.raw) if kind == 0x1 and s == sid]
    assert blocks[0][:1] == b"\x20"


def test_health_check_calls(serve: Serve, connect: Callable[..., Client]) -> None:
    client = connect(serve())
    request = health_pb2.HealthCheckRequest(service="").SerializeToString()
    for _ in range(3):
        reply = client.call(HEALTH, request)
        assert reply.grpc_status == 0
        [(_, payload)] = reply.messages()
        status = health_pb2.HealthCheckResponse.FromString(payload).status
        assert status == health_pb2.HealthCheckResponse.SERVING
