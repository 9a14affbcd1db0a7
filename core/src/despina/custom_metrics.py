"""Custom metrics that models define at run time (the Python backend's ``pb_utils.MetricFamily``).

Models create families and set values here; metrics exporters read :meth:`families` at
scrape time. Thread-safe: model code may run in threads or report from other processes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from despina.errors import AlreadyExists, InvalidArgument

COUNTER = "counter"
GAUGE = "gauge"
HISTOGRAM = "histogram"

LabelKey = tuple[tuple[str, str], ...]


@dataclass
class MetricFamily:
    """A named family; each label set holds one value (counter or gauge) or a histogram."""

    name: str
    description: str
    kind: str
    values: dict[LabelKey, float] = field(default_factory=dict)
    #: For histograms: label set -> (bucket upper bounds, cumulative counts, sum, count).
    buckets: dict[LabelKey, tuple[list[float], list[int], float, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, labels: dict[str, str], amount: float) -> None:
        """Counter/gauge increment; a counter refuses negative amounts."""
        if self.kind == COUNTER and amount < 0:
            raise InvalidArgument("a counter can only be incremented by a non-negative value")
        key = label_key(labels)
        with self.lock:
            self.values[key] = self.values.get(key, 0.0) + amount

    def set(self, labels: dict[str, str], value: float) -> None:
        """Gauge set."""
        if self.kind != GAUGE:
            raise InvalidArgument(f"metric family '{self.name}' is not a gauge")
        with self.lock:
            self.values[label_key(labels)] = value

    def value(self, labels: dict[str, str]) -> float:
        with self.lock:
            return self.values.get(label_key(labels), 0.0)

    def observe(self, labels: dict[str, str], value: float, bounds: list[float]) -> None:
        """Histogram observation with the given bucket upper bounds."""
        key = label_key(labels)
        with self.lock:
            known, counts, total, count = self.buckets.get(key, (bounds, [0] * len(bounds), 0.0, 0))
            counts = [c + (1 if value <= b else 0) for c, b in zip(counts, known, strict=True)]
            self.buckets[key] = (known, counts, total + value, count + 1)

    def remove(self, labels: dict[str, str]) -> None:
        key = label_key(labels)
        with self.lock:
            self.values.pop(key, None)
            self.buckets.pop(key, None)


def label_key(labels: dict[str, str]) -> LabelKey:
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


class CustomMetrics:
    """The custom metric families of one server."""

    def __init__(self) -> None:
        self._families: dict[str, MetricFamily] = {}
        self._lock = threading.Lock()

    def family(self, name: str, description: str, kind: str) -> MetricFamily:
        """Create or return the family ``name``; a different kind is AlreadyExists."""
        if kind not in (COUNTER, GAUGE, HISTOGRAM):
            raise InvalidArgument(f"unknown metric kind '{kind}'")
        with self._lock:
            existing = self._families.get(name)
            if existing is not None:
                if existing.kind != kind:
                    raise AlreadyExists(f"metric family '{name}' exists with kind {existing.kind}")
                return existing
            created = MetricFamily(name, description, kind)
            self._families[name] = created
            return created

    def remove(self, name: str) -> None:
        with self._lock:
            self._families.pop(name, None)

    def families(self) -> list[MetricFamily]:
        with self._lock:
            return list(self._families.values())
