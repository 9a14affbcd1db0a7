"""The Prometheus exporter: Triton's names and labels, values moving after inferences."""

from __future__ import annotations

import math
import re
import socket
from collections.abc import Callable
from typing import Any

import pytest
import toy_backend
from despina import COUNTER, GAUGE, HISTOGRAM, InvalidArgument
from despina.plugin.manager import create_plugins
from despina.testing import RepositoryBuilder, RunningServer

from .helpers import LOOPBACK, TOY, infer, scrape, value


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


def test_custom_metric_families_are_exported_as_triton_writes_them(
    serve: Callable[..., RunningServer],
) -> None:
    running = serve()
    metrics = running.server.custom_metrics
    tenants = metrics.family("requests_by_tenant", "Requests per tenant", COUNTER)
    tenants.metric({"tenant": "a"}).increment(2)
    metrics.family("queue_depth", "", GAUGE).metric({}).set(7.25)
    latency = metrics.family("latency_ms", "Latency", HISTOGRAM).metric({"m": "x"}, [1.0, 5.0])
    for observed in (3.0, 0.5, 100.0):
        latency.observe(observed)
    unused = metrics.family("unused", "No series yet", GAUGE)
    lines = scrape(running).splitlines()
    start = lines.index("# HELP requests_by_tenant Requests per tenant")
    assert lines[start:] == [
        "# HELP requests_by_tenant Requests per tenant",
        "# TYPE requests_by_tenant counter",
        'requests_by_tenant{tenant="a"} 2',
        "# TYPE queue_depth gauge",  # an empty help text: no HELP line
        "queue_depth 7.25",
        "# HELP latency_ms Latency",
        "# TYPE latency_ms histogram",
        'latency_ms_count{m="x"} 3',
        'latency_ms_sum{m="x"} 103.5',
        'latency_ms_bucket{m="x",le="1"} 1',
        'latency_ms_bucket{m="x",le="5"} 2',
        'latency_ms_bucket{m="x",le="+Inf"} 3',
    ]
    assert unused.samples() == []  # registered, but not exposed without series


def test_values_are_written_in_tritons_number_format(serve: Callable[..., RunningServer]) -> None:
    running = serve()
    gauge = running.server.custom_metrics.family("formats", "f", GAUGE)
    values = {"int": 2023.0, "big": 1e20, "small": 1e-05, "frac": 1 / 3, "nan": math.nan}
    for name, number in values.items():
        gauge.metric({"v": name}).set(number)
    gauge.metric({"v": "inf"}).set(-math.inf)
    text = scrape(running)
    assert 'nv_inference_request_success{model="toy",version="1"} 0\n' in text
    for line in (
        'formats{v="int"} 2023',
        'formats{v="big"} 1e+20',
        'formats{v="small"} 1e-05',
        'formats{v="frac"} 0.3333333333333333',
        'formats{v="nan"} Nan',
        'formats{v="inf"} -Inf',
    ):
        assert f"\n{line}\n" in text


def test_a_series_goes_with_its_last_metric(serve: Callable[..., RunningServer]) -> None:
    running = serve()
    family = running.server.custom_metrics.family("held", "h", COUNTER)
    first, second = family.metric({"k": "1"}), family.metric({"k": "1"})
    first.increment(3)
    first.delete()
    assert 'held{k="1"} 3' in scrape(running)
    with pytest.raises(InvalidArgument, match="Metric has been invalidated"):
        first.value()
    second.delete()
    assert "held" not in scrape(running)


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
    from despina.serving.server import StartupError

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


def test_local_cache_counters_per_model_as_triton(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    """Triton 2.51's nv_cache_*_per_model families (names, help, labels) for each model
    the cache serves; none for a model that does not enable it."""
    cached = TOY + "response_cache { enable: true }\n"
    model_repository.add("toy", cached, {"1/model.toy": "{}"})
    model_repository.add("plain", TOY, {"1/model.toy": "{}"})
    running = despina_server(
        model_repository.root,
        args=[*LOOPBACK, "--cache-config=local,size=1048576"],
        plugins=[toy_backend],
    )
    for _ in range(3):
        infer(running, 1.0)
    text = scrape(running)
    model = {"model": "toy", "version": "1"}
    assert value(text, "nv_cache_num_hits_per_model", **model) == 2
    assert value(text, "nv_cache_num_misses_per_model", **model) == 1
    assert value(text, "nv_cache_hit_duration_per_model", **model) >= 0
    assert value(text, "nv_cache_miss_duration_per_model", **model) >= 0
    assert "# HELP nv_cache_num_hits_per_model Number of cache hits per model\n" in text
    assert (
        "# HELP nv_cache_miss_duration_per_model Total cache miss (insert+lookup) duration "
        "per model, in microseconds\n# TYPE nv_cache_miss_duration_per_model counter\n"
    ) in text
    assert 'nv_cache_num_hits_per_model{model="plain"' not in text
