"""A replica's REST adapter answers as ``despina serve``'s HTTP frontend: the same requests
go to a real server's HTTP port and to :class:`~despina_deploy_ray.rest.RestRoutes` (the
HTTP frontend's router adapted to a replica) over that server's data plane (no Ray: the
cluster tests cover Ray's proxies), and the status, content type and (inflated) body must
be equal; the routes that would change one replica are refused."""

from __future__ import annotations

import gzip
import json
import shutil
import urllib.error
import urllib.request
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import toy_backend
from despina.testing import RepositoryBuilder, RunningServer
from despina_frontend_http import StreamResponse
from toy_backend import toy_config

pytest.importorskip("ray")
starlette = pytest.importorskip("starlette.datastructures")
rest = pytest.importorskip("despina_deploy_ray.rest")

EXAMPLES = Path(__file__).parents[3] / "examples" / "model_repository"
LIMIT = 4096
BODY = json.dumps(
    {
        "inputs": [
            {"name": "INPUT0", "datatype": "FP32", "shape": [4], "data": [1, 2, 3, 4]},
            {"name": "INPUT1", "datatype": "FP32", "shape": [4], "data": [1, 1, 1, 1]},
        ]
    }
).encode()
TOY = b'{"INPUT0": [1, 2, 3, 4], "INPUT1": [1, 1, 1, 1]}'
Answer = tuple[int, str, bytes]

CASES: list[tuple[str, str, dict[str, str], bytes | None]] = [
    ("POST", "/v2/models/toy/infer", {}, BODY),
    ("POST", "/v2/models/toy/infer", {"Content-Encoding": "gzip"}, gzip.compress(BODY)),
    ("POST", "/v2/models/toy/infer", {"Content-Encoding": "deflate"}, zlib.compress(BODY)),
    ("POST", "/v2/models/toy/infer", {"Content-Encoding": "deflate"}, zlib.compress(BODY)[2:-4]),
    ("POST", "/v2/models/toy/infer", {"Accept-Encoding": "gzip"}, BODY),
    ("POST", "/v2/models/toy/infer", {"Accept-Encoding": "br, deflate;q=0.5"}, BODY),
    ("POST", "/v2/models/toy/infer", {"Content-Encoding": "gzip"}, b"not gzip"),
    ("POST", "/v2/models/toy/infer", {"Content-Encoding": "br"}, BODY),
    ("POST", "/v2/models/toy/infer", {"Content-Encoding": "gzip"}, gzip.compress(b" " * 99999)),
    ("POST", "/v2/models/toy/infer", {}, b" " * (LIMIT + 1)),
    ("POST", "/v2/models/toy/infer", {}, b"{not json"),
    ("POST", "/v2/models/py_repeat/infer", {}, b"{}"),
    ("POST", "/v2/models/missing/infer", {}, BODY),
    ("GET", "/v2/models/toy/infer", {}, None),
    ("POST", "/v2/models/toy/generate", {}, TOY),
    (
        "POST",
        "/v2/models/toy/versions/1/generate",
        {"Content-Encoding": "gzip"},
        gzip.compress(TOY),
    ),
    ("POST", "/v2/models/toy/generate", {}, b'{"INPUT0": [1, 2, 3]}'),
    ("POST", "/v2/models/toy/generate_stream", {}, TOY),
    ("POST", "/v2/models/py_repeat/generate", {}, b'{"IN": [5]}'),
    ("POST", "/v2/models/py_repeat/generate", {}, b'{"IN": [5, 6]}'),
    ("POST", "/v2/models/py_repeat/generate_stream", {}, b'{"IN": [5, 6, 7]}'),
    ("POST", "/v2/models/py_repeat/generate_stream", {}, b'{"IN": []}'),
    ("POST", "/v2/models/py_repeat/generate_stream", {}, b'{"IN": "x"}'),
    ("GET", "/v2/health/ready", {}, None),
    ("GET", "/v2", {}, None),
    ("GET", "/v2/models/toy", {}, None),
    ("GET", "/v2/models/toy/versions/1/ready", {}, None),
    ("GET", "/v2/models/py_repeat/config", {}, None),
    ("POST", "/v2/repository/index", {}, b'{"ready": true}'),
    ("POST", "/v2/repository/index", {}, b'{"ready": 1}'),
    ("GET", "/v2/logging", {}, None),
    ("GET", "/v2/trace/setting", {}, None),
    ("GET", "/v2/models/toy/trace/setting", {}, None),
    ("GET", "/v2/systemsharedmemory/status", {}, None),
    ("GET", "/v2/cudasharedmemory/region/r/status", {}, None),
    ("GET", "/v2/nothing", {}, None),
]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    from despina.testing import start_server

    root = tmp_path_factory.mktemp("models")
    RepositoryBuilder(root).add("toy", toy_config(), {"1/model.toy": "{}"})
    shutil.copytree(EXAMPLES / "py_repeat", root / "py_repeat")
    args = [f"--http-max-input-size={LIMIT}", "--allow-grpc=false", "--allow-metrics=false"]
    server = start_server(root, args, [toy_backend])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def routes(running: RunningServer) -> Iterator[Any]:
    """A replica's REST routes over the running server's data plane."""
    made = rest.RestRoutes(running.server.dataplane)
    yield made
    made.close()


def served(
    running: RunningServer, method: str, path: str, headers: dict[str, str], body: bytes | None
) -> Answer:
    """The HTTP frontend's answer."""
    url = f"http://{running.http_url}{path}"
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return _answer(response.status, response.headers, response.read())
    except urllib.error.HTTPError as exc:
        return _answer(exc.code, exc.headers, exc.read())


def replied(
    routes: Any,
    running: RunningServer,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None,
) -> Answer:
    """The replica routes' answer (the headers as Starlette gives them)."""

    async def chunks() -> AsyncIterator[bytes]:
        yield body or b""

    async def answer() -> Answer:
        reply = await routes.handle(method, path, starlette.Headers(headers), chunks())
        if isinstance(reply, StreamResponse):
            data = b"".join([chunk async for chunk in reply.chunks])
        else:
            data = reply.joined()
        return _answer(reply.status, starlette.Headers(reply.headers), data)

    return running.call(answer())


def _answer(status: int, headers: Mapping[str, str], body: bytes) -> Answer:
    """(status, content type and encoding, inflated body)."""
    encoding = headers.get("content-encoding", "")
    if encoding == "gzip":
        body = gzip.decompress(body)
    elif encoding == "deflate":
        body = zlib.decompress(body)
    return status, f"{headers.get('content-type', '')} {encoding}".strip(), body


@pytest.mark.parametrize(("method", "path", "headers", "body"), CASES)
def test_replica_routes_answer_as_despina_serve(
    running: RunningServer,
    routes: Any,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None,
) -> None:
    expected = served(running, method, path, headers, body)
    assert replied(routes, running, method, path, headers, body) == expected


def test_replica_serves_every_route_of_despina_serve(running: RunningServer, routes: Any) -> None:
    """The adapter's router holds the HTTP frontend's route table, none added or lost."""
    frontend = next(f for f in running.server.frontends if f.name == "http")
    served_routes = frontend._front.router.routes
    assert [(r.method, r.pattern, r.api) for r in routes.router.routes] == [
        (r.method, r.pattern, r.api) for r in served_routes
    ]


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("/v2/repository/models/toy/load", "MODEL_CONTROL"),
        ("/v2/repository/models/toy/unload", "MODEL_CONTROL"),
        ("/v2/systemsharedmemory/region/r/register", "SHARED_MEMORY"),
        ("/v2/cudasharedmemory/unregister", "SHARED_MEMORY"),
        ("/v2/logging", "SETTINGS"),
        ("/v2/models/toy/trace/setting", "SETTINGS"),
    ],
)
def test_routes_changing_one_replica_are_refused(
    running: RunningServer, routes: Any, path: str, text: str
) -> None:
    from despina_deploy_ray import replicated

    status, kind, body = replied(routes, running, "POST", path, {}, b"{}")
    assert (status, kind) == (409, "application/json")
    assert json.loads(body) == {"error": getattr(replicated, text)}
