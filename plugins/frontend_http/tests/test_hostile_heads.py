"""Request line plus headers over ``--http-max-header-size`` in total, every line within it:
431 with the front's text and ``Connection: close`` on every HTTP path, after the answers
to the requests before it; pipelined requests are not taken for one large head."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.http_parser import HttpRequestParser
from despina.testing import RunningServer
from despina_frontend_http.aioserver import ConnectionCount, GuardedParser, JsonErrorsHandler
from despina_frontend_http.framing import RequestFraming

from .test_hostile_bodies import BODY, INFER, STACKS, error_reply, read_to_close

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


@STACKS
def test_head_lines_adding_up_past_the_limit_are_431(
    serve: Callable[..., RunningServer], workers: list[str]
) -> None:
    """Each line its own send: none is near the limit, their sum is over it."""
    running = serve(f"--http-max-header-size={LIMIT}", *workers)
    start = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n"
    assert_refused(exchange(running, start, *MANY_LINES), 0)
    assert exchange(running, HEALTH.replace(b"Host: x", b"Host: x\r\nConnection: close"))


@STACKS
def test_head_past_the_limit_after_pipelined_requests(
    serve: Callable[..., RunningServer], workers: list[str]
) -> None:
    """In one send: two requests are answered, then the third's head is refused."""
    running = serve(f"--http-max-header-size={LIMIT}", *workers)
    large = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n" + b"".join(MANY_LINES) + b"\r\n"
    assert_refused(exchange(running, HEALTH + HEALTH + large + HEALTH), 2)


@STACKS
def test_a_head_across_the_limit_offset_of_a_send_is_served(
    serve: Callable[..., RunningServer], workers: list[str]
) -> None:
    """In one send, an inference request of ``LIMIT - 20`` bytes, then a small request:
    the second head crosses the offset where the first head's limit ended, and is served."""
    running = serve(f"--http-max-header-size={LIMIT}", *workers)
    head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %%d\r\n\r\n" % INFER.encode()
    body = BODY + b" " * (LIMIT - 20 - len(head % 1000) - len(BODY))
    first = head % len(body) + body
    assert len(first) == LIMIT - 20
    raw = exchange(running, first + HEALTH.replace(b"Host: x", b"Host: x\r\nConnection: close"))
    assert raw.count(b"HTTP/1.1 200 OK\r\n") == 2, raw


#: Two requests, a third whose lines add up past the limit, a fourth.
PIPELINED = HEALTH * 2 + HEALTH[:-2] + b"".join(MANY_LINES) + b"\r\n" + HEALTH


@pytest.mark.parametrize("split", range(len(PIPELINED) + 1))
def test_guarded_parser_wherever_the_bytes_split(split: int) -> None:
    """aiohttp's parser, guarded, hands on the two requests, then the 431 in the third's
    place, however the bytes split (the third head begins a read, or follows a request)."""

    async def parse() -> list[Any]:
        loop = asyncio.get_running_loop()
        handler = JsonErrorsHandler(web.Server(lambda _: None), ConnectionCount(1), LIMIT, LIMIT)
        aiohttp_parser = HttpRequestParser(handler, loop, 65536, max_msg_queue_size=32)
        guard = GuardedParser(aiohttp_parser, RequestFraming(LIMIT, LIMIT))
        return [
            message
            for part in (PIPELINED[:split], PIPELINED[split:])
            for message, _ in guard.feed_data(part)[0]
        ]

    messages = asyncio.run(parse())
    assert [getattr(m, "path", None) for m in messages] == ["/v2/health/ready"] * 2 + [None]
    assert (messages[2].status, messages[2].message) == (431, HEAD_TOO_LARGE)
