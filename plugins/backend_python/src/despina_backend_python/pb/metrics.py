"""``pb_utils.MetricFamily`` / ``Metric``: custom metrics in the server's registry, which
the metrics exporter publishes next to Triton's own metrics."""

from __future__ import annotations

from collections.abc import Sequence

from despina_backend_python.pb import runtime
from despina_backend_python.pb.errors import TritonModelException


class MetricFamily:
    """A named family of one kind; several objects with one name share the family."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2
    _KINDS = ("counter", "gauge", "histogram")

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in (self.COUNTER, self.GAUGE, self.HISTOGRAM):
            raise TritonModelException(f"unknown metric family kind {kind!r}")
        self.name, self.description, self.kind = str(name), str(description), kind
        runtime.current().metric(
            "family", self.name, description=self.description, kind=self._KINDS[kind]
        )

    def Metric(
        self, labels: dict[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> Metric:
        """A metric of this family for one label set (histograms need ``buckets``)."""
        if self.kind == self.HISTOGRAM and not buckets:
            raise TritonModelException("histogram metrics must be created with buckets")
        if self.kind != self.HISTOGRAM and buckets:
            raise TritonModelException("only histogram metrics take buckets")
        return Metric(self, dict(labels or {}), [float(b) for b in buckets or ()])


class Metric:
    """One label set of a family: ``increment``, ``set`` (gauges), ``observe``
    (histograms) and ``value``."""

    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float]) -> None:
        self._family, self._labels, self._buckets = family, labels, buckets

    def _call(self, action: str, value: float = 0.0) -> float:
        return runtime.current().metric(
            action,
            self._family.name,
            labels=self._labels,
            value=float(value),
            buckets=self._buckets,
        )

    def increment(self, value: float) -> None:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("histogram metrics cannot be incremented; use observe")
        if self._family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter can only be incremented by a non-negative value")
        self._call("add", value)

    def set(self, value: float) -> None:
        if self._family.kind != MetricFamily.GAUGE:
            raise TritonModelException("only gauge metrics can be set")
        self._call("set", value)

    def observe(self, value: float) -> None:
        if self._family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only histogram metrics can observe")
        self._call("observe", value)

    def value(self) -> float:
        if self._family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("histogram metrics have no single value")
        return self._call("value")
