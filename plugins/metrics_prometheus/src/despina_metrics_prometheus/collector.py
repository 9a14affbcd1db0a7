"""A collector that reads the server's statistics at scrape time.

Names, help texts and labels are Triton's (``model``, ``version``; ``reason`` on
failures). Counters and gauges come from ``ModelStats`` (and ``host.custom_metrics``)
when Prometheus scrapes; only the histograms and summaries, when turned on, are recorded
per request (:mod:`despina_metrics_prometheus.latency`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from despina import FAILURE_REASONS, HISTOGRAM, MetricFamily

from despina_metrics_prometheus.cpu import CpuSampler, memory
from despina_metrics_prometheus.exposition import Family, format_number
from despina_metrics_prometheus.gpu import FAMILIES as GPU_FAMILIES, GpuSampler
from despina_metrics_prometheus.latency import FIRST_RESPONSE, Histogram, LatencyRecorder
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
#: Summary family -> help (Triton's: the compute ones repeat the counters' texts).
SUMMARIES: dict[str, str] = {
    "nv_inference_request_summary_us": f"Summary of inference request duration in microseconds {_INCL}",
    "nv_inference_queue_summary_us": f"Summary of inference queuing duration in microseconds {_INCL}",
    **{
        name.replace("_duration_us", "_summary_us"): doc
        for name, doc in LATENCIES.items()
        if name.startswith("nv_inference_compute_")
    },
}
#: Per model whose config enables the response cache, with a cache configured (Triton's).
CACHE_COUNTERS: dict[str, str] = {
    "nv_cache_num_hits_per_model": "Number of cache hits per model",
    "nv_cache_hit_duration_per_model": "Total cache hit duration per model, in microseconds",
    "nv_cache_num_misses_per_model": "Number of cache misses per model",
    "nv_cache_miss_duration_per_model": (
        "Total cache miss (insert+lookup) duration per model, in microseconds"
    ),
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


def _cache_counters(versions: list[ModelVersion]) -> Iterator[Family]:
    """Triton's ``nv_cache_*_per_model`` of the versions the response cache serves."""
    cached = [
        v for v in versions if v.scheduler is not None and v.scheduler.model.cache is not None
    ]
    if not cached:
        return
    families = {name: Family(name, doc, "counter") for name, doc in CACHE_COUNTERS.items()}
    for version in cached:
        labels = {"model": version.name, "version": str(version.version)}
        hit, miss = version.stats.cache_hit, version.stats.cache_miss
        values = (hit.count, hit.ns // 1000, miss.count, miss.ns // 1000)
        for family, value in zip(families.values(), values, strict=True):
            family.add_sample(family.name, labels, value)
    yield from families.values()


class StatsCollector:
    """Triton's metric families for one server, read at scrape time."""

    def __init__(
        self,
        host: MetricsHost,
        options: MetricsOptions,
        cpu: CpuSampler | None,
        gpu: GpuSampler | None = None,
    ) -> None:
        self.host = host
        self.options = options
        self.cpu = cpu
        self.gpu = gpu

    def collect(self) -> Iterator[Family]:
        versions = self.host.ready_versions()
        names = dict(COUNTERS)
        if self.options.counter_latencies:
            names.update(LATENCIES)
        families = {name: Family(name, doc, "counter") for name, doc in names.items()}
        failure = Family(
            "nv_inference_request_failure",
            "Number of failed inference requests, all batch sizes",
            "counter",
        )
        pending = Family(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
        )
        load = Family("nv_model_load_duration_secs", "Model load time in seconds", "gauge")
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
            load.add_sample(load.name, labels, version.stats.load_ns / 1e9)
        first = families.pop("nv_inference_request_success")
        yield first
        yield failure
        yield from families.values()
        yield pending
        yield load
        yield from _cache_counters(versions)
        yield from self._latencies(versions)
        if self.gpu is not None:
            yield from self._gpu()
        if self.cpu is not None:
            yield from self._cpu()
        for custom in self.host.custom_metrics.families():
            if (exposed := _custom(custom)) is not None:
                yield exposed

    def _latencies(self, versions: list[ModelVersion]) -> Iterator[Family]:
        """The first-response histogram and the summaries of the versions that record
        them (none unless ``--metrics-config`` turned them on)."""
        recorders = [
            ({"model": v.name, "version": str(v.version)}, v.stats.latency)
            for v in versions
            if isinstance(v.stats.latency, LatencyRecorder)
        ]
        if self.options.histogram_latencies:
            histogram = Family(
                FIRST_RESPONSE,
                "Duration from request to first response in milliseconds",
                "histogram",
            )
            for labels, recorder in recorders:
                if recorder.first is not None:
                    _histogram_samples(histogram, labels, recorder.first)
            yield histogram
        if self.options.summary_latencies:
            summaries = {name: Family(name, doc, "summary") for name, doc in SUMMARIES.items()}
            quantiles = self.options.summary_quantiles
            for labels, recorder in recorders:
                if recorder.summaries is None:
                    continue
                for name, window in recorder.summaries.families():
                    summary = summaries[name]
                    summary.add_sample(f"{name}_count", labels, window.count)
                    summary.add_sample(f"{name}_sum", labels, window.sum)
                    for quantile, estimate in zip(
                        quantiles, window.quantiles(quantiles), strict=True
                    ):
                        summary.add_sample(
                            name, {**labels, "quantile": format_number(quantile)}, estimate
                        )
            yield from summaries.values()

    def _gpu(self) -> Iterator[Family]:
        assert self.gpu is not None
        for name, doc, kind in GPU_FAMILIES:
            metric = Family(name, doc, kind)
            for reading in self.gpu.readings:
                if name in reading.values:
                    metric.add_sample(name, {"gpu_uuid": reading.uuid}, reading.values[name])
            yield metric

    def _cpu(self) -> Iterator[Family]:
        assert self.cpu is not None
        utilization = Family("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge")
        utilization.add_sample(utilization.name, {}, self.cpu.utilization)
        yield utilization
        ram = memory()
        if ram is not None:
            for name, doc, value in (
                ("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", ram[0]),
                ("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", ram[1]),
            ):
                metric = Family(name, doc, "gauge")
                metric.add_sample(name, {}, value)
                yield metric


def _custom(family: MetricFamily) -> Family | None:
    """A model-defined family (pb_utils.MetricFamily) as Triton exposes it, or None while
    it has no series: a histogram's ``_count``, ``_sum``, then its buckets by bound."""
    samples = family.samples()
    if not samples:
        return None
    metric = Family(family.name, family.description, family.kind)
    for sample in samples:
        if family.kind != HISTOGRAM:
            metric.add_sample(family.name, sample.labels, sample.value)
            continue
        metric.add_sample(f"{family.name}_count", sample.labels, sample.count)
        metric.add_sample(f"{family.name}_sum", sample.labels, sample.total)
        for bound, cumulative in (*sample.buckets, (math.inf, sample.count)):
            labels = {**sample.labels, "le": format_number(bound)}
            metric.add_sample(f"{family.name}_bucket", labels, cumulative)
    return metric


def _histogram_samples(metric: Family, labels: dict[str, str], histogram: Histogram) -> None:
    cumulative, total, count = histogram.cumulative()
    name = metric.name
    metric.add_sample(f"{name}_count", labels, count)
    metric.add_sample(f"{name}_sum", labels, total)
    for bound, at_most in zip(histogram.bounds, cumulative, strict=True):
        metric.add_sample(f"{name}_bucket", {**labels, "le": format_number(bound)}, at_most)
    metric.add_sample(f"{name}_bucket", {**labels, "le": "+Inf"}, count)
