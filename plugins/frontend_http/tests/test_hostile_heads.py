"""Request line plus headers over ``--http-max-header-size`` in total, every line within it:
431 with the front's text and ``Connection: close``, after the answers to the requests
before it; pipelined requests are not taken for one large head."""

from __future__ import annotations

import socket
from collections.abc import Callable

from despina.testing import RunningServer

from .test_hostile_bodies import BODY, INFER, error_reply, read_to_close

LIMIT = 2048
HEAD_TOO_LARGE = (
    f"request line and headers exceed {LIMIT} bytes; "
    "use --http-max-header-size to increase the limit"
)
HEALTH = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
#: 40 header lines of 60 bytes: 2400 bytes of head, no line near the limit.
MANY_LINES = [b"X-Many-%02d: %s\r\n" % (i, b"b" * 47) for i in range(40)]


def exchange(running: RunningServer, *sends: bytes) -> bytes:
    """Send each of ``sends`` (one ``sendall`` each), then everything until the server
    closes."""
    with socket.create_connection(("127.0.0.1", running.http_port), 10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for data in sends:
            sock.sendall(data)
        return read_to_close(sock)


def assert_refused(raw: bytes, answered: int) -> None:
    """``raw`` holds ``answered`` 200 answers, then the 431 refusal."""
    assert raw.count(b" 200 OK\r\n") == answered, raw
    status, headers, body = error_reply(raw[raw.rindex(b"HTTP/1.") :])
    assert (status, headers["connection"], body) == (431, "close", {"error": HEAD_TOO_LARGE})


def test_head_lines_adding_up_past_the_limit_are_431(serve: Callable[..., RunningServer]) -> None:
    """Each line its own send: none is near the limit, their sum is over it."""
    running = serve(f"--http-max-header-size={LIMIT}")
    start = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n"
    assert_refused(exchange(running, start, *MANY_LINES), 0)
    assert exchange(running, HEALTH.replace(b"Host: x", b"Host: x\r\nConnection: close"))


def test_head_past_the_limit_after_pipelined_requests(serve: Callable[..., RunningServer]) -> None:
    """In one send: two requests are answered, then the third's head is refused."""
    running = serve(f"--http-max-header-size={LIMIT}")
    large = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n" + b"".join(MANY_LINES) + b"\r\n"
    assert_refused(exchange(running, HEALTH + HEALTH + large + HEALTH), 2)


def test_a_head_across_the_limit_offset_of_a_send_is_served(
    serve: Callable[..., RunningServer],
) -> None:
    """In one send, an inference request of ``LIMIT - 20`` bytes, then a small request:
    the second head crosses the offset where the first head's limit ended, and is served."""
    running = serve(f"--http-max-header-size={LIMIT}")
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %%d\r\n\r\n" % INFER.encode()
    body = BODY + b" " * (LIMIT - 20 - len(head % 1000) - len(BODY))
    first = head % len(body) + body
    assert len(first) == LIMIT - 20
    raw = exchange(running, first + HEALTH.replace(b"Host: x", b"Host: x\r\nConnection: close"))
    assert raw.count(b"HTTP/1.1 200 OK\r\n") == 2, raw
