"""Pytest fixtures for Despina and its plugins (registered through the ``pytest11`` entry point).

- ``model_repository``: a :class:`RepositoryBuilder` on a temporary folder.
- ``despina_server``: a factory starting a real :class:`~despina.serving.server.Server` on
  ephemeral ports (port 0, bound by the listeners) in a background thread; stopped after
  the test.
- ``http_client`` / ``grpc_client``: helpers returning real ``tritonclient`` clients for a
  running server.
- ``served``: helper returning a numpy :class:`~despina.testing.client.ModelClient` (HTTP).
- :func:`http_post`: one raw POST, for answers a client library would not show as sent.
- :data:`ADD_SUB_MODEL_PY`: the ``model.py`` of a pb_utils add_sub model, for tests.

Every pytest run imports this module wherever despina is installed, so it imports nothing
heavy at module level: the server, asyncio, numpy and tritonclient are imported by the
functions and fixtures that use them.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from despina.testing.server import RunningServer, start_server

__all__ = [
    "ADD_SUB_MODEL_PY",
    "RepositoryBuilder",
    "RunningServer",
    "free_port",
    "http_post",
    "start_server",
]

#: A Python-backend ``model.py``: ``OUTPUT0 = INPUT0 + INPUT1``, ``OUTPUT1 = INPUT0 - INPUT1``
#: (any shape and data type the config gives them).
ADD_SUB_MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse(output_tensors=out))
        return responses
"""


def http_post(
    port: int, path: str, body: bytes | str, timeout: float = 60
) -> tuple[int, str, bytes]:
    """POST ``body`` to ``path`` on 127.0.0.1:``port``: (status, Content-Type, raw body)."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", path, body=body)
        answer = connection.getresponse()
        return answer.status, answer.getheader("Content-Type", ""), answer.read()
    finally:
        connection.close()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, for servers other than Despina's (a Despina
    server started by :func:`start_server` binds port 0 and reports what it bound)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RepositoryBuilder:
    """Writes model folders: ``add(name, config_text, {"1/model.py": source})``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def add(
        self, name: str, config: str | None = None, files: dict[str, str | bytes] | None = None
    ) -> Path:
        """Create ``<root>/<name>`` with config.pbtxt (if given) and files; return the folder."""
        model_dir = self.root / name
        model_dir.mkdir(parents=True, exist_ok=True)
        if config is not None:
            (model_dir / "config.pbtxt").write_text(config)
        for relative, content in (files or {}).items():
            path = model_dir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        return model_dir


@pytest.fixture
def model_repository(tmp_path: Path) -> RepositoryBuilder:
    """A repository builder on an empty temporary folder."""
    return RepositoryBuilder(tmp_path / "models")


@pytest.fixture
def despina_server() -> Iterator[Callable[..., RunningServer]]:
    """Factory: ``despina_server(repo_path, args=[...], plugins=[...])`` -> RunningServer."""
    started: list[RunningServer] = []

    def factory(
        repository: Path | Sequence[Path] | None,
        args: Sequence[str] = (),
        plugins: Sequence[object] = (),
    ) -> RunningServer:
        running = start_server(repository, args, plugins)
        started.append(running)
        return running

    yield factory
    for running in reversed(started):
        running.stop()


def _client_factory(protocol: str) -> Iterator[Callable[..., Any]]:
    """Yield ``factory(running, **kwargs)`` making tritonclient clients of ``protocol``
    ("http" or "grpc") for a running server; close them all afterwards."""
    import importlib

    module = importlib.import_module(f"tritonclient.{protocol}")
    clients: list[Any] = []

    def factory(running: RunningServer, **kwargs: Any) -> Any:
        url = running.http_url if protocol == "http" else running.grpc_url
        client = module.InferenceServerClient(url, **kwargs)
        clients.append(client)
        return client

    yield factory
    for client in clients:
        client.close()


@pytest.fixture
def http_client(despina_server: Callable[..., RunningServer]) -> Iterator[Callable[..., Any]]:
    """Factory: ``http_client(running)`` -> ``tritonclient.http.InferenceServerClient``;
    its clients close before the servers of ``despina_server`` stop (a stop waits for
    the HTTP connections still open)."""
    yield from _client_factory("http")


@pytest.fixture
def grpc_client(despina_server: Callable[..., RunningServer]) -> Iterator[Callable[..., Any]]:
    """Factory: ``grpc_client(running)`` -> ``tritonclient.grpc.InferenceServerClient``;
    its clients close before the servers of ``despina_server`` stop."""
    yield from _client_factory("grpc")


@pytest.fixture
def served() -> Iterator[Callable[[RunningServer], Any]]:
    """Factory: ``served(running)`` -> a numpy model client of that server over HTTP."""
    from despina.testing.client import ModelClient

    clients: list[ModelClient] = []

    def factory(running: RunningServer) -> ModelClient:
        clients.append(ModelClient(running))
        return clients[-1]

    yield factory
    for client in clients:
        client.close()
