"""Plugin discovery: builtins through entry points, conflicts, broken plugins, and a
third-party backend distribution installed from a folder and served over the wire."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import toy_backend
from despina.plugin.backend import Backend
from despina.plugin.hookspecs import hookimpl
from despina.plugin.manager import PluginError, create_plugins
from despina.serving.server import Server
from despina.testing import RepositoryBuilder, RunningServer, free_port
from toy_backend import toy_config

Start = Callable[..., RunningServer]

THIRD_PARTY_PYPROJECT = """
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "1.2.3"
dependencies = ["despina"]

[project.entry-points.despina]
{entry} = "{module}"
"""

# What a backend author writes: one hook returning one Backend class.
DOUBLER = """
from despina.plugin.backend import Backend, ModelInstance
from despina.plugin.hookspecs import hookimpl
from despina.inference.request import InferenceResponse


class Doubler(ModelInstance):
    async def execute(self, requests):
        return [InferenceResponse(outputs={"Y": r.inputs["X"] * 2}) for r in requests]


class DoublerBackend(Backend):
    name = "doubler"
    default_model_filename = "model.double"

    async def create_instance(self, spec):
        return Doubler()


@hookimpl
def despina_backends():
    return [DoublerBackend]
"""

DOUBLER_CONFIG = """
backend: "doubler"
input [ { name: "X" data_type: TYPE_INT32 dims: [ 3 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 3 ] } ]
"""


def _distribution(root: Path, dist: str, entry: str, module: str, source: str) -> Path:
    folder = root / dist
    (folder / module).mkdir(parents=True)
    (folder / "pyproject.toml").write_text(
        THIRD_PARTY_PYPROJECT.format(dist=dist, entry=entry, module=module)
    )
    (folder / module / "__init__.py").write_text(textwrap.dedent(source))
    return folder


@pytest.fixture(scope="module")
def third_party(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two third-party distributions pip-installed into a target folder: a working
    backend and one whose module fails to import."""
    root = tmp_path_factory.mktemp("third_party")
    target = root / "site"
    good = _distribution(
        root, "despina-backend-doubler", "doubler", "despina_backend_doubler", DOUBLER
    )
    bad = _distribution(
        root,
        "despina-backend-broken",
        "brokenbackend",
        "despina_backend_broken",
        "raise ImportError('libbroken.so: cannot open shared object file')\n",
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(good),
            str(bad),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def test_builtin_schedulers_come_through_the_entry_point() -> None:
    rows = {row["name"]: row for row in create_plugins().describe()}
    assert rows["schedulers"]["distribution"] == "despina"
    assert {"default", "dynamic"} <= set(rows["schedulers"]["provides"]["schedulers"])


def test_two_plugins_claiming_one_backend_name_are_refused() -> None:
    class Impostor(Backend):
        name = "toy"

        async def create_instance(self, spec):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    class ImpostorPlugin:
        @hookimpl
        def despina_backends(self) -> list[type[Backend]]:
            return [Impostor]

    with pytest.raises(PluginError, match="backends name 'toy' is claimed by both"):
        Server(plugins=[toy_backend, ImpostorPlugin()])


def test_misspelled_hooks_are_caught() -> None:
    class Typo:
        @hookimpl
        def despina_backend(self) -> list[type[Backend]]:
            return []

    with pytest.raises(PluginError, match="despina_backend"):
        create_plugins([Typo()])


def test_broken_plugin_is_reported_and_its_models_are_unavailable(
    third_party: Path,
    monkeypatch: pytest.MonkeyPatch,
    model_repository: RepositoryBuilder,
    despina_server: Start,
) -> None:
    monkeypatch.syspath_prepend(str(third_party))
    model_repository.add("needs_broken", 'backend: "brokenbackend"', {"1/model.bin": ""})
    model_repository.add("fine", toy_config(), {"1/model.toy": ""})
    running = despina_server(
        model_repository.root, ["--exit-on-error=false"], plugins=[toy_backend]
    )
    (failure,) = [f for f in running.server.plugins.failures if f.origin.name == "brokenbackend"]
    assert failure.origin.distribution == "despina-backend-broken"
    assert failure.origin.version == "1.2.3"
    reason = running.server.models.entries["needs_broken"].reason
    assert "unknown backend 'brokenbackend'" in reason
    assert "despina-backend-broken 1.2.3 failed to import: ImportError: libbroken.so" in reason
    assert running.server.models.get("fine").ready


class FrontendThatFailsToImport:
    """A plugin whose entry module imports, but whose hook's lazy import fails."""

    @hookimpl
    def despina_frontends(self) -> list[type]:
        raise ImportError("cannot import name 'CORE' from 'despina'")


def test_capability_hook_that_raises_is_a_plugin_failure_not_a_dead_server(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("fine", toy_config(), {"1/model.toy": ""})
    running = despina_server(
        model_repository.root, plugins=[toy_backend, FrontendThatFailsToImport()]
    )
    (failure,) = [f for f in running.server.plugins.failures if f.stage != "import"]
    assert failure.stage == "despina_frontends"
    assert failure.describe().endswith(
        "failed in its despina_frontends hook: ImportError: cannot import name 'CORE' from "
        "'despina'"
    )
    assert running.server.models.get("fine").ready
    assert running.http_port  # the other frontends serve


def test_third_party_backend_installed_from_a_folder_serves_over_http(
    third_party: Path, tmp_path: Path
) -> None:
    pytest.importorskip("despina_frontend_http", reason="needs the HTTP frontend plugin installed")
    import tritonclient.http as httpclient

    repo = RepositoryBuilder(tmp_path / "repo")
    repo.add("double", DOUBLER_CONFIG, {"1/model.double": ""})
    port = free_port()
    env_path = f"{third_party}"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "despina",
            "serve",
            f"--model-repository={repo.root}",
            f"--http-port={port}",
            "--allow-grpc=false",
            "--allow-metrics=false",
            "--exit-on-error=false",
        ],
        env={**os.environ, "PYTHONPATH": env_path},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if client.is_model_ready("double"):
                    break
            except Exception:  # noqa: BLE001 - not listening yet
                time.sleep(0.2)
        tensor = httpclient.InferInput("X", [3], "INT32")
        tensor.set_data_from_numpy(np.array([1, 2, 3], np.int32))
        result = client.infer("double", [tensor])
        np.testing.assert_array_equal(result.as_numpy("Y"), [2, 4, 6])
        listing = subprocess.run(
            [sys.executable, "-m", "despina", "plugins"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": env_path},
            timeout=60,
        )
        assert "doubler  (despina-backend-doubler 1.2.3)  backends: doubler" in listing.stdout
        assert (
            "brokenbackend  (despina-backend-broken 1.2.3)  FAILED: ImportError" in listing.stdout
        )
        client.close()
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "plugin 'brokenbackend' from despina-backend-broken 1.2.3 failed to import" in err
