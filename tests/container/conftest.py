"""Fixtures of the image test (``make image-test``): the image, built once per session
from ``$BASE_IMAGE`` (default :data:`podman_kit.LOCAL_BASE`) and removed afterwards, a
model repository, and containers of the image, each removed by name however the test
ends. Names carry a per-session token, so two runs never meet."""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from despina.testing import ADD_SUB_MODEL_PY, RepositoryBuilder

sys.path.insert(0, str(Path(__file__).parent))

from image_models import DRAIN_CONFIG, DRAIN_MODEL_PY, ONNX_CONFIG, PYTHON_CONFIG, onnx_add_sub
from podman_kit import (
    LOCAL_BASE,
    Container,
    Podman,
    Unavailable,
    build_image,
    ensure_base,
    remove_image,
    running,
    usable_podman,
)

TOKEN = uuid.uuid4().hex[:8]
BASE = os.environ.get("BASE_IMAGE", LOCAL_BASE)
#: Every container's server flags: HTTP bodies up to 300 MB (tensors over 64 MB).
SERVER_ARGS = ("--http-max-input-size=300000000",)


@pytest.fixture(scope="session")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("image")


@pytest.fixture(scope="session")
def podman(workdir: Path) -> Podman:
    """Podman as this host can run it, with :data:`BASE` present; skips with the reason
    when the host cannot run containers."""
    try:
        ensure_base(BASE, workdir)
        return usable_podman(BASE, workdir)
    except Unavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def image(podman: Podman, workdir: Path) -> Iterator[str]:
    """The tag of the image deploy/container/build.sh built for this session."""
    tag = f"localhost/despina:image-test-{TOKEN}"
    try:
        build_image(podman, BASE, tag, workdir / "build.log")
        yield tag
    finally:
        remove_image(podman, tag)


@pytest.fixture(scope="session")
def repository(workdir: Path) -> Path:
    """``add_sub`` (Python), ``add_sub_onnx`` (ONNX) and ``drain`` (Python), readable by
    the container's uid 1000."""
    models = RepositoryBuilder(workdir / "models")
    models.add("add_sub", PYTHON_CONFIG, {"1/model.py": ADD_SUB_MODEL_PY})
    models.add("add_sub_onnx", ONNX_CONFIG, {"1/model.onnx": onnx_add_sub()})
    models.add("drain", DRAIN_CONFIG, {"1/model.py": DRAIN_MODEL_PY})
    for path in [models.root, *models.root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return models.root


def _running(
    podman: Podman, image: str, repository: Path, role: str, run_args: Sequence[str]
) -> contextlib.AbstractContextManager[Container]:
    name = f"despina-image-test-{TOKEN}-{role}"
    return running(podman, image, name, repository, run_args, SERVER_ARGS)


@pytest.fixture
def launch(podman: Podman, image: str, repository: Path) -> Iterator[Callable[..., Container]]:
    """Factory: ``launch(role, run_args)`` -> a ready container of the image (named after
    ``role``), removed after the test."""
    with contextlib.ExitStack() as stack:

        def start(role: str, run_args: Sequence[str] = ()) -> Container:
            return stack.enter_context(_running(podman, image, repository, role, run_args))

        yield start


@pytest.fixture(scope="session")
def server(podman: Podman, image: str, repository: Path) -> Iterator[Container]:
    """One ready container with ``--shm-size=1g``, shared by the tests that only read."""
    with _running(podman, image, repository, "main", ["--shm-size=1g"]) as container:
        yield container
