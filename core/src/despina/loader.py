"""Building one servable model version: backend, config completion, instances, scheduler.

:func:`load_version` is the whole load of one version; :func:`unload_version` the whole
unload. The model manager (``models.py``) decides what to load and when.
"""

from __future__ import annotations

import copy
import enum
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from despina import config as cfg, instance_groups
from despina.backend import PYTHON_RUNTIME, Backend, InstanceSpec, ModelContext, ModelInstance
from despina.errors import ConfigError, DespinaError, Internal, Unavailable
from despina.paths import safe_join
from despina.rate_limiter import Needs
from despina.redact import safe_text
from despina.repository import (
    available_versions,
    missing_model_file_text,
    no_version_text,
    select_versions,
)
from despina.scheduling.base import ScheduledModel, Scheduler
from despina.stats import LATENCY_OBSERVERS, ModelStats
from despina.validation import ModelSignature
from despina.warmup import warm_up

if TYPE_CHECKING:
    from despina.backend import BackendHost
    from despina.devices import GpuInventory
    from despina.rate_limiter import RateLimiter
    from despina.registry import Registry
    from despina.repository import ModelRepository
    from despina.response_cache import ResponseCache
    from despina.scheduling.base import SchedulerHost
    from despina.settings import CoreSettings

log = logging.getLogger("despina.models")


class _Repositories(Protocol):
    @property
    def repository(self) -> ModelRepository: ...


class _Failure(Protocol):
    def describe(self) -> str: ...


class _PluginFailures(Protocol):
    def failure_for(self, name: str) -> _Failure | None: ...


class LoadHost(Protocol):
    """What loading a model reads of the server (:class:`despina.server.Server` is one):
    declared here so that neither this module nor the model manager imports the server's."""

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
    def models(self) -> _Repositories: ...


#: Reason shown for a loaded version that cannot serve right now.
NOT_SERVING = "loaded but not ready: an instance is restarting or a composing model is unavailable"


class ModelState(enum.StrEnum):
    """Triton's model states as the repository index reports them."""

    READY = "READY"
    UNAVAILABLE = "UNAVAILABLE"
    LOADING = "LOADING"
    UNLOADING = "UNLOADING"


@dataclass
class ModelVersion:
    """One version of a model: its config and, once loaded, what serves it."""

    name: str
    version: int
    config: cfg.ModelConfig
    state: ModelState = ModelState.LOADING
    reason: str = ""
    backend: Backend | None = None
    instances: list[ModelInstance] = field(default_factory=list)
    scheduler: Scheduler | None = None
    signature: ModelSignature | None = None
    stats: ModelStats = field(init=False)

    def __post_init__(self) -> None:
        self.stats = ModelStats(self.name, str(self.version))

    @property
    def ready(self) -> bool:
        """READY and every instance healthy (a restarting instance makes it not ready)."""
        return (
            self.state is ModelState.READY
            and all(i.healthy for i in self.instances)
            and (self.scheduler is None or self.scheduler.ready)
        )

    @property
    def device_inputs(self) -> bool:
        """Whether every instance takes device inputs (an ensemble, with none, does: its
        steps' models decide)."""
        return all(i.device_inputs for i in self.instances)

    @property
    def decoupled(self) -> bool:
        return bool(self.config.model_transaction_policy.decoupled)


def resolve_backend(
    server: LoadHost, config: cfg.ModelConfig, model_dir: Path, versions: list[int] | None = None
) -> type[Backend]:
    """The Backend class for a model: its ``backend``, else its ``platform`` (an
    installed backend declaring it, else Triton's platform -> backend mapping), else the
    installed backend whose ``default_model_filename`` (or the config's, by extension)
    a version folder holds. As Triton, ``platform`` is ignored when ``backend`` is set; an
    unknown platform or backend fails with a ConfigError naming the installed ones."""
    backends: dict[str, type[Backend]] = server.registry.backends
    model = model_dir.name
    if config.backend:
        return _installed(server, backends, config.backend, "")
    if config.platform:
        for cls in backends.values():
            if config.platform in cls.platforms:
                return cls
        mapped = cfg.PLATFORM_TO_BACKEND.get(config.platform)
        if mapped is None:
            known = set(cfg.PLATFORM_TO_BACKEND) | set(cfg.TRITON_PLATFORMS)
            known.update(p for cls in backends.values() for p in cls.platforms)
            raise ConfigError(cfg.unknown_platform_text(config.platform, model, sorted(known)))
        return _installed(server, backends, mapped, f"platform '{config.platform}' needs ")
    if versions is None:
        versions = available_versions(model_dir)
    folders = [model_dir / str(v) for v in reversed(versions)]
    wanted = config.default_model_filename
    for cls in backends.values():
        if cls.default_model_filename and any(
            (f / cls.default_model_filename).exists() for f in folders
        ):
            return cls
    if wanted and any((f / wanted).exists() for f in folders):
        by_extension = _by_extension(backends, wanted)
        if len(by_extension) == 1:
            return by_extension[0]
    raise ConfigError(_no_backend_text(backends, config, model_dir, folders))


def _installed(
    server: LoadHost, backends: dict[str, type[Backend]], name: str, prefix: str
) -> type[Backend]:
    """The installed backend ``name``; else ConfigError (Unavailable where the plugin that
    provides it failed to import) naming the installed ones."""
    for cls in backends.values():
        if cls.name == name:
            return cls
    python = backends.get("python")
    if python is not None and python_based_dir(server, name) is not None:
        return python
    installed = ", ".join(sorted(backends)) or "none"
    reason = f"{prefix}unknown backend '{name}'; installed backends: {installed}"
    failure = server.plugins.failure_for(name)
    if failure is not None:
        raise Unavailable(f"{reason} ({failure.describe()})")
    raise ConfigError(
        f"{reason} (Triton: unable to find backend library for backend '{name}'); install "
        "the plugin that provides it or correct the config's backend/platform"
    )


def python_based_dir(server: LoadHost, backend: str) -> Path | None:
    """``<backend-directory>/<backend>`` when no plugin provides ``backend`` and that
    folder holds a ``model.py``: a Python-based backend, which the python backend runs
    for the model (Triton's search when it finds no backend library); else None."""
    if not backend or backend in server.registry.backends:
        return None
    folder = safe_join(Path(server.settings.backend_directory), backend, "backend")
    return folder if (folder / PYTHON_RUNTIME).is_file() else None


def _by_extension(backends: dict[str, type[Backend]], filename: str) -> list[type[Backend]]:
    """Installed backends whose default model file has ``filename``'s extension."""
    suffix = Path(filename).suffix
    return [
        cls
        for cls in backends.values()
        if suffix
        and cls.default_model_filename
        and Path(cls.default_model_filename).suffix == suffix
    ]


def _no_backend_text(
    backends: dict[str, type[Backend]],
    config: cfg.ModelConfig,
    model_dir: Path,
    folders: list[Path],
) -> str:
    """Triton's text for a model whose backend cannot be told from its files, with what
    each installed backend looks for and, for a file under another name
    (``resnet.onnx``), the rename or ``default_model_filename`` that fixes it."""
    model = model_dir.name
    text = (
        f"Could not determine backend for model '{model}' with no backend in model "
        "configuration. Expected model name of the form 'model.<backend_name>'"
    )
    looks_for = ", ".join(
        f"'{cls.default_model_filename}' ({cls.name})"
        for cls in sorted(backends.values(), key=lambda c: c.name)
        if cls.default_model_filename
    )
    if looks_for:
        text += f"; the installed backends look for {looks_for}"
    for folder in folders:
        try:
            files = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
        except OSError:
            continue
        for file in files:
            matches = _by_extension(backends, file.name)
            if matches:
                cls = matches[0]
                return (
                    f"{text}: version folder {folder.name} holds '{file.name}' but the "
                    f"{cls.name} backend looks for '{cls.default_model_filename}': rename it "
                    f"to '{cls.default_model_filename}' or set default_model_filename: "
                    f'"{file.name}" (and backend: "{cls.name}") in config.pbtxt'
                )
        if files:
            held = ", ".join(f"'{p.name}'" for p in files[:4])
            return (
                f"{text}: version folder {folder.name} holds {held}; name the backend in "
                'config.pbtxt (backend: "...") or rename the model file'
            )
    return f"{text}: the version folders hold no model file"


def without_paths(server: LoadHost, model_dir: Path, error: DespinaError) -> DespinaError:
    """``error``, which failed the load of the model in ``model_dir``, its text rewritten
    (in place) to name no server path (:func:`~despina.redact.safe_text`): the text
    clients see, in the load's answer and the repository index. The full text is logged
    first."""
    full = str(error)
    text = safe_text(full, model_dir, server.models.repository.roots)
    if text != full:
        log.error("failed to load '%s' (told to clients without paths): %s", model_dir.name, full)
        error.args = (text,)
    return error


async def prepare_config(
    server: LoadHost, config: cfg.ModelConfig, model_dir: Path, versions: list[int]
) -> type[Backend] | None:
    """Resolve the backend, auto-complete (when enabled), fill defaults, validate; a
    DespinaError raised names no server path (:func:`without_paths`)."""
    try:
        return await _prepare_config(server, config, model_dir, versions)
    except DespinaError as exc:
        without_paths(server, model_dir, exc)
        raise


async def _prepare_config(
    server: LoadHost, config: cfg.ModelConfig, model_dir: Path, versions: list[int]
) -> type[Backend] | None:
    name = model_dir.name
    backend_cls: type[Backend] | None = None
    if config.platform != cfg.ENSEMBLE_PLATFORM:
        if not versions:
            raise ConfigError(no_version_text(model_dir))
        backend_cls = resolve_backend(server, config, model_dir, versions)
        configured = bool(config.default_model_filename)
        if not config.backend and not config.platform:
            config.backend = backend_cls.name
        if not config.default_model_filename and backend_cls.default_model_filename:
            config.default_model_filename = backend_cls.default_model_filename
    runtime_dir = python_based_dir(server, config.backend)
    if runtime_dir is not None:
        config.runtime = PYTHON_RUNTIME
    cfg.check_file_names(config, name)  # before auto-complete opens the model file
    if not config.name:
        config.name = name
    if backend_cls is not None and runtime_dir is None:
        _check_model_files(config, model_dir, versions, backend_cls.name, configured)
    if backend_cls is not None and server.settings.auto_complete and versions:
        context = ModelContext(
            name, versions[-1], model_dir, config, server.backend_host, runtime_dir=runtime_dir
        )
        await backend_cls(context).auto_complete()
    cfg.normalize(config, name)
    if backend_cls is not None:
        support = backend_cls.gpu_support()
        gpus = server.gpus.supported
        instance_groups.complete(config, gpus, support)
        instance_groups.check(config, gpus, support, server.gpus.min_compute_capability)
    inputs_optional = backend_cls is not None and backend_cls.inputs_optional
    if backend_cls is not None and (not (config.input or inputs_optional) or not config.output):
        _refuse_no_tensors(server, config, name, backend_cls.name)
    cfg.validate(config, name, inputs_optional=inputs_optional)
    return backend_cls


def _check_model_files(
    config: cfg.ModelConfig, model_dir: Path, versions: list[int], backend: str, configured: bool
) -> None:
    """ConfigError naming the fix when a version to load lacks its model file (a file
    under another name, a file beside the version folder); skipped for backends that
    name no model file and for ``cc_model_filenames``."""
    filename = config.default_model_filename
    if not filename or config.cc_model_filenames:
        return
    for version in select_versions(config, versions):
        if not (model_dir / str(version) / filename).exists():
            raise ConfigError(
                missing_model_file_text(model_dir, version, filename, backend, configured)
            )


def _refuse_no_tensors(server: LoadHost, config: cfg.ModelConfig, name: str, backend: str) -> None:
    """Triton's "must specify at least one input/output" with why none is known: the
    config lists none and the backend did not (or, auto-complete off, could not) fill
    them from the model file."""
    kind = "output" if not config.output else "input"
    if server.settings.auto_complete:
        why = (
            f"the config lists no {kind}s and the {backend} backend could not complete "
            f"them from '{config.default_model_filename}'"
        )
        if backend == "python":
            why += " (model.py defines no auto_complete_config)"
    else:
        why = (
            f"the config lists no {kind}s and auto-complete is off "
            "(--strict-model-config=true or --disable-auto-complete-config)"
        )
    raise ConfigError(
        f"model '{name}': must specify at least one {kind}: {why}; list the model's "
        f"{kind}s in config.pbtxt ({kind} [ {{ name: ... data_type: ... dims: [ ... ] }} ])"
    )


def pick_scheduler(server: LoadHost, config: cfg.ModelConfig) -> type[Scheduler]:
    """The single scheduler that handles ``config``, else "default"."""
    schedulers: dict[str, type[Scheduler]] = server.registry.schedulers
    chosen = [cls for cls in schedulers.values() if cls.handles(config)]
    if len(chosen) > 1:
        names = ", ".join(sorted(c.name for c in chosen))
        raise ConfigError(f"model '{config.name}': several schedulers claim it: {names}")
    if chosen:
        return chosen[0]
    if config.platform == cfg.ENSEMBLE_PLATFORM or config.HasField("sequence_batching"):
        needed = "ensemble" if config.platform == cfg.ENSEMBLE_PLATFORM else "sequence batching"
        raise Unavailable(
            f"model '{config.name}' needs {needed}, which no installed scheduler provides"
        )
    if "default" not in schedulers:
        raise Unavailable("no default scheduler is installed")
    return schedulers["default"]


def rate_limiter_needs(
    server: LoadHost, config: cfg.ModelConfig, specs: list[InstanceSpec]
) -> list[Needs | None]:
    """Each instance's rate-limiter needs (None when not limited), registered with the
    server's limiter; empty without ``--rate-limit=execution_count``."""
    if server.rate_limiter is None:
        return []
    needs: list[Needs | None] = []
    for spec in specs:
        group = config.instance_group[spec.group_index]
        if not group.HasField("rate_limiter") or not group.rate_limiter.resources:
            needs.append(None)
            continue
        resources = {
            (r.name.lower(), None if getattr(r, "global") else spec.device_id): int(r.count)
            for r in group.rate_limiter.resources
        }
        one = Needs(resources, int(group.rate_limiter.priority) or 1)
        server.rate_limiter.register(one)
        needs.append(one)
    return needs


async def load_version(
    server: LoadHost, backend_cls: type[Backend] | None, model_dir: Path, version: ModelVersion
) -> None:
    """Load one version; on failure it ends UNAVAILABLE with the reason, which names no
    server path (:func:`without_paths`); never raises."""
    started = time.monotonic_ns()
    specs: list[InstanceSpec] = []
    try:
        if backend_cls is not None:
            context = ModelContext(
                version.name,
                version.version,
                model_dir,
                version.config,
                server.backend_host,
                runtime_dir=python_based_dir(server, version.config.backend),
            )
            version.backend = backend_cls(context)
            await version.backend.load()
            specs = instance_groups.instance_specs(version.config)
            for spec in specs:
                version.instances.append(await version.backend.create_instance(spec))
            await warm_up(version.config, model_dir, version.instances)
        scheduler_cls = pick_scheduler(server, version.config)
        version.signature = ModelSignature(version.name, version.config)
        model = ScheduledModel(
            version.name,
            str(version.version),
            version.config,
            version.instances,
            version.stats,
            host=server.scheduler_host,
            model_dir=model_dir,
            cache=server.response_cache if version.config.response_cache.enable else None,
            limiter=server.rate_limiter,
            needs=rate_limiter_needs(server, version.config, specs),
            max_pending=server.settings.max_pending_requests,
        )
        stash = server.backend_host.stash
        if LATENCY_OBSERVERS in stash:
            version.stats.latency = stash[LATENCY_OBSERVERS].for_model(
                version.name, str(version.version), version.config
            )
        version.scheduler = scheduler_cls(model)
        await version.scheduler.start()
    except Exception as exc:  # noqa: BLE001 - any load failure makes the version unavailable
        error = exc if isinstance(exc, DespinaError) else Internal(f"{type(exc).__name__}: {exc}")
        version.reason = without_paths(server, model_dir, error).status_text
        version.state = ModelState.UNAVAILABLE
        log.error(
            "failed to load '%s' version %d: %s", version.name, version.version, version.reason
        )
        await _release(version)
        return
    version.stats.load_ns = time.monotonic_ns() - started
    version.state = ModelState.READY
    log.info(
        "successfully loaded '%s' version %d in %.0f ms",
        version.name,
        version.version,
        version.stats.load_ns / 1e6,
    )


async def unload_version(version: ModelVersion, drain: bool = True) -> None:
    """Stop taking requests, close instances and the backend; ends UNAVAILABLE.

    With ``drain`` every accepted request is executed first (unload, reload); without it
    (shutdown) queued requests are answered with an error and only running ones finish.
    """
    started = time.monotonic()
    version.state = ModelState.UNLOADING
    if version.scheduler is not None:
        if drain:
            await version.scheduler.drain()
        await version.scheduler.stop()
    await _release(version)
    version.state = ModelState.UNAVAILABLE
    version.reason = "unloaded"
    log.info(
        "successfully unloaded '%s' version %d in %.0f ms",
        version.name,
        version.version,
        (time.monotonic() - started) * 1000,
    )


async def _release(version: ModelVersion) -> None:
    for instance in version.instances:
        try:
            await instance.close()
        except Exception:
            log.exception("closing an instance of '%s' failed", version.name)
    version.instances.clear()
    if version.backend is not None:
        try:
            await version.backend.unload()
        except Exception:
            log.exception("unloading backend of '%s' failed", version.name)
        version.backend = None


def version_config(config: cfg.ModelConfig) -> cfg.ModelConfig:
    """A private copy of the model's config for one version."""
    return copy.deepcopy(config)


def describe(version: ModelVersion) -> dict[str, Any]:
    """The repository index entry of a version; a loaded version that cannot serve (an
    instance restarting, a composing model gone) shows as UNAVAILABLE with why."""
    state, reason = str(version.state), version.reason
    if version.state is ModelState.READY and not version.ready:
        state, reason = str(ModelState.UNAVAILABLE), NOT_SERVING
    return {"name": version.name, "version": str(version.version), "state": state, "reason": reason}


def load_failure_text(name: str, failed: list[ModelVersion]) -> str:
    """Triton's text for a load of ``name`` whose ``failed`` versions did not load."""
    states = "".join(f"version {v.version} is at {v.state} state: {v.reason};" for v in failed)
    return f"load failed for model '{name}': {states}\n"
