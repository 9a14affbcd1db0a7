"""Custom metrics and Logger into the server, and auto-complete, in both modes."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

from .helpers import infer, pair
from .models import ADD_SUB_IO, AUTO_COMPLETE, METRICS, MODE_KEY, add


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


def test_auto_complete_config(
    mode: str, model_repository: Any, despina_server: Any, http_client: Any
) -> None:
    model_repository.add(
        "auto",
        f'parameters {{ key: "{MODE_KEY}" value {{ string_value: "{mode}" }} }}\n',
        {"1/model.py": AUTO_COMPLETE},
    )
    client = http_client(despina_server(model_repository.root))
    config = client.get_model_config("auto")
    assert config["backend"] == "python" and config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    assert [i["name"] for i in config["input"]] == ["INPUT0"]
    assert config["output"][0]["dims"] == [4]
    result = infer(client, "auto", {"INPUT0": np.ones((2, 4), np.float32)})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((2, 4), 3.0))
