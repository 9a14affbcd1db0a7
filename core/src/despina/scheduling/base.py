"""The scheduler contract: what a scheduler is given (:class:`ScheduledModel`) and must do
(:class:`Scheduler`).

A scheduler receives admitted requests through :meth:`Scheduler.submit`, decides which
requests run together on which instance, and answers them only through
:mod:`despina.inference.pipeline` (``execute_on`` / ``run_batch`` to run a batch, ``reject`` for a
request it will not run), which delivers every response with the response cache,
classification, statistics and trace; a scheduler never sends on ``request.stream`` nor
records statistics itself.
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from despina.errors import Unavailable
from despina.inference.classification import read_labels
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.inference.response_cache import ResponseCache
from despina.inference.stats import ModelStats
from despina.plugin.backend import ModelInstance
from despina.repository.config import ModelConfig
from despina.scheduling.rate_limiter import Needs, RateLimiter

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator

#: How often :meth:`Scheduler.drain` looks whether the queue emptied.
DRAIN_POLL_S = 0.005
#: The answer to a client's request that reaches a stopping server (UNAVAILABLE).
STOPPING = "Server is stopping"
#: Triton's answer (UNAVAILABLE) to new work for a model whose scheduler stopped.
NO_NEW_REQUESTS = f"{STOPPING}, scheduler for model has stopped accepting new inference requests"
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

    def composing_models(self, name: str) -> list[str]:
        """The models ensemble ``name`` composes, once its config was read (loading,
        loaded or failed); [] for any other model."""
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

    def output_labels(self, name: str, version: str, output: str) -> list[str]:
        """The labels the READY version serving ``name`` classifies ``output`` with
        (:meth:`ScheduledModel.labels`); NotFound / Unavailable when none is ready."""
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
    #: The server's response cache when this model enables it (``--cache-config``).
    cache: ResponseCache | None = None
    #: The server's rate limiter (``--rate-limit=execution_count``), with each instance's
    #: needs in ``instances`` order (None: the instance is not rate limited).
    limiter: RateLimiter | None = None
    needs: list[Needs | None] = field(default_factory=list)
    #: ``--max-pending-requests``: the queue bound where the config sets no
    #: ``max_queue_size`` (0: unbounded).
    max_pending: int = DEFAULT_MAX_PENDING_REQUESTS
    #: Instances (by index) that a scheduler this one took over from is still running an
    #: execution on (an instance update, see :meth:`Scheduler.hand_over`): each future is
    #: done once it no longer is; until then nothing else runs on that instance.
    busy_until: dict[int, asyncio.Future[None]] = field(default_factory=dict)
    #: Labels of outputs that have none of their own: an ensemble's output takes those of
    #: the step's output written to it, as Triton (filled by the ensemble scheduler).
    inherited_labels: dict[str, list[str]] = field(default_factory=dict)
    #: The outputs the config declares: what a request that names none receives.
    output_names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.output_names = frozenset(output.name for output in self.config.output)

    def labels(self, output: str) -> list[str]:
        """The labels classification gives ``output``: those of its ``label_filename``,
        else inherited ones, else none."""
        label_file = next((o.label_filename for o in self.config.output if o.name == output), "")
        return read_labels(self.model_dir, label_file) or self.inherited_labels.get(output, [])

    def release_needs(self) -> None:
        """Tell the rate limiter these instances are gone (idempotent)."""
        if self.limiter is not None:
            for needs in self.needs:
                if needs is not None:
                    self.limiter.release(needs)


class Scheduler(abc.ABC):
    """Queues requests of one model version and runs them on its instances.

    Contract: every request :meth:`submit` accepted is answered exactly once, through
    :mod:`despina.inference.pipeline` only (``execute_on`` / ``run_batch`` / ``run_batch_now``,
    ``reject``; a scheduler without backend executions: ``respond``, ``conclude``,
    ``fail``), so it gets the response cache, classification, statistics and trace.
    """

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
        """Queue a request :func:`despina.inference.pipeline.admit` admitted (valid, ``stream``
        set, not answered by the cache); never blocks.

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
    def in_flight(self) -> int:
        """The model's in-flight inferences of the shutdown log: the requests queued and
        the executions running (a sequence scheduler: the open sequences; an ensemble:
        the requests running). Triton counts only those queued in its scheduler; a
        backend instance here may take several requests before it runs them."""
        return self.pending + self.busy

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
        """The server is stopping: raise :meth:`refusal` unless a client's ``request``
        continues work accepted before (default: it never does)."""
        raise self.refusal()

    def refusal(self) -> Unavailable:
        """The answer to a client's new request once the server is stopping: Triton's
        scheduler text."""
        return Unavailable(NO_NEW_REQUESTS)

    def can_hand_over(self, successor: Scheduler) -> bool:
        """Whether :meth:`hand_over` to ``successor`` is possible now (the default: when
        :attr:`settled`, nothing accepted left to run); False: the model is reloaded in
        full instead."""
        return self.settled

    async def hand_over(self, successor: Scheduler) -> dict[int, asyncio.Future[None]]:
        """Stop, giving what this scheduler accepted to ``successor``, which runs on some
        of the same instances (an instance update: only the config's ``instance_group``
        changed, the model keeps serving without a reload). Called right after
        :meth:`can_hand_over` said True, once new requests go to ``successor``, which
        is not started yet (it queues what it is given).

        Returns, per instance index of this scheduler, a future done once nothing of
        this scheduler runs on that instance any more (an index not in it is free now).
        The default stops this (settled) scheduler.
        """
        await self.stop()
        return {}

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


def stopping_error(model: ScheduledModel) -> Unavailable:
    """The answer to an accepted request the stopping server will not run (still queued
    when ``--exit-timeout-secs`` ran out, or at an unload)."""
    return Unavailable(f"{STOPPING}, request for model '{model.name}' was not executed")
