"""Behind a load balancer (Triton issue #6230): on SIGTERM a ``despina serve`` process with
``--shutdown-grace-period`` reports not ready at once, keeps serving inference for the
grace period (requests the balancer still routes here succeed, keep-alive connections stay
open), then closes its port, serves the open connections until their clients close them
(as Triton), stops the models and exits."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import toy_backend
from despina.plugin.manager import create_plugins
from despina.serving.flags import parse_settings
from despina.testing import RepositoryBuilder, free_port
from toy_backend import toy_config

pytest.importorskip("despina_frontend_http")

GRACE_S = 4.0
BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [1, 4], "data": [1, 1, 1, 1]},
        ]
    }
).encode()


def _status(url: str, body: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _wait_for(condition: str, check: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {condition}")


@contextmanager
def _serving(model_repository: RepositoryBuilder) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``despina serve`` with the toy model "m" and the grace period, ready: the process
    and its HTTP port (killed at the end if still running)."""
    model_repository.add("m", toy_config(mbs=4), {"1/model.toy": "{}"})
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(Path(toy_backend.__file__).parent))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "despina",
            "serve",
            f"--model-repository={model_repository.root}",
            "--plugin=toy_backend",
            "--http-address=127.0.0.1",
            f"--http-port={port}",
            "--allow-grpc=false",
            "--allow-metrics=false",
            f"--shutdown-grace-period={GRACE_S}",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready = f"http://127.0.0.1:{port}/v2/health/ready"
        _wait_for("readiness", lambda: _status(ready)[0] == 200, 60)
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_sigterm_turns_readiness_false_and_serves_through_the_grace_period(
    model_repository: RepositoryBuilder,
) -> None:
    with _serving(model_repository) as (process, port):
        base = f"http://127.0.0.1:{port}"
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _wait_for("not ready", lambda: _status(f"{base}/v2/health/ready")[0] == 400, 2)
        assert time.monotonic() - signalled < GRACE_S / 2
        # inside the window: live, and inference still answered
        assert _status(f"{base}/v2/health/live")[0] == 200
        status, body = _status(f"{base}/v2/models/m/infer", BODY)
        assert status == 200, body
        assert json.loads(body)["outputs"][0]["data"] == [2, 3, 4, 5]
        assert process.poll() is None
        _, stderr = process.communicate(timeout=GRACE_S + 30)
        assert process.returncode == 0, stderr
        assert time.monotonic() - signalled >= GRACE_S
        assert "serving 4 more seconds before draining" in stderr


def _infer(sock: socket.socket, head_sent: int = 0) -> http.client.HTTPResponse:
    """Send the inference request on a kept-alive connection (its first ``head_sent``
    bytes went already) and read the answer."""
    message = (
        f"POST /v2/models/m/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    sock.sendall(message[head_sent:])
    answer = http.client.HTTPResponse(sock)
    answer.begin()
    answer.read()
    return answer


def test_keep_alive_connection_is_served_until_its_client_closes_it(
    model_repository: RepositoryBuilder,
) -> None:
    """As Triton's HTTP service: a kept-alive connection is served as before through the
    grace period and after the port closes (a request it had begun is answered 200), and
    the models stop only once its client closed it; the wait is logged as Triton logs it."""
    with _serving(model_repository) as (process, port):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        with sock:
            assert _infer(sock).getheader("Connection") is None
            process.send_signal(signal.SIGTERM)
            ready = f"http://127.0.0.1:{port}/v2/health/ready"
            _wait_for("not ready", lambda: _status(ready)[0] == 400, GRACE_S / 2)
            answer = _infer(sock)
            assert answer.status == 200 and answer.getheader("Connection") is None
            sock.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\n")  # begun...
            _wait_for("the port to close", lambda: _refused(port), GRACE_S + 30)
            answer = _infer(sock, head_sent=len(b"POST /v2/models/m/infer HTTP/1.1\r\n"))
            assert answer.status == 200 and answer.getheader("Connection") is None
            assert process.poll() is None  # waiting for this connection
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr
        # this connection, and maybe the port probe the kernel completed as it closed
        assert re.search(r"Timeout \d+: Found [12] HTTP service connections", stderr)
        assert "Waiting for in-flight requests to complete." in stderr
        assert stderr.count("Timeout 30: ") == 1  # one countdown, not restarted


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_grace_period_must_be_a_finite_non_negative_number(value: str) -> None:
    with pytest.raises(SystemExit):
        parse_settings([f"--shutdown-grace-period={value}"], create_plugins())


def test_grace_period_defaults_to_zero() -> None:
    flags = parse_settings([], create_plugins())
    assert flags.shutdown_grace_period == 0.0
