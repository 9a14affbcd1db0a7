"""Limits of the gRPC port a user may set: compressed messages inflate off the event loop
(a compression bomb under a large ``--grpc-max-message-size`` holds up only its own call),
``--grpc-max-concurrent-streams`` and ``--grpc-max-connections`` (more of it in
test_connection_floods.py)."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from despina import BodyBudget, Inflation, inflate
from despina.testing import RunningServer
from despina_frontend_grpc import grpc_framing, h2_frames
from despina_frontend_grpc.connection_calls import INLINE_INFLATE
from despina_frontend_grpc.status import StatusCode
from test_http2_abuse import (
    RESOURCE_EXHAUSTED,
    RawClient,
    add_sub_request,
    assert_serves,
    grpc_message,
    gzipped_add_sub,
    send_gzip_call,
)
from tritonclient.utils import InferenceServerException

Serve = Callable[..., RunningServer]


def add_sub_inputs() -> list[grpcclient.InferInput]:
    data = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs


def gzip_zeros(size: int) -> bytes:
    """``size`` zero bytes gzipped, compressed a MiB at a time (never all in memory)."""
    deflater = zlib.compressobj(9, wbits=31)
    block = bytes(1 << 20)
    parts = [deflater.compress(block) for _ in range(size >> 20)]
    return b"".join(parts) + deflater.flush()


def without_size(bomb: bytes) -> bytes:
    """``bomb`` with a gzip trailer claiming 0 bytes: only inflating it finds its size
    (a trailer announcing more than the limit is refused before any inflating)."""
    return bomb[:-4] + bytes(4)


# --- compressed messages inflate off the event loop

#: The bomb's limit and what it inflates to: ~1 s of inflation (300 KiB on the wire).
BOMB_LIMIT = 256 << 20
BOMB_INFLATED = BOMB_LIMIT + (16 << 20)


def test_bomb_inflating_does_not_hold_up_other_clients(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    """While a bomb inflates (in a worker thread) on one connection, a tritonclient on
    another connection is answered; the bomb's RESOURCE_EXHAUSTED comes after."""
    running = serve(f"--grpc-max-message-size={BOMB_LIMIT}")
    bomb = without_size(gzip_zeros(BOMB_INFLATED))
    assert len(bomb) < BOMB_INFLATED // 500
    inputs = add_sub_inputs()
    with grpcclient.InferenceServerClient(running.grpc_url) as other:
        other.infer("add_sub", inputs)  # connected, and the model warm
        attacker = connect(running)
        start = time.perf_counter()
        sid = send_gzip_call(attacker, grpc_message(bomb, compressed=True))
        time.sleep(0.05)  # the bomb is being inflated
        answers = [other.infer("add_sub", inputs) for _ in range(3)]
        answered = time.perf_counter() - start
        attacker._poll()  # whatever the server sent the attacker so far
        assert "grpc-status" not in attacker.headers(sid), "the bomb ended first"
    for result in answers:
        assert result.as_numpy("OUTPUT1") is not None
    attacker.read_until(lambda: "grpc-status" in attacker.headers(sid))
    refused = time.perf_counter() - start
    assert attacker.headers(sid)["grpc-status"] == str(RESOURCE_EXHAUSTED)
    assert attacker.headers(sid)["grpc-message"] == "Decompressed message larger than max"
    print(
        f"\ngzip bomb ({len(bomb) >> 10} KiB -> {BOMB_INFLATED >> 20} MiB, limit "
        f"{BOMB_LIMIT >> 20} MiB): another client's 3 calls answered after "
        f"{answered * 1000:.0f} ms, the bomb refused after {refused * 1000:.0f} ms"
    )
    assert_serves(running)


def test_large_compressed_messages_are_served_whole(
    serve: Serve, connect: Callable[..., RawClient]
) -> None:
    """Messages inflating past INLINE_INFLATE (finished in a thread) are served whole and
    in order: a unary call, and a call whose END_STREAM arrives while it inflates."""
    running = serve()
    client = connect(running, reads=True)
    from tritonclient.grpc import service_pb2 as pb

    rows = 3 * INLINE_INFLATE // (2 * 16 * 4)  # two FP32 inputs: 3 MiB inflated
    body = gzipped_add_sub(rows)
    sids = [send_gzip_call(client, grpc_message(body, compressed=True)) for _ in range(3)]
    for sid in sids:
        client.read_until(lambda sid=sid: "grpc-status" in client.headers(sid))  # type: ignore[misc]
        assert client.headers(sid)["grpc-status"] == "0", client.headers(sid)
        payload = b"".join(p for k, _, s, p in client.frames if k == h2_frames.DATA and s == sid)
        response = pb.ModelInferResponse.FromString(payload[5:])
        out = np.frombuffer(response.raw_output_contents[0], np.float32)
        assert out.shape == (rows * 16,) and (out == 4.0).all()
    # a large compressed message followed by a second one in one unary call: refused
    # once both are whole (a unary call takes one message)
    small = grpc_message(add_sub_request())
    sid = send_gzip_call(client, grpc_message(body, compressed=True) + small)
    client.read_until(lambda: "grpc-status" in client.headers(sid))
    assert client.headers(sid)["grpc-status"] == "3"  # INVALID_ARGUMENT: the client's mistake
    assert client.headers(sid)["grpc-message"] == "a unary call needs one request message, got 2"
    assert_serves(running)


def test_inflation_steps_give_the_same_message() -> None:
    """A message advanced a little at a time gives what inflating at once gives; one over
    the limit is RESOURCE_EXHAUSTED."""
    data = np.random.default_rng(0).integers(0, 4, 3 << 20, dtype=np.uint8).tobytes()
    charge = BodyBudget(0).charge()
    for encoding, wbits in (("gzip", 31), ("deflate", 15)):
        deflater = zlib.compressobj(6, wbits=wbits)
        body = deflater.compress(data) + deflater.flush()
        buffer = bytearray(grpc_message(body, compressed=True))
        messages, pending = grpc_framing.take_messages(buffer, len(data), encoding, 0, charge)
        assert not messages and pending is not None and not buffer
        steps = 1
        while not pending.advance(0):
            steps += 1
        assert pending.result() == data
        assert steps > 3
        assert inflate(body, encoding, len(data), charge) == data
        with pytest.raises(grpc_framing.MessageError) as refused:
            buffer = bytearray(grpc_message(body, compressed=True))
            grpc_framing.take_messages(buffer, len(data) - 1, encoding, None, charge)
        assert refused.value.code is StatusCode.RESOURCE_EXHAUSTED
    cancelled = Inflation(gzip_zeros(64 << 20), "gzip", 1 << 30, charge)
    cancelled.cancel()
    assert grpc_framing.finish(cancelled) is False


# --- --grpc-max-concurrent-streams


def test_max_concurrent_streams_flag(serve: Serve, connect: Callable[..., RawClient]) -> None:
    """The flag's value is advertised in the server's SETTINGS and a stream beyond it is
    refused with REFUSED_STREAM (a grpc client queues its calls instead)."""
    running = serve("--grpc-max-concurrent-streams=4")
    client = connect(running)
    kind, _, _, payload = client.frames[0]
    assert kind == h2_frames.SETTINGS
    assert (h2_frames.MAX_CONCURRENT_STREAMS, 4) in h2_frames.parse_settings(payload)
    opened = [client.new_stream() for _ in range(5)]
    client.send(
        *(
            h2_frames.frame(h2_frames.HEADERS, h2_frames.END_HEADERS, sid, client.block())
            for sid in opened
        )
    )
    client.read_until(lambda: bool(client.resets()))
    assert client.resets() == {opened[-1]: h2_frames.REFUSED_STREAM}
    # a tritonclient with more calls in flight than that gets every answer (once it has
    # the server's SETTINGS: streams opened before are refused, and grpc fails those)
    with grpcclient.InferenceServerClient(running.grpc_url) as triton:
        results: list[object] = []
        done = threading.Event()

        def callback(result: object, error: object) -> None:
            results.append(error or result)
            if len(results) == 12:
                done.set()

        inputs = add_sub_inputs()
        triton.infer("add_sub", inputs)
        for _ in range(12):
            triton.async_infer("add_sub", inputs, callback)
        assert done.wait(30)
        errors = [str(r) for r in results if isinstance(r, InferenceServerException)]
        assert not errors, errors
    assert_serves(running)


def test_max_concurrent_streams_must_be_positive(serve: Serve) -> None:
    from despina.serving.server import StartupError

    with pytest.raises(StartupError, match="--grpc-max-concurrent-streams must be at least 1"):
        serve("--grpc-max-concurrent-streams=0")
    with pytest.raises(StartupError, match="--grpc-max-connections must be 0"):
        serve("--grpc-max-connections=-1")


# --- --grpc-max-connections


# (a connection beyond the limit: test_connection_floods.py)


def test_max_connections_zero_is_unlimited(serve: Serve, connect: Callable[..., RawClient]) -> None:
    running = serve("--grpc-max-connections=0")
    clients = [connect(running) for _ in range(8)]
    assert all(c.goaway() is None for c in clients)
    assert_serves(running)
