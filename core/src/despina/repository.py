"""Model repositories: which model folders exist and which versions to serve.

A repository is a folder of model folders (``<repo>/<model>/config.pbtxt`` and numeric
version folders). Several repositories may be given; a model name found in two is an
error for that model. :func:`select_versions` applies a config's ``version_policy``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from despina.config import ModelConfig
from despina.errors import ConfigError, NotFound
from despina.paths import check_model_name, safe_join

if TYPE_CHECKING:
    from despina.settings import Stash


class ModelRepository:
    """The union of one or more repositories: local folders, or URLs (``s3://...``) that a
    repository source plugin copies into a local folder (:meth:`sync`)."""

    def __init__(
        self,
        locations: Sequence[str],
        sources: Mapping[str, type[Any]] | None = None,
        stash: Stash | None = None,
    ) -> None:
        self.locations = list(locations)
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

    async def sync(self) -> None:
        """Bring every remote repository up to date in its local folder (poll mode calls
        this before each poll); local folders need nothing."""
        for index, source in self._remote:
            self.roots[index] = Path(await source.localize())

    def model_names(self) -> list[str]:
        """Every model folder name, sorted; hidden folders are skipped."""
        names: set[str] = set()
        for root in self.roots:
            if root.is_dir():
                names.update(
                    p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                )
        return sorted(names)

    def model_dir(self, name: str) -> Path:
        """The folder of model ``name``; InvalidArgument for a name that is not one
        folder name or a folder that leads out of its repository (:mod:`despina.paths`),
        NotFound if absent, ConfigError if ambiguous."""
        check_model_name(name)
        found = [root / name for root in self.roots if (root / name).is_dir()]
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
        if entry.is_dir() and entry.name.isdigit() and int(entry.name) > 0:
            versions.append(int(entry.name))
    return sorted(versions)


def select_versions(config: ModelConfig, available: Sequence[int]) -> list[int]:
    """The versions to serve under the config's ``version_policy`` (default: latest 1).

    Raises ConfigError when ``specific`` names a version that has no folder.
    """
    policy = config.version_policy
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return sorted(available)
    if kind == "specific":
        wanted = sorted(int(v) for v in policy.specific.versions)
        missing = [v for v in wanted if v not in available]
        if missing:
            raise ConfigError(
                f"model '{config.name}': version_policy names versions {missing} "
                "that have no version folder"
            )
        return wanted
    count = int(policy.latest.num_versions) if kind == "latest" else 1
    return sorted(available)[-max(count, 1) :]
