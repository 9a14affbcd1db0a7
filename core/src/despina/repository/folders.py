"""Model repositories: which model folders exist and which versions to serve.

A repository is a folder of model folders (``<repo>/<model>/config.pbtxt`` and numeric
version folders). Several repositories may be given; a model name found in two is an
error for that model. :func:`select_versions` applies a config's ``version_policy``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from despina.errors import AlreadyExists, ConfigError, InvalidArgument, NotFound
from despina.repository.config import ModelConfig
from despina.repository.paths import check_model_name, safe_join
from despina.serving.digits import ascii_digits

if TYPE_CHECKING:
    from despina.serving.settings import Stash


class ModelRepository:
    """The union of one or more repositories: local folders, or URLs (``s3://...``) that a
    repository source plugin copies into a local folder (:meth:`sync`), and the local
    folders registered while the server runs (:meth:`register`, Triton's
    ``TRITONSERVER_ServerRegisterModelRepository``), whose model folders may be served
    under other names."""

    def __init__(
        self,
        locations: Sequence[str],
        sources: Mapping[str, type[Any]] | None = None,
        stash: Stash | None = None,
    ) -> None:
        self.locations = list(dict.fromkeys(locations))  # as Triton: one given twice is one
        self._remote: list[tuple[int, Any]] = []
        self.roots: list[Path] = []
        for index, location in enumerate(self.locations):
            scheme, sep, _ = location.partition("://")
            if not sep:
                self.roots.append(Path(location).expanduser().resolve())
                continue
            source = (sources or {}).get(scheme)
            if source is None:
                installed = ", ".join(sorted(sources or {})) or "none"
                raise ConfigError(
                    f"no installed repository source handles '{scheme}://' "
                    f"(installed schemes: {installed})"
                )
            self._remote.append((index, source(location, stash)))
            self.roots.append(Path())  # replaced by sync()
        #: Registered repositories (as given) -> {model name: its folder in them}.
        self.registered: dict[str, dict[str, str]] = {}
        #: Model name -> (its registered repository's folder, its folder name there).
        self._mapped: dict[str, tuple[Path, str]] = {}

    def register(self, repository: str, mapping: Mapping[str, str] | None = None) -> None:
        """Serve the model folders of the local folder ``repository`` as well, the folders
        ``mapping`` names (``{model name: folder name}``) under those names only.
        InvalidArgument when it is not a folder, AlreadyExists when it is registered
        already or a mapped name is (Triton's texts)."""
        root = Path(repository).expanduser()
        if not root.is_dir():
            raise InvalidArgument(f"failed to register '{repository}', repository not found")
        if repository in self.registered:
            raise AlreadyExists(f"model repository '{repository}' has already been registered")
        mapping = dict(mapping or {})
        for name in mapping:
            if name in self._mapped:
                raise AlreadyExists(
                    f"failed to register '{name}', there is a conflicting mapping for '{name}'"
                )
        for name, folder in mapping.items():
            check_model_name(name)
            check_model_name(folder)
        resolved = root.resolve()
        self.registered[repository] = mapping
        for name, folder in mapping.items():
            self._mapped[name] = (resolved, folder)

    def unregister(self, repository: str) -> None:
        """Stop serving the folders of a registered ``repository`` (loaded models stay
        loaded); InvalidArgument when it is not registered (Triton's text)."""
        mapping = self.registered.pop(repository, None)
        if mapping is None:
            raise InvalidArgument(f"failed to unregister '{repository}', repository not found")
        for name in mapping:
            self._mapped.pop(name, None)

    def _search_roots(self) -> list[tuple[Path, set[str]]]:
        """Every root searched by folder name, each with the folder names it hides (the
        mapped ones of a registered repository)."""
        roots: list[tuple[Path, set[str]]] = [(root, set()) for root in self.roots]
        for repository, mapping in self.registered.items():
            roots.append((Path(repository).expanduser().resolve(), set(mapping.values())))
        return roots

    def missing_roots(self) -> list[str]:
        """The local repositories given that are not folders (as given), which Triton
        fails to stat at start-up."""
        remote = {index for index, _ in self._remote}
        return [
            location
            for index, (location, root) in enumerate(zip(self.locations, self.roots, strict=True))
            if index not in remote and not root.is_dir()
        ]

    async def sync(self) -> None:
        """Bring every remote repository up to date in its local folder (poll mode calls
        this before each poll); local folders need nothing."""
        for index, source in self._remote:
            self.roots[index] = Path(await source.localize())

    def model_names(self) -> list[str]:
        """Every model folder name, sorted; hidden folders are skipped."""
        names: set[str] = set(self._mapped)
        for root, hidden in self._search_roots():
            if root.is_dir():
                names.update(
                    p.name
                    for p in root.iterdir()
                    if p.is_dir() and not p.name.startswith(".") and p.name not in hidden
                )
        return sorted(names)

    def model_dir(self, name: str) -> Path:
        """The folder of model ``name``; InvalidArgument for a name that is not one
        folder name or a folder that leads out of its repository (:mod:`despina.repository.paths`),
        NotFound if absent, ConfigError if ambiguous."""
        check_model_name(name)
        mapped = self._mapped.get(name)
        if mapped is not None:
            root, folder = mapped
            path = safe_join(root, folder, "model folder")
            if not path.is_dir():
                raise NotFound(f"failed to load '{name}', failed to poll from model repository")
            return path
        found = [
            root / name
            for root, hidden in self._search_roots()
            if name not in hidden and (root / name).is_dir()
        ]
        for path in found:
            safe_join(path.parent, name, "model folder")
        if not found:
            raise NotFound(f"failed to load '{name}', failed to poll from model repository")
        if len(found) > 1:
            raise ConfigError(f"model '{name}' appears in more than one model repository")
        return found[0]


def available_versions(model_dir: Path) -> list[int]:
    """Numeric version folders of a model, ascending (other entries are ignored)."""
    versions = []
    for entry in model_dir.iterdir():
        if entry.is_dir() and ascii_digits(entry.name) and int(entry.name) > 0:
            versions.append(int(entry.name))
    return sorted(versions)


def _names(paths: Sequence[Path], limit: int = 4) -> str:
    shown = ", ".join(f"'{p.name}'" for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _visible(model_dir: Path) -> list[Path]:
    try:
        entries = sorted(model_dir.iterdir())
    except OSError:
        return []
    return [e for e in entries if not e.name.startswith(".")]


def no_version_text(model_dir: Path) -> str:
    """Why a model folder has no version to load, and the fix: Triton's text ("at least
    one version must be available ..."), then what the folder holds instead (a folder
    ``v1`` that is not a number, a model file lying directly in the model folder)."""
    name = model_dir.name
    return (
        f"load failed for model '{name}': at least one version must be available under "
        f"the version policy of model '{name}': {no_version_hints(model_dir)}"
    )


def no_version_hints(model_dir: Path) -> str:
    """That a model folder has no version folder, and what it holds instead."""
    name = model_dir.name
    text = (
        "the model folder has no version folder (a folder named by a positive integer "
        f"holding the model file, e.g. '{name}/1/')"
    )
    entries = _visible(model_dir)
    folders = [e for e in entries if e.is_dir()]
    files = [e for e in entries if e.is_file() and e.name != "config.pbtxt"]
    hints = []
    for folder in folders[:4]:
        digits = re.sub(r"\D", "", folder.name)
        if digits and int(digits) > 0:
            hints.append(f"rename folder '{folder.name}' to '{int(digits)}'")
        else:
            hints.append(
                f"folder '{folder.name}' is not a version folder (versions are numbers from 1)"
            )
    if files:
        verb = "lies" if len(files) == 1 else "lie"
        hints.append(
            f"{_names(files)} {verb} directly in the model folder: move "
            f"{'it' if len(files) == 1 else 'them'} into a version folder, e.g. "
            f"'{name}/1/{files[0].name}'"
        )
    if not folders and not files:
        hints.append("the model folder holds no model file")
    return f"{text}; {'; '.join(hints)}"


def version_failures_text(name: str, failures: Sequence[tuple[int, str, str]]) -> str:
    """Triton's text for a load of model ``name`` whose versions failed, given each as
    (version, state, reason): ``load failed for model 'm': version 1 is at UNAVAILABLE
    state: <reason>;`` (one clause per version)."""
    states = "".join(f"version {v} is at {state} state: {why};" for v, state, why in failures)
    return f"load failed for model '{name}': {states}\n"


def missing_model_file_text(
    model_dir: Path, version: int, filename: str, backend: str, configured: bool
) -> str:
    """A version folder without the file the backend loads (the backend's text: "model
    file '1/model.onnx' not found", the Python backend's "Python model file not found
    in ..."), and the fix: another file with the same extension (``resnet.onnx``) to
    rename or name in ``default_model_filename``, or a model file lying outside the
    version folder."""
    name = model_dir.name
    entries = _visible(model_dir / str(version))
    label = f"{version}/{filename}"
    if backend == "python":
        text = f"Python model file not found in '{label}' (model '{name}')"
    else:
        text = f"model '{name}': model file '{label}' not found"
    named = "the config's default_model_filename" if configured else f"the {backend} backend"
    suffix = Path(filename).suffix
    alike = [e for e in entries if suffix and e.suffix == suffix]
    if alike:
        other = alike[0].name
        return (
            f"{text}: version folder {version} holds '{other}' but {named} looks for "
            f"'{filename}': rename it to '{filename}' or set default_model_filename: "
            f'"{other}" in config.pbtxt'
        )
    if (model_dir / filename).exists():
        return (
            f"{text}: '{filename}' lies directly in the model folder: move it to "
            f"'{name}/{version}/{filename}'"
        )
    held = f"holds {_names(entries)}" if entries else "is empty"
    return (
        f"{text}: version folder {version} {held}; {named} looks for '{filename}': put the "
        "model file there under that name or set default_model_filename in config.pbtxt"
    )


def missing_specific_versions(config: ModelConfig, available: Sequence[int]) -> list[int]:
    """The versions a ``specific`` version policy names that have no folder."""
    policy = config.version_policy
    if policy.WhichOneof("policy_choice") != "specific":
        return []
    return sorted({int(v) for v in policy.specific.versions} - set(available))


def select_versions(config: ModelConfig, available: Sequence[int]) -> list[int]:
    """The versions to serve under the config's ``version_policy`` (default: latest 1).
    As Triton, ``specific`` versions without a folder are left out
    (:func:`missing_specific_versions` names them)."""
    policy = config.version_policy
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return sorted(available)
    if kind == "specific":
        return sorted({int(v) for v in policy.specific.versions} & set(available))
    count = int(policy.latest.num_versions) if kind == "latest" else 1
    return sorted(available)[-max(count, 1) :]
