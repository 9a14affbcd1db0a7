"""``--trace-config opentelemetry,url=``: every form Triton's exporter reads, and the refusals."""

from __future__ import annotations

import re

import pytest
from despina.tracing.config import TraceConfig

ACCEPTED = {
    # qa/L0_trace's form: no scheme means http://.
    "localhost:4318/v1/traces": "http://localhost:4318/v1/traces",
    "http://localhost:4318/v1/traces": "http://localhost:4318/v1/traces",
    "https://collector.example/v1/traces": "https://collector.example/v1/traces",
    "HTTPS://collector.example:8443/v1/traces": "https://collector.example:8443/v1/traces",
    # No path: Triton posts to "/".
    "127.0.0.1:4318": "http://127.0.0.1:4318/",
    "collector": "http://collector/",
    "[::1]:4318/v1/traces?tenant=a": "http://[::1]:4318/v1/traces?tenant=a",
}
REFUSED = {
    "": "no host",
    "/v1/traces": "no host",
    "http://:4318/v1/traces": "no host",
    "grpc://localhost:4317": "scheme 'grpc' is not supported; spans are exported over OTLP/HTTP",
    "ftp://localhost/x": "scheme 'ftp' is not supported",
    "localhost:otlp/v1/traces": "the port must be a number from 1 to 65535",
    "localhost:0/v1/traces": "the port must be a number from 1 to 65535",
    "localhost:70000/v1/traces": "the port must be a number from 1 to 65535",
    "localhost:/v1/traces": "the port must be a number from 1 to 65535",
}


@pytest.mark.parametrize(("given", "url"), ACCEPTED.items())
def test_url_forms_triton_accepts(given: str, url: str) -> None:
    assert TraceConfig.parse([f"opentelemetry,url={given}"]).otel_url == url


@pytest.mark.parametrize(("given", "reason"), REFUSED.items())
def test_urls_no_export_could_reach_are_refused_with_the_reason(given: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"opentelemetry,url={given}: ")) as raised:
        TraceConfig.parse([f"opentelemetry,url={given}"])
    assert reason in str(raised.value)


def test_the_default_url_is_tritons() -> None:
    assert TraceConfig.parse([]).otel_url == "http://localhost:4318/v1/traces"
