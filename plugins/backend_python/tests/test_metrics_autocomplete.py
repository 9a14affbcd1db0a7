"""Custom metrics and Logger into the server, in both modes (auto-complete runs in the
conformance suite, test_conformance.py)."""

from __future__ import annotations

import logging
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
    running = despina_server(model_repository.root)
    client = http_client(running)
    for value in (3.0, 7.0):
        result = infer(client, "metrics", pair(value))
    assert result.as_numpy("OUTPUT1")[0] == 2.0
    families = {f.name: f for f in running.server.custom_metrics.families()}
    assert families["test_requests_total"].kind == "counter"
    assert families["test_requests_total"].value({"model": "metrics"}) == 2.0
    assert families["test_last_value"].value({"model": "metrics"}) == 7.0
    assert "metrics model initialized" in caplog.text
    if running.metrics_port:
        import urllib.request

        text = urllib.request.urlopen(running.metrics_url, timeout=10).read().decode()
        assert 'test_requests_total{model="metrics"} 2' in text
