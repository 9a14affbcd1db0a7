"""``tritonfrontend``: KServeHttp, KServeGrpc and Metrics started over a
``tritonserver.Server`` on 127.0.0.1, called with tritonclient and plain HTTP."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonserver
from despina.testing import free_port
from tritonfrontend import KServeGrpc, KServeHttp, Metrics

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")

X = np.array([1, 2, 3, 4], dtype=np.float32)


def _add_sub(client_module: object, url: str) -> np.ndarray:
    client = client_module.InferenceServerClient(url)  # type: ignore[attr-defined]
    try:
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = client_module.InferInput(name, [4], "FP32")  # type: ignore[attr-defined]
            tensor.set_data_from_numpy(X)
            inputs.append(tensor)
        assert client.is_server_ready()
        return np.asarray(client.infer("add_sub", inputs).as_numpy("OUTPUT0"))
    finally:
        client.close()


@pytest.mark.parametrize(
    ("frontend", "client_module"), [(KServeHttp, httpclient), (KServeGrpc, grpcclient)]
)
def test_kserve_frontend_serves_the_server(
    server: tritonserver.Server, frontend: type, client_module: object
) -> None:
    port = free_port()
    with frontend(server, frontend.Options(address="127.0.0.1", port=port)):
        np.testing.assert_array_equal(_add_sub(client_module, f"127.0.0.1:{port}"), X + X)
    with pytest.raises(urllib.error.URLError):  # stopped: nothing listens any more
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=5)


def test_metrics_count_inferences(server: tritonserver.Server) -> None:
    http_port, metrics_port = free_port(), free_port()
    http = KServeHttp(server, KServeHttp.Options(address="127.0.0.1", port=http_port))
    metrics = Metrics(server, Metrics.Options(address="127.0.0.1", port=metrics_port))
    http.start()
    metrics.start()
    try:
        before = _inference_count(_scrape(metrics_port))
        assert _inference_count(server.metrics()) == before
        _add_sub(httpclient, f"127.0.0.1:{http_port}")
        assert _inference_count(_scrape(metrics_port)) == before + 1
        assert _inference_count(server.metrics()) == before + 1
        with pytest.raises(urllib.error.HTTPError):  # the HTTP port serves no /metrics
            _scrape(http_port)
    finally:
        metrics.stop()
        http.stop()


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def _inference_count(text: str) -> int:
    match = re.search(r'nv_inference_count\{[^}]*model="add_sub"[^}]*\}\s+([0-9.]+)', text)
    return int(float(match.group(1))) if match else 0


def test_service_lifecycle_errors(server: tritonserver.Server) -> None:
    service = KServeHttp(server, KServeHttp.Options(address="127.0.0.1", port=free_port()))
    service.start()
    try:
        with pytest.raises(tritonserver.AlreadyExistsError, match="already running"):
            service.start()
    finally:
        service.stop()
    service.stop()  # stopping a stopped service does nothing
    with pytest.raises(tritonserver.InvalidArgumentError, match=r"KServeGrpc\.Options"):
        KServeGrpc(server, {"port": 8001})
    with pytest.raises(tritonserver.InvalidArgumentError, match="Server not started"):
        KServeHttp(tritonserver.Server(model_repository="/nonexistent"))


def test_taken_port_is_unavailable(server: tritonserver.Server) -> None:
    port = free_port()
    with Metrics(server, Metrics.Options(address="127.0.0.1", port=port)):
        second = Metrics(server, Metrics.Options(address="127.0.0.1", port=port))
        with pytest.raises(tritonserver.UnavailableError):
            second.start()


@pytest.mark.parametrize(
    ("options", "values"),
    [
        (KServeHttp.Options, {"port": -15}),
        (KServeHttp.Options, {"thread_count": 0}),
        (KServeHttp.Options, {"header_forward_pattern": 10}),
        (KServeGrpc.Options, {"port": 65536}),
        (KServeGrpc.Options, {"keepalive_timeout_ms": -1}),
        (KServeGrpc.Options, {"infer_allocation_pool_size": "big pool"}),
        (KServeGrpc.Options, {"server_key": 10}),
        (Metrics.Options, {"thread_count": "ten"}),
        (Metrics.Options, {"port": True}),
    ],
)
def test_options_are_checked(options: type, values: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        options(**values)


def test_grpc_compression_level_enum() -> None:
    options = KServeGrpc.Options(infer_compression_level=KServeGrpc.Grpc_compression_level.HIGH)
    assert options.infer_compression_level == 3


def test_frontends_stop_with_the_server(repository: object) -> None:
    server = tritonserver.Server(
        model_repository=str(repository),
        model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
    ).start(wait_until_ready=True, timeout=120)
    port = free_port()
    service = KServeHttp(server, KServeHttp.Options(address="127.0.0.1", port=port))
    service.start()
    server.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/live", timeout=5)
    service.stop()  # after the server: nothing left to stop
