"""``--metrics-on-http-port``: ``/metrics`` on the HTTP port beside the v2 routes, the same
page and content type as on ``--metrics-port``, and no port of its own."""

from __future__ import annotations

from collections.abc import Callable

import requests
import tritonclient.http as httpclient
from despina.testing import RunningServer

from .helpers import infer, value


def test_metrics_share_the_http_port_with_v2(serve: Callable[..., RunningServer]) -> None:
    running = serve("--metrics-on-http-port=true", "--allow-cpu-metrics=false")
    assert running.metrics_port is None
    client = httpclient.InferenceServerClient(running.http_url)
    assert client.is_server_ready()
    infer(running, 1.0)
    url = f"http://{running.http_url}/metrics"
    page = requests.get(url, timeout=10)
    assert page.status_code == 200
    assert page.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert value(page.text, "nv_inference_request_success", model="toy", version="1") == 1
    head = requests.head(url, timeout=10)
    assert head.status_code == 200 and head.content == b""
    assert requests.post(url, timeout=10).status_code == 405
    client.close()


def test_same_page_on_either_port(serve: Callable[..., RunningServer]) -> None:
    """Without the flag the page is served on --metrics-port alone, byte for byte what the
    HTTP port serves with it (the counters of a server that ran nothing; each server's
    model load took its own time)."""
    flags = ("--allow-cpu-metrics=false", "--allow-gpu-metrics=false")
    own = serve(*flags)
    shared = serve(*flags, "--metrics-on-http-port=true")
    assert requests.get(f"http://{own.http_url}/metrics", timeout=10).status_code == 404
    mine = requests.get(own.metrics_url, timeout=10)
    theirs = requests.get(f"http://{shared.http_url}/metrics", timeout=10)
    assert mine.headers["Content-Type"] == theirs.headers["Content-Type"]
    assert _timeless(mine.content) == _timeless(theirs.content)
    assert b"nv_inference_request_success" in mine.content


def _timeless(page: bytes) -> list[bytes]:
    return [line for line in page.splitlines() if not line.startswith(b"nv_model_load_duration")]
