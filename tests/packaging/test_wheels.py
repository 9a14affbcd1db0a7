"""What users get from an index: every distribution (core/, plugins/*/) built as a wheel
into one wheelhouse, each wheel holding every file of its ``src/`` (py.typed, the OpenAPI
description, ``triton_python_backend_utils``); then a fresh venv with ``despina`` alone from
that wheelhouse, whose ``despina serve`` says no protocol frontend is installed, and
``despina[serve]`` installed on top (Despina's wheels from the wheelhouse only, third-party
packages from the index), whose ``despina serve`` answers HTTP, gRPC and /metrics and runs
a Python model (checked with tritonclient from the dev environment).

Needs the package index for third-party packages, as ``make test``'s set-up does; pip's
cache is reused. About 3 minutes on a busy 2-core machine, most of it building wheels.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
import urllib.request
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
#: The distributions the ``serve`` extra of ``despina`` installs.
SERVE_SET = {
    "despina-frontend-http",
    "despina-frontend-grpc",
    "despina-metrics-prometheus",
    "despina-backend-python",
}
#: What a source folder holds that its wheel does not: build output and caches.
NOT_SHIPPED = ("build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".pytest_cache")
#: The start-up lines that say where each listener is (tritonserver's texts).
LISTENING = {
    "http": re.compile(r"Started HTTPService at [\d.]+:(\d+)"),
    "grpc": re.compile(r"Started GRPCInferenceService at [\d.]+:(\d+)"),
    "metrics": re.compile(r"Started Metrics Service at [\d.]+:(\d+)"),
}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def source_folders() -> dict[str, Path]:
    """Every distribution's folder by its name: the core and each plugin."""
    folders = [ROOT / "core", *sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml"))]
    return {
        tomllib.loads((f / "pyproject.toml").read_text())["project"]["name"]: f for f in folders
    }


def build_requirements_met(folders: list[Path]) -> bool:
    """Whether this interpreter has every package the folders' ``build-system.requires``
    name, at a version they accept: then one build environment (this one) serves all."""
    for folder in folders:
        build = tomllib.loads((folder / "pyproject.toml").read_text())["build-system"]
        for requirement in map(Requirement, build["requires"]):
            try:
                version = importlib.metadata.version(requirement.name)
            except importlib.metadata.PackageNotFoundError:
                return False
            if not requirement.specifier.contains(version, prereleases=True):
                return False
    return True


def entry_point_groups(project: dict[str, Any]) -> set[str]:
    """The entry-point groups a ``[project]`` table declares (scripts: console_scripts)."""
    return set(project.get("entry-points", {})) | (
        {"console_scripts"} if "scripts" in project else set()
    )


def wheel_name(distribution: str) -> str:
    """The file-name prefix of a distribution's wheel (``despina_frontend_http-``)."""
    return distribution.replace("-", "_") + "-"


def shipped_files(folder: Path) -> set[str]:
    """The files of ``folder/src`` a wheel must hold, relative to ``src``."""
    src = folder / "src"
    return {
        path.relative_to(src).as_posix()
        for path in src.rglob("*")
        if path.is_file()
        and not any(
            fnmatch.fnmatch(part, pattern)
            for part in path.relative_to(src).parts
            for pattern in NOT_SHIPPED
        )
    }


def run(command: list[str], timeout: float = 600) -> str:
    """Run ``command``; its output, or an assertion error with it."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{output[-4000:]}"
    return output


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every distribution built as a wheel (``pip wheel --no-deps``) from a clean copy of
    its folder: no ``build/`` left by an earlier build can add stale files. In this
    environment when it has the build backend they require (a third of the time on 2
    cores), else in pip's isolated build environments."""
    base = tmp_path_factory.mktemp("wheels")
    folders = list(source_folders().items())
    copies = []
    for name, folder in folders:
        copy = base / "src" / name
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(*NOT_SHIPPED, "tests"))
        copies.append(str(copy))
    house = base / "wheelhouse"
    shared = build_requirements_met([folder for _, folder in folders])
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]
    pip += ["--no-build-isolation"] if shared else []
    run([*pip, "-w", str(house), *copies])
    return house


@dataclass
class Venv:
    """A fresh virtual environment with pip."""

    path: Path

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def install(self, requirement: str, wheelhouse: Path) -> dict[str, str]:
        """``pip install REQUIREMENT --find-links WHEELHOUSE`` (the index for the rest);
        the distributions installed, each with the URL pip took it from."""
        report = self.path / "install-report.json"
        pip = [self.python, "-m", "pip", "install", "-q", "--find-links", str(wheelhouse)]
        run([*pip, "--report", str(report), requirement])
        installed = json.loads(report.read_text())["install"]
        return {item["metadata"]["name"]: item["download_info"]["url"] for item in installed}


@dataclass
class Served:
    """What ``despina serve`` logged, and the ports it listened on."""

    log: str
    ports: dict[str, int]


@contextlib.contextmanager
def serve(environment: Venv, *args: str) -> Iterator[Served]:
    """``despina serve ARGS`` of ``environment`` on ports of its choosing (0), its log
    read up to the model table's header (the start-up done); stopped with SIGTERM (exit 0)
    after the caller is done. It sees nothing
    of this checkout: no PYTHONPATH, no DESPINA_DEFAULT_REPOSITORY, run from the venv."""
    command = [str(environment.path / "bin" / "despina"), "serve"]
    command += ["--http-port=0", "--grpc-port=0", "--metrics-port=0", *args]
    hidden = ("PYTHONPATH", "DESPINA_DEFAULT_REPOSITORY")
    env = {k: v for k, v in os.environ.items() if k not in hidden}
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, text=True, cwd=environment.path, env=env
    )
    assert process.stderr is not None
    lines: list[str] = []
    try:
        for line in process.stderr:  # the table's header ends the start-up
            lines.append(line)
            if line.startswith("Model ") and "Status" in line:
                break
        log = "".join(lines)
        ports = {k: int(m.group(1)) for k, p in LISTENING.items() if (m := p.search(log))}
        yield Served(log, ports)
    finally:
        process.send_signal(signal.SIGTERM)
        rest = process.communicate(timeout=60)[1]
    assert process.returncode == 0, "".join(lines) + rest


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Venv:
    environment = Venv(tmp_path_factory.mktemp("venv") / "despina")
    venv.create(environment.path, with_pip=True)
    sources = environment.install("despina", wheelhouse)
    assert sources["despina"] == (wheelhouse / _wheel(wheelhouse, "despina")).as_uri()
    assert not {name for name in sources if name.startswith("despina-")}
    return environment


@pytest.fixture(scope="module")
def core_alone(core_venv: Venv) -> str:
    """The start-up log of ``despina serve`` with the core alone and no flags (taken
    before ``despina[serve]`` goes into the same venv)."""
    with serve(core_venv) as served:
        return served.log


@pytest.fixture(scope="module")
def serve_venv(core_venv: Venv, core_alone: str, wheelhouse: Path) -> tuple[Venv, dict[str, str]]:
    """``despina[serve]`` added to the core's venv; the distributions it installed."""
    return core_venv, core_venv.install("despina[serve]", wheelhouse)


def _wheel(wheelhouse: Path, distribution: str) -> str:
    (found,) = [p.name for p in wheelhouse.glob(f"{wheel_name(distribution)}*.whl")]
    return found


def test_every_distribution_is_a_wheel_holding_all_of_its_source(wheelhouse: Path) -> None:
    for name, folder in source_folders().items():
        with zipfile.ZipFile(wheelhouse / _wheel(wheelhouse, name)) as wheel:
            names = wheel.namelist()
            listed = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
            text = "".join(wheel.read(n).decode() for n in listed)
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        groups = set(re.findall(r"^\[(.+)\]$", text, re.M))
        assert groups == entry_point_groups(project), name
        packaged = {n for n in names if ".dist-info/" not in n}
        assert packaged == shipped_files(folder), name


def test_the_core_alone_says_no_frontend_is_installed_and_how_to_add_them(core_alone: str) -> None:
    assert "no protocol frontend is installed" in core_alone
    assert "can only be used in-process; pip install 'despina[serve]' adds" in core_alone
    assert "no model repository given: serving no models" in core_alone
    assert not LISTENING["http"].search(core_alone)


def test_despina_serve_extra_from_the_wheelhouse_serves_http_grpc_and_metrics(
    serve_venv: tuple[Venv, dict[str, str]], wheelhouse: Path, tmp_path: Path
) -> None:
    environment, sources = serve_venv
    despina = {name: url for name, url in sources.items() if name.startswith("despina")}
    assert set(despina) == SERVE_SET
    for name, url in despina.items():
        assert url == (wheelhouse / _wheel(wheelhouse, name)).as_uri(), name
    shutil.copytree(ROOT / "examples" / "model_repository" / "add_sub", tmp_path / "add_sub")
    with serve(environment, f"--model-repository={tmp_path}") as served:
        assert not re.search(r"^[WE]\d{4} ", served.log, re.M), served.log
        a = np.arange(4, dtype=np.float32)
        b = np.full(4, 10, dtype=np.float32)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{served.ports['http']}")
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{served.ports['grpc']}")
        assert http.is_model_ready("add_sub") and grpc.is_model_ready("add_sub")
        for client, module in ((http, httpclient), (grpc, grpcclient)):
            inputs = [module.InferInput(f"INPUT{i}", [4], "FP32") for i in (0, 1)]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            result = client.infer("add_sub", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        http.close()
        grpc.close()
        url = f"http://127.0.0.1:{served.ports['metrics']}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            metrics = response.read().decode()
        success = r'nv_inference_request_success\{model="add_sub",version="1"\} (\S+)'
        found = re.search(success, metrics)
        assert found and float(found.group(1)) == 2.0, metrics[:2000]
