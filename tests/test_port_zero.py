"""Port 0: every listener binds an ephemeral port, reports it (``port``) and logs it."""

from __future__ import annotations

import logging
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import toy_backend
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")
pytest.importorskip("despina_metrics_prometheus")

TOY = """
backend: "toy"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
PORT_ZERO = ("--http-port=0", "--grpc-port=0", "--metrics-port=0")
LOOPBACK = ("--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1")


def listeners(port: int) -> int:
    """How many sockets listen on ``port`` (Linux's /proc/net/tcp and tcp6)."""
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if not tables[0].exists():
        pytest.skip("needs Linux's /proc/net/tcp")
    rows = [
        line.split()
        for table in tables
        if table.exists()
        for line in table.read_text().splitlines()[1:]
    ]
    return sum(1 for row in rows if row[1].endswith(f":{port:04X}") and row[3] == "0A")  # LISTEN


def test_port_zero_serves_on_the_reported_ports(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    model_repository.add("toy", TOY, {"1/model.toy": ""})
    with caplog.at_level(logging.INFO, logger="despina"):
        running = despina_server(
            model_repository.root, args=[*PORT_ZERO, *LOOPBACK], plugins=[toy_backend]
        )
    http, grpc, metrics = running.http_port, running.grpc_port, running.metrics_port
    assert http and grpc and metrics and len({http, grpc, metrics}) == 3
    assert listeners(http) == listeners(grpc) == 1
    log = caplog.text
    assert re.search(rf"Started HTTPService at 127\.0\.0\.1:{http}\b", log), log
    assert re.search(rf"Started GRPCInferenceService at 127\.0\.0\.1:{grpc}\b", log), log
    assert re.search(rf"Started Metrics Service at 127\.0\.0\.1:{metrics}\b", log), log
    assert not re.search(r"127\.0\.0\.1:0\b", log), log

    a = np.array([1, 2, 3, 4], np.float32)
    for module, url in ((httpclient, f"127.0.0.1:{http}"), (grpcclient, f"127.0.0.1:{grpc}")):
        inputs = [
            module.InferInput("INPUT0", [4], "FP32"),
            module.InferInput("INPUT1", [4], "FP32"),
        ]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        with module.InferenceServerClient(url) as client:
            assert client.is_server_ready(), module.__name__
            result = client.infer("toy", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=30).read()
    assert b'nv_inference_count{model="toy",version="1"} 2' in scraped


def test_start_server_binds_port_zero_by_default(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    """Without port flags, the test server's ports are the ones its listeners bound."""
    running = despina_server(model_repository.root, args=LOOPBACK)
    assert running.server.flags.http_port == 0
    assert running.server.flags.grpc_port == 0
    assert running.server.flags.metrics_port == 0
    assert running.http_port == next(f.port for f in running.server.frontends if f.name == "http")
    assert running.grpc_port == next(f.port for f in running.server.frontends if f.name == "grpc")
    assert running.metrics_port == running.server.exporters[0].port
    with urllib.request.urlopen(f"http://{running.http_url}/v2/health/ready", timeout=30) as answer:
        assert answer.status == 200
