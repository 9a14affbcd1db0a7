"""Custom metrics that models define at run time (the Python backend's ``pb_utils.MetricFamily``),
with Triton's rules (its core metric API over a Prometheus registry):

- a family is registered once per name and stays registered: creating it again with the same
  kind returns it, keeping the first description (also once all its metrics are gone); with
  another kind it fails;
- a :class:`Metric` is one hold on the series of one label set: holds with the same labels
  share the series (a histogram keeps the bucket bounds of its first hold); the series goes
  when its last hold is deleted;
- exporters read :meth:`CustomMetrics.families` and :meth:`MetricFamily.samples` at scrape
  time; a family without series has nothing to show.

Errors are InvalidArgument with Triton's texts. Thread-safe (re-entrant locks: a model's
finalizer may delete a metric while its thread is inside this module).
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from despina.errors import InvalidArgument

COUNTER = "counter"
GAUGE = "gauge"
HISTOGRAM = "histogram"
KINDS = (COUNTER, GAUGE, HISTOGRAM)

LabelKey = tuple[tuple[str, str], ...]

_METRIC_NAME = re.compile(r"(?!__)[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"(?!__)[a-zA-Z_][a-zA-Z0-9_]*")


def _triton_kind(kind: str) -> str:
    return f"TRITONSERVER_METRIC_KIND_{kind.upper()}"


@dataclass
class _Series:
    """The value of one label set: a number (counter, gauge) or a histogram (``counts``
    not empty; ``value`` is then the sum of the observations)."""

    bounds: tuple[float, ...] = ()
    value: float = 0.0
    #: Per bucket, then one for values above every bound (not cumulative).
    counts: list[int] = field(default_factory=list)
    holds: int = 0


@dataclass(frozen=True)
class Sample:
    """One series as read at scrape time: ``value`` for counters and gauges; for
    histograms ``buckets`` (upper bound, cumulative count), ``total`` and ``count``."""

    labels: dict[str, str]
    value: float = 0.0
    buckets: tuple[tuple[float, int], ...] = ()
    total: float = 0.0
    count: int = 0


class MetricFamily:
    """A registered family: its series by label set, in creation order."""

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.name, self.description, self.kind = name, description, kind
        self.lock = threading.RLock()
        self._series: dict[LabelKey, _Series] = {}

    def metric(self, labels: Mapping[str, str], buckets: Sequence[float] | None = None) -> Metric:
        """A hold on the series of ``labels`` (created at zero if new); histograms need
        ``buckets`` (strictly increasing upper bounds), the other kinds refuse them."""
        if self.kind != HISTOGRAM and buckets is not None:
            raise InvalidArgument(f"Unexpected args found in {self.kind} Metric constructor.")
        if self.kind == HISTOGRAM and buckets is None:
            raise InvalidArgument("Bucket boundaries not found in Metric args.")
        if any(not _LABEL_NAME.fullmatch(name) for name in labels):
            raise InvalidArgument("Invalid label name")
        bounds = tuple(float(b) for b in buckets or ())
        if any(later <= earlier for earlier, later in itertools.pairwise(bounds)):
            raise InvalidArgument("Bucket Boundaries must be strictly sorted")
        key = tuple(sorted(labels.items()))
        with self.lock:
            series = self._series.get(key)
            if series is None:
                histogram = self.kind == HISTOGRAM
                series = _Series(bounds, counts=[0] * (len(bounds) + 1) if histogram else [])
                self._series[key] = series
            series.holds += 1
        return Metric(self, key, series)

    def release(self, key: LabelKey, series: _Series) -> None:
        """Drop one hold on ``series``; the last one removes it."""
        with self.lock:
            series.holds -= 1
            if series.holds == 0 and self._series.get(key) is series:
                del self._series[key]

    def samples(self) -> list[Sample]:
        """A consistent copy of every series."""
        with self.lock:
            return [_sample(dict(key), series) for key, series in self._series.items()]


def _sample(labels: dict[str, str], series: _Series) -> Sample:
    if not series.counts:
        return Sample(labels, series.value)
    cumulative = list(itertools.accumulate(series.counts))
    # the last count (above every bound) is only in the total ``count``
    buckets = tuple(zip(series.bounds, cumulative[:-1], strict=True))
    return Sample(labels, buckets=buckets, total=series.value, count=cumulative[-1])


class Metric:
    """One hold on a series. After :meth:`delete` every operation fails (as Triton's
    invalidated metrics)."""

    def __init__(self, family: MetricFamily, key: LabelKey, series: _Series) -> None:
        self.family = family
        self.kind = family.kind
        self._key = key
        self._series: _Series | None = series

    def _live(self, what: str) -> _Series:
        if self._series is None:
            raise InvalidArgument(f"Could not {what}. Metric has been invalidated.")
        return self._series

    def _unsupported(self, operation: str) -> InvalidArgument:
        return InvalidArgument(f"{_triton_kind(self.kind)} does not support {operation}")

    def value(self) -> float:
        series = self._live("get metric value")
        if self.kind == HISTOGRAM:
            raise self._unsupported("Value")
        with self.family.lock:
            return series.value

    def increment(self, amount: float) -> None:
        """Add ``amount``: any sign on a gauge, non-negative on a counter."""
        series = self._live("increment metric value")
        if self.kind == HISTOGRAM:
            raise self._unsupported("Increment")
        if self.kind == COUNTER and amount < 0:
            raise InvalidArgument(
                f"{_triton_kind(COUNTER)} can only be incremented monotonically by "
                "non-negative values."
            )
        with self.family.lock:
            series.value += amount

    def set(self, value: float) -> None:
        """Gauges only."""
        series = self._live("set metric value")
        if self.kind != GAUGE:
            raise self._unsupported("Set")
        with self.family.lock:
            series.value = value

    def observe(self, value: float) -> None:
        """Histograms only: count ``value`` in the first bucket whose bound it does not
        exceed (NaN and values above every bound: only in ``+Inf``) and add it to the sum."""
        series = self._live("set metric value")
        if self.kind != HISTOGRAM:
            raise self._unsupported("Observe")
        index = next((i for i, b in enumerate(series.bounds) if value <= b), len(series.bounds))
        with self.family.lock:
            series.counts[index] += 1
            series.value += value

    def delete(self) -> None:
        """Release the hold (idempotent)."""
        series, self._series = self._series, None
        if series is not None:
            self.family.release(self._key, series)


class CustomMetrics:
    """The custom metric families of one server."""

    def __init__(self) -> None:
        self._families: dict[str, MetricFamily] = {}
        self._lock = threading.RLock()

    def family(self, name: str, description: str, kind: str) -> MetricFamily:
        """Register the family ``name`` or return the registered one of that kind."""
        if kind not in KINDS:
            raise InvalidArgument("Unsupported kind passed to MetricFamily constructor.")
        if not _METRIC_NAME.fullmatch(name):
            raise InvalidArgument("Invalid metric name")
        with self._lock:
            existing = self._families.get(name)
            if existing is None:
                existing = self._families[name] = MetricFamily(name, description, kind)
            elif existing.kind != kind:
                raise InvalidArgument("Family name already exists with different type")
            return existing

    def families(self) -> list[MetricFamily]:
        """Every registered family, in registration order."""
        with self._lock:
            return list(self._families.values())
