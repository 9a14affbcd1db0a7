"""The exporter's settings, read once from its flags (``despina_configure``), and
``--metrics-config KEY=VALUE`` parsing."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from despina import StashKey, triton_bool

#: Triton's default summary quantiles (the error of each is accepted, see the README).
DEFAULT_QUANTILES = (0.5, 0.9, 0.95, 0.99, 0.999)
#: prometheus-cpp's summary window (Triton sets none): 60 s in 5 rotating buckets.
DEFAULT_MAX_AGE_S = 60.0
DEFAULT_AGE_BUCKETS = 5


@dataclass(frozen=True)
class MetricsOptions:
    """What the exporter reports (``--metrics-config``)."""

    counter_latencies: bool = True
    #: ``nv_inference_first_response_histogram_ms`` per model version.
    histogram_latencies: bool = False
    #: The ``nv_inference_*_summary_us`` families per model version.
    summary_latencies: bool = False
    summary_quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    #: The summaries' sliding window, and how many buckets it rotates through.
    summary_max_age_s: float = DEFAULT_MAX_AGE_S
    summary_age_buckets: int = DEFAULT_AGE_BUCKETS


def _quantiles(raw: str) -> tuple[float, ...]:
    """``q:error,...`` (Triton's format; quotes around it allowed) -> the quantiles."""
    quantiles = []
    for pair in raw.strip("\"'").split(","):
        quantile, sep, error = pair.strip().partition(":")
        try:
            q, e = float(quantile), float(error)
        except ValueError:
            q = e = -1.0
        if not sep or not 0 <= q <= 1 or not 0 <= e <= 1:
            raise ValueError(
                f"--metrics-config summary_quantiles: '{pair}' is not <quantile>:<error> "
                "with both in [0, 1]"
            )
        quantiles.append(q)
    return tuple(sorted(set(quantiles)))


def _positive(key: str, raw: str, kind: type[int] | type[float]) -> float:
    try:
        number = kind(raw)
    except ValueError:
        number = 0
    if number <= 0:
        raise ValueError(f"--metrics-config {key}: expected a positive number, got '{raw}'")
    return number


def parse_metrics_config(values: Iterable[str]) -> MetricsOptions:
    """Parse the ``--metrics-config`` values; ValueError for an unknown key or bad value."""
    options: dict[str, Any] = {}
    for value in values:
        key, sep, raw = value.partition("=")
        if not sep:
            raise ValueError(f"--metrics-config '{value}': expected KEY=VALUE")
        if key in _BOOLEANS:
            try:
                options[key] = triton_bool(raw)
            except argparse.ArgumentTypeError as exc:
                raise ValueError(f"--metrics-config {key}: {exc}") from None
        elif key == "summary_quantiles":
            options[key] = _quantiles(raw)
        elif key == "summary_max_age":
            options["summary_max_age_s"] = _positive(key, raw, float)
        elif key == "summary_age_buckets":
            options[key] = int(_positive(key, raw, int))
        else:
            raise ValueError(
                f"--metrics-config: unsupported setting '{key}' (supported: {', '.join(KEYS)})"
            )
    return MetricsOptions(**options)


_BOOLEANS = ("counter_latencies", "histogram_latencies", "summary_latencies")
#: Every ``--metrics-config`` key.
KEYS = (*_BOOLEANS, "summary_quantiles", "summary_max_age", "summary_age_buckets")


@dataclass(frozen=True)
class ExporterOptions:
    """``--allow-*-metrics`` and ``--metrics-*``, typed and checked."""

    allow_metrics: bool
    #: Accepted for compatibility; no GPU metrics are collected.
    allow_gpu_metrics: bool
    allow_cpu_metrics: bool
    address: str
    port: int
    #: ``--metrics-on-http-port``: ``/metrics`` on the HTTP port, no port of its own.
    on_http_port: bool
    #: How often CPU metrics are sampled, in ms (positive).
    interval_ms: float
    #: ``--metrics-config``, parsed.
    metrics: MetricsOptions

    @classmethod
    def from_namespace(cls, flags: argparse.Namespace) -> ExporterOptions:
        """Read and check the flags; ValueError naming the flag for a bad value."""
        metrics = parse_metrics_config(flags.metrics_config)
        if flags.metrics_interval_ms <= 0:
            raise ValueError("--metrics-interval-ms must be positive")
        return cls(
            allow_metrics=bool(flags.allow_metrics),
            allow_gpu_metrics=bool(flags.allow_gpu_metrics),
            allow_cpu_metrics=bool(flags.allow_cpu_metrics),
            address=str(flags.metrics_address),
            port=int(flags.metrics_port),
            on_http_port=bool(flags.metrics_on_http_port),
            interval_ms=float(flags.metrics_interval_ms),
            metrics=metrics,
        )


#: Where the exporter's options live in the server's stash.
EXPORTER_OPTIONS: StashKey[ExporterOptions] = StashKey("despina-metrics-prometheus")
