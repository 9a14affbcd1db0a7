"""``pb_utils.MetricFamily`` / ``Metric``: custom metrics in the server's registry, which
the metrics exporter publishes next to Triton's own metrics.

As Triton's Python backend: a family holds every metric made from it, so deleting a
``Metric`` object alone changes nothing; deleting the family (the last reference to it)
deletes its metrics from the server, and their objects then fail every operation. Each
object calls the server through the host it was created under (:mod:`.runtime`), by handle.
"""

from __future__ import annotations

import enum
import json
import numbers
import sys
from typing import Any

from despina_backend_python.pb import runtime as pb_runtime
from despina_backend_python.pb.errors import TritonModelException

_DELETED = (
    "Invalid metric operation as the corresponding 'MetricFamily' has been deleted. The "
    "'MetricFamily' object should be deleted AFTER its corresponding 'Metric' objects have "
    "been deleted."
)


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


def _server(host: pb_runtime.Runtime, prefix: str, action: str, name: str, **fields: Any) -> float:
    """One metric call to the server; its error is raised as TritonModelException after
    ``prefix``."""
    try:
        return host.metric(action, name, **fields)
    except TritonModelException as exc:
        raise TritonModelException(f"{prefix}{exc}") from None


def _number(value: Any, what: str) -> float:
    """``value`` as a float; TypeError unless it is a real number."""
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{what}: expected a number, got {type(value).__name__} {value!r}")
    return float(value)


class MetricFamily:
    """A named family of one kind; families created with one name share it on the server
    (the first description stays), another kind is refused."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if not (isinstance(name, str) and isinstance(description, str)):
            raise TypeError("MetricFamily(): 'name' and 'description' must be strings")
        if not isinstance(kind, MetricKind):
            raise TypeError(
                "MetricFamily(): 'kind' must be MetricFamily.COUNTER, GAUGE or HISTOGRAM, "
                f"got {kind!r}"
            )
        self._host = pb_runtime.current()
        self._name, self._kind = name, kind
        self._metrics: list[Metric] = []
        handle = _server(
            self._host,
            "Error when creating MetricFamily: ",
            "family",
            name,
            description=description,
            kind=kind.name.lower(),
        )
        self._handle = int(handle)

    def Metric(
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> Metric:
        """A metric of this family for one label set; histograms need ``buckets`` (a list
        of strictly increasing upper bounds), the other kinds refuse them."""
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        # Triton sends the labels as JSON: keys become strings, a value must stay a string
        sent = json.loads(json.dumps(labels)) or {}
        bounds = None
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self._kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            bounds = [_number(b, "Metric() buckets") for b in buckets]
        elif self._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        handle = _server(
            self._host,
            "Error when creating Metric: ",
            "metric",
            self._name,
            handle=self._handle,
            labels=sent,
            buckets=bounds,
        )
        metric = Metric(self._host, self._name, int(handle))
        self._metrics.append(metric)
        return metric

    def __del__(self) -> None:
        """Delete the family's metrics and the family from the server: only while its
        host still serves the model (not after unload, nor at interpreter exit: their
        series then stay, as Triton's)."""
        handle = getattr(self, "_handle", None)
        if handle is None:
            return
        for metric in self._metrics:
            metric._deleted = True
        if sys.is_finalizing() or not pb_runtime.is_active(self._host):
            return
        try:
            self._host.metric("delete_family", self._name, handle=handle)
        except Exception as exc:  # noqa: BLE001 - a finalizer reports, never raises
            print(f"Error when deleting MetricFamily: {exc}", file=sys.stderr)


class Metric:
    """One label set of a family (made by ``MetricFamily.Metric``): ``increment``,
    ``set`` (gauges), ``observe`` (histograms) and ``value`` (not histograms)."""

    def __init__(self, host: pb_runtime.Runtime, name: str, handle: int) -> None:
        self._host, self._name, self._handle = host, name, handle
        self._deleted = False

    def _call(self, action: str, prefix: str, value: float = 0.0) -> float:
        if self._deleted:
            raise TritonModelException(prefix + _DELETED)
        return _server(self._host, prefix, action, self._name, handle=self._handle, value=value)

    def increment(self, value: float) -> None:
        """Add ``value`` (a counter refuses negative values)."""
        self._call("increment", "Failed to increment metric value: ", _number(value, "increment()"))

    def set(self, value: float) -> None:
        self._call("set", "Failed to set metric value: ", _number(value, "set()"))

    def observe(self, value: float) -> None:
        self._call("observe", "Failed to observe metric value: ", _number(value, "observe()"))

    def value(self) -> float:
        return self._call("value", "Failed to get metric value: ")
