"""Prometheus text exposition with Triton's sample names.

prometheus-client's ``generate_latest`` renames counters to ``<name>_total``; Triton's
counters (``nv_inference_count``, ...) have no suffix and dashboards query them by those
names, so metrics are rendered here as they are named.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_order(item: tuple[str, str]) -> tuple[bool, str]:
    """Labels sorted by name, a bucket's ``le`` or a summary's ``quantile`` last (as
    prometheus-cpp writes them)."""
    return item[0] in ("le", "quantile"), item[0]


def render(metrics: Iterable[Metric]) -> bytes:
    """The text format of ``metrics``: HELP, TYPE, then one line per sample."""
    lines: list[str] = []
    for metric in metrics:
        doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
        lines.append(f"# HELP {metric.name} {doc}")
        lines.append(f"# TYPE {metric.name} {metric.type}")
        for sample in metric.samples:
            labels = ",".join(
                f'{k}="{_escape(str(v))}"'
                for k, v in sorted(sample.labels.items(), key=_label_order)
            )
            name = f"{sample.name}{{{labels}}}" if labels else sample.name
            lines.append(f"{name} {floatToGoString(sample.value)}")  # type: ignore[no-untyped-call]
    lines.append("")
    return "\n".join(lines).encode()
