"""Model repositories through ``tritonserver``: ``register_model_repository`` and
``unregister_model_repository`` (EXPLICIT control mode, Triton's ``{folder: name}``
mapping) and ``poll_model_repository`` (POLL control mode), on real servers."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonserver

X = np.array([1, 2, 3, 4], dtype=np.float32)


@pytest.fixture(scope="module")
def other_repository(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second repository: the folder ``renamed_folder`` holding a copy of add_sub."""
    root = tmp_path_factory.mktemp("other")
    shutil.copytree(repository / "add_sub", root / "renamed_folder")
    return root


@pytest.fixture(scope="module")
def poll_repository(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository of its own for the POLL-mode server: add_sub alone."""
    root = tmp_path_factory.mktemp("polled")
    shutil.copytree(repository / "add_sub", root / "add_sub")
    return root


@pytest.fixture(scope="module")
def poll_server(poll_repository: Path) -> Iterator[tritonserver.Server]:
    server = tritonserver.Server(
        model_repository=str(poll_repository),
        model_control_mode=tritonserver.ModelControlMode.POLL,
        exit_timeout=5,
    ).start(wait_until_ready=True, timeout=120)
    yield server
    server.stop()


def _names(server: tritonserver.Server) -> set[str]:
    return {name for name, _ in server.models()}


def _add_sub(model: tritonserver.Model) -> np.ndarray:
    (response,) = model.infer(inputs={"INPUT0": X, "INPUT1": X})
    return np.from_dlpack(response.outputs["OUTPUT0"])


def test_register_load_and_unregister(server: tritonserver.Server, other_repository: Path) -> None:
    path = str(other_repository)
    server.register_model_repository(path, {"renamed_folder": "renamed"})
    try:
        assert {"renamed", "add_sub"} <= _names(server)
        assert "renamed_folder" not in _names(server)
        np.testing.assert_array_equal(_add_sub(server.load("renamed")), X + X)
        with pytest.raises(tritonserver.AlreadyExistsError, match="already been registered"):
            server.register_model_repository(path)
    finally:
        server.unregister_model_repository(path)
    assert server.model("renamed").ready()  # a loaded model stays loaded
    server.unload("renamed", wait_until_unloaded=True, timeout=60)
    assert not server.model("renamed").ready()
    with pytest.raises(tritonserver.InvalidArgumentError, match="not found"):
        server.unregister_model_repository(path)


def test_register_refuses_bad_mappings_and_paths(
    server: tritonserver.Server, other_repository: Path
) -> None:
    path = str(other_repository)
    with pytest.raises(tritonserver.InvalidArgumentError, match="conflicting mapping for 'x'"):
        server.register_model_repository(path, {"renamed_folder": "x", "other": "x"})
    with pytest.raises(tritonserver.InvalidArgumentError, match="must be a string"):
        server.register_model_repository(path, {"renamed_folder": 1})  # type: ignore[dict-item]
    with pytest.raises(tritonserver.InvalidArgumentError, match="not found"):
        server.register_model_repository(str(other_repository / "missing"))
    with pytest.raises(tritonserver.InvalidArgumentError, match="not found"):
        server.unregister_model_repository(path)  # none of them was registered


def test_poll_applies_added_and_removed_folders(
    poll_server: tritonserver.Server, poll_repository: Path
) -> None:
    shutil.copytree(poll_repository / "add_sub", poll_repository / "added")
    poll_server.poll_model_repository()
    np.testing.assert_array_equal(_add_sub(poll_server.model("added")), X + X)
    shutil.rmtree(poll_repository / "added")
    poll_server.poll_model_repository()
    assert not poll_server.model("added").ready()
    assert poll_server.model("add_sub").ready()


def test_control_modes_refuse_what_they_do_not_allow(
    server: tritonserver.Server, poll_server: tritonserver.Server, other_repository: Path
) -> None:
    with pytest.raises(tritonserver.UnavailableError, match="polling is disabled"):
        server.poll_model_repository()
    with pytest.raises(tritonserver.UnsupportedError, match="not EXPLICIT"):
        poll_server.register_model_repository(str(other_repository))
