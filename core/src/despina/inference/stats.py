"""Per-model-version statistics, shaped like Triton's statistics extension.

The scheduler records each request and each execution once; the statistics endpoints
and the metrics exporter read :meth:`ModelStats.snapshot` (no per-request cost for them).
Durations are nanoseconds. Updates happen on the event loop thread, so no locks.

A backend splits each execution into compute input, infer and output as Triton's
backends do, by :func:`report_compute`. Latency distributions (Triton's histograms and
summaries) cost nothing unless a metrics exporter asks for them: it stores a
:class:`LatencyObservers` under :data:`LATENCY_OBSERVERS`, and each model version loaded
then carries a :class:`LatencyObserver` in :attr:`ModelStats.latency`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from despina.inference.request import InferenceRequest, InferenceResponse, ResponseStream
from despina.serving.settings import StashKey

if TYPE_CHECKING:
    from despina.repository.config import ModelConfig

#: Failure reasons of ``nv_inference_request_failure``.
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


def report_compute(
    requests: Sequence[InferenceRequest], input_end_ns: int, output_start_ns: int
) -> None:
    """What a backend calls once per execution: the framework got the batch's converted
    inputs at ``input_end_ns`` and gave back its outputs at ``output_start_ns``
    (``time.monotonic_ns()``, any thread or process of this host). The scheduler counts
    compute input from the execution's start to the first, infer between them, and
    compute output from the second to the execution's end; unreported, all is infer."""
    for request in requests:
        request.compute_input_end_ns = input_end_ns
        request.compute_output_start_ns = output_start_ns


def compute_durations(
    request: InferenceRequest, start_ns: int, end_ns: int
) -> tuple[int, int, int]:
    """(input, infer, output) nanoseconds of ``request``'s execution from ``start_ns`` to
    ``end_ns``, split where its backend reported (:func:`report_compute`)."""
    input_end, output_start = request.compute_input_end_ns, request.compute_output_start_ns
    if start_ns <= input_end <= output_start <= end_ns:
        return input_end - start_ns, output_start - input_end, end_ns - output_start
    return 0, end_ns - start_ns, 0


class LatencyObserver(Protocol):
    """Latency distributions of one model version (histograms, summaries)."""

    def request(self, total_ns: int, queue_ns: int, compute: tuple[int, int, int] | None) -> None:
        """A successful request (on the event loop); ``compute`` is its (input, infer,
        output) nanoseconds, None when the response cache answered it."""
        ...

    def first_response(self, ns: int) -> None:
        """A request's first response was sent ``ns`` after it arrived (any thread)."""
        ...


class LatencyObservers(Protocol):
    """What builds each model version's :class:`LatencyObserver` when it loads."""

    def for_model(self, name: str, version: str, config: ModelConfig) -> LatencyObserver | None:
        """The observer of a version loading with ``config``; None to observe nothing."""
        ...


#: Where a metrics exporter's ``despina_configure`` stores its :class:`LatencyObservers`
#: (absent: no model version observes latencies, and requests pay nothing for them).
LATENCY_OBSERVERS: StashKey[LatencyObservers] = StashKey("despina.latency-observers")


class FirstResponseStream(ResponseStream):
    """A :class:`ResponseStream` that tells ``observe`` when its first response is sent,
    how long after ``received_ns``: what a request gets while its model observes
    latencies (Triton's time to first response, also for non-decoupled models)."""

    __slots__ = ("_observe", "_received_ns")

    def __init__(self, observe: Callable[[int], None], received_ns: int) -> None:
        super().__init__()
        self._observe: Callable[[int], None] | None = observe
        self._received_ns = received_ns

    def send(self, response: InferenceResponse | None, final: bool) -> None:
        observe = self._observe
        if observe is not None and response is not None and not self.done:
            self._observe = None
            observe(time.monotonic_ns() - self._received_ns)
        super().send(response, final)


@dataclass
class Duration:
    """A count and a total duration in nanoseconds."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def as_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class BatchStats:
    """Per batch size: compute durations of the executions of that size."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class ModelStats:
    """Counters of one model version."""

    name: str
    version: str
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    pending: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAILURE_REASONS, 0))
    batches: defaultdict[int, BatchStats] = field(default_factory=lambda: defaultdict(BatchStats))
    #: How long the version took to load, in nanoseconds (0 until it is READY).
    load_ns: int = 0
    #: Its latency distributions, when a metrics exporter observes them.
    latency: LatencyObserver | None = None

    def record_execution(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One ``execute`` call of ``batch_size`` inferences in all: the execution count and
        the batch statistics (as Triton's Python backend, also for one that failed)."""
        self.execution_count += 1
        batch = self.batches[batch_size]  # the adds written out: this runs per execution
        batch.compute_input.count += 1
        batch.compute_input.ns += input_ns
        batch.compute_infer.count += 1
        batch.compute_infer.ns += infer_ns
        batch.compute_output.count += 1
        batch.compute_output.ns += output_ns

    def record_success(
        self,
        total_ns: int,
        queue_ns: int,
        batch_size: int = 0,
        compute_ns: tuple[int, int, int] = (0, 0, 0),
    ) -> None:
        """A request answered successfully, ``total_ns`` after it arrived. An executed one
        (``batch_size`` > 0) adds its inferences and its execution's (input, infer,
        output) durations, as Triton counts per request; a cache hit adds neither."""
        self.success.count += 1  # the adds written out: this runs per request
        self.success.ns += total_ns
        self.queue.count += 1
        self.queue.ns += queue_ns
        self.last_inference_ms = time.time_ns() // 1_000_000
        if batch_size:
            self.inference_count += batch_size
            self.compute_input.count += 1
            self.compute_input.ns += compute_ns[0]
            self.compute_infer.count += 1
            self.compute_infer.ns += compute_ns[1]
            self.compute_output.count += 1
            self.compute_output.ns += compute_ns[2]
        if self.latency is not None:
            self.latency.request(total_ns, queue_ns, compute_ns if batch_size else None)

    def record_failure(self, total_ns: int, reason: str) -> None:
        """A request that failed; ``reason`` is one of FAILURE_REASONS."""
        self.fail.add(total_ns)
        self.failures[reason] += 1
        self.last_inference_ms = time.time_ns() // 1_000_000

    def snapshot(self) -> dict[str, Any]:
        """The model's entry of the statistics extension's ``model_stats`` list."""
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.as_dict(),
                "fail": self.fail.as_dict(),
                "queue": self.queue.as_dict(),
                "compute_input": self.compute_input.as_dict(),
                "compute_infer": self.compute_infer.as_dict(),
                "compute_output": self.compute_output.as_dict(),
                "cache_hit": self.cache_hit.as_dict(),
                "cache_miss": self.cache_miss.as_dict(),
            },
            "response_stats": {},
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": batch.compute_input.as_dict(),
                    "compute_infer": batch.compute_infer.as_dict(),
                    "compute_output": batch.compute_output.as_dict(),
                }
                for size, batch in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }
