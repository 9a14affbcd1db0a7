"""SIGTERM with HTTP/1.1 requests pipelined on one connection (reliability issue 37, item
4), on Despina or Triton.

A Python model ``sleepy`` sleeps 0.3 s per request on one instance. A raw socket writes
``--requests`` inference requests at once on one keep-alive connection; SIGTERM follows
0.1 s later (the first is executing, the others were read and wait their turn). 0.1 s
after the signal one more request is written on the same connection. Each answer's
status, ``Connection`` header and error text are recorded in order, with the process's
exit status. One markdown table row per run::

    .venv/bin/python bench/sigterm_pipelined.py --server despina
    .venv/bin/python bench/sigterm_pipelined.py --server triton
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from python_servers import TRITON, write_model
from reliability import MODEL_PY, model_config
from run import free_port, wait_ready


def request(value: float) -> bytes:
    """One keep-alive inference request to ``sleepy`` (JSON inputs)."""
    inputs = [
        {"name": name, "datatype": "FP32", "shape": [4], "data": [value] * 4}
        for name in ("INPUT0", "INPUT1")
    ]
    body = json.dumps({"inputs": inputs}).encode()
    head = (
        "POST /v2/models/sleepy/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def answers(sock: socket.socket) -> list[str]:
    """Every answer on ``sock`` until it closes: status, ``Connection: close``, error text."""
    found = []
    reader = sock.makefile("rb")
    while True:
        try:
            status_line = reader.readline()
        except OSError as exc:
            found.append(f"then {type(exc).__name__}")
            return found
        if not status_line:
            found.append("then closed")
            return found
        headers = {}
        while (line := reader.readline().strip()) != b"":
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = reader.read(int(headers.get("content-length", "0")))
        status = int(status_line.split()[1])
        text = json.loads(body).get("error", "") if status != 200 else ""
        closing = headers.get("connection", "").lower() == "close"
        found.append(f"{status}{' close' if closing else ''}{f' {text!r}' if text else ''}")
        if closing:
            return found


def measure(options: argparse.Namespace) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "models"
        write_model(root, "sleepy", model_config("sleepy", 0.3, 1), MODEL_PY)
        http_port, grpc_port = free_port(), free_port()
        ports = [f"--http-port={http_port}", f"--grpc-port={grpc_port}"]
        if options.server == "triton":
            command = [str(TRITON), f"--model-repository={root}", "--allow-metrics=false"]
        else:
            despina = str(Path(sys.executable).parent / "despina")
            command = [despina, "serve", f"--model-repository={root}", "--allow-metrics=false"]
            command += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1"]
        with (Path(tmp) / "server.log").open("wb") as log:
            process = subprocess.Popen([*command, *ports], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(http_port, process, timeout_s=180)
            sock = socket.create_connection(("127.0.0.1", http_port), timeout=60)
            sock.sendall(b"".join(request(float(i)) for i in range(options.requests)))
            time.sleep(0.1)
            began = time.monotonic()
            process.send_signal(signal.SIGTERM)
            time.sleep(0.1)
            try:
                sock.sendall(request(99.0))
                late = "written"
            except OSError as exc:
                late = f"not written ({type(exc).__name__})"
            found = answers(sock)
            sock.close()
            status = process.wait(120)
            exited = time.monotonic() - began
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    return (
        f"| {options.server} | {options.requests} + 1 after ({late}) | {'; '.join(found)} | "
        f"{status} | {exited:.2f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("despina", "triton"), default="despina")
    parser.add_argument("--requests", type=int, default=4)
    print(measure(parser.parse_args()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
