"""The scheduler contract and the one place that runs a batch on an instance.

A scheduler receives validated requests through :meth:`Scheduler.submit`, decides which
requests run together on which instance, and runs them with :func:`run_batch`, which
records statistics and delivers every response (or an error) to each request's stream.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from despina.backend import ModelInstance
from despina.classification import classify_outputs
from despina.config import ModelConfig
from despina.errors import DespinaError, Internal, Unavailable
from despina.inference import InferenceRequest, InferenceResponse
from despina.placement import NeedsThread
from despina.rate_limiter import Needs, RateLimiter
from despina.response_cache import ResponseCache
from despina.stats import ModelStats, compute_durations

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

log = logging.getLogger("despina.scheduling")

#: How often :meth:`Scheduler.drain` looks whether the queue emptied.
DRAIN_POLL_S = 0.005
#: The answer to a client's request that reaches a stopping server (UNAVAILABLE).
STOPPING = "Server is stopping"
#: ``--max-pending-requests``'s default: requests a model version's queue holds (per
#: priority level) where its config sets no ``max_queue_size``; beyond it a request is
#: refused at once with UNAVAILABLE "Exceeds maximum queue size" (Triton's text for a full
#: queue), so a flood costs bounded memory. 0: unbounded, as Triton.
DEFAULT_MAX_PENDING_REQUESTS = 4096


class SchedulerHost(Protocol):
    """What a scheduler may use of the server: the other models (an ensemble runs its
    steps on them and waits for them to load)."""

    def known_models(self) -> set[str]:
        """Every model name in a repository or loaded."""
        ...

    async def settle(self, name: str) -> None:
        """Wait while model ``name`` is loading or due to load at start-up (bounded); in
        explicit control mode load it when it is not ready and nothing else will."""
        ...

    def ready_config(self, name: str, version: str = "") -> ModelConfig:
        """The config of the READY version serving ``name``; NotFound / Unavailable
        otherwise."""
        ...

    def has_ready_version(self, name: str) -> bool:
        """Whether any version of ``name`` is READY (another version may be asked for)."""
        ...

    def load_failure(self, name: str) -> str:
        """Why ``name`` failed to load, or "" when it did not fail (or never loaded)."""
        ...

    def infer_stream(self, request: InferenceRequest) -> AsyncGenerator[InferenceResponse, None]:
        """Every response of a request on any model (errors as ``error`` set)."""
        ...

    def takes_device_inputs(self, name: str, version: str = "") -> bool:
        """Whether the READY version serving ``name`` takes DeviceArray inputs (False
        when none is ready)."""
        ...


@dataclass
class ScheduledModel:
    """What a scheduler works with: one model version's config, instances and stats."""

    name: str
    version: str
    config: ModelConfig
    instances: list[ModelInstance]
    stats: ModelStats
    #: The other models, through the server (ensembles run their steps on them).
    host: SchedulerHost | None = None
    #: The model's folder in the repository (sequence batching reads initial states there).
    model_dir: Path | None = None
    #: The server's response cache when this model enables it.
    cache: ResponseCache | None = None
    #: The server's rate limiter (``--rate-limit=execution_count``), with each instance's
    #: needs in ``instances`` order (None: the instance is not rate limited).
    limiter: RateLimiter | None = None
    needs: list[Needs | None] = field(default_factory=list)
    #: ``--max-pending-requests``: the queue bound where the config sets no
    #: ``max_queue_size`` (0: unbounded).
    max_pending: int = DEFAULT_MAX_PENDING_REQUESTS
    #: The outputs the config declares: what a request that names none receives.
    output_names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.output_names = frozenset(output.name for output in self.config.output)


class Scheduler(abc.ABC):
    """Queues requests of one model version and runs them on its instances."""

    name: ClassVar[str]

    def __init__(self, model: ScheduledModel) -> None:
        self.model = model

    @classmethod
    def handles(cls, config: ModelConfig) -> bool:
        """True when this scheduler is the one for ``config`` (default: never chosen)."""
        return False

    @abc.abstractmethod
    async def start(self) -> None:
        """Start workers; called once after the instances exist."""

    @abc.abstractmethod
    def submit(self, request: InferenceRequest) -> None:
        """Queue a validated request whose ``stream`` is set; never blocks.

        Raises Unavailable when the queue is full or the scheduler is stopping.
        """

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop taking requests, let running executions finish, and fail every queued
        request with Unavailable (nothing is dropped silently)."""

    @property
    def pending(self) -> int:
        """Requests queued and not yet executing."""
        return 0

    @property
    def ready(self) -> bool:
        """False while the scheduler cannot serve (an ensemble whose composing model is
        not ready); the model version is READY only while this is true."""
        return True

    @property
    def busy(self) -> int:
        """Executions running now."""
        return 0

    @property
    def settled(self) -> bool:
        """Nothing accepted is left to run: nothing queued or executing (a sequence
        scheduler: no sequence open either). Shutdown waits for this on every model at
        once, within ``--exit-timeout-secs``."""
        return not (self.pending or self.busy)

    #: Whether a client's request may continue work accepted before the server began
    #: stopping (a sequence's next request): the server then asks
    #: :meth:`admit_while_stopping` instead of refusing it at once.
    takes_follow_ons: ClassVar[bool] = False

    def admit_while_stopping(self, request: InferenceRequest) -> None:
        """The server is stopping: raise Unavailable unless a client's ``request``
        continues work accepted before (default: it never does)."""
        raise Unavailable(STOPPING)

    async def drain(self) -> None:
        """Wait until nothing is queued or executing; unload and reload call this before
        :meth:`stop`, so a reload never fails a request that was already accepted."""
        while self.pending or self.busy:
            await asyncio.sleep(DRAIN_POLL_S)


def batch_size_of(request: InferenceRequest, config: ModelConfig) -> int:
    """A request's batch size: its first dimension when the model batches, else 1."""
    if config.max_batch_size > 0 and request.inputs:
        first = next(iter(request.inputs.values()))
        return int(first.shape[0]) if first.ndim else 1
    return 1


async def execute_on(
    model: ScheduledModel,
    index: int,
    requests: Sequence[InferenceRequest],
    instance: ModelInstance | None = None,
) -> None:
    """:func:`run_batch` on ``model.instances[index]`` (or on ``instance``, a wrapper of
    it), holding the instance's rate-limiter resources for the execution when it has any.
    Never raises."""
    target = instance if instance is not None else model.instances[index]
    needs = model.needs[index] if model.limiter is not None and index < len(model.needs) else None
    if model.limiter is None or needs is None:
        await run_batch(model, target, requests)
        return
    async with model.limiter.slot(needs):
        await run_batch(model, target, requests)


async def run_batch(
    model: ScheduledModel, instance: ModelInstance, requests: Sequence[InferenceRequest]
) -> None:
    """Execute ``requests`` on ``instance`` and answer each one; never raises.

    Statistics as Triton's: one execution of the summed batch size (also when it fails);
    per request success (its inferences, queue and compute times) or failure. Backend
    errors fail the whole batch with the error's text; an execution cancelled (a stopping
    server that stopped waiting for it) answers it with the stopping error.
    """
    start = time.monotonic_ns()
    try:
        responses = await instance.execute(requests)
    except asyncio.CancelledError:
        _fail_all(model, requests, stopping_error(model), "OTHER")
        raise
    except Exception as exc:  # noqa: BLE001 - any backend failure answers the batch
        _answer_failed(model, requests, exc, start)
        return
    _answer(model, requests, responses, start)


def run_batch_now(
    model: ScheduledModel, instance: ModelInstance, requests: Sequence[InferenceRequest]
) -> bool:
    """:func:`run_batch` through ``instance.execute_now``, synchronously; False, with
    nothing answered, when the instance declined (NeedsThread)."""
    start = time.monotonic_ns()
    try:
        responses = instance.execute_now(requests)
    except NeedsThread:
        return False
    except Exception as exc:  # noqa: BLE001 - any backend failure answers the batch
        _answer_failed(model, requests, exc, start)
        return True
    _answer(model, requests, responses, start)
    return True


def _answer_failed(
    model: ScheduledModel, requests: Sequence[InferenceRequest], exc: Exception, start: int
) -> None:
    batch = sum(batch_size_of(r, model.config) for r in requests)
    model.stats.record_execution(batch, 0, time.monotonic_ns() - start, 0)
    if not isinstance(exc, DespinaError):
        log.error("model '%s' failed to execute", model.name, exc_info=exc)
        exc = Internal(f"{type(exc).__name__}: {exc}")
    _fail_all(model, requests, exc, "BACKEND")


def _answer(
    model: ScheduledModel,
    requests: Sequence[InferenceRequest],
    responses: Sequence[InferenceResponse] | None,
    start: int,
) -> None:
    """Deliver what an execution that began at ``start`` returned, with its statistics."""
    end = time.monotonic_ns()
    stats = model.stats
    sizes = [batch_size_of(r, model.config) for r in requests]
    stats.record_execution(sum(sizes), *compute_durations(requests[0], start, end))
    for request in requests:  # before delivery: the final response may complete a trace
        if request.trace is not None:
            request.trace.computed(start, end, compute_durations(request, start, end))
    if responses is None:
        for request, size in zip(requests, sizes, strict=True):
            _record_outcome(stats, request, size, start, end, failed=False)
        return
    if len(responses) != len(requests):
        error = Internal(
            f"model '{model.name}' returned {len(responses)} responses for {len(requests)} requests"
        )
        _fail_all(model, requests, error, "BACKEND")
        return
    for request, response, size in zip(requests, responses, sizes, strict=True):
        sent = _deliver(model, request, response)
        _record_outcome(stats, request, size, start, end, failed=sent.error is not None)


def _deliver(
    model: ScheduledModel, request: InferenceRequest, response: InferenceResponse
) -> InferenceResponse:
    """Send a backend's response: only the requested outputs (all the config declares
    when none is named), classified where asked, stored in the cache; return what was
    sent."""
    response.model_name = model.name
    response.model_version = model.version
    response.id = response.id or request.id
    wanted = request.requested_output_names
    allowed = model.output_names if wanted is None else set(wanted)  # as Triton
    if response.outputs.keys() - allowed:
        response.outputs = {n: a for n, a in response.outputs.items() if n in allowed}
    if response.error is None and request.outputs:
        try:
            classify_outputs(request, response, model.config, model.model_dir)
        except DespinaError as exc:
            response = InferenceResponse(model.name, model.version, response.id, error=exc)
    if model.cache is not None and request.cache_key is not None and response.error is None:
        model.cache.store(request.cache_key, response.outputs, response.parameters)
    if request.stream is not None:
        request.stream.send(response, final=True)
    return response


def _record_outcome(
    stats: ModelStats, request: InferenceRequest, size: int, start: int, end: int, failed: bool
) -> None:
    """One request's statistics; ``size`` is its batch size."""
    total = end - request.received_ns
    if failed:
        stats.record_failure(total, "BACKEND")
    else:
        stats.record_success(
            total, start - request.received_ns, size, compute_durations(request, start, end)
        )


def _fail_all(
    model: ScheduledModel,
    requests: Sequence[InferenceRequest],
    error: DespinaError,
    reason: str,
) -> None:
    now = time.monotonic_ns()
    for request in requests:
        model.stats.record_failure(now - request.received_ns, reason)
        if request.stream is not None:
            request.stream.send(
                InferenceResponse(model.name, model.version, request.id, error=error), final=True
            )


def reject(model: ScheduledModel, request: InferenceRequest, error: DespinaError) -> None:
    """Answer a request the scheduler will not run (cancelled, timed out, shutdown)."""
    reason = "CANCELED" if request.cancelled else "REJECTED"
    _fail_all(model, [request], error, reason)


def stopping_error(model: ScheduledModel) -> Unavailable:
    """The answer to an accepted request the stopping server will not run (still queued
    when ``--exit-timeout-secs`` ran out, or at an unload)."""
    return Unavailable(f"{STOPPING}, request for model '{model.name}' was not executed")
