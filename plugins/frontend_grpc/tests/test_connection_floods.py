"""Connection floods on the gRPC port: idle sockets do not lock clients out. A connection
without the HTTP/2 preface is closed after ``--grpc-handshake-timeout-secs``; at
``--grpc-max-connections`` a new connection makes room (the oldest without its preface,
else the longest-idle one gets GOAWAY); one with calls in flight is never evicted."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from despina.testing import RunningServer
from despina_frontend_grpc import h2_frames
from test_http2_abuse import RawClient
from test_http2_limits import add_sub_inputs
from tritonclient.utils import InferenceServerException

Serve = Callable[..., RunningServer]
#: A channel of its own (grpc shares connections between channels alike by default).
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


@contextmanager
def idle_sockets(running: RunningServer, count: int) -> Iterator[list[socket.socket]]:
    """``count`` TCP connections to the gRPC port that send nothing."""
    assert running.grpc_port is not None
    with ExitStack() as stack:
        yield [
            stack.enter_context(socket.create_connection(("127.0.0.1", running.grpc_port), 10))
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


def timed_infer(running: RunningServer) -> float:
    """Seconds a new tritonclient takes to connect and get add_sub's right answer."""
    start = time.perf_counter()
    with grpcclient.InferenceServerClient(running.grpc_url, channel_args=OWN_CONNECTION) as c:
        result = c.infer("add_sub", add_sub_inputs(), client_timeout=10)
    elapsed = time.perf_counter() - start
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), add_sub_inputs_sum())
    return elapsed


def add_sub_inputs_sum() -> np.ndarray:
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    return data + data


def sleep_inputs(tenths: float) -> list[grpcclient.InferInput]:
    """The sleep model's input: it answers after ``tenths`` / 10 seconds."""
    tensor = grpcclient.InferInput("IN", [1], "FP32")
    tensor.set_data_from_numpy(np.array([tenths], np.float32))
    return [tensor]


def test_twice_the_limit_of_idle_sockets_do_not_lock_clients_out(serve: Serve) -> None:
    running = serve("--grpc-max-connections=50", "--grpc-handshake-timeout-secs=1")
    with idle_sockets(running, 100) as attackers:
        latencies = [timed_infer(running) for _ in range(5)]
        assert max(latencies) < 2.0, latencies
        # every idle socket is closed: evicted for the newer ones, or timed out
        assert all(closed_by_server(sock, 3.0) for sock in attackers)
    print(
        f"\n100 idle sockets, limit 50: 5 new clients served in {max(latencies) * 1e3:.0f} ms max"
    )


def test_a_connection_without_the_preface_is_closed_after_the_timeout(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    running = serve("--grpc-handshake-timeout-secs=1")
    speaker = connect(running)  # sent the preface and SETTINGS, then nothing
    with idle_sockets(running, 3) as silent:
        silent[0].sendall(h2_frames.PREFACE[:10])  # a preface begun is not a preface
        start = time.monotonic()
        assert all(closed_by_server(sock, 3.0) for sock in silent)
        assert 0.8 < time.monotonic() - start < 2.5
    time.sleep(0.5)
    speaker._poll()
    assert not speaker.closed and speaker.goaway() is None


def test_at_the_limit_the_idle_connection_makes_room_the_busy_one_stays(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    """Limit 2: one connection idle (a raw client past its preface), one with a call in
    flight; a new client is served, the idle one gets GOAWAY, the call finishes right."""
    running = serve("--grpc-max-connections=2")
    with grpcclient.InferenceServerClient(running.grpc_url, channel_args=OWN_CONNECTION) as busy:
        busy.infer("sleep", sleep_inputs(0))  # connected
        idle = connect(running)
        answers: list[object] = []
        busy.async_infer(
            "sleep", sleep_inputs(20), lambda result, error: answers.append(error or result)
        )
        time.sleep(0.2)  # the call is in flight
        timed_infer(running)
        idle.read_until(lambda: idle.goaway() is not None)
        deadline = time.monotonic() + 10
        while not answers and time.monotonic() < deadline:
            time.sleep(0.05)
        (answer,) = answers
        assert isinstance(answer, grpcclient.InferResult), answer
        np.testing.assert_array_equal(answer.as_numpy("OUT"), [20.0])


def test_an_evicted_client_reconnects_and_is_served(serve: Serve) -> None:
    """Two tritonclients take turns on a limit of one: each call evicts the other's idle
    connection (GOAWAY), and every call is answered."""
    running = serve("--grpc-max-connections=1")
    clients = [
        grpcclient.InferenceServerClient(running.grpc_url, channel_args=OWN_CONNECTION)
        for _ in range(2)
    ]
    try:
        for turn in range(6):
            result = clients[turn % 2].infer("add_sub", add_sub_inputs(), client_timeout=10)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), add_sub_inputs_sum())
    finally:
        for client in clients:
            client.close()


def test_when_every_connection_is_busy_a_new_one_is_refused(serve: Serve) -> None:
    running = serve("--grpc-max-connections=2")
    answers: list[object] = []
    busy = [
        grpcclient.InferenceServerClient(running.grpc_url, channel_args=OWN_CONNECTION)
        for _ in range(2)
    ]
    try:
        for client in busy:
            client.async_infer(
                "sleep", sleep_inputs(20), lambda result, error: answers.append(error or result)
            )
        time.sleep(0.3)  # both calls in flight
        with idle_sockets(running, 1) as (third,):  # closed at once, before any frame
            third.sendall(h2_frames.PREFACE + h2_frames.settings_frame(()))
            assert closed_by_server(third, 1.0)
        with pytest.raises(InferenceServerException) as refused:
            timed_infer(running)
        assert refused.value.status() == "StatusCode.UNAVAILABLE"
        deadline = time.monotonic() + 10
        while len(answers) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(answers) == 2
        assert all(isinstance(a, grpcclient.InferResult) for a in answers), answers
    finally:
        for client in busy:
            client.close()
    assert timed_infer(running) < 5  # the busy ones are idle now: room is made
