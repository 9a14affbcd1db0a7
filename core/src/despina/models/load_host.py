"""What loading a model reads of the server: :class:`LoadHost`.

Declared apart so that the config pipeline, the backend resolution, the loader and the
model manager need not import the server (:class:`despina.serving.server.Server` is one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from despina.inference.response_cache import ResponseCache
    from despina.memory.gpus import GpuInventory
    from despina.plugin.backend import BackendHost
    from despina.plugin.registry import Registry
    from despina.repository.folders import ModelRepository
    from despina.scheduling.base import SchedulerHost
    from despina.scheduling.rate_limiter import RateLimiter
    from despina.scheduling.routed_sequences import SequenceForwarding
    from despina.serving.settings import CoreSettings


class _Repositories(Protocol):
    @property
    def repository(self) -> ModelRepository: ...


class _Failure(Protocol):
    def describe(self) -> str: ...


class _PluginFailures(Protocol):
    def failure_for(self, name: str) -> _Failure | None: ...


class LoadHost(Protocol):
    """The server as a model load sees it."""

    registry: Registry
    settings: CoreSettings
    #: The GPUs this process may place instances on.
    gpus: GpuInventory
    backend_host: BackendHost
    scheduler_host: SchedulerHost
    response_cache: ResponseCache | None
    rate_limiter: RateLimiter | None

    @property
    def plugins(self) -> _PluginFailures: ...

    @property
    def sequence_router(self) -> SequenceForwarding | None:
        """Under ``--serving-processes`` above 1: where each sequence runs."""
        ...

    @property
    def models(self) -> _Repositories: ...
