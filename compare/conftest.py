"""Despina and Triton 2.51 serving the same repository side by side (``make compare``).

Triton comes from ``$TRITONSERVER`` (default ``../shared/tools/tritonserver``); without
it every comparison is skipped. Despina never runs or links Triton: it is only asked the
same questions.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from despina.testing import RepositoryBuilder, free_port

from .models import build

ROOT = Path(__file__).parents[1]
TRITONSERVER = os.environ.get("TRITONSERVER", str(ROOT.parent / "shared/tools/tritonserver"))
START_LIMIT_S = 180
COMMON_FLAGS = ["--model-control-mode=explicit", "--load-model=*", "--exit-on-error=false"]


@dataclass
class Served:
    """One server of the pair: its name, process and ports."""

    name: str
    process: subprocess.Popen[bytes]
    http_port: int
    grpc_port: int
    metrics_port: int

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _start(name: str, command: list[str], repo: Path, log: Path) -> Served:
    ports = free_port(), free_port(), free_port()
    flags = [
        f"--model-repository={repo}",
        f"--http-port={ports[0]}",
        f"--grpc-port={ports[1]}",
        f"--metrics-port={ports[2]}",
        *COMMON_FLAGS,
    ]
    with log.open("wb") as out:
        process = subprocess.Popen([*command, *flags], stdout=out, stderr=subprocess.STDOUT)
    return Served(name, process, *ports)


def _wait_loaded(served: Served, log: Path, models: int) -> None:
    """Until the repository index shows every model READY or UNAVAILABLE."""
    index = urllib.request.Request(f"http://{served.http_url}/v2/repository/index", b"{}")
    deadline = time.monotonic() + START_LIMIT_S
    while time.monotonic() < deadline:
        if served.process.poll() is not None:
            raise RuntimeError(f"{served.name} exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(index, timeout=2) as answer:
                rows = json.loads(answer.read())
            settled = [r for r in rows if r.get("state") in ("READY", "UNAVAILABLE")]
            if len(settled) == models:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{served.name} did not load the models in {START_LIMIT_S} s")


@dataclass
class Pair:
    despina: Served
    triton: Served
    #: The repository both serve.
    repository: Path

    def __iter__(self) -> Iterator[Served]:
        return iter((self.despina, self.triton))

    def as_despina_writes_paths(self, answer: Any) -> Any:
        """Triton's ``answer`` with each path inside a model folder written relative to it
        (``<repository>/broken/1/model.py`` -> ``1/model.py``), as Despina writes paths
        in error texts (the README's difference: clients never see server paths)."""
        folders = {str(self.repository), str(self.repository.resolve())}
        pattern = re.compile("|".join(re.escape(f) + "/[^/]+/" for f in sorted(folders)))
        if isinstance(answer, str):
            return pattern.sub("", answer)
        if isinstance(answer, bytes):
            return pattern.sub("", answer.decode()).encode()
        if isinstance(answer, dict):
            return {k: self.as_despina_writes_paths(v) for k, v in answer.items()}
        if isinstance(answer, list | tuple):
            return type(answer)(self.as_despina_writes_paths(v) for v in answer)
        return answer


@pytest.fixture(scope="session", params=["process", "in-process"])
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    """Both servers on one repository whose Python models Despina runs in the param's
    execution mode; a fresh pair per mode (statistics start from zero)."""
    if shutil.which(TRITONSERVER) is None:
        pytest.skip(f"no tritonserver at {TRITONSERVER} (set TRITONSERVER)")
    root = tmp_path_factory.mktemp("compare")
    repo = RepositoryBuilder(root / "repo")
    build(repo, request.param)
    with serving_pair(repo.root, ["--allow-client-shm=true"], []) as both:
        yield both


@contextmanager
def serving_pair(
    repository: Path, despina_flags: list[str], triton_flags: list[str]
) -> Iterator[Pair]:
    """Despina and Triton started on ``repository`` (logs beside it: ``despina.log``,
    ``triton.log``), every model settled; both stopped on the way out."""
    root = repository.parent
    command = [sys.executable, "-m", "despina", "serve", *despina_flags]
    despina = _start("despina", command, repository, root / "despina.log")
    triton = _start("triton", [TRITONSERVER, *triton_flags], repository, root / "triton.log")
    both = Pair(despina, triton, repository)
    try:
        for served in both:
            _wait_loaded(served, root / f"{served.name}.log", len(list(repository.iterdir())))
        yield both
    finally:
        for served in both:
            served.stop()
