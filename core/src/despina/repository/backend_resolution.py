"""Which installed backend serves a model: :func:`resolve_backend`.

From the config's ``backend``, else its ``platform``, else the model file a version folder
holds; a backend no plugin provides may be Python-based (:func:`python_based_dir`). A model
whose backend cannot be told fails with Triton's text and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from despina.errors import ConfigError, Unavailable
from despina.plugin.backend import PYTHON_RUNTIME, Backend
from despina.repository import config as cfg
from despina.repository.folders import available_versions, no_version_hints
from despina.repository.paths import safe_join

if TYPE_CHECKING:
    from despina.models.load_host import LoadHost


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
    folders = _version_folders(model_dir, versions)
    wanted = config.default_model_filename
    by_file = _by_model_file(backends, folders)
    if by_file is not None:
        return by_file
    if wanted and any((f / wanted).exists() for f in folders):
        by_extension = _by_extension(backends, wanted)
        if len(by_extension) == 1:
            return by_extension[0]
    raise ConfigError(_no_backend_text(backends, model_dir.name, model_dir, folders))


def backend_from_name(
    server: LoadHost, config: cfg.ModelConfig, model_dir: Path, versions: list[int], name: str
) -> None:
    """Triton's last resort when neither the config (``backend``, ``platform``,
    ``default_model_filename``) nor a model file of an installed backend in a version
    folder tells the backend: a model named ``<anything>.<backend>`` gets ``backend:
    "<backend>"`` and ``default_model_filename: "model.<backend>"``; any other name fails
    with Triton's "Invalid model name" text and what would fix it. Triton does this when it
    polls the repository, before it looks for version folders."""
    if config.backend or config.platform or config.default_model_filename:
        return
    backends: dict[str, type[Backend]] = server.registry.backends
    folders = _version_folders(model_dir, versions)
    if _by_model_file(backends, folders) is not None:
        return
    _, dot, backend = name.partition(".")
    if not dot:
        raise ConfigError(_no_backend_text(backends, name, model_dir, folders))
    config.backend = backend
    config.default_model_filename = f"model.{backend}"


def _version_folders(model_dir: Path, versions: list[int]) -> list[Path]:
    """The version folders, latest first."""
    return [model_dir / str(v) for v in reversed(versions)]


def _by_model_file(backends: dict[str, type[Backend]], folders: list[Path]) -> type[Backend] | None:
    """The installed backend whose default model file a version folder holds, else None."""
    for cls in backends.values():
        if cls.default_model_filename and any(
            (f / cls.default_model_filename).exists() for f in folders
        ):
            return cls
    return None


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
        f"unable to find backend library for backend '{name}', try specifying runtime on the "
        f"model configuration ({reason}; install the plugin that provides it or correct the "
        "config's backend/platform)"
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
    backends: dict[str, type[Backend]], model: str, model_dir: Path, folders: list[Path]
) -> str:
    """Triton's text for a model whose backend cannot be told from its config, name or
    files, with what each installed backend looks for and, for a file under another name
    (``resnet.onnx``), the rename or ``default_model_filename`` that fixes it; for a
    folder without version folders, what it holds instead."""
    text = (
        f"Invalid model name: Could not determine backend for model '{model}' with no "
        "backend in model configuration. Expected model name of the form "
        "'model.<backend_name>'."
    )
    looks_for = ", ".join(
        f"'{cls.default_model_filename}' ({cls.name})"
        for cls in sorted(backends.values(), key=lambda c: c.name)
        if cls.default_model_filename
    )
    text += f" The installed backends look for {looks_for or 'no model file'}"
    if not folders:
        return f"{text}; {no_version_hints(model_dir)}"
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
