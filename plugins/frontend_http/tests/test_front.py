"""Raw HTTP/1.1 on the port: pipelining, chunked bodies, 100-continue, limits, keep-alive,
malformed requests, disconnects, routed responses, binary tensors, compression, restricted
APIs, percent-encoded paths, many connections."""

from __future__ import annotations

import asyncio
import gzip
import json
import queue
import socket
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import http_test_backend
import numpy as np
import pytest
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.plugin.backend import Backend, InstanceSpec, ModelInstance
from despina.plugin.hookspecs import hookimpl
from despina.testing import RepositoryBuilder, RunningServer

#: Seconds any single socket operation may take before the test fails.
TIMEOUT = 10.0
INFER = "/v2/models/add_sub/infer"
TOO_LARGE = (
    "request body exceeds the maximum allowed size of 1000 bytes; "
    "use --http-max-input-size to increase the limit"
)


@dataclass
class Reply:
    """One HTTP response as received."""

    version: str
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes
    raw: bytes  # every byte of the response, framing included

    def json(self) -> Any:
        assert self.headers.get("content-type") == "application/json", self.headers
        return json.loads(self.body)


class Conn:
    """A client connection over a raw socket; every read fails after TIMEOUT seconds."""

    def __init__(self, running: RunningServer, port: int | None = None) -> None:
        """Connect to ``running``'s HTTP port, or to ``port`` on 127.0.0.1."""
        port = running.http_port if port is None else port
        self.sock = socket.create_connection(("127.0.0.1", port), TIMEOUT)
        self.buffer = b""
        self.taken: list[bytes] = []

    def send(self, data: bytes) -> Conn:
        self.sock.sendall(data)
        return self

    def _fill(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.buffer += data

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._fill()
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        self.taken.append(data)
        return data

    def _line(self, end: bytes = b"\r\n") -> bytes:
        while (index := self.buffer.find(end)) < 0:
            self._fill()
        return self._take(index + len(end))[: -len(end)]

    def reply(self, head_only: bool = False) -> Reply:
        """The next response; its body framed by Content-Length or chunked encoding."""
        self.taken = []
        first, *lines = self._line(b"\r\n\r\n").decode("latin-1").split("\r\n")
        version, status = first.split(" ")[:2]
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        body = b""
        if head_only or int(status) < 200 or int(status) in (204, 304):
            pass
        elif headers.get("transfer-encoding") == "chunked":
            while size := int(self._line().split(b";")[0], 16):
                body += self._take(size)
                assert self._take(2) == b"\r\n"
            while self._line():  # trailers
                pass
        else:
            body = self._take(int(headers["content-length"]))
        return Reply(version, int(status), headers, body, b"".join(self.taken))

    def read(self, size: int) -> bytes:
        """The next ``size`` bytes (the body after a ``reply(head_only=True)``)."""
        return self._take(size)

    def closed(self) -> bool:
        """True when the server closed the connection with nothing more to read."""
        if self.buffer:
            return False
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def connect() -> Iterator[Callable[..., Conn]]:
    """``connect(running[, port])``: a Conn, closed after the test."""
    opened: list[Conn] = []

    def factory(running: RunningServer, port: int | None = None) -> Conn:
        opened.append(Conn(running, port))
        return opened[-1]

    yield factory
    for conn in opened:
        conn.close()


def request(
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    version: str = "1.1",
) -> bytes:
    """A request's bytes; a Content-Length is added unless the headers frame the body."""
    fields = {"Host": "127.0.0.1", **(headers or {})}
    if method in ("POST", "PUT") and "Transfer-Encoding" not in fields:
        fields.setdefault("Content-Length", str(len(body)))
    head = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    return f"{method} {path} HTTP/{version}\r\n{head}\r\n".encode("latin-1") + body


def chunked(body: bytes, size: int) -> bytes:
    """``body`` in chunked transfer encoding, ``size`` bytes per chunk."""
    parts = [
        b"%x\r\n%s\r\n" % (len(p), p)
        for p in (body[i : i + size] for i in range(0, len(body), size))
    ]
    return b"".join(parts) + b"0\r\n\r\n"


def add_sub_json(a: Sequence[float], b: Sequence[float]) -> bytes:
    """A JSON add_sub request body (FP32 [n])."""
    inputs = [
        {"name": name, "datatype": "FP32", "shape": [len(x)], "data": list(x)}
        for name, x in (("INPUT0", a), ("INPUT1", b))
    ]
    return json.dumps({"inputs": inputs}).encode()


def infer(a: Sequence[float], b: Sequence[float], path: str = INFER, **headers: str) -> bytes:
    """A complete JSON add_sub infer request."""
    return request("POST", path, add_sub_json(a, b), headers)


def assert_add_sub(reply: Reply, a: Sequence[float], b: Sequence[float]) -> None:
    """``reply`` is add_sub's correct JSON answer for ``a`` and ``b``."""
    assert reply.status == 200, reply.body
    outputs = {o["name"]: o["data"] for o in reply.json()["outputs"]}
    assert outputs["OUTPUT0"] == [x + y for x, y in zip(a, b, strict=True)]
    assert outputs["OUTPUT1"] == [x - y for x, y in zip(a, b, strict=True)]


def test_pipelined_requests_are_answered_in_order(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    conn = connect(serve())
    conn.send(infer([1, 2], [3, 4]) + request("GET", "/v2/health/ready") + infer([10], [1]))
    assert_add_sub(conn.reply(), [1, 2], [3, 4])
    ready = conn.reply()
    assert ready.status == 200 and ready.body == b""
    assert_add_sub(conn.reply(), [10], [1])
    conn.send(infer([5], [5]))  # still open
    assert_add_sub(conn.reply(), [5], [5])


def test_requests_answered_at_once_keep_their_order(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    """A model that runs requests within submit is answered inside the parser's callback:
    pipelined requests around it, errors, upgrade offers and HTTP/1.0 keep their order and
    framing."""
    now = "/v2/models/add_sub_now/infer"
    conn = connect(serve())
    offer = {
        "Connection": "Upgrade, HTTP2-Settings",
        "Upgrade": "h2c",
        "HTTP2-Settings": "AAMAAABk",
    }
    conn.send(infer([5], [6], now, **offer))  # on an idle connection
    assert_add_sub(conn.reply(), [5], [6])
    conn.send(
        infer([1], [2], now)
        + infer([3], [4])  # add_sub: answered by a worker, in turn
        + request("POST", now, b"{not json")
        + request("GET", "/v2/health/ready")
        + infer([7], [8], now)
    )
    assert_add_sub(conn.reply(), [1], [2])
    assert_add_sub(conn.reply(), [3], [4])
    error = conn.reply()
    assert error.status == 400 and "failed to parse the request JSON" in error.json()["error"]
    assert conn.reply().status == 200
    assert_add_sub(conn.reply(), [7], [8])
    old = connect(serve())
    old.send(request("POST", now, add_sub_json([1], [1]), version="1.0"))
    assert_add_sub(old.reply(), [1], [1])
    assert old.closed()


def test_upgrade_offers_are_ignored(serve: Callable[..., RunningServer], connect: Any) -> None:
    """curl --http2 offers h2c on every request: it is answered as HTTP/1.1, body included,
    and the connection serves on."""
    conn = connect(serve())
    offer = {
        "Connection": "Upgrade, HTTP2-Settings",
        "Upgrade": "h2c",
        "HTTP2-Settings": "AAMAAABk",
    }
    conn.send(infer([1, 2], [3, 4], **offer))
    assert_add_sub(conn.reply(), [1, 2], [3, 4])
    conn.send(request("GET", "/v2/health/ready", headers=offer) + infer([7], [1]))
    assert conn.reply().status == 200
    assert_add_sub(conn.reply(), [7], [1])


def test_chunked_request_bodies(serve: Callable[..., RunningServer], connect: Any) -> None:
    conn = connect(serve())
    te = {"Transfer-Encoding": "chunked"}
    body = chunked(add_sub_json([1, 2, 3], [1, 1, 1]), 7)
    conn.send(request("POST", INFER, headers=te))
    for i in range(0, len(body), 50):  # the chunks arrive in several writes
        conn.send(body[i : i + 50])
    assert_add_sub(conn.reply(), [1, 2, 3], [1, 1, 1])
    conn.send(request("POST", "/v2/repository/index", chunked(b"{}", 1), te))
    index = conn.reply()
    assert index.status == 200
    assert {"name": "add_sub", "version": "1", "state": "READY"} in index.json()


def test_expect_continue(serve: Callable[..., RunningServer], connect: Any) -> None:
    conn = connect(serve())
    body = add_sub_json([1], [2])
    head = {"Content-Length": str(len(body)), "Expect": "100-continue"}
    conn.send(request("POST", INFER, headers=head))
    assert conn.reply().raw == b"HTTP/1.1 100 Continue\r\n\r\n"
    conn.send(body)
    assert_add_sub(conn.reply(), [1], [2])


def test_declared_body_over_the_limit_is_refused_unsent(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    running = serve("--http-max-input-size=1000")
    for headers in ({"Expect": "100-continue"}, {}):
        conn = connect(running)
        conn.send(request("POST", INFER, headers={"Content-Length": "5000", **headers}))
        reply = conn.reply()  # no 100 Continue: the refusal comes first, the body never
        assert reply.status == 413 and reply.json() == {"error": TOO_LARGE}
        assert reply.headers["connection"] == "close" and conn.closed()
    conn = connect(running)  # behind another request: refused once that one is answered
    expect = {"Content-Length": "5000", "Expect": "100-continue"}
    conn.send(infer([3], [4]) + request("POST", INFER, headers=expect))
    assert_add_sub(conn.reply(), [3], [4])
    assert conn.reply().status == 413 and conn.closed()
    conn = connect(running)  # a client that sends a large body anyway reads the refusal
    conn.send(request("POST", INFER, b"{" + b" " * 8_000_000 + b"}"))
    reply = conn.reply()
    assert reply.status == 413 and reply.json() == {"error": TOO_LARGE}
    assert_add_sub(connect(running).send(infer([1], [2])).reply(), [1], [2])


def test_pipelined_expect_continue_comes_in_order(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    conn = connect(serve())
    body = add_sub_json([1], [2])
    expect = {"Content-Length": str(len(body)), "Expect": "100-continue"}
    conn.send(infer([3], [4]) + request("POST", INFER, headers=expect))
    assert_add_sub(conn.reply(), [3], [4])  # the answer before it, then the 100
    assert conn.reply().status == 100
    assert_add_sub(conn.send(body).reply(), [1], [2])


def test_chunked_body_past_the_limit_gets_413(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    running = serve("--http-max-input-size=1000")
    body = chunked(add_sub_json([1.0] * 300, [2.0] * 300), 200)
    reply = (
        connect(running)
        .send(request("POST", INFER, body, {"Transfer-Encoding": "chunked"}))
        .reply()
    )
    assert reply.status == 413 and reply.json() == {"error": TOO_LARGE}
    assert_add_sub(connect(running).send(infer([1], [2])).reply(), [1], [2])


def test_a_chunked_body_of_more_than_65536_chunks_gets_400(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    """Newer Triton's cap (server #8770): 65536 non-empty chunks pass; one more is refused
    (400, its text) before the body ends, and the connection closes."""
    running = serve()
    te = {"Transfer-Encoding": "chunked"}
    index = "/v2/repository/index"
    most = chunked(b"{" + b" " * 65534 + b"}", 1)
    reply = connect(running).send(request("POST", index, most, te)).reply()
    assert reply.status == 200, reply.body
    conn = connect(running)
    one_more = chunked(b"{" + b" " * 65535 + b"}", 1)
    reply = conn.send(request("POST", index, one_more[:-2], te)).reply()  # its end unsent
    assert reply.status == 400 and reply.headers["connection"] == "close"
    assert reply.json() == {
        "error": "Chunked request body exceeds maximum of 65536 non-empty chunks. "
        "Send fewer or larger HTTP chunks."
    }
    conn.send(b"\r\n")
    assert conn.closed()
    assert_add_sub(connect(running).send(infer([1], [2])).reply(), [1], [2])


def test_keep_alive_and_connection_close(serve: Callable[..., RunningServer], connect: Any) -> None:
    running = serve()
    keep = {"Connection": "keep-alive"}
    conn = connect(running)
    for _ in range(2):  # HTTP/1.0 with keep-alive: the front's answer and a routed one
        conn.send(request("POST", INFER, add_sub_json([1], [1]), keep, version="1.0"))
        reply = conn.reply()
        assert_add_sub(reply, [1], [1])
        assert reply.headers["connection"].lower() == "keep-alive"
        conn.send(request("GET", "/v2/health/live", headers=keep, version="1.0"))
        reply = conn.reply()
        assert reply.status == 200 and reply.headers["connection"].lower() == "keep-alive"
    for message in (
        request("POST", INFER, add_sub_json([1], [1]), version="1.0"),
        request("GET", "/v2/health/live", version="1.0"),
        infer([1], [1], Connection="close"),
        request("GET", "/v2/health/live", headers={"Connection": "close"}),
    ):
        conn = connect(running).send(message)
        assert conn.reply().status == 200 and conn.closed()


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x01\x02 nonsense\r\n\r\n",
        b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: ten\r\n\r\n",
    ],
    ids=["garbage", "header-line", "content-length"],
)
def test_malformed_requests_get_400(
    serve: Callable[..., RunningServer], connect: Any, garbage: bytes
) -> None:
    running = serve()
    other = connect(running)  # a connection opened before keeps working
    conn = connect(running).send(garbage)
    reply = conn.reply()
    assert reply.status == 400 and reply.json()["error"].startswith("malformed HTTP request")
    assert conn.closed()
    conn = connect(running).send(garbage + b"x" * 8_000_000)  # the 400 is not lost to a reset
    assert conn.reply().status == 400
    assert_add_sub(other.send(infer([1], [2])).reply(), [1], [2])
    assert_add_sub(connect(running).send(infer([3], [2])).reply(), [3], [2])
    pipelined = connect(running).send(infer([4], [1]) + garbage)  # answered, then the 400
    assert_add_sub(pipelined.reply(), [4], [1])
    assert pipelined.reply().status == 400
    assert pipelined.closed()


class SlowInstance(ModelInstance):
    """Echoes its inputs after waiting (at most 5 s) until its requests are cancelled."""

    def __init__(self, running: queue.Queue[InferenceRequest]) -> None:
        self.running = running

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        for r in requests:
            self.running.put(r)
        for _ in range(100):
            if all(r.cancelled for r in requests):
                break
            await asyncio.sleep(0.05)
        return [InferenceResponse(outputs={"OUTPUT0": r.inputs["INPUT0"]}) for r in requests]


class SlowPlugin:
    """The ``slowtest`` backend; the requests it runs are put on ``running``."""

    def __init__(self) -> None:
        self.running: queue.Queue[InferenceRequest] = queue.Queue()

    @hookimpl
    def despina_backends(self) -> list[type[Backend]]:
        running = self.running

        class SlowBackend(Backend):
            name = "slowtest"
            default_model_filename = "model.slowtest"

            async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
                return SlowInstance(running)

        return [SlowBackend]


def test_client_gone_mid_inference(
    serve: Callable[..., RunningServer], model_repository: RepositoryBuilder, connect: Any
) -> None:
    config = http_test_backend.config(count=1).replace("httptest", "slowtest")
    model_repository.add("slow", config, {"1/model.slowtest": ""})
    plugin = SlowPlugin()
    running = serve(plugins=(plugin,))
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [7]}]}
    )
    conn = connect(running).send(request("POST", "/v2/models/slow/infer", body.encode()))
    started = plugin.running.get(timeout=TIMEOUT)
    conn.close()
    for _ in range(100):  # the server notices the disconnect and flags the request
        if started.cancelled:
            break
        time.sleep(0.05)
    assert started.cancelled
    assert_add_sub(connect(running).send(infer([1], [2])).reply(), [1], [2])


ROUTED = [
    ("GET", "/v2/models/add_sub/config"),
    ("GET", "/v2"),
    ("GET", "/v2/models/add_sub"),
    ("GET", "/v2/models/add_sub/stats"),
    ("GET", "/v2/no/such/path"),
    ("HEAD", "/v2/health/ready"),
    ("GET", "/v2/models/add_sub/versions/7/config"),
]


def test_routed_requests_share_a_connection(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    conn = connect(serve())
    replies = []
    for method, path in ROUTED:
        replies.append(conn.send(request(method, path)).reply(head_only=method == "HEAD"))
        assert_add_sub(conn.send(infer([2], [1])).reply(), [2], [1])
    config, meta, model, stats, unknown, head, bad_version = replies
    assert config.status == 200 and config.json()["name"] == "add_sub"
    assert meta.status == 200 and meta.json()["name"] == "triton"
    assert model.status == 200 and [i["name"] for i in model.json()["inputs"]] == [
        "INPUT0",
        "INPUT1",
    ]
    assert stats.status == 200 and stats.json()["model_stats"][0]["name"] == "add_sub"
    assert unknown.status == 404 and unknown.json() == {"error": "Not Found"}
    assert head.status == 405 and head.body == b""  # as Triton: health is GET only
    assert bad_version.status == 404 and "add_sub" in bad_version.json()["error"]


def test_routed_responses_are_exact(serve: Callable[..., RunningServer], connect: Any) -> None:
    """The router's answers, byte for byte, as Triton frames them (no Server or Date
    header): an empty 200, JSON errors, a HEAD answered with its head only, and a
    server-sent-event stream chunked."""
    conn = connect(serve())
    expected = {
        ("GET", "/v2/health/ready"): b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        ("GET", "/v2/no/such/path"): (
            b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
            b'Content-Length: 21\r\n\r\n{"error":"Not Found"}'
        ),
        ("HEAD", "/v2/health/ready"): (
            b"HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\n"
            b"Content-Length: 30\r\n\r\n"
        ),
        ("DELETE", "/v2/models/add_sub/ready"): (
            b"HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\n"
            b'Content-Length: 30\r\n\r\n{"error":"Method Not Allowed"}'
        ),
    }
    for (method, path), raw in expected.items():
        assert conn.send(request(method, path)).reply(head_only=method == "HEAD").raw == raw
    body = b'{"INPUT0": [1], "INPUT1": [1]}'
    stream = conn.send(request("POST", "/v2/models/add_sub/generate_stream", body)).reply()
    assert stream.raw.startswith(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    assert stream.body.startswith(b'data: {"OUTPUT0":2.0,') and stream.body.endswith(b"\n\n")
    assert conn.buffer == b""


def add_sub_binary(a: np.ndarray, b: np.ndarray) -> tuple[bytes, int]:
    """A binary add_sub request asking for binary outputs: (body, JSON header length)."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "datatype": "FP32",
                    "shape": [x.size],
                    "parameters": {"binary_data_size": x.nbytes},
                }
                for name, x in (("INPUT0", a), ("INPUT1", b))
            ],
            "outputs": [
                {"name": f"OUTPUT{i}", "parameters": {"binary_data": True}} for i in range(2)
            ],
        }
    ).encode()
    return header + a.tobytes() + b.tobytes(), len(header)


def binary_outputs(body: bytes, header_length: int) -> dict[str, np.ndarray]:
    """The binary outputs of a response body whose JSON header is ``header_length`` bytes."""
    outputs = {}
    offset = header_length
    for output in json.loads(body[:header_length])["outputs"]:
        size = output["parameters"]["binary_data_size"]
        outputs[output["name"]] = np.frombuffer(body[offset : offset + size], np.float32)
        offset += size
    assert offset == len(body)
    return outputs


def test_binary_tensors_and_compressed_responses(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    conn = connect(serve())
    a = np.arange(1000, dtype=np.float32)
    b = np.full(1000, 3, dtype=np.float32)
    body, length = add_sub_binary(a, b)
    headers = {"Inference-Header-Content-Length": str(length)}
    plain = conn.send(request("POST", INFER, body, headers)).reply()
    assert plain.status == 200 and plain.headers["content-type"] == "application/octet-stream"
    assert "content-encoding" not in plain.headers
    header_length = int(plain.headers["inference-header-content-length"])
    outputs = binary_outputs(plain.body, header_length)
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)
    packed = conn.send(request("POST", INFER, body, {**headers, "Accept-Encoding": "gzip"})).reply()
    assert packed.status == 200 and packed.headers["content-encoding"] == "gzip"
    assert packed.headers["inference-header-content-length"] == str(header_length)
    assert len(packed.body) < len(plain.body) and gzip.decompress(packed.body) == plain.body


def test_compressed_request_bodies(serve: Callable[..., RunningServer], connect: Any) -> None:
    conn = connect(serve())
    body = add_sub_json([1, 2], [5, 5])
    for encoding, packed in (("gzip", gzip.compress(body)), ("deflate", zlib.compress(body))):
        conn.send(request("POST", INFER, packed, {"Content-Encoding": encoding}))
        assert_add_sub(conn.reply(), [1, 2], [5, 5])
    a, b = np.arange(4, dtype=np.float32), np.ones(4, dtype=np.float32)
    raw, length = add_sub_binary(a, b)
    headers = {"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(length)}
    reply = conn.send(request("POST", INFER, gzip.compress(raw), headers)).reply()
    outputs = binary_outputs(reply.body, int(reply.headers["inference-header-content-length"]))
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)


def test_large_routed_response_to_a_slow_reader(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    """A gzip body goes through the router; its 32 MiB binary answer reaches a client that
    starts reading late, intact, and the connection serves on."""
    conn = connect(serve())
    a = np.arange(4 * 1024 * 1024, dtype=np.float32)
    b = np.ones_like(a)
    raw, length = add_sub_binary(a, b)
    headers = {"Content-Encoding": "gzip", "Inference-Header-Content-Length": str(length)}
    conn.send(request("POST", INFER, gzip.compress(raw, compresslevel=1), headers))
    time.sleep(0.5)  # the answer waits in buffers meanwhile
    reply = conn.reply()
    outputs = binary_outputs(reply.body, int(reply.headers["inference-header-content-length"]))
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
    np.testing.assert_array_equal(outputs["OUTPUT1"], a - b)
    assert_add_sub(conn.send(infer([1], [1])).reply(), [1], [1])


def test_shutdown_answers_every_request_already_read(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    """Stopping while a client reads slowly: every request it had sent is answered on the
    connection, kept alive (the server serves its open connections as before, as Triton's
    HTTP service); the stop ends once the client closed it. None is dropped."""
    running = serve()
    a = np.arange(2 * 1024 * 1024, dtype=np.float32)  # its 16 MiB answer fills the buffers
    b = np.ones_like(a)
    raw, length = add_sub_binary(a, b)
    large = request("POST", INFER, raw, {"Inference-Header-Content-Length": str(length)})
    conn = connect(running).send(large + infer([1], [2]) + infer([3], [4]))
    first = conn.reply(head_only=True)  # the large request was read and is being answered
    stopping = ThreadPoolExecutor(1)
    stopped = stopping.submit(running.stop)
    deadline = time.monotonic() + TIMEOUT
    while True:  # the listener closes as the stop begins
        assert time.monotonic() < deadline, "the server did not stop listening"
        try:
            socket.create_connection(("127.0.0.1", running.http_port), TIMEOUT).close()
        except ConnectionRefusedError:
            break
        time.sleep(0.02)
    body = conn.read(int(first.headers["content-length"]))
    outputs = binary_outputs(body, int(first.headers["inference-header-content-length"]))
    np.testing.assert_array_equal(outputs["OUTPUT0"], a + b)
    later = [conn.reply(), conn.reply()]
    assert_add_sub(later[0], [1], [2])
    assert_add_sub(later[1], [3], [4])
    assert all("connection" not in reply.headers for reply in (first, *later))
    assert not stopped.done()  # waiting for the client to close its connection
    conn.close()
    stopped.result(TIMEOUT)
    stopping.shutdown()


def test_restricted_inference(serve: Callable[..., RunningServer], connect: Any) -> None:
    conn = connect(serve("--http-restricted-api=inference:key=secret"))
    denied = {"error": "This API is restricted, expecting header 'key'"}
    body = add_sub_json([1], [2])
    for headers in ({}, {"key": "wrong"}, {"Content-Encoding": "gzip"}):
        packed = gzip.compress(body) if headers.get("Content-Encoding") else body
        reply = conn.send(request("POST", INFER, packed, headers)).reply()
        assert reply.status == 403 and reply.json() == denied
    assert_add_sub(conn.send(infer([1], [2], Key="secret")).reply(), [1], [2])
    reply = conn.send(
        request("POST", INFER, gzip.compress(body), {"Content-Encoding": "gzip", "KEY": "secret"})
    ).reply()
    assert_add_sub(reply, [1], [2])
    assert conn.send(request("GET", "/v2/health/ready")).reply().status == 200


def test_percent_encoded_paths(serve: Callable[..., RunningServer], connect: Any) -> None:
    conn = connect(serve())
    for path in (
        "/v2/models/add%5Fsub/infer",
        "/v2/models/%61dd_sub/versions/1/infer",
        "/v2/models/add_sub/infer?x=1",
    ):
        assert_add_sub(conn.send(infer([4], [1], path)).reply(), [4], [1])
    reply = conn.send(request("GET", "/v2/models/add%5Fsub")).reply()
    assert reply.status == 200 and reply.json()["name"] == "add_sub"
    missing = conn.send(infer([4], [1], "/v2/models/add%2Fsub/infer")).reply()
    assert missing.status == 404  # %2F is part of the name, not a path separator
    assert missing.json() == {"error": "Request for unknown model: 'add/sub' is not found"}


def test_many_keep_alive_connections(serve: Callable[..., RunningServer]) -> None:
    running = serve()

    def client(index: int) -> int:
        conn = Conn(running)
        try:
            for i in range(20):
                a, b = [index, i, 1.5], [i, index, 0.5]
                assert_add_sub(conn.send(infer(a, b)).reply(), a, b)
        finally:
            conn.close()
        return index

    with ThreadPoolExecutor(20) as pool:
        assert sorted(pool.map(client, range(20), timeout=120)) == list(range(20))
