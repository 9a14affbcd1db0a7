"""Despina's Prometheus metrics exporter (Triton's metric names and labels).

The public API, for other frontends: :func:`metrics_page`, the ``/metrics`` page of the
started exporter. Every other module is internal."""

from despina_metrics_prometheus.exporter import metrics_page

__all__ = ["metrics_page"]
