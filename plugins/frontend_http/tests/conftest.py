"""Fixtures of the HTTP frontend's tests: a server with the httptest models."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from despina.inference.tensors import DATATYPES
from despina.testing import RepositoryBuilder, RunningServer

sys.path.insert(0, str(Path(__file__).parent))  # the in-test backend module beside this file
import http_test_backend

#: Every frontend and exporter listens on loopback only (flags are inert when not installed).
LOOPBACK = ("--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1")


def build_repository(repo: RepositoryBuilder) -> None:
    """add_sub (FP32 [-1]; add_sub_now the same, run within submit), one echo model per
    datatype, a batching and a labelled model."""
    marker = {"1/model.httptest": ""}
    repo.add("add_sub", http_test_backend.config(mode="add_sub"), marker)
    now = 'parameters { key: "now" value { string_value: "true" } }'
    repo.add("add_sub_now", http_test_backend.config(mode="add_sub", extra=now), marker)
    for datatype in DATATYPES:
        repo.add(f"echo_{datatype.lower()}", http_test_backend.config(datatype, "-1, -1"), marker)
    repo.add(
        "batched", http_test_backend.config(dims="4", max_batch_size=8, mode="add_sub"), marker
    )
    labelled = http_test_backend.config(dims="4", max_batch_size=8, count=1).replace(
        'name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ]',
        'name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt"',
    )
    repo.add("labelled", labelled, {**marker, "labels.txt": "cat\ndog\nbird\nfish\n"})


@pytest.fixture
def serve(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> Callable[..., RunningServer]:
    """``serve(*args)``: a server on 127.0.0.1 with the test repository and backend."""
    build_repository(model_repository)

    def start(*args: str, plugins: tuple[Any, ...] = ()) -> RunningServer:
        return despina_server(
            model_repository.root,
            args=[*LOOPBACK, *args],
            plugins=[http_test_backend, *plugins],
        )

    return start


@pytest.fixture
def server(serve: Callable[..., RunningServer]) -> RunningServer:
    """A server with default flags."""
    return serve()
