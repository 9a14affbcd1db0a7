"""The in-process API: a :class:`Server` owns its plugins, models and frontends.

``Server(settings).infer(request)`` works without any frontend, like Triton's in-process
API, and several servers can live in one process (each has its own plugin manager).
Frontends call :meth:`Server.submit` / :meth:`Server.infer` and never touch backends.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import replace
from typing import Any

from despina.errors import DespinaError, Internal, InvalidArgument, Unavailable
from despina.inference.pipeline import admit
from despina.inference.request import InferenceRequest, InferenceResponse, ResponseStream
from despina.inference.request_bodies import BodyBudget
from despina.inference.response_cache import ResponseCache, parse_cache_config
from despina.memory.gpus import GpuInventory, discover
from despina.memory.heap import release_free_heap
from despina.memory.shared_memory import SharedMemoryRegistry
from despina.models.manager import ModelManager
from despina.models.versions import ModelVersion
from despina.plugin.manager import create_plugins
from despina.plugin.ports import (
    BackendHost,
    Frontend,
    FrontendHost,
    HoldsConnections,
    MetricsExporter,
    MetricsHost,
    SchedulerHost,
)
from despina.plugin.registry import Registry
from despina.repository.folders import ModelRepository
from despina.repository.poller import LocalChanges, ModelChanges, RepositoryPoller
from despina.scheduling.base import STOPPING
from despina.scheduling.rate_limiter import RateLimiter, parse_resource_flags
from despina.serving.custom_metrics import CustomMetrics
from despina.serving.dataplane import (
    BackendServices,
    DataPlane,
    SchedulerServices,
    instances_ready,
)
from despina.serving.exit_timeout import ExitTimeout
from despina.serving.flags import build_serve_parser, parse_settings, plugin_modules
from despina.serving.joint_loads import JointChanges, JointLoads
from despina.serving.peers import Peers
from despina.serving.runtime_settings import LogSettings, TraceSettings
from despina.serving.sequence_routing import SequenceRouter
from despina.serving.serving_processes import per_process_file
from despina.serving.settings import CORE, CoreSettings, Stash
from despina.tracing.config import TraceConfig
from despina.tracing.tracer import Tracer
from despina.transport.listen import AddressInUse
from despina.version import __version__

log = logging.getLogger("despina.server")


#: Triton protocol extensions every Despina server implements (both frontends);
#: cuda_shared_memory follows system_shared_memory where cupy sees a CUDA device.
EXTENSIONS = (
    "classification",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
)


class StartupError(Exception):
    """The server cannot start (a model failed with ``--exit-on-error``, bad flags, ...)."""


class Server:
    """One Despina server. Create, ``await start()``, serve, ``await stop()``."""

    def __init__(
        self,
        flags: argparse.Namespace | None = None,
        plugins: Sequence[object] = (),
        load_entrypoints: bool = True,
    ) -> None:
        self.plugins = create_plugins(plugins, load_entrypoints)
        #: The parsed command line, read once: here into :attr:`settings`, and by each
        #: plugin's ``despina_configure`` into its own entry of :attr:`stash`.
        self.flags = flags if flags is not None else parse_settings([], self.plugins)
        self.stash = Stash()
        self.stash[CORE] = CoreSettings.from_namespace(self.flags)
        #: The core's settings (typed, frozen).
        self.settings = self.stash[CORE]
        self.registry = Registry.build(self.plugins)
        #: The GPUs instances may be placed on (a plugin's answer, else NVML / device nodes).
        min_cc = self.settings.min_supported_compute_capability
        self.gpus: GpuInventory = self.plugins.hook.despina_gpu_inventory(
            min_compute_capability=min_cc
        ) or discover(min_compute_capability=min_cc)
        self.id: str = self.settings.id
        self.version: str = __version__
        try:
            repository = ModelRepository(
                list(self.settings.model_repository), self._sources(), self.stash
            )
        except DespinaError as exc:
            raise StartupError(str(exc)) from None
        self.models = ModelManager(self, repository)
        self.shared_memory = SharedMemoryRegistry(self.settings.allow_client_shm)
        #: Bytes request bodies in flight hold, server-wide (``--max-inflight-request-bytes``).
        self.request_bodies = BodyBudget(self.settings.max_inflight_request_bytes)
        self.custom_metrics = CustomMetrics()
        try:
            #: The response cache ``--cache-config`` names (started by :meth:`start`).
            self.response_cache = self._response_cache()
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        self.rate_limiter: RateLimiter | None = None
        if self.settings.rate_limit == "execution_count":
            try:
                limits = parse_resource_flags(self.settings.rate_limit_resource)
            except ValueError as exc:
                raise StartupError(str(exc)) from None
            self.rate_limiter = RateLimiter(limits)
        self.log_settings = LogSettings.from_settings(self.settings)
        try:
            parsed = TraceConfig.parse(self.settings.trace_config)
            trace_config = replace(parsed, file=per_process_file(parsed.file))
            self.tracer = Tracer(trace_config, TraceSettings(trace_config.extension_values()))
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        #: Loads and unloads every serving process makes together (``--serving-processes``).
        self.joint_loads = JointLoads(self.models)
        #: What frontends call: every protocol-independent operation (:mod:`despina.serving.dataplane`).
        plane = DataPlane(self)
        self.dataplane: FrontendHost = plane
        #: What metrics exporters read (the data plane, seen through the MetricsHost port).
        self.metrics_host: MetricsHost = plane
        #: What the other serving processes may ask of this one (``--serving-processes``).
        self.peer_operations = plane.peer_operations()
        #: What backends and their models use (:class:`despina.plugin.ports.BackendHost`).
        self.backend_host: BackendHost = BackendServices(self)
        #: What schedulers use: the other models (:class:`despina.plugin.ports.SchedulerHost`).
        self.scheduler_host: SchedulerHost = SchedulerServices(self)
        self.frontends: list[Frontend] = []
        self.exporters: list[MetricsExporter] = []
        self.live = False
        #: Set as :meth:`stop` begins; ``_stopping`` once the models stop (its step 2).
        self._stop_began = False
        self._stopping = False
        #: ``time.monotonic_ns()`` as :meth:`stop` began: a client's request a frontend
        #: received before it is accepted work (:meth:`_refuses`).
        self._stop_ns = 0
        #: Set by :meth:`shutdown`: not ready any more, still serving (the grace period).
        self.draining = False
        self.poller: RepositoryPoller | None = None
        #: Under ``--serving-processes`` above 1: the other serving processes, which
        #: statistics are summed over and changes fanned out to (set by ``despina serve``).
        self.peers: Peers | None = None
        #: Under ``--serving-processes`` above 1: where each sequence runs (set by
        #: ``despina serve`` before :meth:`start`).
        self.sequence_router: SequenceRouter | None = None

    @classmethod
    def from_args(cls, argv: Sequence[str], plugins: Sequence[object] = ()) -> Server:
        """A server configured from a ``despina serve`` / tritonserver command line: the
        installed plugins, ``plugins``, and the modules its ``--plugin`` flags name."""
        extra = [*plugins, *plugin_modules(argv)]
        return cls(parse_settings(list(argv), create_plugins(extra)), extra)

    def _response_cache(self) -> ResponseCache | None:
        """The installed cache ``--cache-config`` names, made with its options; ValueError
        for flags that name none, or one not installed, or options it refuses."""
        chosen = parse_cache_config(
            self.settings.cache_config, self.settings.response_cache_byte_size
        )
        if chosen is None:
            return None
        name, options = chosen
        cls = self.registry.caches.get(name)
        if cls is None:
            installed = ", ".join(f"'{n}'" for n in sorted(self.registry.caches)) or "none"
            raise ValueError(
                f"--cache-config: unknown cache '{name}'; installed caches: {installed}"
            )
        return cls(options)

    def _sources(self) -> dict[str, type[Any]]:
        """Repository source classes by URL scheme."""
        return {scheme: cls for cls in self.registry.sources.values() for scheme in cls.schemes}

    @property
    def extensions(self) -> list[str]:
        """The extensions server metadata reports: ``sequence`` when a sequence scheduler
        is installed, then :data:`EXTENSIONS`, ``cuda_shared_memory`` among them where CUDA
        regions can be opened."""
        sequence = ["sequence"] if "sequence" in self.registry.schedulers else []
        extensions = [EXTENSIONS[0], *sequence, *EXTENSIONS[1:]]
        if self.shared_memory.cuda_support().available:
            extensions.insert(extensions.index("system_shared_memory") + 1, "cuda_shared_memory")
        return extensions

    @property
    def ready(self) -> bool:
        """Triton's readiness: live, neither draining nor stopping, and (strict) every
        model READY."""
        if not self.live or self._stopping or self.draining:
            return False
        return self.models.all_ready() if self.settings.strict_readiness else True

    async def ready_checked(self) -> bool:
        """:attr:`ready`, then, with strict readiness, every READY version's instance
        checks (:meth:`~despina.ModelInstance.check_ready`, all at once), as Triton's server
        readiness asks each READY model's instances. An instance without a check of its
        own answers at once, so only models that define one cost anything."""
        if not self.ready:
            return False
        if not self.settings.strict_readiness:
            return True
        checks = [instances_ready(version) for version in self.models.ready_versions()]
        return all(await asyncio.gather(*checks))

    async def start(self) -> None:
        """Configure plugins, load the start-up models, start exporters and frontends.

        Raises StartupError when a model fails or a local repository is missing and
        ``--exit-on-error`` is true; a missing repository otherwise leaves the server
        serving, not live (Triton's server that failed to initialize), with no models.
        """
        try:
            self.plugins.hook.despina_configure.call_historic(
                kwargs={"settings": self.flags, "stash": self.stash}
            )
        except ValueError as exc:
            raise StartupError(str(exc)) from None
        log.info("%s", self.gpus.describe())
        log.info("%s", self.shared_memory.cuda_support().describe())
        missing = self.models.repository.missing_roots()
        if missing:  # as Triton: with --exit-on-error=false it serves, neither live nor ready
            reason = f"Internal: failed to stat file {missing[0]}"
            if self.settings.exit_on_error:
                raise StartupError(reason)
            log.error("%s", reason)
        self.live = not missing
        if self.response_cache is not None:
            try:
                await self.response_cache.start()
            except Exception as exc:  # noqa: BLE001 - any cache failure stops the start-up
                raise StartupError(f"{self.response_cache.name} cache: {exc}") from None
        try:
            await self.models.repository.sync()
        except Exception as exc:  # noqa: BLE001 - any source failure stops the start-up
            raise StartupError(f"failed to fetch the model repository: {exc}") from None
        if self.live:  # not when a repository is missing
            await self._load_startup_models()
        for cls in self.registry.exporters.values():
            exporter = cls(self.metrics_host)
            await self._start_or_stop(exporter, "metrics exporter")
            self.exporters.append(exporter)
        for cls in self.registry.frontends.values():
            frontend = cls(self.dataplane)
            await self._start_or_stop(frontend, "frontend")
            self.frontends.append(frontend)
        changes = self._polled_changes()
        if changes is not None:
            interval = float(self.settings.repository_poll_secs)
            self.poller = RepositoryPoller(self.models, interval, changes)
            self.poller.remember_loaded()
            self.poller.start()
        self.plugins.hook.despina_server_started(server=self.dataplane)
        release_free_heap()

    def _polled_changes(self) -> ModelChanges | None:
        """How poll mode applies what it finds, None where this process does not poll: its
        own loads and unloads; under ``--serving-processes`` only serving process 0 polls,
        and its changes are every process's (:class:`JointChanges`)."""
        if self.settings.model_control_mode != "poll" or not self.live:
            return None
        if self.peers is None:
            return LocalChanges(self.models)
        if self.peers.place.index != 0:
            return None
        return JointChanges(self.joint_loads, self.peers)

    async def _load_startup_models(self) -> None:
        """Load the start-up models; StartupError when one fails and ``--exit-on-error``
        is true, or the ``--load-model`` names contradict each other."""
        try:
            await self.models.load_startup()
        except InvalidArgument as exc:
            raise StartupError(str(exc)) from None
        failures = self.models.failures()
        if failures and self.settings.exit_on_error:
            await self.models.unload_all()
            if self.response_cache is not None:
                await self.response_cache.stop()
            lines = "; ".join(f"{name}: {reason}" for name, reason in failures)
            raise StartupError(f"failed to load all models: {lines}")

    async def _start_or_stop(self, component: Frontend | MetricsExporter, what: str) -> None:
        """Start ``component``; when it fails, stop what started before it (models,
        exporters, frontends) and raise: StartupError for a port or a setting refused,
        any other exception as it came (a plugin's bug)."""
        try:
            await component.start()
        except BaseException as exc:
            await self.stop()
            if isinstance(exc, AddressInUse) and exc.service:  # Triton's text, as it is
                raise StartupError(str(exc)) from None
            if isinstance(exc, OSError | DespinaError):
                raise StartupError(f"{what} '{component.name}' failed to start: {exc}") from None
            raise

    async def start_frontend(
        self, name: str, args: Sequence[str] = ()
    ) -> Frontend | MetricsExporter:
        """Start one more frontend or metrics exporter, the installed one called ``name``,
        over this started server: configured by the server's flags with ``args`` (that
        plugin's flags, e.g. ``["--http-port=8005"]``) on top. The caller owns it: ``await
        stop()`` stops it (the server's stop does not). ValueError for an unknown name or
        a flag refused, OSError when its port cannot be bound."""
        cls: type[Frontend] | type[MetricsExporter] | None = self.registry.frontends.get(
            name
        ) or self.registry.exporters.get(name)
        if cls is None:
            raise ValueError(f"no frontend or metrics exporter '{name}' is installed")
        flags = copy.copy(self.flags)
        try:
            build_serve_parser(self.plugins)[0].parse_args(list(args), namespace=flags)
        except SystemExit:  # argparse wrote why to stderr
            raise ValueError(f"flags refused: {' '.join(args)}") from None
        host = DataPlane(self)
        host.stash = Stash()
        host.stash[CORE] = self.settings
        given = {"settings": flags, "stash": host.stash}
        for impl in self.plugins.hook.despina_configure.get_hookimpls():  # a historic hook
            impl.function(**{arg: given[arg] for arg in impl.argnames})
        component = cls(host)
        await component.start()
        return component

    async def stop(self) -> None:
        """Stop as Triton does, within one ``--exit-timeout-secs`` counted down across the
        steps (:class:`~despina.serving.exit_timeout.ExitTimeout`):

        1. frontends that :class:`~despina.plugin.ports.HoldsConnections` (HTTP) close
           their ports and serve their open connections as before until the clients
           close them (Triton's ``Timeout N: Found M HTTP service connections``); the
           others (gRPC) ``drain()`` at once, as Triton 2.58+ closes its gRPC service
           before the models stop: their calls running are answered, a new connection
           is refused;
        2. the models stop: a client's new request is refused (the scheduler's "Server
           is stopping, scheduler for model has stopped accepting new inference
           requests"; a sequence's next request is still taken) on the HTTP connections
           still open; everything accepted (queued, executing, open sequences, the
           ensemble steps and BLS calls they make) runs; what is still queued when the
           time runs out is answered with the stopping error. Unload (executions still
           running finish, for at most another ``--exit-timeout-secs``);
        3. every frontend ``drain()``s (closes its port; its open connections close
           after what they read is answered; a second drain does nothing), then stops."""
        if self._stop_began:
            return
        self._stop_began = self.draining = True
        countdown = ExitTimeout(float(self.settings.exit_timeout_secs))
        if self.poller is not None:
            await self.poller.stop()
        await self._close_connections(countdown)
        self._stopping = True
        self._stop_ns = time.monotonic_ns()
        self.plugins.hook.despina_server_stopping(server=self.dataplane)
        log.info("Waiting for in-flight requests to complete.")
        if not await countdown.wait(self._settled, self._log_in_flight):
            log.warning("exit timeout reached: requests not run are answered 'Server is stopping'")
        log.info("All models are stopped, unloading models")
        timeout = float(self.settings.exit_timeout_secs)
        try:
            await asyncio.wait_for(self.models.unload_all(), timeout)
        except TimeoutError:
            log.warning(
                "executions still running %g s after the exit timeout: not waited for", timeout
            )
        for frontend in reversed(self.frontends):
            frontend.drain()
        for frontend in reversed(self.frontends):
            await frontend.stop()
        for exporter in self.exporters:
            await exporter.stop()
        if self.response_cache is not None:
            await self.response_cache.stop()
        self.shared_memory.unregister_all()
        self.tracer.close()
        self.live = False

    async def _close_connections(self, countdown: ExitTimeout) -> None:
        """Step 1 of :meth:`stop`: the ports of the frontends that hold connections close
        (the others drain); wait for the open connections to close, logging them each
        second as Triton."""
        holding = [f for f in self.frontends if isinstance(f, HoldsConnections)]
        for frontend in self.frontends:
            if isinstance(frontend, HoldsConnections):
                frontend.refuse_connections()
            else:
                frontend.drain()

        def report(seconds: int) -> None:
            for frontend in holding:
                if count := frontend.open_connections:
                    service = frontend.name.upper()
                    log.info("Timeout %d: Found %d %s service connections", seconds, count, service)

        await countdown.wait(lambda: not any(f.open_connections for f in holding), report)

    def _settled(self) -> bool:
        """Every READY version has run what it accepted (all at once: an ensemble's next
        step or a BLS call may land on a model that was idle), and every frontend is
        ``settled`` (has answered the requests it received before the stop; one may
        still hold some it has not submitted)."""
        return all(
            v.scheduler is None or v.scheduler.settled for v in self.models.ready_versions()
        ) and all(frontend.settled for frontend in self.frontends)

    def _log_in_flight(self, seconds: int) -> None:
        """Triton's lines, each second while the models stop: the versions with in-flight
        inferences, and each one's count."""
        counts = [
            (v.name, v.version, v.scheduler.in_flight)
            for v in self.models.ready_versions()
            if v.scheduler is not None and v.scheduler.in_flight
        ]
        log.info(
            "Timeout %d: Found %d model versions that have in-flight inferences",
            seconds,
            len(counts),
        )
        for name, version, count in counts:
            log.info("Model '%s' (version %d) has %d in-flight inferences", name, version, count)

    def _refuses(self, received_ns: int) -> bool:
        """Whether a client's request is new work for a stopping server: the server is
        stopping and the request was not received before :meth:`stop` began.
        ``received_ns``: ``time.monotonic_ns()`` when its frontend had read it whole (its
        body included), 0 when not said (refused once stopping)."""
        return self._stopping and not 0 < received_ns < self._stop_ns

    def inference_model(
        self, name: str, version: str = "", *, received_ns: int = 0
    ) -> ModelVersion:
        """The model version a new inference request runs on (``models.get``). Once the
        server is stopping: Unavailable "Server is stopping" where no version is found
        (its models may be gone: not a 404), and for a request not received before the
        stop (``received_ns``, see :meth:`_refuses`) except on a model whose scheduler
        ``takes_follow_ons`` (a sequence model: :meth:`submit` asks it about the
        request); a request received before the stop is accepted work, looked up as
        ever."""
        if not self._stopping:
            return self.models.get(name, version)
        try:
            model = self.models.get(name, version)
        except DespinaError:
            raise Unavailable(STOPPING) from None
        if self._refuses(received_ns):
            if model.scheduler is None:
                raise Unavailable(STOPPING)
            if not model.scheduler.takes_follow_ons:
                raise model.scheduler.refusal()
        return model

    def submit(
        self,
        request: InferenceRequest,
        streaming: bool = True,
        model: ModelVersion | None = None,
        inner: bool = False,
        *,
        received_ns: int = 0,
    ) -> tuple[ModelVersion, ResponseStream]:
        """Admit a request (:func:`despina.inference.pipeline.admit`: validated, answered from the
        cache or queued); return the model and the stream to read.

        ``model``: the version :meth:`inference_model` returned for the request, when the
        caller looked it up already (with no await since). ``inner``: a request of work
        already accepted (an ensemble step, a BLS call), run while the server stops too.
        ``received_ns``: when a client's request was received (:meth:`_refuses`): one
        received before the stop began runs as any request did before it. Raises
        DespinaError (unknown model, invalid input, full queue, stopping) synchronously,
        and Unsupported for a decoupled model unless ``streaming``.
        """
        if model is None:
            name, version = request.model_name, request.model_version
            if inner:
                model = self.models.get(name, version)
            else:
                model = self.inference_model(name, version, received_ns=received_ns)
        if not inner and self._refuses(received_ns):
            assert model.scheduler is not None
            model.scheduler.admit_while_stopping(request)
        return model, admit(model, request, self.shared_memory, streaming)

    def submit_forwarded(self, request: InferenceRequest) -> ResponseStream:
        """:meth:`submit` a request another serving process forwarded (a sequence this one
        owns), as a client's request received when that process received it."""
        return self.submit(request, received_ns=request.received_ns)[1]

    async def infer(
        self, request: InferenceRequest, model: ModelVersion | None = None, inner: bool = False
    ) -> InferenceResponse:
        """Run a request on a non-decoupled model; return its response or raise its error.
        ``model``, ``inner``: as for :meth:`submit`."""
        model, stream = self.submit(request, streaming=False, model=model, inner=inner)
        return self.outcome(model, await stream.last())

    def outcome(self, model: ModelVersion, response: InferenceResponse | None) -> InferenceResponse:
        """The last response of a request submitted to ``model`` (not decoupled): returned,
        named after the model, or its error raised."""
        if response is None:
            raise Internal(f"model '{model.name}' sent no response")
        if response.error is not None:
            raise response.error
        response.model_name, response.model_version = model.name, str(model.version)
        return response

    async def infer_stream(
        self, request: InferenceRequest, inner: bool = False
    ) -> AsyncGenerator[InferenceResponse, None]:
        """Run a request on any model; yield every response (errors as ``error`` set).
        ``inner``: as for :meth:`submit`."""
        model, stream = self.submit(request, inner=inner)
        async for response in stream:
            response.model_name, response.model_version = model.name, str(model.version)
            yield response

    async def shutdown(self) -> None:
        """Leave a load balancer's rotation, then stop: readiness turns false at once while
        every listener keeps serving for ``--shutdown-grace-period`` seconds, then
        :meth:`stop` drains within ``--exit-timeout-secs``."""
        self.draining = True
        grace = self.settings.shutdown_grace_period
        if grace > 0:
            log.info("not ready; serving %g more seconds before draining", grace)
            await asyncio.sleep(grace)
        await self.stop()

    async def serve_forever(self, stop_event: asyncio.Event) -> None:
        """Start, wait for ``stop_event``, then :meth:`shutdown`."""
        await self.start()
        try:
            await stop_event.wait()
        finally:
            await self.shutdown()
