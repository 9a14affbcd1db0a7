"""Prometheus text exposition as Triton (prometheus-cpp) writes it.

prometheus-client's ``generate_latest`` renames counters to ``<name>_total``; Triton's
counters (``nv_inference_count``, ...) have no suffix and dashboards query them by those
names, so metrics are rendered here as they are named, with Triton's number format
(``0``, ``2023``, ``1e-05``, ``+Inf``, ``Nan``) and no ``# HELP`` line for an empty help
text. Unlike Triton, a help text's backslashes and line breaks are escaped (Triton writes
them raw, which breaks the format).

The families are this module's own two small records rather than prometheus-client's
``Metric``: importing any part of prometheus-client imports its HTTP exposition servers
(``urllib.request``, ``http.server``, ``wsgiref``), about 2 MB of the server's resident
memory, for two data classes. The tests read the output with prometheus-client's parser.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Sample(NamedTuple):
    """One line of a family: the sample's name, its labels and its value."""

    name: str
    labels: dict[str, str]
    value: float


@dataclass(slots=True)
class Family:
    """One metric family: its name, help text, type (``counter``, ``gauge``, ``histogram``,
    ``summary``) and samples, in the order they are written."""

    name: str
    documentation: str
    type: str
    samples: list[Sample] = field(default_factory=list)

    def add_sample(self, name: str, labels: dict[str, str], value: float) -> None:
        self.samples.append(Sample(name, labels, value))


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def format_number(value: float) -> str:
    """``value`` as prometheus-cpp writes sample values and bucket bounds (C's ``%.16g``:
    ``0``, ``0.1``, ``1e+20``)."""
    if math.isnan(value):
        return "Nan"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.16g}"


def _label_order(item: tuple[str, str]) -> tuple[bool, str]:
    """Labels sorted by name, a bucket's ``le`` or a summary's ``quantile`` last (as
    prometheus-cpp writes them)."""
    return item[0] in ("le", "quantile"), item[0]


def render(metrics: Iterable[Family]) -> bytes:
    """The text format of ``metrics``: HELP (if any), TYPE, then one line per sample."""
    lines: list[str] = []
    for metric in metrics:
        if metric.documentation:
            doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
            lines.append(f"# HELP {metric.name} {doc}")
        lines.append(f"# TYPE {metric.name} {metric.type}")
        for sample in metric.samples:
            labels = ",".join(
                f'{k}="{_escape(str(v))}"'
                for k, v in sorted(sample.labels.items(), key=_label_order)
            )
            name = f"{sample.name}{{{labels}}}" if labels else sample.name
            lines.append(f"{name} {format_number(sample.value)}")
    lines.append("")
    return "\n".join(lines).encode()
