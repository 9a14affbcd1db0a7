"""Triton's latency histograms and summaries, recorded per request while they are on.

``--metrics-config histogram_latencies=true`` gives every model version a time-to-first-
response histogram in milliseconds (buckets from its config's ``model_metrics``, else
Triton's 100, 500, 2000, 5000); ``summary_latencies=true`` gives it sliding-window
quantiles of request, queue and compute durations in microseconds. Values are Triton's:
whole milliseconds and microseconds (floored), observed as its core observes them.

Quantiles come from a log-bucketed sketch per age bucket (values within
:data:`RELATIVE_ACCURACY` of the true quantile's value, bounded memory, O(1) per
observation) rather than prometheus-cpp's CKMS stream, whose error is on the rank.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from despina import ConfigError

from despina_metrics_prometheus.options import MetricsOptions

if TYPE_CHECKING:
    from despina import ModelConfig

log = logging.getLogger("despina.metrics")

#: The family whose buckets a model's ``model_metrics`` may set (Triton's only one).
FIRST_RESPONSE = "nv_inference_first_response_histogram_ms"
#: Triton's default buckets of the first-response histogram, in milliseconds.
FIRST_RESPONSE_BUCKETS = (100.0, 500.0, 2000.0, 5000.0)
#: How far a reported quantile may be from the true one, relative to its value.
RELATIVE_ACCURACY = 0.005
_GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_INV_LOG_GAMMA = 1 / math.log(_GAMMA)
#: The sketch key of the value 0 (below every other key).
_ZERO = -(1 << 62)


class Histogram:
    """Counts per bucket, a sum and a count; :meth:`observe` may run on any thread."""

    __slots__ = ("_counts", "_lock", "bounds", "count", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)  # the last: above every bound
        self.sum = 0.0
        self.count = 0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.bounds, value)  # the first bound >= value
        with self._lock:
            self._counts[index] += 1
            self.sum += value
            self.count += 1

    def cumulative(self) -> tuple[list[int], float, int]:
        """(count at or below each bound, sum, count), read at once."""
        with self._lock:
            counts, total, count = list(self._counts), self.sum, self.count
        running, cumulative = 0, []
        for value in counts[:-1]:
            running += value
            cumulative.append(running)
        return cumulative, total, count


class WindowQuantiles:
    """A summary: quantiles over the last ``max_age_ns`` (a ring of ``age_buckets``
    sketches, the oldest cleared each ``max_age_ns / age_buckets``), with a sum and
    count since the start. Observed on the event loop only."""

    __slots__ = ("_head", "_next_ns", "_period_ns", "_sketches", "count", "sum")

    def __init__(self, max_age_ns: int, age_buckets: int) -> None:
        self._sketches: list[dict[int, int]] = [{} for _ in range(age_buckets)]
        self._head = 0
        self._period_ns = max(1, max_age_ns // age_buckets)
        self._next_ns = time.monotonic_ns() + self._period_ns
        self.sum = 0
        self.count = 0

    def observe(self, value: int, now_ns: int) -> None:
        if now_ns >= self._next_ns:
            self._rotate(now_ns)
        self.sum += value
        self.count += 1
        key = math.ceil(math.log(value) * _INV_LOG_GAMMA) if value > 0 else _ZERO
        sketch = self._sketches[self._head]
        sketch[key] = sketch.get(key, 0) + 1

    def _rotate(self, now_ns: int) -> None:
        steps = (now_ns - self._next_ns) // self._period_ns + 1
        for _ in range(min(steps, len(self._sketches))):
            self._head = (self._head + 1) % len(self._sketches)
            self._sketches[self._head] = {}
        self._next_ns += steps * self._period_ns

    def quantiles(self, quantiles: Sequence[float]) -> list[float]:
        """The value at each quantile over the window (NaN when it saw nothing)."""
        now = time.monotonic_ns()
        if now >= self._next_ns:
            self._rotate(now)
        merged: dict[int, int] = {}
        for sketch in self._sketches:
            for key, count in sketch.items():
                merged[key] = merged.get(key, 0) + count
        total = sum(merged.values())
        if not total:
            return [math.nan] * len(quantiles)
        keys = sorted(merged)
        values = []
        for quantile in quantiles:
            rank, running = quantile * (total - 1), 0
            for key in keys:
                running += merged[key]
                if running > rank:
                    break
            values.append(0.0 if key == _ZERO else float(round(2 * _GAMMA**key / (_GAMMA + 1))))
        return values


@dataclass
class LatencySummaries:
    """The summaries of one model version; ``request`` is None for a model whose
    responses are cached (Triton leaves that one out there)."""

    request: WindowQuantiles | None
    queue: WindowQuantiles
    compute_input: WindowQuantiles
    compute_infer: WindowQuantiles
    compute_output: WindowQuantiles

    @classmethod
    def create(cls, options: MetricsOptions, cached: bool) -> LatencySummaries:
        max_age_ns = int(options.summary_max_age_s * 1e9)

        def window() -> WindowQuantiles:
            return WindowQuantiles(max_age_ns, options.summary_age_buckets)

        return cls(None if cached else window(), window(), window(), window(), window())

    def observe(self, total_ns: int, queue_ns: int, compute: tuple[int, int, int] | None) -> None:
        now = time.monotonic_ns()
        if self.request is not None:
            self.request.observe(total_ns // 1000, now)
        self.queue.observe(queue_ns // 1000, now)
        if compute is not None:
            self.compute_input.observe(compute[0] // 1000, now)
            self.compute_infer.observe(compute[1] // 1000, now)
            self.compute_output.observe(compute[2] // 1000, now)

    def families(self) -> Iterator[tuple[str, WindowQuantiles]]:
        """(family name, summary) in Triton's order."""
        if self.request is not None:
            yield "nv_inference_request_summary_us", self.request
        yield "nv_inference_queue_summary_us", self.queue
        yield "nv_inference_compute_input_summary_us", self.compute_input
        yield "nv_inference_compute_infer_summary_us", self.compute_infer
        yield "nv_inference_compute_output_summary_us", self.compute_output


class LatencyRecorder:
    """One model version's histogram and summaries (a ``despina.LatencyObserver``)."""

    __slots__ = ("first", "summaries")

    def __init__(self, first: Histogram | None, summaries: LatencySummaries | None) -> None:
        self.first = first
        self.summaries = summaries

    def request(self, total_ns: int, queue_ns: int, compute: tuple[int, int, int] | None) -> None:
        if self.summaries is not None:
            self.summaries.observe(total_ns, queue_ns, compute)

    def first_response(self, ns: int) -> None:
        if self.first is not None:
            self.first.observe(ns // 1_000_000)


@dataclass(frozen=True)
class LatencyMetrics:
    """Builds each model version's :class:`LatencyRecorder` (a ``despina.LatencyObservers``,
    stored under ``despina.LATENCY_OBSERVERS`` while histograms or summaries are on)."""

    options: MetricsOptions

    def for_model(self, name: str, version: str, config: ModelConfig) -> LatencyRecorder:
        options = self.options
        first = (
            Histogram(first_response_buckets(name, config)) if options.histogram_latencies else None
        )
        summaries = (
            LatencySummaries.create(options, bool(config.response_cache.enable))
            if options.summary_latencies
            else None
        )
        return LatencyRecorder(first, summaries)


def first_response_buckets(name: str, config: ModelConfig) -> tuple[float, ...]:
    """The first-response buckets of model ``name``: its config's ``model_metrics``
    ``metric_control`` for that family, else the default. A family Triton cannot
    customize is logged and ignored, as Triton does; ConfigError for buckets that are
    not strictly increasing (prometheus-cpp refuses them too)."""
    buckets: tuple[float, ...] = FIRST_RESPONSE_BUCKETS
    for control in config.model_metrics.metric_control:
        family = control.metric_identifier.family
        if family != FIRST_RESPONSE:
            log.warning(
                "model '%s': metric family '%s' in 'metric_identifier' is not a customizable "
                "metric (only %s is)",
                name,
                family,
                FIRST_RESPONSE,
            )
            continue
        buckets = tuple(float(b) for b in control.histogram_options.buckets)
    if any(b <= a for a, b in itertools.pairwise(buckets)):
        raise ConfigError(
            f"model '{name}': model_metrics buckets of {FIRST_RESPONSE} must be strictly "
            f"increasing, got {list(buckets)}"
        )
    return buckets
