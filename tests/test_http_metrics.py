"""End to end across plugins: inferences over HTTP move the Prometheus metrics."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import toy_backend
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_metrics_prometheus")

TOY = """
backend: "toy"
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def sample(text: str, name: str, labels: str) -> float:
    match = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text, re.MULTILINE)
    assert match is not None, text
    return float(match.group(1))


def test_http_inferences_move_triton_metrics(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Callable[..., Any],
) -> None:
    import tritonclient.http as httpclient

    model_repository.add("toy", TOY, {"1/model.toy": ""})
    running = despina_server(
        model_repository.root,
        args=[
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
        ],
        plugins=[toy_backend],
    )
    client = http_client(running)
    inputs = [httpclient.InferInput(f"INPUT{i}", [4], "FP32") for i in range(2)]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones(4, np.float32))
    for _ in range(5):
        assert client.infer("toy", inputs).as_numpy("OUTPUT0").tolist() == [2.0] * 4
    with urllib.request.urlopen(running.metrics_url) as response:
        text = response.read().decode()
    labels = 'model="toy",version="1"'
    assert sample(text, "nv_inference_request_success", labels) == 5
    assert sample(text, "nv_inference_count", labels) == 5
    stats = client.get_inference_statistics("toy")["model_stats"][0]
    assert stats["inference_stats"]["success"]["count"] == 5
    assert (
        sample(text, "nv_inference_request_duration_us", labels)
        == stats["inference_stats"]["success"]["ns"] // 1000
    )
