"""A real Redis server per test (Debian's ``redis-server``, started here on a free
loopback port in a temporary folder), and ``despina serve`` processes around it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from despina.testing import free_port

ECHO_CONFIG = """
name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [
  { name: "Y", data_type: TYPE_FP32, dims: [ 4 ] },
  { name: "S", data_type: TYPE_STRING, dims: [ 2 ] }
]
response_cache { enable: true }
"""
ECHO_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            words = np.array([b"sum", str(float(x.sum())).encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", x + 1), pb_utils.Tensor("S", words)]))
        return responses
"""


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1:``port`` (no persistence); with
    ``tls`` (the PEM files of :func:`tls_files`) it serves TLS only, on that port, and
    asks clients for a certificate the same CA signed."""

    def __init__(self, folder: Path, tls: dict[str, Path] | None = None) -> None:
        self.folder = folder
        self.port = free_port()
        self.tls = tls
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None
        listen = ["--port", str(self.port)]
        if self.tls is not None:
            listen = [
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--tls-cert-file",
                str(self.tls["server.crt"]),
                "--tls-key-file",
                str(self.tls["server.key"]),
                "--tls-ca-cert-file",
                str(self.tls["ca"]),
                "--tls-auth-clients",
                "yes",
            ]
        self.process = subprocess.Popen(
            [
                binary,
                "--bind",
                "127.0.0.1",
                *listen,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while self.command("PING") != "+PONG":
            assert time.monotonic() < deadline, "redis-server did not answer"
            time.sleep(0.05)

    def command(self, *words: str) -> str:
        """One inline command's first reply line ("" when Redis does not answer)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as plain:
                conn = plain
                if self.tls is not None:
                    context = ssl.create_default_context(cafile=str(self.tls["ca"]))
                    context.load_cert_chain(self.tls["client.crt"], self.tls["client.key"])
                    conn = context.wrap_socket(plain, server_hostname="127.0.0.1")
                with conn:
                    conn.sendall(" ".join(words).encode() + b"\r\n")
                    return conn.recv(65536).split(b"\r\n")[0].decode()
        except OSError:
            return ""

    def signal(self, number: int) -> None:
        assert self.process is not None
        self.process.send_signal(number)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(10)
        self.process = None


def tls_files(folder: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    import trustme

    ca = trustme.CA()
    files = {name: folder / name for name in ("ca", "server.crt", "server.key")}
    files |= {"client.crt": folder / "client.crt", "client.key": folder / "client.key"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    for role, leaf in (("server", ca.issue_cert("127.0.0.1")), ("client", ca.issue_cert("c"))):
        leaf.private_key_pem.write_to_path(str(files[f"{role}.key"]))
        leaf.cert_chain_pems[0].write_to_path(str(files[f"{role}.crt"]))
    return files


def _redis(folder: Path, tls: dict[str, Path] | None) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (`make venv` installs it with apt as root)")
    server = RedisServer(folder, tls)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    yield from _redis(tmp_path, None)


@pytest.fixture
def tls_redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis serving mutual TLS only (its files in ``.tls``)."""
    yield from _redis(tmp_path, tls_files(tmp_path))


class Serving:
    """A ``despina serve`` process of the echo model: its HTTP port and its log."""

    def __init__(self, repository: Path, log: Path, args: list[str]) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        self.log = log
        self._log_file = log.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "despina",
                "serve",
                f"--model-repository={repository}",
                "--http-address=127.0.0.1",
                f"--http-port={self.port}",
                "--allow-grpc=false",
                "--metrics-address=127.0.0.1",
                f"--metrics-port={self.metrics_port}",
                *args,
            ],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 90
        while True:
            assert self.process.poll() is None, self.log.read_text()
            try:
                url = f"http://127.0.0.1:{self.port}/v2/models/echo/ready"
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "despina serve did not get ready"
            time.sleep(0.1)

    def statistics(self) -> dict[str, object]:
        url = f"http://127.0.0.1:{self.port}/v2/models/echo/stats"
        with urllib.request.urlopen(url, timeout=10) as response:
            stats: dict[str, object] = json.loads(response.read())["model_stats"][0]
        return stats

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            return str(response.read().decode())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log_file.close()


@pytest.fixture
def echo_repository(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    (root / "echo" / "1").mkdir(parents=True)
    (root / "echo" / "config.pbtxt").write_text(ECHO_CONFIG)
    (root / "echo" / "1" / "model.py").write_text(ECHO_MODEL)
    return root


@pytest.fixture
def serve(echo_repository: Path, tmp_path: Path) -> Iterator[Callable[..., Serving]]:
    """``serve(*flags)``: a ready ``despina serve`` of the echo model (stopped at the end)."""
    started: list[Serving] = []

    def start(*args: str, ready: bool = True) -> Serving:
        serving = Serving(echo_repository, tmp_path / f"serve{len(started)}.log", list(args))
        started.append(serving)
        if ready:
            serving.wait_ready()
        return serving

    yield start
    for serving in started:
        serving.stop()
