"""Version folders and version policies."""

from __future__ import annotations

from pathlib import Path

import pytest
from despina.errors import ConfigError, NotFound
from despina.repository import config as cfg
from despina.repository.folders import (
    ModelRepository,
    available_versions,
    missing_specific_versions,
    select_versions,
)


def _model(root: Path, name: str, versions: list[str]) -> Path:
    for version in versions:
        (root / name / version).mkdir(parents=True)
    return root / name


def test_only_positive_numeric_folders_are_versions(tmp_path: Path) -> None:
    model = _model(tmp_path, "m", ["1", "3", "10", "0", "latest", ".hidden"])
    (model / "7").write_text("a file, not a folder")
    assert available_versions(model) == [1, 3, 10]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", [10]),
        ("version_policy: { latest: { num_versions: 2 } }", [3, 10]),
        ("version_policy: { all: {} }", [1, 3, 10]),
        ("version_policy: { specific: { versions: [ 3, 1 ] } }", [1, 3]),
    ],
)
def test_version_policies(policy: str, expected: list[int]) -> None:
    config = cfg.parse_text(policy)
    assert select_versions(config, [1, 3, 10]) == expected


def test_specific_version_without_folder_is_left_out() -> None:
    """As Triton: only the named versions that have a folder load."""
    config = cfg.parse_text('name: "m" version_policy: { specific: { versions: [ 4, 3 ] } }')
    assert select_versions(config, [1, 3]) == [3]
    assert missing_specific_versions(config, [1, 3]) == [4]


def test_several_repositories_and_ambiguous_names(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    _model(first, "x", ["1"])
    _model(first, "both", ["1"])
    _model(second, "y", ["1"])
    _model(second, "both", ["1"])
    repository = ModelRepository([str(first), str(second)])
    assert repository.model_names() == ["both", "x", "y"]
    assert repository.model_dir("y") == second / "y"
    with pytest.raises(ConfigError, match="more than one model repository"):
        repository.model_dir("both")
    with pytest.raises(NotFound):
        repository.model_dir("missing")


def test_registered_repositories_and_their_mappings(tmp_path: Path) -> None:
    """Triton's repository registration: a folder's models served as well, a mapped folder
    under its mapped name only; Triton's texts for a missing, repeated or conflicting one."""
    from despina.errors import AlreadyExists, InvalidArgument

    base, extra = tmp_path / "base", tmp_path / "extra"
    _model(base, "x", ["1"])
    _model(extra, "model", ["1"])
    _model(extra, "helper", ["1"])
    repository = ModelRepository([str(base)])
    repository.register(str(extra), {"renamed": "model"})
    assert repository.model_names() == ["helper", "renamed", "x"]
    assert repository.model_dir("renamed") == extra.resolve() / "model"
    assert repository.model_dir("helper") == extra.resolve() / "helper"
    with pytest.raises(NotFound):
        repository.model_dir("model")  # mapped: served under its mapped name only
    with pytest.raises(AlreadyExists, match=r"model repository '.*' has already been registered"):
        repository.register(str(extra))
    other = tmp_path / "other"
    _model(other, "model", ["1"])
    with pytest.raises(AlreadyExists, match="there is a conflicting mapping for 'renamed'"):
        repository.register(str(other), {"renamed": "model"})
    with pytest.raises(InvalidArgument, match=r"failed to register '.*', repository not found"):
        repository.register(str(tmp_path / "missing"))
    repository.unregister(str(extra))
    assert repository.model_names() == ["x"]
    with pytest.raises(InvalidArgument, match=r"failed to unregister '.*', repository not found"):
        repository.unregister(str(extra))
