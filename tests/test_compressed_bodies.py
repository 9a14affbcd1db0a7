"""Compressed request bodies cannot exhaust a server's memory (security issue 37): a
``despina serve`` process with small limits and a small ``--max-inflight-request-bytes``
gets gzip bombs over gRPC (a raw HTTP/2 client, compressed flag and ``grpc-encoding:
gzip``) and HTTP (``Content-Encoding: gzip``); each is refused with its protocol's status,
the process's VmRSS stays far below what the bombs inflate to, the memory goes back after
a refusal, and ordinary and compressed requests are served afterwards."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import toy_backend
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from despina.testing import RepositoryBuilder, free_port
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ResponseReceived, StreamEnded, StreamReset, TrailersReceived
from h2.exceptions import StreamClosedError
from toy_backend import toy_config
from tritonclient.grpc import service_pb2 as pb

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

MIB = 1 << 20
#: The per-request limits (gRPC message, HTTP body) and the server-wide budget.
LIMIT = 64 * MIB
BUDGET = 96 * MIB
INFER = "/inference.GRPCInferenceService/ModelInfer"
RESOURCE_EXHAUSTED = "8"
INVALID_ARGUMENT = "3"


@dataclass
class Serving:
    process: subprocess.Popen[str]
    http_port: int
    grpc_port: int

    def rss_mib(self) -> float:
        """The server process's VmRSS."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")


@contextmanager
def serving(repo: RepositoryBuilder, *flags: str) -> Iterator[Serving]:
    """``despina serve`` with the toy model "m" (INPUT0, INPUT1: FP32 [4]), ready."""
    repo.add("m", toy_config(), {"1/model.toy": "{}"})
    http_port, grpc_port = free_port(), free_port()
    env = dict(os.environ, PYTHONPATH=str(Path(toy_backend.__file__).parent))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "despina",
            "serve",
            f"--model-repository={repo.root}",
            "--plugin=toy_backend",
            "--http-address=127.0.0.1",
            f"--http-port={http_port}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={grpc_port}",
            "--allow-metrics=false",
            *flags,
        ],
        env=env,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "the server did not get ready"
            try:
                if http_status("GET", http_port, "/v2/health/ready")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        yield Serving(process, http_port, grpc_port)
    finally:
        process.kill()
        process.wait()


def http_status(
    method: str, port: int, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body, headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


class Peak:
    """The highest VmRSS of the server while the block runs (sampled every 5 ms)."""

    def __init__(self, server: Serving) -> None:
        self.server = server
        self.mib = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample)

    def _sample(self) -> None:
        while not self._done.is_set():
            self.mib = max(self.mib, self.server.rss_mib())
            time.sleep(0.005)

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()


def gzip_zeros(head: bytes, size: int) -> bytes:
    """``head`` then ``size`` zero bytes, gzipped a MiB at a time."""
    deflater = zlib.compressobj(9, wbits=31)
    parts = [deflater.compress(head)]
    block = bytes(MIB)
    parts += [deflater.compress(block[: min(MIB, size - i)]) for i in range(0, size, MIB)]
    return b"".join(parts) + deflater.flush()


def hide_size(body: bytes) -> bytes:
    """A gzip body whose trailer claims 0 bytes: only inflating finds its size."""
    return body[:-4] + bytes(4)


def grpc_bomb(size: int) -> bytes:
    """A gzip ModelInferRequest for "m" whose raw input (field 7) is ``size`` zeros."""
    head = pb.ModelInferRequest(model_name="m")
    head.inputs.add(name="INPUT0", datatype="FP32", shape=[4])
    prefix = head.SerializeToString() + b"\x3a" + encode_varint(size)
    return gzip_zeros(prefix, size)


def encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes((value,))


class GrpcCall:
    """One ModelInfer call on its own raw HTTP/2 connection (``h2``)."""

    def __init__(self, port: int, compressed: bool = True) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.compressed = compressed
        self.fields: dict[str, str] = {}
        self.ended = False
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", INFER),
            (":authority", "127.0.0.1"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ]
        if compressed:
            headers.append(("grpc-encoding", "gzip"))
        self.conn.send_headers(1, headers)
        self._flush()

    def _flush(self) -> None:
        if data := self.conn.data_to_send():
            self.sock.sendall(data)

    def _receive(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            self.ended = True
            return
        for event in self.conn.receive_data(data):
            if isinstance(event, (ResponseReceived, TrailersReceived)):
                self.fields.update(dict(event.headers))
            elif isinstance(event, (StreamEnded, StreamReset)):
                self.ended = True
        self._flush()

    def send(self, message: bytes, size: int | None = None, end: bool = True) -> None:
        """Send ``message`` length-prefixed (announcing ``size``, its length by default)
        as the windows allow, unless the answer comes first."""
        prefix = bytes((self.compressed,)) + (size or len(message)).to_bytes(4, "big")
        view = memoryview(prefix + message)
        while view and not self.ended:
            room = min(self.conn.local_flow_control_window(1), self.conn.max_outbound_frame_size)
            if room <= 0:
                self._receive()
                continue
            try:
                self.conn.send_data(1, bytes(view[:room]), end_stream=end and room >= len(view))
            except StreamClosedError:  # answered before the whole message went
                return
            view = view[room:]
            self._flush()

    def answer(self) -> tuple[str, str]:
        """(grpc-status, grpc-message) once the call ended."""
        while not self.ended:
            self._receive()
        self.sock.close()
        return self.fields.get("grpc-status", "none"), self.fields.get("grpc-message", "")


def grpc_call(port: int, message: bytes) -> tuple[str, str]:
    call = GrpcCall(port)
    call.send(message)
    return call.answer()


def http_bomb(size: int) -> tuple[bytes, dict[str, str]]:
    """A gzip binary-tensor infer body for "m" of ``size`` zeros, and its headers."""
    parameters = {"binary_data_size": size}
    header = json.dumps(
        {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [4], "parameters": parameters}]}
    ).encode()
    headers = {
        "Content-Encoding": "gzip",
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return gzip_zeros(header, size), headers


def serves(server: Serving) -> None:
    """Ordinary and gzip-compressed requests are answered, over gRPC and HTTP."""
    data = np.arange(4, dtype=np.float32)
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = grpcclient.InferInput(name, [4], "FP32")
            tensor.set_data_from_numpy(data)
            inputs.append(tensor)
        for algorithm in (None, "gzip"):
            result = client.infer("m", inputs, compression_algorithm=algorithm)
            assert (result.as_numpy("OUTPUT0") == 2 * data).all()
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    try:
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [4], "FP32")
            tensor.set_data_from_numpy(data)
            inputs.append(tensor)
        for algorithm in (None, "gzip", "deflate"):
            result = client.infer("m", inputs, request_compression_algorithm=algorithm)
            assert (result.as_numpy("OUTPUT0") == 2 * data).all()
    finally:
        client.close()


def test_grpc_gzip_bombs_are_refused_within_bounded_memory(
    model_repository: RepositoryBuilder,
) -> None:
    flags = (f"--grpc-max-message-size={LIMIT}", f"--max-inflight-request-bytes={BUDGET}")
    with serving(model_repository, *flags) as server:
        serves(server)
        before = server.rss_mib()
        # a trailer announcing 1 GiB: refused before anything inflates
        honest = grpc_bomb(1 << 30)
        with Peak(server) as peak:
            assert grpc_call(server.grpc_port, honest) == (
                RESOURCE_EXHAUSTED,
                "Decompressed message larger than max",
            )
        assert peak.mib - before < 32, (before, peak.mib)
        # a trailer that lies: refused once the output passes the limit
        forged = hide_size(honest)
        with Peak(server) as peak:
            assert grpc_call(server.grpc_port, forged) == (
                RESOURCE_EXHAUSTED,
                "Decompressed message larger than max",
            )
        assert peak.mib - before < LIMIT / MIB + 48, (before, peak.mib)
        time.sleep(1)  # the large refusal's memory goes back to the system
        after = server.rss_mib()
        assert after - before < 32, (before, peak.mib, after)
        # eight at once, each under the limit (40 MiB), 320 MiB together: the budget
        # (96 MiB) refuses those that would pass it; the others reach the model, which
        # refuses their shape
        bomb = grpc_bomb(40 * MIB)
        answers: list[tuple[str, str]] = []
        with Peak(server) as peak:
            threads = [
                threading.Thread(target=lambda: answers.append(grpc_call(server.grpc_port, bomb)))
                for _ in range(8)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        busy = [a for a in answers if a[0] == RESOURCE_EXHAUSTED]
        assert len(answers) == 8 and busy, answers
        assert all("--max-inflight-request-bytes" in text for _, text in busy), busy
        assert all(a[0] in (RESOURCE_EXHAUSTED, INVALID_ARGUMENT) for a in answers), answers
        # charged at most the budget (inflated), plus what accepted messages cost beyond
        # it (joined, parsed): far below the 320 MiB inflated
        assert peak.mib - before < 4 * BUDGET / MIB, (before, peak.mib)
        print(
            f"\ngRPC: RSS before {before:.0f} MiB, eight 40 MiB bombs peak {peak.mib:.0f} "
            f"MiB, {len(busy)} refused by the budget"
        )
        serves(server)


def test_http_gzip_bombs_and_the_shared_budget(model_repository: RepositoryBuilder) -> None:
    flags = (
        f"--http-max-input-size={LIMIT}",
        f"--grpc-max-message-size={LIMIT}",
        f"--max-inflight-request-bytes={BUDGET}",
    )
    with serving(model_repository, *flags) as server:
        serves(server)
        before = server.rss_mib()
        too_large = (
            f"request body exceeds the maximum allowed size of {LIMIT} bytes; "
            "use --http-max-input-size to increase the limit"
        )
        body, headers = http_bomb(1 << 30)
        for bomb in (body, hide_size(body)):
            with Peak(server) as peak:
                status, _, text = http_status(
                    "POST", server.http_port, "/v2/models/m/infer", bomb, headers
                )
            assert (status, json.loads(text)) == (413, {"error": too_large})
            assert peak.mib - before < LIMIT / MIB + 48, (before, peak.mib)
        time.sleep(1)
        assert server.rss_mib() - before < 32
        # a gRPC message of 63 MiB announced and not yet sent (uncompressed) holds 63
        # MiB of the budget: an HTTP body inflating to 48 MiB waits (503, Retry-After)
        holder = GrpcCall(server.grpc_port, compressed=False)
        holder.send(b"\0" * 1024, size=LIMIT - MIB, end=False)
        time.sleep(0.2)
        body, headers = http_bomb(48 * MIB)
        status, answer_headers, text = http_status(
            "POST", server.http_port, "/v2/models/m/infer", body, headers
        )
        assert status == 503, text
        assert answer_headers["Retry-After"] == "1"
        assert "retry later" in json.loads(text)["error"]
        holder.sock.close()  # the client goes away: its message no longer counts
        time.sleep(0.2)
        status, _, text = http_status("POST", server.http_port, "/v2/models/m/infer", body, headers)
        assert status == 400, text  # inflated whole; the model refuses its shape
        serves(server)


def test_a_body_alone_over_the_budget_is_413(model_repository: RepositoryBuilder) -> None:
    flags = (f"--http-max-input-size={LIMIT}", f"--max-inflight-request-bytes={16 * MIB}")
    with serving(model_repository, *flags) as server:
        body, headers = http_bomb(32 * MIB)
        status, answer_headers, text = http_status(
            "POST", server.http_port, "/v2/models/m/infer", body, headers
        )
        assert status == 413 and "Retry-After" not in answer_headers, text
        assert "needs more than the server's" in json.loads(text)["error"]
        answer = grpc_call(server.grpc_port, hide_size(grpc_bomb(32 * MIB)))
        assert answer[0] == RESOURCE_EXHAUSTED and "needs more than" in answer[1], answer
        serves(server)
