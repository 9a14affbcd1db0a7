"""Stopping under keep-alive traffic, as Triton's HTTP service stops: the listener closes
as the stop begins and the open connections are served as before until their clients
close them (or ``--exit-timeout-secs`` runs out); then the models stop (new requests get
503 "Server is stopping..."), and once they are unloaded every answer says
``Connection: close`` and its connection closes after it; an idle connection waits a
moment for a request its client may be sending. So a client sending back to back gets an
answer for every request it sent (a result, or 503 "Server is stopping..."), then a
refused connection: never an EOF after sending."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import toy_backend
from despina.testing import RepositoryBuilder, RunningServer
from outcomes import Outcomes
from toy_backend import toy_config

from .test_front import (
    TIMEOUT,
    Conn,
    Reply,
    connect as connect,  # the fixture
    infer,
)

CLIENTS = 6
#: Requests one client sends at most (the loop is bounded; the stop ends it far sooner).
MAX_REQUESTS = 200_000
#: What a refused request's error begins with (the scheduler's text, or with the models
#: unloaded the server's).
STOPPING = "Server is stopping"
#: The exit timeout of the servers whose clients keep sending: the connections are served
#: that long before the models stop.
EXIT_TIMEOUT = "--exit-timeout-secs=2"
#: Answers before the stop: every client is sending.
WARM_UP = 20 * CLIENTS


def refused(running: RunningServer) -> bool:
    """Whether the port refuses connections (the listener closed; a connect the kernel
    completed in the listener's queue as it closed is reset instead)."""
    try:
        socket.create_connection(("127.0.0.1", running.http_port), TIMEOUT).close()
    except (ConnectionRefusedError, ConnectionResetError):
        return True
    return False


def still_open(conn: Conn) -> bool:
    """The server neither closed ``conn`` nor sent more on it (within a moment)."""
    readable, _, _ = select.select([conn.sock], [], [], 0.2)
    return not readable and not conn.buffer


def stop_in_background(running: RunningServer) -> Callable[[], None]:
    """Begin ``running.stop()`` in a thread and return once the listener closed (the drain
    began); the returned function waits for the stop to end."""
    stopper = threading.Thread(target=running.stop)
    stopper.start()
    deadline = time.monotonic() + TIMEOUT
    while not refused(running):
        assert time.monotonic() < deadline, "the server did not stop listening"
        time.sleep(0.01)

    def join() -> None:
        stopper.join(60)
        assert not stopper.is_alive()

    return join


class Sender(Outcomes):
    """Clients on keep-alive connections, each sending requests back to back (half to the
    slow model), reconnecting after an answer that says ``Connection: close``, until a
    connection is refused. Tallies how each request ended."""

    def __init__(self, running: RunningServer) -> None:
        super().__init__()
        self.running = running

    def client(self, index: int) -> None:
        path = "/v2/models/slow/infer" if index % 2 else "/v2/models/add_sub/infer"
        conn: Conn | None = None
        fresh = True
        for number in range(MAX_REQUESTS):
            if conn is None:
                try:
                    conn = Conn(self.running)
                except (ConnectionRefusedError, ConnectionResetError):  # nothing was sent
                    # (a reset: the handshake raced the listener's close)
                    self.note("refused")
                    return
                fresh = True
            a, b = [float(index), float(number), 1.0, 2.0], [1.0, 1.0, 1.0, 1.0]
            try:
                reply = conn.send(infer(a, b, path)).reply()
            except OSError as exc:  # reset, EOF or timeout after the request went out
                # A reset on a connection's first request is counted as refused: it is what
                # TCP does to a handshake completed after the listener's last accept and
                # before its close (the server never saw the connection), and a client
                # cannot tell it apart. On a connection that was answered, nothing may be lost.
                if fresh and isinstance(exc, ConnectionResetError):
                    self.note("refused")
                else:
                    self.note("lost", f"client {index}, request {number}: {exc!r}")
                conn.close()
                return
            fresh = False
            self.tally(reply, a, b)
            if reply.headers.get("connection") == "close":
                if not conn.closed():
                    self.note("unexpected", f"client {index}: still open after close")
                conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def tally(self, reply: Reply, a: list[float], b: list[float]) -> None:
        if reply.status == 200:
            outputs = {o["name"]: o["data"] for o in reply.json()["outputs"]}
            right = outputs["OUTPUT0"] == [x + y for x, y in zip(a, b, strict=True)]
            self.note("ok" if right else "wrong", "" if right else str(outputs))
        elif reply.status == 503 and reply.json()["error"].startswith(STOPPING):
            self.note("stopping")
        else:
            self.note("unexpected", f"{reply.status}: {reply.body[:200]!r}")


def test_keep_alive_clients_sending_while_the_server_stops_lose_nothing(
    serve: Callable[..., RunningServer], model_repository: RepositoryBuilder
) -> None:
    group = f"instance_group [{{ count: {CLIENTS} kind: KIND_CPU }}]"
    model_repository.add("slow", toy_config(extra=group), {"1/model.toy": '{"delay_s": 0.02}'})
    running = serve(EXIT_TIMEOUT, plugins=(toy_backend,))
    sender = Sender(running)
    with ThreadPoolExecutor(CLIENTS) as pool:
        clients = [pool.submit(sender.client, i) for i in range(CLIENTS)]
        deadline = time.monotonic() + 60
        while sender.answered() < WARM_UP:
            assert time.monotonic() < deadline, f"load did not start: {sender.outcomes}"
            assert not any(c.done() for c in clients), sender.problems
            time.sleep(0.02)
        running.stop()
        for done in clients:
            done.result(60)
    print("keep-alive clients at stop:", dict(sender.outcomes))
    assert not sender.problems
    assert set(sender.outcomes) <= {"ok", "stopping", "refused"}
    assert sender.outcomes["refused"] == CLIENTS  # each ended on the closed port
    assert sender.outcomes["ok"] >= WARM_UP


def test_open_connections_are_served_until_their_clients_close_them(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    """Connections open as the stop begins, one idle and one with a request begun, are
    served as before (as Triton's HTTP service: the request is answered 200 on a
    connection kept alive, however late); the stop goes on once their clients closed
    them, and reports them as Triton does."""
    running = serve()
    begun, idle = connect(running), connect(running)
    message = infer([1.0], [2.0])
    for conn in (begun, idle):  # both served once: keep-alive connections
        assert conn.send(message).reply().status == 200
    begun.send(message[:20])
    join = stop_in_background(running)
    time.sleep(1.0)  # longer than the wait of an idle connection once drained
    reply = begun.send(message[20:]).reply()
    assert reply.status == 200, reply.body
    assert "connection" not in reply.headers
    assert still_open(begun) and still_open(idle)
    assert not running.server.ready
    begun.close()
    idle.close()
    join()


def test_answer_in_flight_as_the_stop_begins_keeps_its_connection(
    serve: Callable[..., RunningServer], model_repository: RepositoryBuilder, connect: Any
) -> None:
    """A request running as the stop begins gets its result on a connection kept alive
    (HTTP/1.1 keep-alive and HTTP/1.0 ``Connection: keep-alive`` alike); the models
    unload after the clients closed the connections."""
    group = "instance_group [{ count: 2 kind: KIND_CPU }]"
    model_repository.add("slow", toy_config(extra=group), {"1/model.toy": '{"delay_by_value": 1}'})
    running = serve(plugins=(toy_backend,))
    path = "/v2/models/slow/infer"
    kept = connect(running).send(infer([1.0] * 4, [1.0] * 4, path))
    old = connect(running).send(
        infer([1.0] * 4, [2.0] * 4, path, Connection="keep-alive").replace(b"1.1", b"1.0", 1)
    )
    deadline = time.monotonic() + TIMEOUT
    while toy_backend.ToyBackend.active < 2:  # both run (a second each)
        assert time.monotonic() < deadline, "the requests did not start"
        time.sleep(0.01)
    join = stop_in_background(running)
    for conn, b in ((kept, 1.0), (old, 2.0)):
        reply = conn.reply()
        assert reply.status == 200, reply.body
        assert reply.json()["outputs"][0]["data"] == [1.0 + b] * 4
        assert reply.headers.get("connection") != "close"
        assert still_open(conn)
        conn.close()
    join()


def test_a_connection_queued_as_the_port_closes_is_served(
    serve: Callable[..., RunningServer],
) -> None:
    """A connection the kernel completed in the listener's queue, its request sent, as
    the drain closes the port (asyncio had not accepted it yet) is served, not reset."""
    running = serve()
    frontend = next(f for f in running.server.frontends if f.name == "http")

    async def connect_then_drain() -> Conn:
        conn = Conn(running)  # the loop is busy here: queued, not accepted yet
        conn.send(infer([1.0], [2.0]))
        frontend.drain()
        return conn

    conn = running.call(connect_then_drain())
    try:
        reply = conn.reply()
        assert reply.status == 200, reply.body
        assert reply.headers["connection"] == "close"
        assert conn.closed()
        assert refused(running)
    finally:
        conn.close()


def test_a_body_that_never_comes_is_cut_and_does_not_hold_the_stop(
    serve: Callable[..., RunningServer], connect: Any
) -> None:
    """A connection whose request stops before its body ends is waited for until the
    exit timeout runs out, then cut once the models unloaded and the connections had
    their wait (CLOSE_WAIT_S): the stop ends."""
    running = serve(EXIT_TIMEOUT)
    stalled = connect(running)
    stalled.send(infer([1.0], [2.0])[:-5])
    join = stop_in_background(running)
    join()
    assert stalled.closed()
