"""Fixtures of the gRPC frontend's tests: servers with the grpctest models on 127.0.0.1."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from despina.inference.tensors import DATATYPES
from despina.testing import RepositoryBuilder, RunningServer, start_server

sys.path.insert(0, str(Path(__file__).parent))  # the in-test backend module beside this file
import grpc_test_backend as backend

#: Flags every test server gets: loopback only, and no other protocol listening.
LOCAL = (
    "--grpc-address=127.0.0.1",
    "--allow-http=false",
    "--allow-metrics=false",
    "--allow-client-shm=true",
)


def build_repository(repo: RepositoryBuilder) -> None:
    """add_sub, one echo model per datatype, sleep, decoupled, fail and sequence models."""
    version = {"1/.keep": ""}
    repo.add("add_sub", backend.config("add_sub", "add_sub", dims="-1, 16"), version)
    for datatype in DATATYPES:
        name = f"echo_{datatype.lower()}"
        repo.add(name, backend.config(name, datatype=datatype, dims="-1, -1"), version)
    repo.add("sleep", backend.config("sleep", "sleep"), version)
    repo.add(
        "decoupled", backend.config("decoupled", "decoupled", "INT32", decoupled=True), version
    )
    repo.add("fail", backend.config("fail", "fail"), version)
    sequence = (
        backend.config("sequence")
        + "sequence_batching { max_sequence_idle_microseconds: 60000000 }\n"
    )
    repo.add("sequence", sequence, version)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server shared by a test module."""
    repo = RepositoryBuilder(tmp_path_factory.mktemp("grpc") / "models")
    build_repository(repo)
    running = start_server(repo.root, args=list(LOCAL), plugins=[backend])
    yield running
    running.stop()


@pytest.fixture
def serve(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> Callable[..., RunningServer]:
    """``serve(*args)``: a fresh server with the test repository and extra flags."""
    build_repository(model_repository)

    def start(*args: str, plugins: tuple[Any, ...] = ()) -> RunningServer:
        return despina_server(
            model_repository.root, args=[*LOCAL, *args], plugins=[backend, *plugins]
        )

    return start


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[Any]:
    """A tritonclient.grpc client of the shared server."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(server.grpc_url) as connected:
        yield connected


@pytest.fixture
def connect() -> Iterator[Callable[..., Any]]:
    """``connect(running, reads=False)``: a raw HTTP/2 client (test_http2_abuse.RawClient)
    to the server's gRPC port, closed after the test."""
    from test_http2_abuse import RawClient

    opened: list[RawClient] = []

    def factory(running: RunningServer, reads: bool = False) -> RawClient:
        opened.append(RawClient(running, reads))
        return opened[-1]

    yield factory
    for client in opened:
        client.close()
