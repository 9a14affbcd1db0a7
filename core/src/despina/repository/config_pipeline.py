"""How a model's config becomes what its backend and scheduler see: :func:`prepare`.

One pipeline, top to bottom, in Triton's order (which decides which error a config with
several mistakes gets; the texts are Triton's):

1. read ``config.pbtxt`` (or a load request's JSON) into the *draft*;
2. run the model's repository agents (:mod:`despina.repository.agents`), which may move its folder;
3. a config that names no backend and whose version folders hold no model file gets the
   backend its model name ends with (``<name>.<backend>``,
   :func:`despina.repository.backend_resolution.backend_from_name`); then validate what
   needs neither backend nor files (:mod:`despina.repository.validation`:
   Triton's ``ValidateModelConfig``, and with auto-complete off ``ValidateModelIOConfig``),
   as Triton does when it polls the repository;
4. at least one version folder (but for an ensemble); the instance groups that name their
   kind and GPUs (:func:`despina.repository.instance_groups.check_listed`);
5. resolve the backend (:mod:`despina.repository.backend_resolution`), named in the draft with its
   default model file; check the ``runtime`` field against it (:func:`check_runtime`), file
   names and that each version folder holds that file;
6. the backend's :meth:`~despina.plugin.backend.Backend.auto_complete` fills the draft from the
   model file (Python: the model's ``auto_complete_config``);
7. :func:`normalize`: Triton's defaults;
8. instance groups completed and checked (:mod:`despina.repository.instance_groups`);
9. validated again (:func:`despina.repository.validation.validate_completed`), then frozen in a
   :class:`PreparedConfig`.

The draft is the only ModelConfig written, by this module and the backend's
``auto_complete`` alone. Once frozen it is read-only for everyone (server, backends,
schedulers); a protobuf message cannot be made immutable, so the model manager checks
:meth:`PreparedConfig.changed` when the model unloads. One exception remains: an
ensemble's scheduler states its ``model_transaction_policy`` when it starts, before the
version is served, because Triton decides it from the composing models, which may only
load then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from despina.errors import ConfigError, DespinaError
from despina.plugin.backend import PYTHON_RUNTIME, Backend, ModelContext
from despina.repository import config as cfg, instance_groups
from despina.repository.agents import run_agents
from despina.repository.backend_resolution import (
    backend_from_name,
    python_based_dir,
    resolve_backend,
)
from despina.repository.config import ModelConfig
from despina.repository.folders import (
    available_versions,
    missing_model_file_text,
    no_version_text,
    select_versions,
    version_failures_text,
)
from despina.repository.redact import without_paths
from despina.repository.validation import validate_completed, validate_io, validate_model

if TYPE_CHECKING:
    from despina.models.load_host import LoadHost

#: Triton's default ``sequence_batching.max_sequence_idle_microseconds`` (1 s).
DEFAULT_IDLE_US = 1_000_000


@dataclass(frozen=True)
class PreparedConfig:
    """A model's config as it is served, and what the pipeline decided on the way.

    ``config`` is frozen: nothing writes to it once prepared (but an ensemble's scheduler,
    see the module docstring); every version of the model shares it.
    """

    config: ModelConfig
    #: The backend that serves the model; None for an ensemble.
    backend: type[Backend] | None
    #: The folder the model loads from (a repository agent may have replaced it).
    model_dir: Path
    #: The numeric version folders, ascending.
    versions: tuple[int, ...]
    #: A Python-based backend's folder (:func:`python_based_dir`), else None.
    runtime_dir: Path | None
    _frozen: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_frozen", self._serialized())

    def changed(self) -> bool:
        """Whether ``config`` was written to since it was frozen (a broken contract)."""
        return self._serialized() != self._frozen

    def _serialized(self) -> bytes:
        config = self.config
        if config.platform == cfg.ENSEMBLE_PLATFORM:  # its scheduler states this at start
            config = ModelConfig()
            config.CopyFrom(self.config)
            config.ClearField("model_transaction_policy")
        return bytes(config.SerializeToString(deterministic=True))


async def prepare(
    host: LoadHost,
    model_dir: Path,
    config_json: str | bytes | None = None,
    model_name: str | None = None,
) -> PreparedConfig:
    """The frozen config of the model in ``model_dir``: its ``config.pbtxt``, or
    ``config_json`` (a load request's), completed, normalized and validated.
    ``model_name``: the model's name when it is not its folder's (a folder a registered
    repository maps to another name): its config is renamed to it, as Triton does.

    Raises DespinaError with Triton's text for what Triton refuses; past the repository
    agents the text names no server path (:func:`~despina.repository.redact.without_paths`).
    """
    if config_json is not None:
        draft = cfg.parse_json(config_json, f"config of '{model_dir.name}'")
    else:
        draft, _ = cfg.read_model_config(model_dir)
    model_dir = await run_agents(host.registry.agents, draft, model_dir)
    name, versions = model_dir.name, available_versions(model_dir)
    if model_name is not None and model_name != name:  # mapped: served under its mapping
        name = draft.name = model_name
    if not draft.name:
        draft.name = name
    try:
        backend_from_name(host, draft, model_dir, versions, name)
        validate_model(draft)
        if not host.settings.auto_complete:
            validate_io(draft)
        backend: type[Backend] | None = None
        named_file = bool(draft.default_model_filename)
        if draft.platform != cfg.ENSEMBLE_PLATFORM:
            if not versions:
                raise ConfigError(no_version_text(model_dir))
            instance_groups.check_listed(
                draft, host.gpus.supported, host.gpus.min_compute_capability
            )
            backend = resolve_backend(host, draft, model_dir, versions)
            _name_backend(draft, backend)
            check_runtime(draft, backend.name, name)
        runtime_dir = python_based_dir(host, draft.backend)
        if runtime_dir is not None:
            draft.runtime = PYTHON_RUNTIME
        cfg.check_file_names(draft, name)  # before auto-complete opens the model file
        if backend is not None:
            if runtime_dir is None and backend.default_model_filename:
                _check_model_files(draft, model_dir, versions, backend.name, named_file)
            if host.settings.auto_complete:
                # the newest version the policy loads (Triton completes from a loaded one)
                version = (select_versions(draft, versions) or versions)[-1]
                context = ModelContext(
                    name, version, model_dir, draft, host.backend_host, runtime_dir=runtime_dir
                )
                await backend(context).auto_complete()
        normalize(draft)
        if backend is not None:
            _place_instances(host, draft, backend)
        validate_completed(draft, name)
    except DespinaError as exc:
        without_paths(exc, model_dir, host.models.repository.roots)
        raise
    return PreparedConfig(draft, backend, model_dir, tuple(versions), runtime_dir)


def check_runtime(draft: ModelConfig, backend: str, name: str) -> None:
    """ConfigError with Triton's text for a ``runtime`` that names neither the backend's
    library (``libtriton_<backend>.so``, which Despina's backends stand for) nor a
    Python-based backend's ``model.py``: one leaving the backend folder (absolute, or
    through ``..``) escapes it, any other is not found."""
    runtime = draft.runtime
    if not runtime or runtime in (PYTHON_RUNTIME, f"libtriton_{backend}.so"):
        return
    path = PurePosixPath(runtime)
    if path.is_absolute() or ".." in path.parts:
        raise ConfigError(
            f"backend library name '{runtime}' escapes backend directory, for model "
            f"'{name}', check model config runtime field"
        )
    raise ConfigError(f"unable to find backend library '{runtime}' for model '{name}'")


def _name_backend(draft: ModelConfig, backend: type[Backend]) -> None:
    """Name the resolved backend (when neither ``backend`` nor ``platform`` does) and its
    default model file (when the config names none)."""
    if not draft.backend and not draft.platform:
        draft.backend = backend.name
    if not draft.default_model_filename and backend.default_model_filename:
        draft.default_model_filename = backend.default_model_filename


def _check_model_files(
    draft: ModelConfig, model_dir: Path, versions: list[int], backend: str, named: bool
) -> None:
    """ConfigError naming the fix when a version to load lacks its model file (a file
    under another name, a file beside the version folder); skipped for
    ``cc_model_filenames``, and not called for backends that name no model file (they read
    none, whatever the config names: ``model.<backend>`` from the model's name).
    ``named``: whether the config itself named ``default_model_filename``."""
    filename = draft.default_model_filename
    if not filename or draft.cc_model_filenames:
        return
    for version in select_versions(draft, versions):
        if not (model_dir / str(version) / filename).exists():
            # as Triton, where the backend finds it missing: a failure of that version
            missing = ConfigError(
                missing_model_file_text(model_dir, version, filename, backend, named)
            )
            failure = (version, "UNAVAILABLE", missing.status_text)
            raise ConfigError(version_failures_text(model_dir.name, [failure]))


def normalize(draft: ModelConfig) -> None:
    """Fill Triton's defaults: platform (from ``backend``), version policy, the dynamic
    batcher's preferred batch size (``max_batch_size``); not for ensembles: the sequence
    batcher's idle time and Oldest preferred batch size (``max_batch_size``), pinned
    memory on, and no dynamic batcher without batching. Instance groups:
    :func:`despina.repository.instance_groups.complete`."""
    if draft.backend in cfg.BACKEND_TO_PLATFORM and not draft.platform:
        draft.platform = cfg.BACKEND_TO_PLATFORM[draft.backend]
    if not draft.HasField("version_policy"):
        draft.version_policy.latest.num_versions = 1
    if draft.HasField("dynamic_batching") and draft.max_batch_size > 0:
        preferred = draft.dynamic_batching.preferred_batch_size
        if not preferred:
            preferred.append(draft.max_batch_size)
    if draft.platform == cfg.ENSEMBLE_PLATFORM:
        return
    if draft.HasField("sequence_batching"):
        sequence = draft.sequence_batching
        if not sequence.max_sequence_idle_microseconds:
            sequence.max_sequence_idle_microseconds = DEFAULT_IDLE_US
        oldest = sequence.WhichOneof("strategy_choice") == "oldest"
        if oldest and not sequence.oldest.preferred_batch_size and draft.max_batch_size > 0:
            sequence.oldest.preferred_batch_size.append(draft.max_batch_size)
    optimization = draft.optimization
    for pinned in ("input_pinned_memory", "output_pinned_memory"):
        if not optimization.HasField(pinned):
            getattr(optimization, pinned).enable = True
    if draft.HasField("dynamic_batching") and draft.max_batch_size == 0:
        draft.ClearField("dynamic_batching")


def _place_instances(host: LoadHost, draft: ModelConfig, backend: type[Backend]) -> None:
    """Complete the instance groups for ``backend`` on this server's GPUs; ConfigError
    (Triton's text) for one that cannot be placed."""
    support, gpus = backend.gpu_support(), host.gpus.supported
    groups = instance_groups.complete(draft, gpus, support)
    del draft.instance_group[:]
    draft.instance_group.extend(groups)
    instance_groups.check(draft, gpus, support, host.gpus.min_compute_capability)
