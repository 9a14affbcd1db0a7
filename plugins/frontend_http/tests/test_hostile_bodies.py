"""Hostile chunked bodies: a chunk whose announced size is over ``--http-max-input-size``
is refused at once (413, or 400 when the size overflows 64 bits), before its bytes come;
legitimate chunked bodies still pass however their bytes are split."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator

import httptools
import pytest
from despina.testing import RunningServer
from despina_frontend_http.framing import ChunkSizes

INFER = "/v2/models/add_sub/infer"
LIMIT = 1000
TOO_LARGE = (
    f"request body exceeds the maximum allowed size of {LIMIT} bytes; "
    "use --http-max-input-size to increase the limit"
)
HEAD = b"POST %s HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" % INFER.encode()
BODY = json.dumps(
    {
        "inputs": [
            {"name": name, "datatype": "FP32", "shape": [3], "data": [1, 2, 3]}
            for name in ("INPUT0", "INPUT1")
        ]
    }
).encode()


def chunked(body: bytes, size: int) -> bytes:
    """``body`` in chunks of ``size`` bytes, with a zero-padded size, an extension and a
    trailer (everything a size line may hold)."""
    parts = [
        b"00%x;ext=1\r\n%s\r\n" % (len(p), p)
        for p in (body[i : i + size] for i in range(0, len(body), size))
    ]
    return b"".join(parts) + b"0\r\nX-Trailer: ab\r\n\r\n"


#: Two chunked requests, then a third announcing one byte over the limit.
PIPELINED = (HEAD + chunked(BODY, 40)) * 2 + HEAD + b"40;x=1\r\n" + b"y" * 64 + b"\r\n3a9\r\n"


@pytest.fixture
def connect() -> Iterator[Callable[[RunningServer], socket.socket]]:
    """``connect(running)``: a socket to its HTTP port, closed after the test."""
    opened: list[socket.socket] = []

    def factory(running: RunningServer) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", running.http_port), 10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        opened.append(sock)
        return sock

    yield factory
    for sock in opened:
        sock.close()


def read_to_close(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a timeout fails the test)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def error_reply(raw: bytes) -> tuple[int, dict[str, str], dict[str, str]]:
    """(status, lower-case headers, JSON body) of one error response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    first, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    assert headers["content-type"] == "application/json", raw
    assert len(body) == int(headers["content-length"]), raw
    return int(first.split(" ")[1]), headers, json.loads(body)


@pytest.mark.parametrize(
    ("size_line", "status"),
    [
        ([b"7fffffffffffffff\r\n"], 413),
        ([b"ffffffffffffffff\r\n"], 413),
        ([b"3e9\r\n"], 413),  # one byte over the limit
        ([b"0000000000000000000000000000000000000003E9;x=y\r\n"], 413),
        ([b"7ffffff", b"fffffffff\r\n"], 413),  # the size line in two reads
        ([b"7fffffff"], 413),  # its digits so far are over the limit already
        ([b"1" * 40 + b"\r\n"], 400),  # over 64 bits: the parser's "Chunk size overflow"
    ],
)
def test_chunk_size_over_the_limit_is_refused_at_once(
    serve: Callable[..., RunningServer],
    connect: Callable[[RunningServer], socket.socket],
    size_line: list[bytes],
    status: int,
) -> None:
    running = serve(f"--http-max-input-size={LIMIT}")
    sock = connect(running)
    sock.sendall(HEAD + size_line[0])
    for part in size_line[1:]:
        sock.sendall(part)
    got, headers, body = error_reply(read_to_close(sock))
    assert got == status and headers["connection"] == "close", (got, headers, body)
    assert body == {"error": TOO_LARGE} if status == 413 else "Chunk size overflow" in body["error"]
    sock = connect(running)  # the server keeps serving
    sock.sendall(HEAD + chunked(BODY, 40))
    assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")


def test_chunk_over_the_limit_while_the_body_is_read(
    serve: Callable[..., RunningServer],
    connect: Callable[[RunningServer], socket.socket],
) -> None:
    """The size line comes after ``100 Continue``, the request being handled: 413 too."""
    sock = connect(serve(f"--http-max-input-size={LIMIT}"))
    sock.sendall(HEAD.replace(b"Host: x", b"Host: x\r\nExpect: 100-continue"))
    assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
    sock.sendall(b"7fffffffffffffff\r\n")
    got, headers, body = error_reply(read_to_close(sock))
    assert (got, headers["connection"], body) == (413, "close", {"error": TOO_LARGE})


def test_chunk_over_the_limit_after_answered_requests(
    serve: Callable[..., RunningServer],
    connect: Callable[[RunningServer], socket.socket],
) -> None:
    """Pipelined after two requests in one send: those are answered, then 413 and close."""
    sock = connect(serve(f"--http-max-input-size={LIMIT}"))
    sock.sendall(PIPELINED)
    raw = read_to_close(sock)
    assert raw.count(b"HTTP/1.1 200 OK\r\n") == 2, raw
    got, headers, body = error_reply(raw[raw.rindex(b"HTTP/1.") :])
    assert (got, headers["connection"], body) == (413, "close", {"error": TOO_LARGE})


def test_chunked_body_passing_the_limit_is_refused_before_it_ends(
    serve: Callable[..., RunningServer],
    connect: Callable[[RunningServer], socket.socket],
) -> None:
    """Small chunks adding up past the limit: 413 at once, without the last chunk."""
    running = serve(f"--http-max-input-size={LIMIT}")
    sock = connect(running)
    sock.sendall(HEAD + b"100\r\n" + b" " * 256 + b"\r\n")
    for _ in range(4):
        sock.sendall(b"100\r\n" + b" " * 256 + b"\r\n")
    got, _, body = error_reply(sock.recv(65536))
    assert (got, body) == (413, {"error": TOO_LARGE})


def test_chunked_body_split_anywhere_is_served(
    serve: Callable[..., RunningServer],
    connect: Callable[[RunningServer], socket.socket],
) -> None:
    """Sent a byte at a time (size lines split anywhere), a body at the limit passes."""
    body = BODY + b" " * (LIMIT - len(BODY))
    sock = connect(serve(f"--http-max-input-size={LIMIT}"))
    for byte in HEAD + chunked(body, 97):
        sock.sendall(bytes([byte]))
    assert sock.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")


class Chunked:
    """httptools parsing a request, with :class:`ChunkSizes` wired as the front wires it."""

    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.chunks = ChunkSizes()
        self.received = 0

    def on_headers_complete(self) -> None:
        self.chunks.between()

    def on_chunk_header(self) -> None:
        self.chunks.header(self.received)

    def on_chunk_complete(self) -> None:
        self.chunks.between()

    def on_body(self, body: bytes) -> None:
        self.received += len(body)

    def on_message_complete(self) -> None:
        self.chunks.end()

    def feed(self, data: bytes) -> int | None:
        """The size announced after ``data`` (None when no size line is being read)."""
        self.parser.feed_data(data)
        if self.chunks.reading or self.chunks.opened:
            return self.chunks.announced(data, self.received)
        return None


#: Two chunks (26 bytes), then one announcing 0x3e9 bytes, 3 of which came.
STREAM = HEAD + b"0a;e=1\r\n0123456789\r\n00010\r\n" + b"x" * 16 + b"\r\n3e9\r\nabc"


@pytest.mark.parametrize("split", range(len(HEAD) - 4, len(STREAM)))
def test_chunk_sizes_wherever_the_bytes_split(split: int) -> None:
    """What :class:`ChunkSizes` reports never exceeds what the chunks announce, and
    reaches the announced size of an open chunk once its size line is read."""
    stream = STREAM
    parser = Chunked()
    sizes = [parser.feed(stream[:split]), parser.feed(stream[split:])]
    assert max(size or 0 for size in sizes) == 26 + 0x3E9


def test_size_line_across_the_head_limit_offset_is_read(
    serve: Callable[..., RunningServer],
    connect: Callable[[RunningServer], socket.socket],
) -> None:
    """In one send, a head and a chunk, then a size line over the limit that crosses the
    offset where the head's limit (1024 bytes) ended: 413 at once."""
    sock = connect(serve(f"--http-max-input-size={LIMIT}", "--http-max-header-size=1024"))
    first = 1024 - 2 - len(HEAD) - len(b"%x\r\n" % 900) - 2
    sock.sendall(HEAD + b"%x\r\n" % first + b"z" * first + b"\r\n3e9\r\n")
    got, headers, body = error_reply(read_to_close(sock))
    assert (got, headers["connection"], body) == (413, "close", {"error": TOO_LARGE})
