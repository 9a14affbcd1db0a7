"""Triton's ensemble scheduler (``platform: "ensemble"``): a DAG of models run as one
request.

Each step is an ordinary request to its composing model, submitted through the server
(so it is validated, scheduled, batched and counted like any other request). A step
starts as soon as every tensor it reads exists; a step's output arrays become the next
steps' inputs as they are (no copies). The first failing step fails the ensemble request
with Triton's ``in ensemble '<name>', `` prefix before the step's own error (whose
text names the composing model where Triton's does). ``max_inflight_requests``
bounds each step's in-flight requests over all requests of the ensemble. A cancelled
ensemble request fails with Cancelled and cancels its step requests still queued.

Decoupled steps: every response of a decoupled step starts its own run of the steps
downstream of it (a fork of the tensors seen so far), and the ensemble, decoupled too,
answers once per fork that produced every output. The ensemble is ready only while
every composing model has a ready version; in explicit control mode, loading it loads
the composing models that are not loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from despina.errors import ConfigError, DespinaError, InvalidArgument, Unavailable
from despina.inference.request import InferenceRequest
from despina.repository.config import ENSEMBLE_PLATFORM, ModelConfig
from despina.repository.validation import decoupled_cache_error
from despina.scheduling.base import ScheduledModel, Scheduler, stopping_error
from despina.scheduling.ensemble_graph import build_graph, check_composing
from despina.scheduling.ensemble_run import EnsembleRun
from despina.scheduling.queue import QUEUE_FULL

log = logging.getLogger("despina.scheduling")


class EnsembleScheduler(Scheduler):
    """The scheduler of ``platform: "ensemble"`` models (no backend, no instances)."""

    name = "ensemble"

    def refusal(self) -> Unavailable:
        """As Triton, where the first step's scheduler refuses the request: the
        ensemble's prefix and the scheduler's text."""
        return Unavailable(f"in ensemble '{self.model.name}', {super().refusal()}")

    @classmethod
    def handles(cls, config: ModelConfig) -> bool:
        return bool(config.platform == ENSEMBLE_PLATFORM)

    def __init__(self, model: ScheduledModel) -> None:
        super().__init__(model)
        if model.host is None:
            raise ConfigError(f"ensemble '{model.name}' needs a server to run its steps")
        self._host = model.host
        self.graph = build_graph(model.config)
        self._running: set[asyncio.Task[None]] = set()
        self._stopping = False
        limit = int(model.config.ensemble_scheduling.max_inflight_requests)
        #: ``max_inflight_requests``: in-flight requests per step, over all ensemble requests.
        self._limits = [asyncio.Semaphore(limit) for _ in self.graph.steps] if limit else []

    async def start(self) -> None:
        """Wait for the composing models to settle, then check the steps against them.

        Raises ConfigError when a composing model is unknown, failed, or does not fit, and
        InvalidArgument (Triton's text) when the ensemble depends on itself, which is
        looked for before waiting and again once the composing models settled (an ensemble
        of the cycle loading meanwhile has its config read by then).
        """
        host = self._host
        self._check_circular()
        missing = [m for m in self.graph.models if m not in host.known_models()]
        if missing:
            raise InvalidArgument(
                f"ensemble {self.model.name} contains models that are not available or "
                f"ambiguous: {', '.join(missing)}"
            )
        for name in self.graph.models:
            await host.settle(name)
        self._check_circular()
        configs: dict[str, ModelConfig] = {}
        for step in self.graph.steps:
            configs[step.model_name] = self._composing_config(step.model_name, step.model_version)
        check_composing(self.graph, self.model.config, configs)
        self._inherit_labels()
        policy = self.model.config.model_transaction_policy
        policy.SetInParent()  # as Triton: always stated, false included
        policy.decoupled = bool(self.graph.decoupled)
        if policy.decoupled and self.model.config.response_cache.enable:
            raise decoupled_cache_error(self.model.name)

    def _inherit_labels(self) -> None:
        """Give each output whose config names no label file the labels of the step's
        output written to it (Triton's label provider of an ensemble)."""
        for output in self.model.config.output:
            if output.label_filename:
                continue
            for step in self.graph.steps:
                for model_output, tensor in step.outputs.items():
                    if tensor == output.name:
                        self.model.inherited_labels[output.name] = self._host.output_labels(
                            step.model_name, step.model_version, model_output
                        )

    def _check_circular(self) -> None:
        """InvalidArgument with Triton's text when a chain of composing models leads back
        to this ensemble: ``<this> -> ... -> <the model using it> -> <this>``."""
        start = self.model.name
        seen: set[str] = set()

        def user_of_start(current: str, upstreams: list[str]) -> str | None:
            for upstream in upstreams:
                if upstream == start:
                    return current
                if upstream not in seen:
                    seen.add(upstream)
                    found = user_of_start(upstream, self._host.composing_models(upstream))
                    if found is not None:
                        return found
            return None

        user = user_of_start(start, self.graph.models)
        if user is not None:
            raise InvalidArgument(
                f"circular dependency between ensembles: {start} -> ... -> {user} -> {start}"
            )

    def _composing_config(self, name: str, version: str) -> ModelConfig:
        """The config of the composing model's version; Triton's texts when it has none."""
        host = self._host
        try:
            return host.ready_config(name, version)
        except DespinaError:
            pass
        prefix = f"ensemble '{self.model.name}' depends on '{name}'"
        if version and host.has_ready_version(name):
            raise ConfigError(f"{prefix} whose required version {version} is not loaded.")
        failure = host.load_failure(name)
        reason = f" Model '{name}' loading failed with error: {failure}" if failure else ""
        raise ConfigError(f"{prefix} which has no loaded version.{reason}")

    @property
    def ready(self) -> bool:
        """True while every composing model has a ready version."""
        for step in self.graph.steps:
            try:
                self._host.ready_config(step.model_name, step.model_version)
            except DespinaError:
                return False
        return True

    def submit(self, request: InferenceRequest) -> None:
        """Start the request's run; refused (UNAVAILABLE) while stopping or while
        ``--max-pending-requests`` ensemble requests are in flight."""
        if self._stopping:
            raise stopping_error(self.model)
        limit = self.model.max_pending
        if limit and len(self._running) >= limit:
            raise Unavailable(QUEUE_FULL)
        run = EnsembleRun(self.model, self.graph, self._host, request, self._limits)
        task = asyncio.create_task(run.run())
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    @property
    def busy(self) -> int:
        return len(self._running)

    @property
    def in_flight(self) -> int:
        return self.busy

    async def stop(self) -> None:
        """Refuse new requests and let running ones finish (their steps' models answer
        or fail them)."""
        self._stopping = True
        for task in list(self._running):
            with contextlib.suppress(asyncio.CancelledError):
                await task
