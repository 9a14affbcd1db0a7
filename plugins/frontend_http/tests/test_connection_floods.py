"""Connection floods on the HTTP port: idle sockets do not lock clients out. A connection
without a whole first request head is closed after ``--http-handshake-timeout-secs``; at
``--http-max-connections`` a new connection makes room (the oldest without a request, else
the longest-idle keep-alive one, which drains: a request it sends meanwhile is answered);
one with a request in flight is never evicted."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import tritonclient.http as httpclient
from despina.testing import RunningServer
from helpers import INFER, infer_ok

Serve = Callable[..., RunningServer]
READY = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [2], "data": [1, 2]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [2], "data": [1, 1]},
        ]
    }
).encode()
INFER_HEAD = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (
    INFER.encode(),
    len(BODY),
)


@contextmanager
def sockets(running: RunningServer, count: int) -> Iterator[list[socket.socket]]:
    """``count`` TCP connections to the HTTP port."""
    with ExitStack() as stack:
        yield [
            stack.enter_context(socket.create_connection(("127.0.0.1", running.http_port), 10))
            for _ in range(count)
        ]


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (what it sends
    meanwhile is read and dropped)."""
    sock.settimeout(within)
    try:
        while sock.recv(1 << 16):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def answer(sock: socket.socket) -> bytes:
    """One whole response (a head with Content-Length, and its body)."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1 << 16)
        assert chunk, f"closed after {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(v for k, _, v in _fields(head) if k == b"content-length"))
    while len(body) < length:
        body += sock.recv(1 << 16)
    return head + b"\r\n\r\n" + body


def _fields(head: bytes) -> Iterator[tuple[bytes, bytes, bytes]]:
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        yield name.strip().lower(), sep, value.strip()


def timed_infer(running: RunningServer) -> float:
    """Seconds a new tritonclient takes to connect and get add_sub's right answer."""
    start = time.perf_counter()
    with httpclient.InferenceServerClient(running.http_url, connection_timeout=10) as client:
        infer_ok(client)
    return time.perf_counter() - start


def test_twice_the_limit_of_idle_sockets_do_not_lock_clients_out(serve: Serve) -> None:
    running = serve("--http-max-connections=50", "--http-handshake-timeout-secs=1")
    with sockets(running, 100) as attackers:
        latencies = [timed_infer(running) for _ in range(5)]
        assert max(latencies) < 2.0, latencies
        assert all(closed_by_server(sock, 3.0) for sock in attackers)
    print(
        f"\n100 idle sockets, limit 50: 5 new clients served in {max(latencies) * 1e3:.0f} ms max"
    )


def test_a_connection_without_a_request_head_is_closed_after_the_timeout(serve: Serve) -> None:
    """Silent and dribbling (a head never finished) connections close after the timeout;
    a keep-alive connection that sent a request stays open past it."""
    running = serve("--http-handshake-timeout-secs=1")
    with sockets(running, 3) as (silent, dribbling, kept):
        kept.sendall(READY)
        assert answer(kept).startswith(b"HTTP/1.1 200")
        start = time.monotonic()
        for _ in range(3):
            dribbling.sendall(b"GET /v2/health/ready HT"[:8])
            time.sleep(0.2)
        assert closed_by_server(silent, 3.0) and closed_by_server(dribbling, 3.0)
        assert 0.8 < time.monotonic() - start < 2.5
        time.sleep(0.5)
        kept.sendall(READY)
        assert answer(kept).startswith(b"HTTP/1.1 200")


def test_at_the_limit_the_idle_connection_makes_room_the_busy_one_stays(serve: Serve) -> None:
    """Limit 2: one keep-alive connection idle, one in the middle of sending a request;
    a new client is served, the idle connection closes, the request is answered."""
    running = serve("--http-max-connections=2")
    with sockets(running, 2) as (idle, busy):
        idle.sendall(READY)
        assert answer(idle).startswith(b"HTTP/1.1 200")
        busy.sendall(INFER_HEAD + BODY[:10])
        time.sleep(0.1)
        assert timed_infer(running) < 2.0
        assert closed_by_server(idle, 3.0)
        busy.sendall(BODY[10:])
        response = answer(busy)
        assert response.startswith(b"HTTP/1.1 200"), response
        assert json.loads(response.partition(b"\r\n\r\n")[2])["outputs"][0]["data"] == [2, 3]


def test_an_evicted_keep_alive_connection_answers_the_request_it_sends_meanwhile(
    serve: Serve,
) -> None:
    """Limit 1: the idle connection evicted for a new one drains; the request its client
    sends at that moment is answered (``Connection: close``), not lost."""
    running = serve("--http-max-connections=1")
    with sockets(running, 1) as (first,):
        first.sendall(READY)
        assert answer(first).startswith(b"HTTP/1.1 200")
        with sockets(running, 1) as (second,):
            time.sleep(0.05)  # the second is admitted: the first drains
            first.sendall(READY)
            response = answer(first)
            assert response.startswith(b"HTTP/1.1 200")
            assert b"connection: close" in response.lower()
            second.sendall(READY)
            assert answer(second).startswith(b"HTTP/1.1 200")


def test_when_every_connection_is_busy_a_new_one_is_refused(serve: Serve) -> None:
    running = serve("--http-max-connections=2")
    with sockets(running, 2) as busy:
        for sock in busy:
            sock.sendall(INFER_HEAD + BODY[:10])
        time.sleep(0.1)
        with sockets(running, 1) as (third,):
            third.sendall(READY)
            assert closed_by_server(third, 1.0)
        for sock in busy:
            sock.sendall(BODY[10:])
            assert answer(sock).startswith(b"HTTP/1.1 200")
    assert timed_infer(running) < 5  # the busy ones closed or idle: room is made
