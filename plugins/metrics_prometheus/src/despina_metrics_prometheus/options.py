"""``--metrics-config KEY=VALUE`` parsing."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from despina.triton_flags import triton_bool


@dataclass(frozen=True)
class MetricsOptions:
    """What the exporter reports."""

    counter_latencies: bool = True


def parse_metrics_config(values: list[str]) -> MetricsOptions:
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
