"""Fuzz targets' set-up: hypothesis profiles, the servers under test, the tally.

Profiles: "ci" (``make test``: each target runs a few dozen derandomized examples, no
example database, so a run is the same every time) and "fuzz" (``make fuzz`` /
``tests/fuzz/campaign.py``: ``$DESPINA_FUZZ_EXAMPLES`` examples per target, random seeds).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

sys.path.insert(0, str(Path(__file__).parent))

import fuzzkit

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

_QUIET = list(HealthCheck)
settings.register_profile(
    "ci",
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=_QUIET,
    print_blob=False,
)
settings.register_profile(
    "fuzz",
    deadline=None,
    database=None,
    suppress_health_check=_QUIET,
    phases=[Phase.generate, Phase.target, Phase.shrink],
    print_blob=True,
)
settings.load_profile("fuzz" if fuzzkit.fuzzing() else "ci")

LOCAL = ["--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--allow-metrics=false"]

BYTES_CONFIG = """
backend: "toy"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ -1 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ -1 ] }
]
"""


def build_repository(root: Path) -> Path:
    """toy (FP32 [-1,4] add/sub, max_batch_size 8) and toy_bytes (BYTES [-1])."""
    from despina.testing import RepositoryBuilder
    from toy_backend import toy_config

    builder = RepositoryBuilder(root)
    builder.add("toy", toy_config(mbs=8), {"1/model.toy": ""})
    builder.add("toy_bytes", BYTES_CONFIG, {"1/model.toy": ""})
    return root


@pytest.fixture(scope="session")
def infer_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One server for the inference targets (HTTP and gRPC, default stacks)."""
    import toy_backend
    from despina.testing import start_server

    root = build_repository(tmp_path_factory.mktemp("fuzz") / "models")
    running = start_server(root, LOCAL, plugins=[toy_backend])
    yield running
    running.stop()


class RepositoryServer:
    """A server in explicit model-control mode over a repository in ``sandbox``, whose
    temporary files (load overrides) go to ``sandbox/deep/.../tmp``."""

    def __init__(self, running: object, sandbox: Path, repository: Path, temp: Path) -> None:
        self.running = running
        self.sandbox = sandbox
        self.repository = repository
        self.temp = temp


@pytest.fixture(scope="session")
def repository_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RepositoryServer]:
    import toy_backend
    from despina.testing import start_server

    sandbox = tmp_path_factory.mktemp("fuzzrepo")
    temp = sandbox.joinpath("d1", "d2", "d3", "d4", "tmp")
    temp.mkdir(parents=True)
    repository = build_repository(sandbox / "models")
    saved = tempfile.tempdir
    tempfile.tempdir = str(temp)  # the server's override folders land in the sandbox
    running = start_server(
        repository,
        [*LOCAL, "--model-control-mode=explicit", "--load-model=*"],
        plugins=[toy_backend],
    )
    try:
        yield RepositoryServer(running, sandbox, repository, temp)
    finally:
        running.stop()
        tempfile.tempdir = saved


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if fuzzkit.TALLY:
        terminalreporter.section("fuzz targets")
        terminalreporter.write_line(fuzzkit.table())
    fuzzkit.write_report()
