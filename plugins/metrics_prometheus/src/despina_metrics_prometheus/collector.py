"""A prometheus-client Collector that reads the server's statistics at scrape time.

Names, help texts and labels are Triton's (``model``, ``version``; ``reason`` on
failures). Nothing is recorded per request: every value comes from ``ModelStats`` (and
``host.custom_metrics``) when Prometheus scrapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from despina import COUNTER, FAILURE_REASONS, GAUGE, MetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from despina_metrics_prometheus.cpu import CpuSampler, memory
from despina_metrics_prometheus.options import MetricsOptions

if TYPE_CHECKING:
    from despina import MetricsHost, ModelVersion

_CACHED = "(does not include cached requests)"
_INCL = "(includes cached requests)"

#: name -> (help, what to read from a model version)
COUNTERS: dict[str, str] = {
    "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
    "nv_inference_count": f"Number of inferences performed {_CACHED}",
    "nv_inference_exec_count": f"Number of model executions performed {_CACHED}",
}
LATENCIES: dict[str, str] = {
    "nv_inference_request_duration_us": f"Cumulative inference request duration in microseconds {_INCL}",
    "nv_inference_queue_duration_us": f"Cumulative inference queuing duration in microseconds {_INCL}",
    "nv_inference_compute_input_duration_us": f"Cumulative compute input duration in microseconds {_CACHED}",
    "nv_inference_compute_infer_duration_us": f"Cumulative compute inference duration in microseconds {_CACHED}",
    "nv_inference_compute_output_duration_us": f"Cumulative inference compute output duration in microseconds {_CACHED}",
}


def _counter_values(version: ModelVersion) -> dict[str, float]:
    stats = version.stats
    return {
        "nv_inference_request_success": stats.success.count,
        "nv_inference_count": stats.inference_count,
        "nv_inference_exec_count": stats.execution_count,
        "nv_inference_request_duration_us": stats.success.ns // 1000,
        "nv_inference_queue_duration_us": stats.queue.ns // 1000,
        "nv_inference_compute_input_duration_us": stats.compute_input.ns // 1000,
        "nv_inference_compute_infer_duration_us": stats.compute_infer.ns // 1000,
        "nv_inference_compute_output_duration_us": stats.compute_output.ns // 1000,
    }


class StatsCollector(Collector):
    """Triton's metric families for one server (register it in any CollectorRegistry)."""

    def __init__(self, host: MetricsHost, options: MetricsOptions, cpu: CpuSampler | None) -> None:
        self.host = host
        self.options = options
        self.cpu = cpu

    def collect(self) -> Iterator[Metric]:
        versions = self.host.ready_versions()
        names = dict(COUNTERS)
        if self.options.counter_latencies:
            names.update(LATENCIES)
        families = {name: Metric(name, doc, "counter") for name, doc in names.items()}
        failure = Metric(
            "nv_inference_request_failure",
            "Number of failed inference requests, all batch sizes",
            "counter",
        )
        pending = Metric(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
        )
        for version in versions:
            labels = {"model": version.name, "version": str(version.version)}
            values = _counter_values(version)
            for name, family in families.items():
                family.add_sample(name, labels, values[name])
            for reason in FAILURE_REASONS:
                failure.add_sample(
                    failure.name, {**labels, "reason": reason}, version.stats.failures[reason]
                )
            queued = version.scheduler.pending if version.scheduler is not None else 0
            pending.add_sample(pending.name, labels, queued)
        first = families.pop("nv_inference_request_success")
        yield first
        yield failure
        yield from families.values()
        yield pending
        if self.cpu is not None:
            yield from self._cpu()
        for custom in self.host.custom_metrics.families():
            yield _custom(custom)

    def _cpu(self) -> Iterator[Metric]:
        assert self.cpu is not None
        utilization = Metric("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge")
        utilization.add_sample(utilization.name, {}, self.cpu.utilization)
        yield utilization
        ram = memory()
        if ram is not None:
            for name, doc, value in (
                ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", ram[0]),
                ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", ram[1]),
            ):
                metric = Metric(name, doc, "gauge")
                metric.add_sample(name, {}, value)
                yield metric


def _custom(family: MetricFamily) -> Metric:
    """A model-defined family (pb_utils.MetricFamily) as a Metric."""
    kind = family.kind if family.kind in (COUNTER, GAUGE) else "histogram"
    metric = Metric(family.name, family.description, kind)
    with family.lock:
        values = list(family.values.items())
        buckets = list(family.buckets.items())
    for key, value in values:
        metric.add_sample(family.name, dict(key), value)
    for key, (bounds, counts, total, count) in buckets:
        labels = dict(key)
        for bound, cumulative in zip(bounds, counts, strict=True):
            metric.add_sample(f"{family.name}_bucket", {**labels, "le": _bound(bound)}, cumulative)
        metric.add_sample(f"{family.name}_bucket", {**labels, "le": "+Inf"}, count)
        metric.add_sample(f"{family.name}_sum", labels, total)
        metric.add_sample(f"{family.name}_count", labels, count)
    return metric


def _bound(value: float) -> str:
    return repr(float(value))
