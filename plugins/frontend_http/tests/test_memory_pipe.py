"""The in-memory pipe between the front and aiohttp: delivery (in order, from the loop,
in chunks), reading paused and resumed, write flow control, EOF, close and abort
(``connection_lost`` once on each side), aiohttp's request handler on it, and through the
front: aiohttp held back while a client reads slowly, the client's address and TLS."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trustme
from aiohttp import web
from despina.testing import RunningServer
from despina_frontend_http.memory_pipe import CHUNK, MemoryTransport, connect

from .helpers import front_of


class Recorder(asyncio.Protocol):
    """Records what its transport calls; ``keep_open`` is what ``eof_received`` returns."""

    def __init__(self, keep_open: bool = False) -> None:
        self.keep_open = keep_open
        self.events: list[tuple[str, Any]] = []
        self.transport: MemoryTransport | None = None
        self.in_callback = False
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, MemoryTransport)
        self.transport = transport
        self.events.append(("made", None))

    def data_received(self, data: bytes) -> None:
        assert not self.in_callback, "delivered re-entrantly"
        self.in_callback = True
        self.events.append(("data", data))
        self.in_callback = False

    def eof_received(self) -> bool:
        self.events.append(("eof", None))
        return self.keep_open

    def pause_writing(self) -> None:
        self.events.append(("pause_writing", None))

    def resume_writing(self) -> None:
        self.events.append(("resume_writing", None))

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append(("lost", exc))
        self.lost.set_result(exc)

    def data(self) -> bytes:
        return b"".join(value for name, value in self.events if name == "data")

    def names(self) -> list[str]:
        return [name for name, _ in self.events]


async def steps(count: int = 5) -> None:
    """Let the loop run ``count`` iterations."""
    for _ in range(count):
        await asyncio.sleep(0)


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


def pair(**kwargs: Any) -> tuple[Recorder, Recorder, MemoryTransport, MemoryTransport]:
    a, b = Recorder(), Recorder()
    ta, tb = connect(a, b, **kwargs)
    return a, b, ta, tb


def test_connection_made_and_extra_info() -> None:
    async def body() -> None:
        a, b, ta, tb = pair(b_extra={"peername": ("203.0.113.7", 5000), "sslcontext": None})
        assert (a.transport, b.transport) == (ta, tb)
        assert a.events == b.events == [("made", None)]
        assert tb.get_extra_info("peername") == ("203.0.113.7", 5000)
        assert tb.get_extra_info("socket") is None
        assert tb.get_extra_info("sslcontext") is None
        assert ta.get_extra_info("peername", "none") == "none"
        assert ta.get_protocol() is a and ta.can_write_eof()

    run(body)


def test_writes_arrive_in_order_from_the_loop() -> None:
    async def body() -> None:
        a, b, ta, tb = pair()
        ta.write(b"one ")
        ta.writelines([b"two ", bytearray(b"three "), memoryview(b"four")])
        ta.write(b"")
        assert b.names() == ["made"]  # never within write()
        await steps()
        assert b.data() == b"one two three four"
        tb.write(b"back")
        await steps()
        assert a.data() == b"back"

    run(body)


def test_a_reply_written_within_data_received_comes_from_the_loop() -> None:
    async def body() -> None:
        class Echo(Recorder):
            def data_received(self, data: bytes) -> None:
                super().data_received(data)
                assert self.transport is not None
                self.transport.write(data.upper())

        class Pong(Recorder):
            def data_received(self, data: bytes) -> None:
                super().data_received(data)
                assert self.transport is not None
                if len(self.data()) < 8:
                    self.transport.write(b"ping")

        client, echo = Pong(), Echo()
        ta, _ = connect(client, echo)
        ta.write(b"ping")
        await steps(10)  # both callbacks assert they are never entered twice at once
        assert client.data() == b"PINGPING" and echo.data() == b"pingping"

    run(body)


def test_large_writes_come_in_chunks_and_pause_reading_holds_the_rest() -> None:
    async def body() -> None:
        class Pausing(Recorder):
            def data_received(self, data: bytes) -> None:
                super().data_received(data)
                assert self.transport is not None
                self.transport.pause_reading()

        a, b = Recorder(), Pausing()
        ta, tb = connect(a, b)
        payload = bytes(range(256)) * (3 * CHUNK // 256) + b"end"
        tb.pause_reading()
        assert not tb.is_reading()
        ta.write(payload)
        await steps()
        assert b.data() == b""
        for delivered in (CHUNK, 2 * CHUNK, 3 * CHUNK, len(payload)):
            tb.resume_reading()
            await steps()
            assert len(b.data()) == delivered  # one chunk, then paused again
        assert b.data() == payload

    run(body)


def test_write_flow_control_follows_what_the_peer_has_not_read() -> None:
    async def body() -> None:
        a, b, ta, tb = pair()
        assert ta.get_write_buffer_limits() == (1 << 14, 1 << 16)
        ta.set_write_buffer_limits(high=100, low=10)
        assert ta.get_write_buffer_limits() == (10, 100)
        with pytest.raises(ValueError):
            ta.set_write_buffer_limits(high=5, low=10)
        tb.pause_reading()
        ta.write(b"x" * 60)
        assert ta.get_write_buffer_size() == 60 and "pause_writing" not in a.names()
        ta.write(b"x" * 60)
        ta.write(b"x" * 60)
        assert ta.get_write_buffer_size() == 180
        assert a.names().count("pause_writing") == 1  # once past the high-water mark
        tb.resume_reading()
        await steps()
        assert ta.get_write_buffer_size() == 0 and len(b.data()) == 180
        assert a.names()[1:] == ["pause_writing", "resume_writing"]
        ta.set_write_buffer_limits(high=0)  # asyncio's way to flush every write at once
        tb.pause_reading()
        ta.write(b"y")
        assert a.names()[-1] == "pause_writing"
        ta.set_write_buffer_limits(high=10)  # raised over what is buffered: resumed
        assert a.names()[-1] == "resume_writing"

    run(body)


def test_write_eof_then_eof_received_after_the_data() -> None:
    async def body() -> None:
        a, b, ta, tb = pair()
        b.keep_open = True  # half-closed: b may still answer
        ta.write(b"request")
        ta.write_eof()
        with pytest.raises(RuntimeError):
            ta.write(b"more")
        await steps()
        assert b.events == [("made", None), ("data", b"request"), ("eof", None)]
        assert not tb.is_closing()
        tb.write(b"answer")
        tb.close()  # a gets the answer, then EOF, and closes (eof_received -> False)
        assert await asyncio.wait_for(b.lost, 1) is None
        assert await asyncio.wait_for(a.lost, 1) is None
        assert a.names() == ["made", "data", "eof", "lost"] and a.data() == b"answer"
        assert ta.is_closing() and tb.is_closing()

    run(body)


def test_close_delivers_what_was_written_then_eof_and_loses_once() -> None:
    async def body() -> None:
        a, b, ta, tb = pair()
        ta.write(b"last words")
        ta.close()
        ta.close()
        ta.abort()
        ta.write(b"dropped")
        assert ta.is_closing()
        await steps()
        assert a.events == [("made", None), ("lost", None)]
        assert b.events == [("made", None), ("data", b"last words"), ("eof", None), ("lost", None)]
        tb.write(b"after")  # the peer went away: dropped
        await steps()
        assert a.data() == b""

    run(body)


def test_close_drops_unread_data_and_releases_a_paused_writer() -> None:
    async def body() -> None:
        a, b, ta, tb = pair()
        ta.set_write_buffer_limits(high=4)
        tb.pause_reading()
        ta.write(b"unread bytes")
        assert a.names()[-1] == "pause_writing"
        tb.close()
        assert ta.get_write_buffer_size() == 0
        assert a.names()[-1] == "resume_writing"
        tb.resume_reading()
        await steps()
        assert b.events == [("made", None), ("lost", None)]
        assert a.names() == ["made", "pause_writing", "resume_writing", "eof", "lost"]

    run(body)


def test_abort_resets_the_peer_and_drops_its_unread_data() -> None:
    async def body() -> None:
        a, b, ta, tb = pair()
        tb.pause_reading()
        ta.write(b"never read")
        ta.abort()
        assert tb.is_closing()
        assert await asyncio.wait_for(a.lost, 1) is None
        assert isinstance(await asyncio.wait_for(b.lost, 1), ConnectionResetError)
        await steps()
        assert b.names() == ["made", "lost"] and a.names() == ["made", "lost"]

    run(body)


def test_a_failing_data_received_is_reported_and_aborts() -> None:
    async def body() -> None:
        reported: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: reported.append(ctx))

        class Failing(Recorder):
            def data_received(self, data: bytes) -> None:
                raise ValueError("broken protocol")

        a, broken = Recorder(), Failing()
        ta, _ = connect(a, broken)
        ta.write(b"x")
        assert isinstance(await asyncio.wait_for(a.lost, 1), ConnectionResetError)
        assert await asyncio.wait_for(broken.lost, 1) is None
        assert isinstance(reported[0]["exception"], ValueError)

    run(body)


def test_aiohttp_serves_on_the_pipe_and_sees_the_client_address() -> None:
    async def body() -> None:
        async def handler(request: web.BaseRequest) -> web.Response:
            body = await request.read()
            return web.Response(text=f"{request.remote} {request.secure} {body.decode()}")

        server = web.Server(handler)
        client = Recorder()
        ta, _ = connect(client, server(), b_extra={"peername": ("203.0.113.7", 40000)})
        ta.write(b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi")
        ta.write(b"GET /y HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        assert await asyncio.wait_for(client.lost, 5) is None
        replies = client.data().split(b"HTTP/1.1 200 OK")
        assert replies[1].endswith(b"\r\n\r\n203.0.113.7 False hi")
        assert replies[2].endswith(b"\r\n\r\n203.0.113.7 False ")
        await server.shutdown()

    run(body)


def echo_request(size: int) -> bytes:
    """A gzip-encoded binary request to ``echo_uint8`` whose answer carries ``size`` bytes."""
    inputs = [("INPUT0", b"\x07" * size), ("INPUT1", b"\x01")]
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "datatype": "UINT8",
                    "shape": [1, len(data)],
                    "parameters": {"binary_data_size": len(data)},
                }
                for name, data in inputs
            ],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    body = gzip.compress(header + b"".join(data for _, data in inputs), compresslevel=1)
    head = (
        "POST /v2/models/echo_uint8/infer HTTP/1.1\r\nHost: h\r\nContent-Encoding: gzip\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def test_a_slow_client_holds_aiohttp_back(serve: Callable[..., RunningServer]) -> None:
    """A relayed 32 MiB answer to a client that does not read: the link stops reading and
    aiohttp's handler is paused writing; once the client reads, all of it comes. aiohttp's
    handler sees the client's address."""
    running = serve()
    front = front_of(running)
    size = 32 << 20
    with socket.create_connection(("127.0.0.1", running.http_port), 10) as sock:
        sock.sendall(echo_request(size))
        deadline = time.monotonic() + 10
        while True:  # the server runs on its own thread: poll what it shows
            assert time.monotonic() < deadline, "the relay was never held back"
            links = list(front.links)
            handlers = list(front.runner.server.connections)
            held = links and handlers and handlers[0].writing_paused
            if held and not links[0].transport.is_reading():
                break
            time.sleep(0.02)
        assert handlers[0].peername == sock.getsockname()  # request.remote: the client
        assert handlers[0].ssl_context is None
        buffered = handlers[0].transport.get_write_buffer_size()
        assert 0 < buffered < size
        received = b""
        while b"\r\n\r\n" not in received:
            received += sock.recv(1 << 16)
        head, _, body = received.partition(b"\r\n\r\n")
        length = int(
            next(h for h in head.split(b"\r\n") if h.startswith(b"Content-Length")).split(b":")[1]
        )
        while len(body) < length:
            body += sock.recv(1 << 20)
        assert body.endswith(b"\x07" * size) and len(body) == length
    assert not handlers[0].writing_paused


def test_aiohttp_sees_the_client_tls_connection(
    serve: Callable[..., RunningServer], tmp_path: Any
) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    issued.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    issued.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    running = serve(
        "--http-use-ssl=true",
        f"--http-server-cert={tmp_path / 'cert.pem'}",
        f"--http-server-key={tmp_path / 'key.pem'}",
    )
    context = ssl.create_default_context()
    ca.configure_trust(context)
    raw = socket.create_connection(("127.0.0.1", running.http_port), 10)
    with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: h\r\n\r\n")
        assert tls.recv(1 << 16).startswith(b"HTTP/1.1 200 OK\r\n")
        (handler,) = front_of(running).runner.server.connections
        assert isinstance(handler.ssl_context, ssl.SSLContext)  # request.secure
        assert handler.peername == tls.getsockname()  # request.remote
