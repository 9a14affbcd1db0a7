"""The Prometheus exporter: Triton's names and labels, values moving after inferences."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable
from typing import Any

import pytest
from despina.custom_metrics import COUNTER, GAUGE, HISTOGRAM
from despina.plugins import create_plugins
from despina.testing import RunningServer

from .helpers import infer, scrape, value


def test_discovered_through_entry_point() -> None:
    rows = {row["name"]: row for row in create_plugins().describe()}
    assert rows["metrics"]["distribution"] == "despina-metrics-prometheus"
    assert rows["metrics"]["provides"]["metrics"] == ["prometheus"]


def test_triton_metrics_move_after_inferences(serve: Callable[..., RunningServer]) -> None:
    running = serve("--metrics-interval-ms=50")
    before = scrape(running)
    model = {"model": "toy", "version": "1"}
    assert value(before, "nv_inference_request_success", **model) == 0
    assert "# TYPE nv_inference_count counter" in before
    assert "# TYPE nv_inference_pending_request_count gauge" in before
    for _ in range(3):
        infer(running, 1.0)
    infer(running, -1.0)  # the toy model answers negative inputs with an error
    after = scrape(running)
    assert value(after, "nv_inference_request_success", **model) == 3
    assert value(after, "nv_inference_request_failure", reason="BACKEND", **model) == 1
    assert value(after, "nv_inference_request_failure", reason="REJECTED", **model) == 0
    assert value(after, "nv_inference_count", **model) == 3  # successful ones, as Triton
    assert value(after, "nv_inference_exec_count", **model) == 4
    assert value(after, "nv_inference_request_duration_us", **model) > 0
    assert value(after, "nv_inference_compute_infer_duration_us", **model) >= 0
    assert value(after, "nv_inference_queue_duration_us", **model) >= 0
    assert value(after, "nv_inference_pending_request_count", **model) == 0
    assert 0.0 <= value(after, "nv_cpu_utilization") <= 1.0
    assert value(after, "nv_cpu_memory_total_bytes") >= value(after, "nv_cpu_memory_used_bytes") > 0


def test_custom_metric_families_are_exported(serve: Callable[..., RunningServer]) -> None:
    running = serve()
    metrics = running.server.custom_metrics
    metrics.family("requests_by_tenant", "Requests per tenant", COUNTER).add({"tenant": "a"}, 2)
    metrics.family("queue_depth", "Depth", GAUGE).set({}, 7)
    metrics.family("latency_ms", "Latency", HISTOGRAM).observe({"m": "x"}, 3.0, [1.0, 5.0])
    text = scrape(running)
    assert value(text, "requests_by_tenant", tenant="a") == 2
    assert "# TYPE requests_by_tenant counter" in text
    assert value(text, "queue_depth") == 7
    assert value(text, "latency_ms_bucket", le="1.0", m="x") == 0
    assert value(text, "latency_ms_bucket", le="5.0", m="x") == 1
    assert value(text, "latency_ms_bucket", le="+Inf", m="x") == 1
    assert value(text, "latency_ms_sum", m="x") == 3.0


def test_flags_turn_parts_off(serve: Callable[..., RunningServer]) -> None:
    running = serve("--allow-cpu-metrics=false", "--metrics-config=counter_latencies=false")
    text = scrape(running)
    assert "nv_cpu_utilization" not in text and "nv_inference_request_duration_us" not in text
    assert "nv_inference_count{" in text


def test_metrics_can_be_disabled(serve: Callable[..., RunningServer]) -> None:
    running = serve("--allow-metrics=false")
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", running.metrics_port or 0)) != 0


def test_bad_metrics_config_fails_startup(serve: Callable[..., RunningServer]) -> None:
    from despina.server import StartupError

    with pytest.raises(StartupError, match="unsupported setting 'latency_buckets'"):
        serve("--metrics-config=latency_buckets=1,2")


def test_discovered_metric_names_are_tritons(serve: Callable[..., RunningServer]) -> None:
    text = scrape(serve())
    names: set[Any] = set(re.findall(r"^# TYPE (\S+)", text, re.MULTILINE))
    assert {
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_inference_pending_request_count",
    } <= names
    assert not any(name.endswith("_total") for name in names)
