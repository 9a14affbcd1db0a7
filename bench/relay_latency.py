"""Latency of the HTTP port's requests in two revisions of Despina, on one keep-alive
connection per server, requests alternated between them.

Two trees are served with the same venv: ``before`` and ``after`` are ``git archive`` of
two revisions (default: HEAD's parent and HEAD), so nothing being edited in the working
tree differs. Each is a ``despina serve`` process (the in-process ``bench`` add_sub
backend, ``bench/model_repository``) with the tree's sources first on ``PYTHONPATH``.
Requests, each timed from its first byte sent to its answer's last byte read: ``GET
/v2/health/ready``, ``GET /v2/models/add_sub`` (metadata), ``POST .../infer`` with a gzip
body, and the plain ``POST .../infer`` (the front's fast path). Every step sends one
request of each kind to both servers, in an order alternating step by step. Each
server's CPU time (user + system, from ``/proc``) over the timed window is reported per
step too. ``--same`` serves ``before`` as both (an A/A run: the noise floor).

    .venv/bin/python bench/relay_latency.py [--before REV] [--after REV] [--seconds 6] [--same]
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREES = Path("/tmp/relay_latency")
_BODY = json.dumps(
    {
        "inputs": [
            {"name": f"INPUT{i}", "datatype": "FP32", "shape": [1, 16], "data": [1.0] * 16}
            for i in range(2)
        ]
    }
).encode()
_INFER = "POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: b\r\n"
REQUESTS = {
    "GET /v2/health/ready": b"GET /v2/health/ready HTTP/1.1\r\nHost: b\r\n\r\n",
    "GET /v2/models/add_sub": b"GET /v2/models/add_sub HTTP/1.1\r\nHost: b\r\n\r\n",
    "POST infer, gzip body": (
        f"{_INFER}Content-Encoding: gzip\r\nContent-Length: {len(gzip.compress(_BODY))}\r\n\r\n"
    ).encode()
    + gzip.compress(_BODY),
    "POST infer (control)": f"{_INFER}Content-Length: {len(_BODY)}\r\n\r\n".encode() + _BODY,
}


def make_trees(before: str, after: str) -> dict[str, Path]:
    """``before`` and ``after``: the trees of two revisions."""
    shutil.rmtree(TREES, ignore_errors=True)
    trees = {"before": TREES / "before", "after": TREES / "after"}
    for name, revision in (("before", before), ("after", after)):
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision], check=True, capture_output=True
        ).stdout
        trees[name].mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(trees[name], filter="data")
    return trees


def python_path(tree: Path) -> str:
    sources = [tree / "core/src", *sorted(tree.glob("plugins/*/src")), tree / "bench"]
    return os.pathsep.join(str(path) for path in sources)


def start(tree: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``despina serve`` from ``tree``; the process and its HTTP port."""
    env = dict(os.environ, PYTHONPATH=python_path(tree))
    front = subprocess.run(
        [sys.executable, "-c", "import despina_frontend_http as f; print(f.__file__)"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert front.startswith(str(tree)), front
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        *(sys.executable, "-m", "despina", "serve", "--plugin=bench_backend"),
        f"--model-repository={tree / 'bench/model_repository'}",
        *("--http-address=127.0.0.1", f"--http-port={port}", "--allow-grpc=false"),
        "--allow-metrics=false",
    ]
    process = subprocess.Popen(
        command, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=tree
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            Client(port).exchange(REQUESTS["GET /v2/health/ready"])
            return process, port
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"{tree} did not start: see {log}")


class Client:
    """One keep-alive connection; :meth:`exchange` sends a request and reads its answer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), 10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def exchange(self, message: bytes) -> float:
        """Seconds from sending ``message`` to the last byte of a 200 answer."""
        began = time.perf_counter()
        self.sock.sendall(message)
        data = b""
        while (end := data.find(b"\r\n\r\n")) < 0:
            data += self.recv()
        head = data[:end].decode("latin-1").lower()
        assert head.startswith("http/1.1 200"), head
        length = int(head.partition("content-length:")[2].split("\r\n")[0])
        while len(data) < end + 4 + length:
            data += self.recv()
        return time.perf_counter() - began

    def recv(self) -> bytes:
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("closed")
        return chunk


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--before", default="HEAD~1", help="revision served as before")
    parser.add_argument("--after", default="HEAD", help="revision served as after")
    parser.add_argument("--same", action="store_true", help="before as both (A/A)")
    options = parser.parse_args()
    trees = make_trees(options.before, options.before if options.same else options.after)
    servers = {name: start(tree, TREES / f"{name}.log") for name, tree in trees.items()}
    try:
        clients = {name: Client(port) for name, (_, port) in servers.items()}
        names = list(clients)
        for _ in range(200):  # warm up both
            for name in names:
                for message in REQUESTS.values():
                    clients[name].exchange(message)
        samples: dict[tuple[str, str], list[float]] = {
            (kind, name): [] for kind in REQUESTS for name in names
        }
        cpu = {name: cpu_seconds(process.pid) for name, (process, _) in servers.items()}
        deadline = time.monotonic() + options.seconds
        step = 0
        while time.monotonic() < deadline:
            order = names if step % 2 == 0 else names[::-1]
            for kind, message in REQUESTS.items():
                for name in order:
                    samples[kind, name].append(clients[name].exchange(message))
            step += 1
        for name, (process, _) in servers.items():
            cpu[name] = cpu_seconds(process.pid) - cpu[name]
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(30)
    print(
        "| request | before p50 (µs) | after p50 (µs) | after/before p50 "
        "| before p99 (µs) | after p99 (µs) | after/before p99 |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in REQUESTS:
        before, after = samples[kind, "before"], samples[kind, "after"]
        cells = []
        for fraction in (0.5, 0.99):
            b, a = percentile(before, fraction) * 1e6, percentile(after, fraction) * 1e6
            cells.append(f"{b:.0f} | {a:.0f} | {a / b:.2f}")
        print(f"| {kind} | {cells[0]} | {cells[1]} |")
    per_step = ", ".join(f"{name} {cpu[name] / step * 1e6:.0f}" for name in names)
    print(
        f"\n{step} steps of {len(REQUESTS)} requests to each server in {options.seconds:g} s; "
        f"server CPU µs per step (its {len(REQUESTS)} requests): {per_step}"
    )


if __name__ == "__main__":
    main()
