"""One port for everything: with ``--openai-on-http-port`` and ``--metrics-on-http-port``
the HTTP port serves the OpenAI API, the v2 routes and Prometheus' ``/metrics`` (the
generation metrics at ``/metrics/openai``), and neither has a port of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import requests
import tritonclient.http as httpclient
from despina.testing import RunningServer, start_server

from .conftest import ARGS

LLM, SCRIPTED = "tiny_llm", "scripted"


@pytest.fixture(scope="module")
def one_port(repository: Path) -> Iterator[RunningServer]:
    running = start_server(
        repository, [*ARGS, "--openai-on-http-port=true", "--metrics-on-http-port=true"]
    )
    yield running
    running.stop()


def test_openai_v2_and_metrics_on_the_http_port(one_port: RunningServer) -> None:
    assert next(f.port for f in one_port.server.frontends if f.name == "openai") is None
    assert one_port.metrics_port is None
    root = f"http://{one_port.http_url}"
    with openai.OpenAI(base_url=f"{root}/v1", api_key="EMPTY", max_retries=0) as client:
        assert LLM in {model.id for model in client.models.list()}
        stream = client.completions.create(model=SCRIPTED, prompt="x", max_tokens=3, stream=True)
        assert "".join(c.choices[0].text for c in stream if c.choices) == "one two three "
        with pytest.raises(openai.NotFoundError) as missing:
            client.chat.completions.create(
                model="nope", messages=[{"role": "user", "content": "x"}]
            )
        assert missing.value.code == "model_not_found"
    triton = httpclient.InferenceServerClient(one_port.http_url)
    assert triton.is_server_ready() and triton.is_model_ready(LLM)
    triton.close()
    metrics = requests.get(f"{root}/metrics", timeout=10)
    assert metrics.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert f'nv_inference_request_success{{model="{SCRIPTED}",version="1"}}' in metrics.text


def test_openai_restrictions_and_metrics_on_the_http_port(one_port: RunningServer) -> None:
    """``--openai-restricted-api metrics`` guards the generation metrics there too; a path
    nothing serves is the HTTP port's 404."""
    url = f"http://{one_port.http_url}/metrics/openai"
    refused = requests.get(url, timeout=10)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_auth"
    page = requests.get(url, headers={"admin-key": "secret"}, timeout=10)
    assert page.status_code == 200
    assert "# TYPE despina_openai_output_tokens_total counter" in page.text
    missing = requests.get(f"http://{one_port.http_url}/v1/nothing", timeout=10)
    assert (missing.status_code, missing.content) == (404, b'{"error":"Not Found"}')
