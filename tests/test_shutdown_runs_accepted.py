"""SIGTERM runs the work a ``despina serve`` process accepted (reliability issue 37, item
4; as Triton 2.51): requests in flight, queued in the default scheduler or the dynamic
batcher, and open sequences all run and are answered before the process exits 0. Open
HTTP connections are served as before until their clients close them while the gRPC
service closes at once (as Triton 2.58+); then the models stop, and only new work is
refused (the scheduler's "Server is stopping, scheduler for model has stopped accepting
new inference requests"), while a sequence's next request still runs.
Work still queued when ``--exit-timeout-secs`` runs out is answered with the stopping
error: nothing hangs."""

from __future__ import annotations

import http.client
import importlib
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from despina.testing import RepositoryBuilder, free_port

pytest.importorskip("despina_backend_python")
pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

#: Sleeps ``delay_s`` once per execution; OUTPUT0 = INPUT0 + 1 for each request.
SLEEPY_PY = """\
import json
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.delay = float(parameters["delay_s"]["string_value"])

    def execute(self, requests):
        time.sleep(self.delay)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() + 1)]
            )
            for r in requests
        ]
"""


def sleepy_config(delay_s: float, instances: int, batching: str = "") -> str:
    """FP32 [1] in and out; ``batching``: a dynamic batcher with batches of 4."""
    max_batch = 4 if batching else 0
    return f"""
backend: "python"
max_batch_size: {max_batch}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
parameters {{ key: "delay_s" value: {{ string_value: "{delay_s}" }} }}
{batching}
"""


SEQUENCE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
parameters { key: "delay_s" value: { string_value: "0" } }
sequence_batching { max_sequence_idle_microseconds: 30000000 }
"""


@dataclass
class Serving:
    """A ``despina serve`` process on 127.0.0.1."""

    process: subprocess.Popen[str]
    http_port: int
    grpc_port: int

    def client(self, protocol: str) -> Any:
        if protocol == "http":
            import tritonclient.http as httpclient

            return httpclient.InferenceServerClient(
                f"127.0.0.1:{self.http_port}", network_timeout=60
            )
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")

    def terminate(self) -> float:
        """SIGTERM; the monotonic time it was sent."""
        self.process.send_signal(signal.SIGTERM)
        return time.monotonic()

    def exit_status(self) -> tuple[int, str]:
        """Wait for the exit: its status and the log."""
        _, log = self.process.communicate(timeout=60)
        return self.process.returncode, log

    def wait_for_drain(self) -> None:
        """Until the HTTP port refuses connections: the server is stopping."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.http_port), timeout=5).close()
            except ConnectionRefusedError:
                return
            time.sleep(0.005)
        raise AssertionError("the port still accepts connections")


@contextmanager
def serving(root: Path, *flags: str) -> Iterator[Serving]:
    """``despina serve`` on the repository at ``root``, ready (killed at the end if it
    is still running)."""
    http_port, grpc_port = free_port(), free_port()
    command = [sys.executable, "-m", "despina", "serve", f"--model-repository={root}"]
    command += ["--http-address=127.0.0.1", f"--http-port={http_port}"]
    command += ["--grpc-address=127.0.0.1", f"--grpc-port={grpc_port}", "--allow-metrics=false"]
    process = subprocess.Popen([*command, *flags], stderr=subprocess.PIPE, text=True)
    try:
        running = Serving(process, http_port, grpc_port)
        deadline = time.monotonic() + 120
        while not _ready(http_port):
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "not ready"
            time.sleep(0.1)
        yield running
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _ready(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/v2/health/ready")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def concurrent_requests(
    running: Serving, protocol: str, count: int, shape: tuple[int, ...] = (1,), added: int = 1
) -> tuple[threading.Barrier, Callable[[], dict[str, int]]]:
    """``count`` client threads, each with its own connection, send one request of
    ``shape`` to ``sleepy`` once the returned barrier (``count + 1`` parties) is passed;
    the returned function joins them and counts their outcomes ("ok": the output is the
    input plus ``added``; "wrong"; or the error's text)."""
    module: Any = importlib.import_module(f"tritonclient.{protocol}")
    from tritonclient.utils import InferenceServerException

    outcomes: dict[str, int] = {}
    lock = threading.Lock()
    go = threading.Barrier(count + 1)

    def one(index: int) -> None:
        client = running.client(protocol)
        tensor = module.InferInput("INPUT0", list(shape), "FP32")
        tensor.set_data_from_numpy(np.full(shape, index, np.float32))
        go.wait()
        try:
            result = client.infer("sleepy", [tensor]).as_numpy("OUTPUT0").ravel().tolist()
            outcome = "ok" if result == [index + added] else "wrong"
        except InferenceServerException as exc:
            outcome = str(exc.message())
        except Exception as exc:  # noqa: BLE001 - lost on the way: counted, asserted on
            outcome = f"{type(exc).__name__}: {exc}"
        finally:
            client.close()
        with lock:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()

    def finish() -> dict[str, int]:
        for thread in threads:
            thread.join(120)
            assert not thread.is_alive(), "a request hangs"
        return outcomes

    return go, finish


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sigterm_runs_every_request_in_flight(
    model_repository: RepositoryBuilder, protocol: str
) -> None:
    """The issue's case: 64 requests, 0.2 s per execution on 2 instances, SIGTERM after
    1 s: the 54 or so still queued run too (before: 503 "... was not executed")."""
    model_repository.add("sleepy", sleepy_config(0.2, 2), {"1/model.py": SLEEPY_PY})
    with serving(model_repository.root) as running:
        go, finish = concurrent_requests(running, protocol, 64)
        go.wait()
        time.sleep(1)
        signalled = running.terminate()
        outcomes = finish()
        status, log = running.exit_status()
    assert outcomes == {"ok": 64}
    assert status == 0, log
    assert time.monotonic() - signalled < 30


def test_sigterm_runs_what_the_dynamic_batcher_holds(model_repository: RepositoryBuilder) -> None:
    batching = "dynamic_batching { max_queue_delay_microseconds: 100000 }"
    config = sleepy_config(0.2, 2, batching)
    model_repository.add("sleepy", config, {"1/model.py": SLEEPY_PY})
    with serving(model_repository.root) as running:
        go, finish = concurrent_requests(running, "http", 64, (1, 1))
        go.wait()
        time.sleep(0.5)
        running.terminate()
        outcomes = finish()
        status, log = running.exit_status()
    assert outcomes == {"ok": 64}
    assert status == 0, log


PIPELINE_CONFIG = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
ensemble_scheduling { step [
  { model_name: "first" model_version: -1
    input_map { key: "INPUT0" value: "INPUT0" } output_map { key: "OUTPUT0" value: "middle" } },
  { model_name: "second" model_version: -1
    input_map { key: "INPUT0" value: "middle" } output_map { key: "OUTPUT0" value: "OUTPUT0" } }
] }
"""


def test_sigterm_runs_every_step_of_accepted_ensemble_requests(
    model_repository: RepositoryBuilder,
) -> None:
    """Ensemble requests in flight run their later steps after the signal (the steps'
    requests are the accepted request's own work, not new requests)."""
    for name in ("first", "second"):
        model_repository.add(name, sleepy_config(0.2, 1), {"1/model.py": SLEEPY_PY})
    model_repository.add("sleepy", PIPELINE_CONFIG, {"1/.keep": ""})
    with serving(model_repository.root) as running:
        go, finish = concurrent_requests(running, "grpc", 8, added=2)
        go.wait()
        time.sleep(0.3)
        running.terminate()
        outcomes = finish()
        status, log = running.exit_status()
    assert outcomes == {"ok": 8}
    assert status == 0, log


def test_sigterm_closes_grpc_and_open_http_connections_finish_their_sequences(
    model_repository: RepositoryBuilder,
) -> None:
    """As Triton 2.58+ (v2.71's test_shutdown_sequence): the gRPC service closes when the
    signal comes (a call sent after it is refused, UNAVAILABLE or CANCELLED), while an HTTP
    connection opened before it is served as before: its open sequence's next request runs,
    and the server stops once the client closes it."""
    from tritonclient.grpc import InferInput
    from tritonclient.utils import InferenceServerException

    model_repository.add("counter", SEQUENCE_CONFIG, {"1/model.py": SLEEPY_PY})
    model_repository.add("sleepy", sleepy_config(0, 1), {"1/model.py": SLEEPY_PY})
    with serving(model_repository.root) as running:
        client = running.client("http")
        start = client.infer("counter", _input(1), sequence_id=7, sequence_start=True)
        assert start.as_numpy("OUTPUT0").tolist() == [2]
        grpc = running.client("grpc")
        tensor = InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.array([5], np.float32))
        assert grpc.is_server_ready()
        running.terminate()
        running.wait_for_drain()
        with pytest.raises(InferenceServerException) as refused:
            grpc.infer("sleepy", [tensor])
        assert refused.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.CANCELLED")
        grpc.close()
        time.sleep(0.5)
        assert running.process.poll() is None  # the HTTP connection is still open
        result = client.infer("counter", _input(5), sequence_id=7, sequence_end=True)
        assert result.as_numpy("OUTPUT0").tolist() == [6]
        client.close()
        exit_status, log = running.exit_status()
    assert exit_status == 0, log
    assert first_connection_count(log) >= 1


def first_connection_count(log: str) -> int:
    """The count in the stop's first ``Found N HTTP service connections`` line: the
    client's connections, plus any probe of :meth:`Serving.wait_for_drain` the kernel
    completed as the port closed (counted until its close is read)."""
    found = re.search(r"Timeout \d+: Found (\d+) HTTP service connections", log)
    assert found is not None, log
    return int(found.group(1))


def _input(value: float) -> list[Any]:
    import tritonclient.http as httpclient

    tensor = httpclient.InferInput("INPUT0", [1], "FP32")
    tensor.set_data_from_numpy(np.array([value], np.float32))
    return [tensor]


def test_exit_timeout_answers_what_is_still_queued(model_repository: RepositoryBuilder) -> None:
    """10 s of queued work, ``--exit-timeout-secs=1``: about 1 s of it runs, the rest is
    answered "Server is stopping, ... was not executed", and the process exits soon."""
    model_repository.add("sleepy", sleepy_config(0.2, 1), {"1/model.py": SLEEPY_PY})
    with serving(model_repository.root, "--exit-timeout-secs=1") as running:
        go, finish = concurrent_requests(running, "http", 50)
        go.wait()
        time.sleep(0.5)
        signalled = running.terminate()
        outcomes = finish()
        status, log = running.exit_status()
        exited = time.monotonic() - signalled
    refused = outcomes.pop("Server is stopping, request for model 'sleepy' was not executed", 0)
    assert set(outcomes) == {"ok"}, (outcomes, log[-3000:])
    assert 3 <= outcomes["ok"] <= 20 and outcomes["ok"] + refused == 50
    assert status == 0, log
    assert exited < 8
    assert "exit timeout reached" in log


def _infer_request(value: float) -> bytes:
    """A keep-alive inference request to ``sleepy`` adding 1 to ``value``."""
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": [value]}]}
    ).encode()
    head = (
        "POST /v2/models/sleepy/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _answers(sock: socket.socket, count: int) -> list[tuple[int, bool, Any]]:
    """The next ``count`` answers on ``sock``: (status, whether it says ``Connection:
    close``, its JSON body)."""
    found: list[tuple[int, bool, Any]] = []
    reader = sock.makefile("rb")
    for _ in range(count):
        status_line = reader.readline()
        assert status_line, f"closed after {found}"
        headers = {}
        while (line := reader.readline().strip()) != b"":
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = json.loads(reader.read(int(headers["content-length"])))
        found.append((int(status_line.split()[1]), headers.get("connection") == "close", body))
    return found


def test_sigterm_runs_requests_pipelined_before_it(model_repository: RepositoryBuilder) -> None:
    """HTTP/1.1 requests pipelined behind the one executing as the signal comes, and a
    request written after it on a connection opened before it, run and are answered in
    order on connections kept alive: the server serves its open HTTP connections until
    their clients close them (as Triton), then stops."""
    model_repository.add("sleepy", sleepy_config(0.3, 1), {"1/model.py": SLEEPY_PY})
    with serving(model_repository.root) as running:
        pipelined = socket.create_connection(("127.0.0.1", running.http_port), timeout=30)
        pipelined.sendall(b"".join(_infer_request(i) for i in range(4)))
        late = socket.create_connection(("127.0.0.1", running.http_port), timeout=30)
        late.sendall(_infer_request(10))
        time.sleep(0.15)  # the first executes, the other four were read
        running.terminate()
        running.wait_for_drain()
        late.sendall(_infer_request(11))
        with pipelined, late:
            answered = _answers(pipelined, 4)
            later = _answers(late, 2)
            assert running.process.poll() is None  # waiting for the two connections
        status, log = running.exit_status()
    assert [(s, c, b["outputs"][0]["data"]) for s, c, b in answered] == [
        (200, False, [1]),
        (200, False, [2]),
        (200, False, [3]),
        (200, False, [4]),
    ]
    assert [(s, c, b["outputs"][0]["data"]) for s, c, b in later] == [
        (200, False, [11]),
        (200, False, [12]),
    ]
    assert status == 0, log
    assert first_connection_count(log) >= 2
