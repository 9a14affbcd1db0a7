"""The exporter's settings, read once from its flags (``despina_configure``), and
``--metrics-config KEY=VALUE`` parsing."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass

from despina import StashKey, triton_bool


@dataclass(frozen=True)
class MetricsOptions:
    """What the exporter reports."""

    counter_latencies: bool = True


def parse_metrics_config(values: Iterable[str]) -> MetricsOptions:
    """Parse the ``--metrics-config`` values; ValueError for an unknown key or bad value."""
    options: dict[str, bool] = {}
    for value in values:
        key, sep, raw = value.partition("=")
        if not sep:
            raise ValueError(f"--metrics-config '{value}': expected KEY=VALUE")
        if key != "counter_latencies":
            raise ValueError(
                f"--metrics-config: unsupported setting '{key}' (supported: counter_latencies)"
            )
        try:
            options[key] = triton_bool(raw)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(f"--metrics-config {key}: {exc}") from None
    return MetricsOptions(**options)


@dataclass(frozen=True)
class ExporterOptions:
    """``--allow-*-metrics`` and ``--metrics-*``, typed and checked."""

    allow_metrics: bool
    #: Accepted for compatibility; no GPU metrics are collected.
    allow_gpu_metrics: bool
    allow_cpu_metrics: bool
    address: str
    port: int
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
            interval_ms=float(flags.metrics_interval_ms),
            metrics=metrics,
        )


#: Where the exporter's options live in the server's stash.
EXPORTER_OPTIONS: StashKey[ExporterOptions] = StashKey("despina-metrics-prometheus")
