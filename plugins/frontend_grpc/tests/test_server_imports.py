"""A ``despina serve`` process never loads grpcio's C core (~9 MiB resident): its gRPC
server is Despina's own, the protobuf messages come from :mod:`despina.triton_proto`,
the status codes from :mod:`despina_frontend_grpc.status`. Checked on a real server
process that has answered gRPC calls, by the shared objects it has mapped."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import grpc
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc

STARTED = re.compile(r"Started GRPCInferenceService at [0-9.]+:(\d+)")


def test_a_serving_process_has_not_loaded_grpcio(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    command = [sys.executable, "-m", "despina", "serve", f"--model-repository={tmp_path}"]
    command += ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--allow-metrics=false"]
    command += ["--http-port=0", "--grpc-port=0"]
    with log.open("w") as handle:
        server = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (found := STARTED.search(log.read_text())):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        target = f"127.0.0.1:{found.group(1)}"
        client = grpcclient.InferenceServerClient(target)
        assert client.is_server_ready()
        assert client.get_server_metadata().name == "triton"
        with grpc.insecure_channel(target) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        mapped = Path(f"/proc/{server.pid}/maps").read_text()
        assert "cygrpc" not in mapped
    finally:
        server.terminate()
        server.wait(timeout=60)
