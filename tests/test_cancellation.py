"""Cancellation over the wire: a client that disconnects while its request is queued has
the request dropped from the queue (counted as a CANCELED failure, never executed), and
the server keeps serving."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import toy_backend
from despina.testing import RepositoryBuilder, RunningServer
from toy_backend import toy_config

pytest.importorskip("despina_frontend_http")

ONE_INSTANCE = "instance_group [{ count: 1 kind: KIND_CPU }] dynamic_batching { }"


def _post(port: int, request_id: str) -> socket.socket:
    """Send an infer request for model "slow" on a raw socket; return the open socket."""
    tensor = {"datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]}
    body = json.dumps(
        {"id": request_id, "inputs": [{**tensor, "name": "INPUT0"}, {**tensor, "name": "INPUT1"}]}
    ).encode()
    head = (
        f"POST /v2/models/slow/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(head + body)
    return sock


def _status(sock: socket.socket) -> int:
    """Read the response status line, then close the socket."""
    with sock:
        line = sock.makefile("rb").readline()
    return int(line.split()[1])


def _wait_for(condition: Callable[[], bool], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_http_disconnect_drops_the_queued_request(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    import tritonclient.http as httpclient

    model_repository.add(
        "slow", toy_config(mbs=1, extra=ONE_INSTANCE), {"1/model.toy": '{"delay_s": 1.5}'}
    )
    running = despina_server(
        model_repository.root,
        ["--allow-grpc=false"],
        plugins=[toy_backend],
    )
    port = int(running.http_url.rsplit(":", 1)[1])
    stats = running.server.models.get("slow").stats
    toy_backend.ToyBackend.order.clear()

    first = _post(port, "first")  # occupies the single instance
    _wait_for(lambda: "first" in toy_backend.ToyBackend.order)
    gone = _post(port, "gone")
    kept = _post(port, "kept")
    time.sleep(0.2)  # both are queued behind "first"
    gone.close()  # the client of "gone" disconnects while its request waits
    _wait_for(lambda: stats.failures["CANCELED"] == 1)

    with ThreadPoolExecutor(2) as pool:
        statuses = list(pool.map(_status, [first, kept]))
    assert statuses == [200, 200]
    assert "gone" not in toy_backend.ToyBackend.order
    assert toy_backend.ToyBackend.order == ["first", "kept"]
    assert stats.failures["CANCELED"] == 1

    # The server keeps serving after the disconnect.
    client = httpclient.InferenceServerClient(running.http_url)
    inputs = [httpclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    result = client.infer("slow", inputs, request_id="after")
    assert result.as_numpy("OUTPUT0").tolist() == [[2.0] * 4]
    client.close()
    assert toy_backend.ToyBackend.order == ["first", "kept", "after"]
