"""The data plane: every protocol-independent operation a frontend serves, once.

A frontend decodes its protocol, calls one method here, and encodes the result or the
:class:`~despina.errors.DespinaError` raised (each error class carries its HTTP status and
gRPC code). Texts are Triton's; where the HTTP and gRPC frontends used to answer one
operation differently, the one answer kept is named in the method's docstring.
:class:`DataPlane` implements :class:`despina.plugin.ports.FrontendHost` (and ``MetricsHost``);
:class:`BackendServices`, what backends may use, :class:`despina.plugin.ports.BackendHost`;
:class:`SchedulerServices`, what schedulers may use, :class:`despina.plugin.ports.SchedulerHost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from base64 import b64decode, b64encode
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from despina.errors import DespinaError, InvalidArgument, Unsupported
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.inference.tensors import config_to_datatype
from despina.models.versions import ModelState
from despina.repository.config import mc
from despina.repository.signatures import backend_setting, default_max_batch_size
from despina.serving.joint_loads import JointLoads

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from despina.inference.request import ResponseStream
    from despina.inference.request_bodies import BodyBudget
    from despina.memory.gpus import GpuInventory
    from despina.memory.shared_memory import SharedMemoryRegistry
    from despina.models.manager import ModelManager
    from despina.models.versions import ModelVersion
    from despina.plugin.manager import Plugins
    from despina.plugin.ports import FrontendHost
    from despina.serving.custom_metrics import CustomMetrics
    from despina.serving.peers import Operation, Peers
    from despina.serving.runtime_settings import LogSettings
    from despina.serving.settings import CoreSettings, Stash
    from despina.tracing.tracer import Tracer

log = logging.getLogger("despina")


class Core(Protocol):
    """What the services below read of the server (:class:`despina.serving.server.Server` is
    one): declared here so this module never imports the server's."""

    models: ModelManager
    shared_memory: SharedMemoryRegistry
    stash: Stash
    settings: CoreSettings
    custom_metrics: CustomMetrics
    log_settings: LogSettings
    tracer: Tracer
    request_bodies: BodyBudget
    gpus: GpuInventory
    dataplane: FrontendHost
    plugins: Plugins
    id: str
    version: str
    #: The other serving processes (``--serving-processes`` above 1), else None.
    peers: Peers | None
    #: This process's part in the loads and unloads all serving processes make together.
    joint_loads: JointLoads

    @property
    def live(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    async def ready_checked(self) -> bool: ...

    @property
    def extensions(self) -> list[str]: ...

    def inference_model(
        self, name: str, version: str = "", *, received_ns: int = 0
    ) -> ModelVersion: ...

    def submit(
        self,
        request: InferenceRequest,
        streaming: bool = True,
        model: ModelVersion | None = None,
        inner: bool = False,
        *,
        received_ns: int = 0,
    ) -> tuple[ModelVersion, ResponseStream]: ...

    async def infer(
        self, request: InferenceRequest, model: ModelVersion | None = None, inner: bool = False
    ) -> InferenceResponse: ...

    def outcome(
        self, model: ModelVersion, response: InferenceResponse | None
    ) -> InferenceResponse: ...

    def infer_stream(
        self, request: InferenceRequest, inner: bool = False
    ) -> AsyncGenerator[InferenceResponse, None]: ...


class DataPlane:
    """What one server offers its frontends."""

    def __init__(self, server: Core) -> None:
        self._server = server
        self._models = server.models
        #: Loads and unloads every serving process makes together (``--serving-processes``).
        self._joint = server.joint_loads
        #: Registered system shared-memory regions (decoders read inputs from them).
        self.shared_memory: SharedMemoryRegistry = server.shared_memory
        #: Which requests are traced: frontends check ``tracer.active`` per request.
        self.tracer: Tracer = server.tracer
        #: Bytes request bodies in flight hold, server-wide (frontends charge them).
        self.request_bodies: BodyBudget = server.request_bodies
        #: The server's typed settings: each plugin's options under its own key.
        self.stash = server.stash
        #: Custom metric families models created (metrics exporters read them).
        self.custom_metrics = server.custom_metrics
        #: The GPUs the server may use (metrics exporters report them).
        self.gpus: GpuInventory = server.gpus
        #: Every READY model version, by name then version (metrics exporters read them).
        self.ready_versions = server.models.ready_versions
        #: Readiness with every READY model's own checks (strict readiness).
        self.ready_checked = server.ready_checked
        # Inference: the server's own bound methods, so the request path gains no frame.
        #: The version a new request runs on (Unavailable once stopping).
        self.inference_model = server.inference_model
        #: Validate and queue a request: (model, response stream).
        self.submit = server.submit
        #: Run a request on a non-decoupled model: its response, or its error raised.
        self.infer = server.infer
        #: The last response of a submitted request, named after the model, or its error.
        self.outcome = server.outcome
        #: Every response of a request on any model (errors as ``error`` set).
        self.infer_stream = server.infer_stream

    # health and metadata
    @property
    def live(self) -> bool:
        """Triton's liveness: the server has started and not yet stopped."""
        return self._server.live

    @property
    def ready(self) -> bool:
        """Triton's readiness (see :attr:`despina.serving.server.Server.ready`)."""
        return self._server.ready

    def model_ready(self, name: str, version: str = "") -> bool:
        """Whether the model (version) can serve inference now."""
        try:
            self._models.get(name, version)
        except DespinaError:
            return False
        return True

    async def model_ready_checked(self, name: str, version: str = "") -> bool:
        """:meth:`model_ready`, then every instance's own check, all at once; one that
        answers False or raises makes the model not ready (logged at verbose level)."""
        try:
            model = self._models.get(name, version)
        except DespinaError:
            return False
        return await instances_ready(model)

    def server_metadata(self) -> dict[str, Any]:
        """``{"name", "version", "extensions"}`` as KServe v2 server metadata."""
        server = self._server
        return {"name": server.id, "version": server.version, "extensions": server.extensions}

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """KServe v2 model metadata (name, ready versions, platform, inputs, outputs)."""
        model = self._models.get(name, version)
        config = model.config
        batch = [-1] if config.max_batch_size > 0 else []

        def tensor(t: Any) -> dict[str, Any]:
            datatype = config_to_datatype(mc.DataType.Name(t.data_type))
            return {"name": t.name, "datatype": datatype, "shape": batch + [int(d) for d in t.dims]}

        versions = self._models.entries[name].versions
        return {
            "name": name,
            "versions": [str(v) for v, mv in sorted(versions.items()) if mv.ready],
            "platform": config.platform or config.backend,
            "inputs": [tensor(t) for t in config.input],
            "outputs": [tensor(t) for t in config.output],
        }

    def model_config(self, name: str, version: str = "") -> mc.ModelConfig:
        """The model version's complete configuration (auto-completed, defaults filled)."""
        return self._models.get(name, version).config

    def statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """Statistics of every ready version, of model ``name``, or of one version; Triton's
        texts for a model or version not ready (InvalidArgument). Both frontends now
        answer a missing version with Triton's "requested model version is not available
        for model ..." (gRPC used to give the model's text)."""
        if not name:
            return [v.stats.snapshot() for v in self._models.ready_versions()]
        entry = self._models.entries.get(name)
        ready = [v for _, v in sorted(entry.versions.items()) if v.ready] if entry else []
        if not ready:
            raise InvalidArgument(f"requested model '{name}' is not available")
        if version:
            ready = [v for v in ready if str(v.version) == version]
            if not ready:
                raise InvalidArgument(
                    f"requested model version is not available for model '{name}'"
                )
        return [v.stats.snapshot() for v in ready]

    async def model_statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        """What a client's statistics call answers: :meth:`statistics`, summed over every
        serving process under ``--serving-processes`` (Unavailable when one does not
        answer: :mod:`despina.serving.peers`)."""
        peers = self._server.peers
        if peers is None:
            return self.statistics(name, version)
        return await peers.summed(name, version)

    # model repository
    def repository_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """Every model (and version) of the repositories with its state and reason; fields
        that are empty are left out of each row."""
        rows = self._models.index(ready_only=ready_only)
        return [{k: v for k, v in row.items() if v != ""} for row in rows]

    async def load(
        self, name: str, config: str | None = None, files: Mapping[str, bytes] | None = None
    ) -> None:
        """Load or reload ``name`` (explicit control mode only), optionally with a config
        (JSON) and file overrides (``{"1/model.py": bytes}``); under ``--serving-processes``
        in every serving process or, when one fails, in none
        (:mod:`despina.serving.joint_loads`)."""
        self._models.check_control()
        peers = self._server.peers
        if peers is None:
            await self._models.load(name, config, files or None)
        else:
            await self._joint.load(peers, name, config, files or None)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Unload ``name`` (explicit control mode only); unloading one not loaded is OK.
        Under ``--serving-processes`` in every serving process."""
        self._models.check_control()
        peers = self._server.peers
        if peers is None:
            await self._models.unload(name, unload_dependents=unload_dependents)
        else:
            await self._joint.unload(peers, name, unload_dependents)

    def register_model_repository(
        self, repository: str, mapping: Mapping[str, str] | None = None
    ) -> None:
        """Serve the model folders of ``repository`` as well, those ``mapping`` names
        (``{model name: folder name}``) under those names; explicit control mode only
        (Unsupported otherwise, Triton's text)."""
        if not self._models.explicit:
            raise Unsupported(
                "repository registration is not allowed if model control mode is not EXPLICIT"
            )
        self._models.repository.register(repository, mapping)
        log.info("Model repository registered: %s", repository)

    def unregister_model_repository(self, repository: str) -> None:
        """Forget a registered repository (explicit control mode only); its loaded models
        stay loaded."""
        if not self._models.explicit:
            raise Unsupported(
                "repository unregistration is not allowed if model control mode is not EXPLICIT"
            )
        self._models.repository.unregister(repository)
        log.info("Model repository unregistered: %s", repository)

    # shared memory
    def system_shm_status(self, name: str = "") -> list[dict[str, Any]]:
        """Registered system shared-memory regions (one, when ``name`` is given)."""
        return self.shared_memory.status(name)

    async def system_shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Register a region (refused unless client shared memory is allowed); under
        ``--serving-processes`` in every serving process or, when one fails, in none."""
        self.shared_memory.register(name, key, offset, byte_size)
        arguments = {"name": name, "key": key, "offset": offset, "byte_size": byte_size}
        await self._fan_out_registration("system_shm", arguments, "system")

    async def system_shm_unregister(self, name: str = "") -> None:
        """Unregister one system region, or every one when ``name`` is empty (in every
        serving process under ``--serving-processes``)."""
        self.shared_memory.unregister(name)
        await self._tell_peers("system_shm_unregister", {"name": name})

    def cuda_shm_status(self, name: str = "") -> list[dict[str, Any]]:
        """Registered CUDA shared-memory regions (one, when ``name`` is given)."""
        return self.shared_memory.status(name, kind="cuda")

    async def cuda_shm_register(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        """Register a CUDA region from its IPC handle (refused unless client shared memory
        is allowed; InvalidArgument, one text for both protocols, where the server cannot
        open CUDA memory: no cupy, or no device); under ``--serving-processes`` in every
        serving process (each opens the handle) or, when one fails, in none."""
        self.shared_memory.register_cuda(name, raw_handle, device_id, byte_size)
        arguments = {
            "name": name,
            "raw_handle": b64encode(raw_handle).decode(),
            "device_id": device_id,
            "byte_size": byte_size,
        }
        await self._fan_out_registration("cuda_shm", arguments, "cuda")

    async def cuda_shm_unregister(self, name: str = "") -> None:
        """Unregister one CUDA region, or every one when ``name`` is empty (in every
        serving process under ``--serving-processes``)."""
        self.shared_memory.unregister(name, kind="cuda")
        await self._tell_peers("cuda_shm_unregister", {"name": name})

    async def _fan_out_registration(
        self, kind: str, arguments: dict[str, Any], registry_kind: str
    ) -> None:
        """Register a region this process registered in every peer too; when one fails,
        unregister it here (and :meth:`Peers.fan_out` in the peers that took it)."""
        peers = self._server.peers
        if peers is None:
            return
        name = arguments["name"]
        undo = (f"{kind}_unregister", {"name": name})
        try:
            await peers.fan_out(f"{kind}_register", arguments, undo)
        except DespinaError:
            self.shared_memory.unregister(name, kind=registry_kind)
            raise

    def peer_operations(self) -> dict[str, Operation]:
        """What another serving process may ask of this one (:mod:`despina.serving.peers`):
        its own statistics, and its share of a change a peer received (registrations,
        settings, loads and unloads)."""
        registry = self.shared_memory
        return {
            "statistics": lambda a: self.statistics(a["name"], a["version"]),
            "system_shm_register": lambda a: registry.register(
                a["name"], a["key"], a["offset"], a["byte_size"]
            ),
            "system_shm_unregister": lambda a: registry.unregister(a["name"]),
            "cuda_shm_register": lambda a: registry.register_cuda(
                a["name"], b64decode(a["raw_handle"]), a["device_id"], a["byte_size"]
            ),
            "cuda_shm_unregister": lambda a: registry.unregister(a["name"], kind="cuda"),
            "log_settings": self._update_log_settings,
            "trace_settings": self._update_trace_settings,
            **self._joint.operations(),
        }

    # plugins' contributions to frontends
    def plugin_contributions(self, hook_name: str, **kwargs: Any) -> list[tuple[Any, str]]:
        """What the plugins' ``hook_name`` implementations return, each item with
        "<plugin> (<distribution>)"; a hook that raises is recorded as failed."""
        return [
            (item, f"{origin.name} ({origin.distribution})")
            for item, origin in self._server.plugins.contributions(hook_name, **kwargs)
        ]

    # runtime settings
    async def log_settings(self, changes: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Apply ``changes`` (InvalidArgument for a bad key or value) and return every
        log setting; under ``--serving-processes`` the changes reach every process."""
        if changes:
            self._update_log_settings({"changes": dict(changes)})
            await self._tell_peers("log_settings", {"changes": dict(changes)})
        return self._server.log_settings.as_dict()

    async def trace_settings(
        self, model: str = "", changes: Mapping[str, Any] | None = None
    ) -> dict[str, list[str]]:
        """Apply ``changes`` to the global or ``model``'s trace settings and return them;
        InvalidArgument (Triton's text) for a model that is not loaded. Under
        ``--serving-processes`` the changes reach every process."""
        if not changes:
            self._check_traced(model)
            return self._server.tracer.get(model)
        arguments = {"model": model, "changes": dict(changes)}
        current = self._update_trace_settings(arguments)
        await self._tell_peers("trace_settings", arguments)
        return current

    def _check_traced(self, model: str) -> None:
        if model and model not in self._models.entries:
            raise InvalidArgument(f"Request for unknown model : {model}")

    def _update_log_settings(self, arguments: dict[str, Any]) -> None:
        self._server.log_settings.update(arguments["changes"])

    def _update_trace_settings(self, arguments: dict[str, Any]) -> dict[str, list[str]]:
        self._check_traced(arguments["model"])
        return self._server.tracer.update(arguments["changes"], arguments["model"])

    async def _tell_peers(self, op: str, arguments: dict[str, Any]) -> None:
        """Make a change this process made (and checked) in every peer as well (under
        ``--serving-processes``): the same checks pass there, so only a peer that does not
        answer fails it (Unavailable)."""
        if self._server.peers is not None:
            await self._server.peers.ask_all(op, arguments)


class BackendServices:
    """What one server offers its backends and their models
    (:class:`despina.plugin.ports.BackendHost`)."""

    def __init__(self, server: Core) -> None:
        self._server = server
        self._models = server.models
        self._settings = server.settings
        #: The server's typed settings: each plugin's options under its own key.
        self.stash = server.stash
        self.custom_metrics = server.custom_metrics
        plane = server.dataplane
        self.model_ready = plane.model_ready
        self.load = plane.load
        self.unload = plane.unload

    @property
    def exit_timeout_s(self) -> float:
        """``--exit-timeout-secs``: how long shutdown waits for running work."""
        return float(self._settings.exit_timeout_secs)

    def default_max_batch_size(self, backend: str) -> int:
        """``--backend-config=[<backend>,]default-max-batch-size=N``, else Triton's 4."""
        return default_max_batch_size(self._settings.backend_config, backend)

    def backend_setting(self, backend: str, key: str) -> str | None:
        """The value of ``--backend-config=[<backend>,]<key>=<value>``, or None."""
        return backend_setting(self._settings.backend_config, backend, key)

    async def bls_infer(self, caller: str, request: InferenceRequest) -> InferenceResponse:
        """Run ``caller``'s request on a non-decoupled model; its error raised. Part of
        the caller's accepted work: run while the server stops too."""
        self._models.record_call(caller, request.model_name)
        return await self._server.infer(request, inner=True)

    def bls_stream(
        self, caller: str, request: InferenceRequest
    ) -> AsyncGenerator[InferenceResponse, None]:
        """Every response of ``caller``'s request on any model (run while the server
        stops too, as :meth:`bls_infer`)."""
        self._models.record_call(caller, request.model_name)
        return self._server.infer_stream(request, inner=True)


class SchedulerServices:
    """What one server offers its schedulers (:class:`despina.plugin.ports.SchedulerHost`)."""

    #: How long :meth:`settle` waits for a model that is still loading.
    SETTLE_WAIT_S = 120.0
    _POLL_S = 0.01

    def __init__(self, server: Core) -> None:
        self._models = server.models
        self._startup = set(server.settings.load_model or [])
        self._server = server

    def infer_stream(self, request: InferenceRequest) -> AsyncGenerator[InferenceResponse, None]:
        """Every response of an ensemble step's request: part of the ensemble request's
        accepted work, run while the server stops too."""
        return self._server.infer_stream(request, inner=True)

    def ready_config(self, name: str, version: str = "") -> mc.ModelConfig:
        """The config of the READY version serving ``name``; NotFound / Unavailable."""
        return self._models.get(name, version).config

    def takes_device_inputs(self, name: str, version: str = "") -> bool:
        try:
            return self._models.get(name, version).device_inputs
        except DespinaError:
            return False

    def output_labels(self, name: str, version: str, output: str) -> list[str]:
        scheduler = self._models.get(name, version).scheduler
        return scheduler.model.labels(output) if scheduler is not None else []

    def known_models(self) -> set[str]:
        """Every model name in a repository or loaded."""
        return set(self._models.repository.model_names()) | set(self._models.entries)

    async def settle(self, name: str) -> None:
        """Wait while ``name`` is loading or due to load at start-up (at most
        :data:`SETTLE_WAIT_S`); in explicit control mode load it when it is not ready and
        nothing else will, as Triton does for an ensemble's composing models. A failed
        load is not raised: :meth:`load_failure` tells it."""
        manager = self._models
        startup_loads = not manager.explicit or "*" in self._startup or name in self._startup
        deadline = time.monotonic() + self.SETTLE_WAIT_S
        while time.monotonic() < deadline:
            entry = manager.entries.get(name)
            if entry is None and not startup_loads:
                break
            if entry is not None and entry.state is not ModelState.LOADING:
                break
            await asyncio.sleep(self._POLL_S)
        entry = manager.entries.get(name)
        if manager.explicit and (entry is None or not entry.ready):
            with contextlib.suppress(DespinaError):
                await manager.load(name)

    def composing_models(self, name: str) -> list[str]:
        """The models ensemble ``name`` composes ([] for any other model)."""
        return self._models.composing_models(name)

    def has_ready_version(self, name: str) -> bool:
        """Whether any version of ``name`` is READY."""
        entry = self._models.entries.get(name)
        return entry is not None and any(v.ready for v in entry.versions.values())

    def load_failure(self, name: str) -> str:
        """Why ``name`` failed to load, or ""."""
        entry = self._models.entries.get(name)
        return entry.reason if entry is not None else ""


async def instances_ready(model: ModelVersion) -> bool:
    """Every instance's own check of ``model``, all at once; one that answers False or
    raises makes it not ready (logged at verbose level)."""
    checks = [instance.check_ready() for instance in model.instances]
    for answer in await asyncio.gather(*checks, return_exceptions=True):
        if answer is not True:
            why = answer if isinstance(answer, BaseException) else "an instance's check"
            log.debug("Model '%s' version %s is not ready: %s", model.name, model.version, why)
            return False
    return True
