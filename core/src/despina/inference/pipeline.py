"""Every inference request's way through the server, around what its scheduler decides.

:func:`admit` takes a request in and hands it to its model's scheduler. The scheduler only
decides which requests run together, when, and on which instance; it answers each request
it accepted through this module and nothing else: :func:`execute_on` / :func:`run_batch`
(:func:`run_batch_now`) run a batch on an instance and answer every request of it,
:func:`reject` answers one it will not run, a scheduler that answers without a backend
execution (the ensemble) uses :func:`respond`, :func:`conclude` and :func:`fail`, and one
whose request another serving process ran (a forwarded sequence's) :func:`relay`. So every
scheduler, third-party ones included, gets the same validation, response cache,
classification, statistics and trace, and each request gets exactly one final response.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

from despina.errors import Cancelled, DespinaError, Internal, Unsupported
from despina.inference.classification import classify_outputs
from despina.inference.request import InferenceRequest, InferenceResponse, ResponseStream
from despina.inference.response_cache import CachedResponse, cache_key
from despina.inference.stats import FirstResponseStream, ModelStats, compute_durations
from despina.inference.validation import validate_request
from despina.memory.device_arrays import holds_device_arrays, host_inputs
from despina.models.call_placement import NeedsThread
from despina.scheduling.base import ScheduledModel, Scheduler, batch_size_of, stopping_error

if TYPE_CHECKING:
    from despina.memory.shared_memory import SharedMemoryRegistry
    from despina.models.versions import ModelVersion
    from despina.plugin.backend import ModelInstance

log = logging.getLogger("despina.scheduling")

#: Requests waiting for a network cache's lookup (a task is only weakly held by its loop).
_lookups: set[asyncio.Task[None]] = set()


def admit(
    model: ModelVersion,
    request: InferenceRequest,
    shared_memory: SharedMemoryRegistry,
    streaming: bool,
) -> ResponseStream:
    """Take ``request`` in on a loaded ``model`` and give it to the model's scheduler;
    return the stream its responses come on.

    What the scheduler's ``submit`` then receives: a request valid for the model's
    signature; host arrays for inputs unless every instance takes device inputs;
    ``device_outputs`` set where every output it binds is a CUDA region; the regions its
    outputs are bound to held (its frontend calls ``release_regions``); ``stream`` set
    (recording time to first response where latency is observed); its trace accepted,
    and ended by the final response. A request the response cache answers is answered
    here (a cache hit in statistics) and never reaches the scheduler; a miss carries its
    ``cache_key`` for :func:`deliver` to store. Where the cache answers over the network,
    the request waits for it in a task and ``submit``'s error, if any, is its response.

    Raises DespinaError synchronously: Unsupported for a decoupled model unless
    ``streaming``, InvalidArgument for an invalid request, what ``submit`` raises.
    """
    scheduler = model.scheduler
    assert model.signature is not None and scheduler is not None
    if not streaming and model.decoupled:
        raise Unsupported(
            f"Model '{model.name}' is configured with decoupled transaction policy; "
            "use the streaming API"
        )
    validate_request(request, model.signature)
    if holds_device_arrays(request.inputs) and not model.device_inputs:
        host_inputs(request.inputs)
    if request.outputs:
        if not request.device_outputs:
            request.device_outputs = shared_memory.all_cuda(request.outputs)
        hold = shared_memory.hold(request.outputs)
        if hold is not None:
            request.region_release = hold.release
    latency = model.stats.latency
    stream = (
        ResponseStream()
        if latency is None
        else FirstResponseStream(latency.first_response, request.received_ns)
    )
    request.stream = stream
    trace = request.trace
    if trace is not None:
        trace.accepted(model.name, model.version, request)
        stream.trace = trace
    scheduled = scheduler.model
    if scheduled.cache is None:
        scheduler.submit(request)
        return stream
    start = time.monotonic_ns()
    key = cache_key(request, scheduled.version)
    found = scheduled.cache.lookup(key)
    if found is None or isinstance(found, CachedResponse):
        if not _answer_from_cache(scheduled, request, key, found, start):
            scheduler.submit(request)
    else:
        task = asyncio.get_running_loop().create_task(
            _look_up_then_submit(scheduler, request, key, found, start)
        )
        _lookups.add(task)
        task.add_done_callback(_lookups.discard)
    return stream


async def _look_up_then_submit(
    scheduler: Scheduler,
    request: InferenceRequest,
    key: bytes,
    lookup: Awaitable[CachedResponse | None],
    start: int,
) -> None:
    """Wait for a network cache's answer; on a miss submit, answering ``submit``'s error."""
    try:
        found = await lookup
    except Exception:
        log.exception("response cache '%s' failed a lookup", scheduler.model.name)
        found = None
    if _answer_from_cache(scheduler.model, request, key, found, start):
        return
    try:
        scheduler.submit(request)
    except DespinaError as exc:
        reject(scheduler.model, request, exc)


def _answer_from_cache(
    model: ScheduledModel,
    request: InferenceRequest,
    key: bytes,
    hit: CachedResponse | None,
    start: int,
) -> bool:
    """Answer a request from the cache's ``hit`` (True), or mark it to be stored (False),
    counting the lookup that began at ``start``."""
    elapsed = time.monotonic_ns() - start
    if hit is None:
        request.cache_key = key
        model.stats.cache_miss.add(elapsed)
        return False
    model.stats.cache_hit.add(elapsed)
    model.stats.record_success(time.monotonic_ns() - request.received_ns, 0)
    response = InferenceResponse(
        model.name, model.version, request.id, dict(hit.outputs), dict(hit.parameters)
    )
    request.respond(response)
    return True


async def execute_on(
    model: ScheduledModel,
    index: int,
    requests: Sequence[InferenceRequest],
    instance: ModelInstance | None = None,
    *,
    padding: int = 0,
) -> None:
    """:func:`run_batch` on ``model.instances[index]`` (or on ``instance``, a wrapper of
    it), holding the instance's rate-limiter resources for the execution when it has any.
    Never raises."""
    target = instance if instance is not None else model.instances[index]
    needs = model.needs[index] if model.limiter is not None and index < len(model.needs) else None
    if model.limiter is None or needs is None:
        await run_batch(model, target, requests, padding=padding)
        return
    async with model.limiter.slot(needs):
        await run_batch(model, target, requests, padding=padding)


async def run_batch(
    model: ScheduledModel,
    instance: ModelInstance,
    requests: Sequence[InferenceRequest],
    *,
    padding: int = 0,
) -> None:
    """Execute ``requests`` on ``instance`` and answer each one; never raises.

    Statistics as Triton's: one execution of the summed batch size (also when it fails),
    ``padding`` included (requests the scheduler adds that nobody waits for, such as a
    sequence batch's not-ready slots: Triton's backends count them); per request success
    (its inferences, queue and compute times) or failure. Backend errors fail the whole
    batch with the error's text; an execution cancelled (a stopping server that stopped
    waiting for it) answers it with the stopping error.
    """
    start = time.monotonic_ns()
    try:
        responses = await instance.execute(requests)
    except asyncio.CancelledError:
        fail(model, requests, stopping_error(model), "OTHER")
        raise
    except Exception as exc:  # noqa: BLE001 - any backend failure answers the batch
        _answer_failed(model, requests, exc, start, padding)
        return
    _answer(model, requests, responses, start, padding)


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
        _answer_failed(model, requests, exc, start, 0)
        return True
    _answer(model, requests, responses, start, 0)
    return True


def _answer_failed(
    model: ScheduledModel,
    requests: Sequence[InferenceRequest],
    exc: Exception,
    start: int,
    padding: int,
) -> None:
    batch = sum(batch_size_of(r, model.config) for r in requests) + padding
    model.stats.record_execution(batch, 0, time.monotonic_ns() - start, 0)
    if not isinstance(exc, DespinaError):
        log.error("model '%s' failed to execute", model.name, exc_info=exc)
        exc = Internal(f"{type(exc).__name__}: {exc}")
    fail(model, requests, exc, "BACKEND")


def _answer(
    model: ScheduledModel,
    requests: Sequence[InferenceRequest],
    responses: Sequence[InferenceResponse] | None,
    start: int,
    padding: int,
) -> None:
    """Deliver what an execution that began at ``start`` returned, with its statistics
    (``padding`` added to the execution's batch size); None: a decoupled backend sent
    every response itself (``request.respond``)."""
    end = time.monotonic_ns()
    stats = model.stats
    sizes = [batch_size_of(r, model.config) for r in requests]
    stats.record_execution(sum(sizes) + padding, *compute_durations(requests[0], start, end))
    for request in requests:  # before delivery: the final response may complete a trace
        if request.trace is not None:
            request.trace.computed(start, end, compute_durations(request, start, end))
    if responses is None:
        for request, size in zip(requests, sizes, strict=True):
            _record_success(stats, request, size, start, end)
        return
    if len(responses) != len(requests):
        error = Internal(
            f"model '{model.name}' returned {len(responses)} responses for {len(requests)} requests"
        )
        fail(model, requests, error, "BACKEND")
        return
    for request, response, size in zip(requests, responses, sizes, strict=True):
        deliver(model, request, response, size, start, end)


def deliver(
    model: ScheduledModel,
    request: InferenceRequest,
    response: InferenceResponse,
    size: int,
    start: int,
    end: int,
) -> None:
    """Send ``response`` as the request's final one and count it: named after the model;
    only the requested outputs (every one the config declares when none is named),
    classified where an output asks (``classification``); stored in the response cache
    on a miss; per-model success with the request's batch ``size``, its queue time up to
    ``start`` and compute time from ``start`` to ``end`` (monotonic ns), or a BACKEND
    failure when the response (or its classification) is an error."""
    response.model_name = model.name
    response.model_version = model.version
    response.id = response.id or request.id
    wanted = request.requested_output_names
    allowed = model.output_names if wanted is None else set(wanted)  # as Triton
    if response.outputs.keys() - allowed:
        response.outputs = {n: a for n, a in response.outputs.items() if n in allowed}
    if response.error is None and request.outputs:
        try:
            classify_outputs(request, response, model.config.max_batch_size > 0, model.labels)
        except DespinaError as exc:
            response = InferenceResponse(model.name, model.version, response.id, error=exc)
    if response.error is None:
        if model.cache is not None and request.cache_key is not None:
            began = time.monotonic_ns()  # Triton counts insertion in the miss's duration
            model.cache.insert(request.cache_key, response.outputs, response.parameters)
            model.stats.cache_miss.add(time.monotonic_ns() - began, count=0)
        if request.stream is not None:
            request.stream.send(response, final=True)
        _record_success(model.stats, request, size, start, end)
        return
    if request.stream is not None:
        request.stream.send(response, final=True)
    model.stats.record_failure(end - request.received_ns, "BACKEND")


def _record_success(
    stats: ModelStats, request: InferenceRequest, size: int, start: int, end: int
) -> None:
    """One executed request's success; ``size`` is its batch size."""
    stats.record_success(
        end - request.received_ns,
        start - request.received_ns,
        size,
        compute_durations(request, start, end),
    )


def respond(request: InferenceRequest, response: InferenceResponse) -> None:
    """Send a non-final response of a decoupled request (an ensemble's, per complete set
    of outputs); :func:`conclude` sends its final flag."""
    if request.stream is not None:
        request.stream.send(response, final=False)


def relay(request: InferenceRequest, response: InferenceResponse | None, final: bool) -> None:
    """Send a response another serving process answered ``request`` with (a forwarded
    sequence's, :mod:`despina.scheduling.routed_sequences`): as it came, counted there."""
    if request.stream is not None:
        request.stream.send(response, final)


def conclude(
    model: ScheduledModel, request: InferenceRequest, response: InferenceResponse | None
) -> None:
    """Answer a request its scheduler ran without a backend execution (an ensemble), as
    Triton counts an ensemble request: one execution of its batch size whose compute
    spans from its arrival to now, and :func:`deliver` of ``response``; None (a decoupled
    request whose responses went through :func:`respond`): the success and the final
    flag alone."""
    end = time.monotonic_ns()
    start = request.received_ns
    size = batch_size_of(request, model.config)
    model.stats.record_execution(size, 0, end - start, 0)
    if response is not None:
        deliver(model, request, response, size, start, end)
        return
    _record_success(model.stats, request, size, start, end)
    if request.stream is not None:
        request.stream.send(None, final=True)


def fail(
    model: ScheduledModel,
    requests: Sequence[InferenceRequest],
    error: DespinaError,
    reason: str,
) -> None:
    """Answer each request with ``error`` (final) and count a failure for ``reason``, one
    of :data:`~despina.inference.stats.FAILURE_REASONS`."""
    now = time.monotonic_ns()
    for request in requests:
        model.stats.record_failure(now - request.received_ns, reason)
        if request.stream is not None:
            request.stream.send(
                InferenceResponse(model.name, model.version, request.id, error=error), final=True
            )


def reject(model: ScheduledModel, request: InferenceRequest, error: DespinaError) -> None:
    """Answer a request the scheduler will not run (cancelled, timed out, shutdown); it
    counts as CANCELED when it or its error is a cancellation (as the rest of a sequence
    whose request was cancelled), as Triton counts it, else as REJECTED."""
    reason = "CANCELED" if request.cancelled or isinstance(error, Cancelled) else "REJECTED"
    fail(model, [request], error, reason)
