"""Ports: what each kind of plugin may use of the server, as typed Protocols.

The plugin kinds that are not backends or schedulers are Protocols here too: a
:class:`Frontend`, a :class:`MetricsExporter`, a :class:`RepositorySource`, a
:class:`RepositoryAgent` and a :class:`ResponseCache` (what the server calls on them).

A frontend receives a :class:`FrontendHost`, a metrics exporter a :class:`MetricsHost`, a
backend (through its :class:`~despina.plugin.backend.ModelContext`) a :class:`BackendHost`, a
scheduler (through its :class:`~despina.scheduling.base.ScheduledModel`) a
:class:`SchedulerHost`. Plugins program against these and never against
:class:`~despina.serving.server.Server`, which stays free to change. The implementations live in
:mod:`despina.serving.dataplane`; mypy checks each where the server assigns it. ``BackendHost``
and ``SchedulerHost`` are defined beside the contracts they serve (:mod:`despina.plugin.backend`,
:mod:`despina.scheduling.base`), so those modules never import this one; so is
``ResponseCache`` (:mod:`despina.inference.response_cache`, which the pipeline calls).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from despina.inference.response_cache import ResponseCache
from despina.plugin.backend import BackendHost
from despina.scheduling.base import SchedulerHost

__all__ = [
    "BackendHost",
    "Frontend",
    "FrontendHost",
    "HoldsConnections",
    "MetricsExporter",
    "MetricsHost",
    "RepositoryAgent",
    "RepositorySource",
    "ResponseCache",
    "SchedulerHost",
    "ServingProcessesPart",
]

if TYPE_CHECKING:
    from despina.inference.request import InferenceRequest, InferenceResponse, ResponseStream
    from despina.inference.request_bodies import BodyBudget
    from despina.memory.gpus import GpuInventory
    from despina.memory.shared_memory import SharedMemoryRegistry
    from despina.models.versions import ModelVersion
    from despina.repository.config import mc
    from despina.serving.custom_metrics import CustomMetrics
    from despina.serving.settings import Stash
    from despina.tracing.tracer import Tracer


class FrontendHost(Protocol):
    """What a protocol frontend serves. Every method raises
    :class:`~despina.errors.DespinaError` subclasses, which carry their HTTP status and
    gRPC code; texts are Triton's."""

    #: Registered system shared-memory regions (decoders read inputs from, and encoders
    #: write outputs into, them).
    shared_memory: SharedMemoryRegistry
    #: The server's typed settings: the frontend reads its options under its own key.
    stash: Stash
    #: Request tracing: when ``tracer.active``, a frontend asks ``tracer.sample(model,
    #: traceparent)`` for a request's trace, records its protocol timestamps on it and
    #: releases it once the response is written.
    tracer: Tracer
    #: The bytes request bodies in flight may hold, server-wide: a frontend charges a
    #: body it buffers or inflates (:meth:`~despina.inference.request_bodies.BodyBudget.charge`).
    request_bodies: BodyBudget

    @property
    def live(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    async def ready_checked(self) -> bool:
        """:attr:`ready`, then (strict readiness) every READY model's instance checks
        (:meth:`~despina.ModelInstance.check_ready`): what the server-ready endpoints
        answer."""
        ...

    def inference_model(
        self, name: str, version: str = "", *, received_ns: int = 0
    ) -> ModelVersion:
        """The version a new request runs on; Unavailable once the server is stopping,
        unless the request was received before: ``received_ns``, ``time.monotonic_ns()``
        when the frontend had read it whole (0: not said)."""
        ...

    def submit(
        self,
        request: InferenceRequest,
        streaming: bool = True,
        model: ModelVersion | None = None,
        *,
        received_ns: int = 0,
    ) -> tuple[ModelVersion, ResponseStream]:
        """Validate and queue a request (``model``: what :meth:`inference_model` returned
        for it, if looked up already; ``received_ns``: as for it); raises synchronously
        for a request that cannot run, and Unsupported for a decoupled model unless
        ``streaming``."""
        ...

    async def infer(
        self, request: InferenceRequest, model: ModelVersion | None = None
    ) -> InferenceResponse:
        """Run a request on a non-decoupled model: its response, or its error raised."""
        ...

    def outcome(self, model: ModelVersion, response: InferenceResponse | None) -> InferenceResponse:
        """The last response of a submitted request, named after the model, or its error."""
        ...

    def infer_stream(self, request: InferenceRequest) -> AsyncGenerator[InferenceResponse, None]:
        """Every response of a request on any model (errors as ``error`` set)."""
        ...

    def model_ready(self, name: str, version: str = "") -> bool: ...

    async def model_ready_checked(self, name: str, version: str = "") -> bool:
        """:meth:`model_ready`, then every instance's own check
        (:meth:`~despina.ModelInstance.check_ready`): what the model-ready endpoints answer."""
        ...

    def server_metadata(self) -> dict[str, Any]: ...

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]: ...

    def model_config(self, name: str, version: str = "") -> mc.ModelConfig: ...

    def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """This process's statistics (Triton's ``model_stats`` entries)."""
        ...

    async def model_statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """What a statistics call answers: :meth:`statistics`, summed over every serving
        process under ``--serving-processes`` (Unavailable when one does not answer)."""
        ...

    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]: ...

    async def load(
        self, name: str, config: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None: ...

    async def unload(self, name: str, unload_dependents: bool = False) -> None: ...

    def register_model_repository(
        self, repository: str, mapping: Mapping[str, str] | None = None
    ) -> None:
        """Serve the model folders of the local folder ``repository`` as well, those
        ``mapping`` names (``{model name: folder name}``) under those names (Triton's
        ``TRITONSERVER_ServerRegisterModelRepository``; explicit control mode only)."""
        ...

    def unregister_model_repository(self, repository: str) -> None:
        """Forget a registered repository; its loaded models stay loaded."""
        ...

    def system_shm_status(self, name: str = "") -> list[dict[str, Any]]: ...

    async def system_shm_register(
        self, name: str, key: str, offset: int, byte_size: int
    ) -> None: ...

    async def system_shm_unregister(self, name: str = "") -> None: ...

    def cuda_shm_status(self, name: str = "") -> list[dict[str, Any]]: ...

    async def cuda_shm_register(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None: ...

    async def cuda_shm_unregister(self, name: str = "") -> None: ...

    async def log_settings(self, changes: Mapping[str, Any] | None = None) -> dict[str, Any]: ...

    async def trace_settings(
        self, model: str = "", changes: Mapping[str, Any] | None = None
    ) -> dict[str, list[str]]: ...

    def plugin_contributions(self, hook_name: str, **kwargs: Any) -> list[tuple[Any, str]]:
        """What the plugins' ``hook_name`` implementations return (lists, concatenated),
        each item with its plugin's name and distribution, for a frontend's own hooks
        (``despina_http_routes``); a hook that raises is reported and gives none."""
        ...


class MetricsHost(Protocol):
    """What a metrics exporter reads at scrape time (no per-request work)."""

    #: The server's typed settings: the exporter reads its options under its own key.
    stash: Stash
    #: Custom metric families models created.
    custom_metrics: CustomMetrics
    #: The GPUs the server may use (their metrics are Triton's ``nv_gpu_*``).
    gpus: GpuInventory

    def ready_versions(self) -> list[ModelVersion]:
        """Every READY model version, by name then version, with its statistics."""
        ...


class Frontend(Protocol):
    """A protocol frontend (``despina_frontends``), made as ``Frontend(host)`` with the
    server's :class:`FrontendHost` and started after the models load.

    Stopping, as Triton: a frontend that is also :class:`HoldsConnections` closes its port
    first and the server waits for its open connections; then the models stop while every
    frontend serves (new inferences are refused by the schedulers) and the server waits
    for ``settled`` with the models' queues (within ``--exit-timeout-secs``); once the
    models are unloaded, ``drain()`` (stop accepting, close the open connections
    gracefully), then ``stop()``."""

    name: ClassVar[str]

    def __init__(self, host: FrontendHost) -> None: ...

    async def start(self) -> None:
        """Listen and serve (a frontend its flags disable starts nothing)."""
        ...

    def drain(self) -> None:
        """Stop accepting; let open connections finish what they read, then close."""
        ...

    @property
    def settled(self) -> bool:
        """False while the frontend holds requests received before the stop that it has
        not answered (perhaps not yet submitted)."""
        ...

    async def stop(self) -> None:
        """Close what is still open and release the frontend's resources."""
        ...


@runtime_checkable
class HoldsConnections(Protocol):
    """A :class:`Frontend` whose clients keep a connection for their next requests
    (HTTP/1.1), stopped as Triton stops its HTTP service: first, before the models stop,
    it refuses new connections and serves the open ones as before; the server waits until
    they are closed, within ``--exit-timeout-secs``."""

    def refuse_connections(self) -> None:
        """Close the port (a connection the kernel completed meanwhile is still served);
        keep serving the open connections."""
        ...

    @property
    def open_connections(self) -> int:
        """The connections open now."""
        ...


class MetricsExporter(Protocol):
    """A metrics exporter (``despina_metrics_exporters``), made as ``Exporter(host)`` with
    the server's :class:`MetricsHost`; it reads statistics at scrape time."""

    name: ClassVar[str]

    def __init__(self, host: MetricsHost) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class ServingProcessesPart(Protocol):
    """A plugin's share of ``--serving-processes N`` (``despina_serving_processes``): the
    flags serving process ``index`` gets after the command line's (later flags win), and a
    service the supervising process runs while they serve (e.g. one metrics port)."""

    def child_flags(self, index: int) -> list[str]: ...

    async def start(self) -> None:
        """Start the supervisor's service before any serving process starts; OSError or
        ValueError refuse the start (the message is shown to the user)."""
        ...

    async def stop(self) -> None: ...


class RepositorySource(Protocol):
    """Turns a repository URL of one of its ``schemes`` into a local folder
    (``despina_repository_sources``): made as ``Source(url, stash)``, then
    :meth:`localize` at start-up and before every poll (it re-syncs the copy)."""

    schemes: ClassVar[tuple[str, ...]]

    def __init__(self, url: str, stash: Stash) -> None: ...

    async def localize(self) -> Path: ...


class RepositoryAgent(Protocol):
    """Runs before a model that names it in ``model_repository_agents`` loads
    (``despina_repository_agents``): made as ``Agent(params)``; :meth:`prepare` may check
    or rewrite files and returns the folder to load from; raising fails the load."""

    name: ClassVar[str]

    def __init__(self, parameters: dict[str, str]) -> None: ...

    async def prepare(self, model_dir: Path) -> Path: ...
