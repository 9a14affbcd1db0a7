"""Entry-point module: the metrics flags and exporter class. Cheap to import."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from despina import hookimpl, triton_bool

if TYPE_CHECKING:
    from despina import FrontendHost, Stash


@hookimpl
def despina_addoption(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("metrics (despina-metrics-prometheus)")
    group.add_argument(
        "--allow-metrics",
        type=triton_bool,
        default=True,
        metavar="BOOL",
        help="serve Prometheus metrics (default: true)",
    )
    group.add_argument(
        "--allow-gpu-metrics",
        type=triton_bool,
        default=True,
        metavar="BOOL",
        help="report nv_gpu_* metrics of the GPUs the server may use, read from NVML "
        "(needs nvidia-ml-py; default: true)",
    )
    group.add_argument(
        "--allow-cpu-metrics",
        type=triton_bool,
        default=True,
        metavar="BOOL",
        help="report CPU utilization and memory (default: true)",
    )
    group.add_argument(
        "--metrics-address",
        default="0.0.0.0",
        metavar="ADDR",
        help="metrics address to bind (default: 0.0.0.0)",
    )
    group.add_argument(
        "--metrics-port", type=int, default=8002, metavar="INT", help="metrics port (default: 8002)"
    )
    group.add_argument(
        "--metrics-on-http-port",
        type=triton_bool,
        default=False,
        metavar="BOOL",
        help="serve /metrics on the HTTP port (--http-port) beside the v2 routes instead of "
        "on --metrics-port (Despina; default: false)",
    )
    group.add_argument(
        "--metrics-interval-ms",
        type=float,
        default=2000,
        metavar="FLOAT",
        help="how often CPU metrics are sampled, in ms (default: 2000)",
    )
    group.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=(
            "counter_latencies=<bool> (default true): the *_duration_us counters; "
            "histogram_latencies=<bool> (default false): the first-response histogram; "
            "summary_latencies=<bool> (default false): the *_summary_us summaries, with "
            "summary_quantiles=<q>:<error>,... summary_max_age=<seconds> (60) and "
            "summary_age_buckets=<n> (5); repeatable"
        ),
    )


@hookimpl
def despina_configure(settings: argparse.Namespace, stash: Stash) -> None:
    """Store the :class:`ExporterOptions`, and what records latency histograms and
    summaries when they are on; ValueError for a bad ``--metrics-config`` or
    ``--metrics-interval-ms``."""
    from despina import LATENCY_OBSERVERS

    from despina_metrics_prometheus.latency import LatencyMetrics
    from despina_metrics_prometheus.options import EXPORTER_OPTIONS, ExporterOptions

    options = ExporterOptions.from_namespace(settings)
    stash[EXPORTER_OPTIONS] = options
    metrics = options.metrics
    if options.allow_metrics and (metrics.histogram_latencies or metrics.summary_latencies):
        stash[LATENCY_OBSERVERS] = LatencyMetrics(metrics)


@hookimpl
def despina_metrics_exporters() -> list[type[Any]]:
    from despina_metrics_prometheus.exporter import PrometheusExporter

    return [PrometheusExporter]


@hookimpl
def despina_http_routes(host: FrontendHost) -> list[Any]:
    from despina_metrics_prometheus.exporter import http_port_routes

    return http_port_routes(host)


@hookimpl
def despina_serving_processes(flags: argparse.Namespace, count: int) -> Any:
    """With ``--serving-processes``: one metrics port, the serving processes' pages
    summed, served by the supervisor (:mod:`despina_metrics_prometheus.summed`)."""
    from despina_metrics_prometheus.summed import SummedMetrics

    return SummedMetrics.of(flags, count)
