"""Custom metrics and Logger into the server, in both modes (auto-complete runs in the
conformance suite, test_conformance.py)."""

from __future__ import annotations

import logging
import urllib.request
from typing import Any

import pytest

from .helpers import infer, pair
from .models import ADD_SUB_IO, METRICS, add


@pytest.fixture(params=["process", "in-process"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_custom_metrics_and_logger(
    mode: str,
    model_repository: Any,
    despina_server: Any,
    http_client: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="despina.model")
    add(model_repository, "metrics", METRICS, ADD_SUB_IO, mode)
    running = despina_server(
        model_repository.root,
        ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"],
    )
    client = http_client(running)
    for value in (3.0, 7.0):
        result = infer(client, "metrics", pair(value))
    assert result.as_numpy("OUTPUT1")[0] == 2.0
    families = {f.name: f for f in running.server.custom_metrics.families()}
    assert families["test_requests_total"].kind == "counter"
    assert [(s.labels, s.value) for s in families["test_requests_total"].samples()] == [
        ({"model": "metrics"}, 2.0)
    ]
    assert [s.value for s in families["test_last_value"].samples()] == [7.0]
    assert "metrics model initialized" in caplog.text
    text = urllib.request.urlopen(running.metrics_url, timeout=10).read().decode()
    assert 'test_requests_total{model="metrics"} 2\n' in text
