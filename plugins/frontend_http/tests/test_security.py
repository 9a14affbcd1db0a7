"""HTTPS (``--http-use-ssl``, mutual TLS) and the request limits: header size, open
connections, JSON depth, outputs per request, decompressed size, restricted groups on
every route. Each refusal is Triton's ``{"error": ...}`` JSON, and the server serves on."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import ssl
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient
import trustme
from despina.testing import RunningServer
from despina_frontend_http import v2_routes
from despina_frontend_http.limits import check_json_depth
from helpers import INFER, add_sub_inputs, infer_ok, raw

#: Every restricted-API group (``--http-restricted-api``).
GROUPS = {
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    folder = tmp_path_factory.mktemp("certificates")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    client = ca.issue_cert("client.example")
    files = {
        "ca": folder / "ca.pem",
        "server.crt": folder / "server.crt",
        "server.key": folder / "server.key",
        "client.crt": folder / "client.crt",
        "client.key": folder / "client.key",
    }
    ca.cert_pem.write_to_path(str(files["ca"]))
    server.private_key_pem.write_to_path(str(files["server.key"]))
    server.cert_chain_pems[0].write_to_path(str(files["server.crt"]))
    for pem in server.cert_chain_pems[1:]:
        pem.write_to_path(str(files["server.crt"]), append=True)
    client.private_key_pem.write_to_path(str(files["client.key"]))
    client.cert_chain_pems[0].write_to_path(str(files["client.crt"]))
    return files


def tls_flags(files: dict[str, Path], mutual: bool = False) -> list[str]:
    flags = [
        "--http-use-ssl=true",
        f"--http-server-cert={files['server.crt']}",
        f"--http-server-key={files['server.key']}",
    ]
    if mutual:
        flags += ["--http-use-ssl-mutual=true", f"--http-root-cert={files['ca']}"]
    return flags


def https_client(
    running: RunningServer, files: dict[str, Path], with_cert: bool = False
) -> httpclient.InferenceServerClient:
    """tritonclient over HTTPS, verifying the server against the test CA (hostname too)."""
    options = {"ca_certs": str(files["ca"])}
    if with_cert:
        options |= {"certfile": str(files["client.crt"]), "keyfile": str(files["client.key"])}
    return httpclient.InferenceServerClient(
        f"127.0.0.1:{running.http_port}", ssl=True, ssl_options=options
    )


def refused_without_certificate(context: ssl.SSLContext, sock: socket.socket) -> None:
    """Handshake and one request without a client certificate: raises when refused."""
    with context.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        if not tls.recv(1024):  # TLS 1.3: the refusal comes after the handshake
            raise ConnectionError("closed")


def plain_http_fails(running: RunningServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", running.http_port, timeout=10)
    try:
        with pytest.raises((http.client.HTTPException, OSError)):
            connection.request("GET", "/v2/health/ready")
            connection.getresponse().read()
    finally:
        connection.close()


# --- TLS


def test_https_inference(
    serve: Callable[..., RunningServer], certificates: dict[str, Path]
) -> None:
    running = serve(*tls_flags(certificates))
    with https_client(running, certificates) as client:
        assert client.is_server_ready()
        infer_ok(client)
        inputs, a, b = add_sub_inputs(binary=False)
        result = client.infer("add_sub", inputs)
        assert (result.as_numpy("OUTPUT0") == a + b).all()
    plain_http_fails(running)
    with https_client(running, certificates) as client:  # still serving
        infer_ok(client)


def test_https_refuses_an_unknown_ca(
    serve: Callable[..., RunningServer], certificates: dict[str, Path], tmp_path: Path
) -> None:
    """The client really verifies: a CA other than the server's fails the handshake."""
    running = serve(*tls_flags(certificates))
    other = tmp_path / "other.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    client = httpclient.InferenceServerClient(
        f"127.0.0.1:{running.http_port}", ssl=True, ssl_options={"ca_certs": str(other)}
    )
    with pytest.raises(ssl.SSLError):
        client.is_server_live()
    client.close()


def test_mutual_tls_needs_a_client_certificate(
    serve: Callable[..., RunningServer], certificates: dict[str, Path]
) -> None:
    running = serve(*tls_flags(certificates, mutual=True))
    with https_client(running, certificates, with_cert=True) as client:
        infer_ok(client)
    anonymous = ssl.create_default_context(cafile=str(certificates["ca"]))
    sock = socket.create_connection(("127.0.0.1", running.http_port), 10)
    with pytest.raises((ssl.SSLError, ConnectionError)):
        refused_without_certificate(anonymous, sock)
    sock.close()
    with https_client(running, certificates, with_cert=True) as client:
        infer_ok(client)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--http-use-ssl=true"], "--http-server-cert"),
        (
            ["--http-use-ssl-mutual=true", "--http-server-cert=a", "--http-server-key=b"],
            "--http-root-cert",
        ),
        (
            ["--http-use-ssl=true", "--http-server-cert=/nonexistent", "--http-server-key=/x"],
            "--http-server-cert",
        ),
    ],
)
def test_tls_flags_are_checked_at_start(
    serve: Callable[..., RunningServer], flags: list[str], named: str
) -> None:
    from despina.serving.server import StartupError

    with pytest.raises(StartupError, match=named):
        serve(*flags)


# --- header size


def read_to_close(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def reply(data: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    head, _, body = data.partition(b"\r\n\r\n")
    first, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(first.split(" ")[1]), headers, json.loads(body)


@pytest.mark.parametrize("where", ["header", "url", "many-lines"])
def test_head_over_the_limit_is_431(serve: Callable[..., RunningServer], where: str) -> None:
    running = serve("--http-max-header-size=2048")
    with socket.create_connection(("127.0.0.1", running.http_port), 10) as sock:
        if where == "header":
            sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4000)
        elif where == "url":
            sock.sendall(b"GET /v2/" + b"a" * 4000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        else:  # many small reads, none of them over the limit
            sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n")
            for _ in range(100):
                sock.sendall(b"X-Many: " + b"b" * 40 + b"\r\n")
        status, headers, body = reply(read_to_close(sock))
    assert status == 431, body
    assert headers["content-type"] == "application/json"
    assert "--http-max-header-size" in body["error"]
    with httpclient.InferenceServerClient(running.http_url) as client:
        infer_ok(client)


def test_head_within_the_limit_is_served(serve: Callable[..., RunningServer]) -> None:
    running = serve("--http-max-header-size=2048")
    headers = {"X-Fill": "c" * 1500}
    with httpclient.InferenceServerClient(running.http_url) as client:
        inputs, _, _ = add_sub_inputs()
        client.infer("add_sub", inputs, headers=headers)
        # a large body in one read is not a large head
        inputs, _, _ = add_sub_inputs(n=100_000)
        client.infer("add_sub", inputs, headers=headers)


# --- connections: test_connection_floods.py


# --- JSON depth and outputs


def deep_infer_body(depth: int) -> bytes:
    data = b"[" * depth + b"1" + b"]" * depth
    inputs = [
        b'{"name":"%s","datatype":"FP32","shape":[1],"data":%s}' % (name, data)
        for name in (b"INPUT0", b"INPUT1")
    ]
    return b'{"inputs":[' + b",".join(inputs) + b"]}"


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        (INFER, {}),
        (INFER, "binary"),
        ("/v2/models/add_sub/generate", {}),
        ("/v2/repository/models/add_sub/load", {}),
    ],
    ids=["json", "binary-header", "generate", "repository"],
)
def test_deep_json_is_400(serve: Callable[..., RunningServer], path: str, headers: Any) -> None:
    running = serve()
    body = b"[" * 100_000 + b"]" * 100_000
    if headers == "binary":
        headers = {"Inference-Header-Content-Length": str(len(body))}
        body += b"\0" * 8
    status, answer = raw(running, path, body, headers)
    assert status == 400, answer
    assert "--http-max-json-depth" in answer["error"]
    assert len(answer["error"]) < 200
    with httpclient.InferenceServerClient(running.http_url) as client:
        infer_ok(client)


def test_json_depth_limit_is_the_flag(serve: Callable[..., RunningServer]) -> None:
    running = serve("--http-max-json-depth=8")
    status, answer = raw(running, INFER, deep_infer_body(6))
    assert status == 400 and "nested deeper than 8 levels" in answer["error"], answer
    status, answer = raw(running, INFER, deep_infer_body(5))  # 3 + 5 levels
    assert status == 200, answer


def test_rank_32_tensor_data_still_parses(serve: Callable[..., RunningServer]) -> None:
    status, answer = raw(serve(), INFER, deep_infer_body(32))
    assert status == 200, answer
    assert answer["outputs"][0]["data"] == [2.0]


def test_depth_check_skips_strings() -> None:
    check_json_depth(b'{"a": "' + b"[{" * 500 + b'\\"[["}', 4)
    check_json_depth(b"[]" * 1000, 1)
    with pytest.raises(Exception, match="nested deeper than 4"):
        check_json_depth(b'{"a":"\\\\", "b":[[[[1]]]]}', 4)


def test_outputs_over_the_limit_are_400(serve: Callable[..., RunningServer]) -> None:
    running = serve("--http-max-outputs=4")
    body = json.loads(deep_infer_body(1))
    body["outputs"] = [{"name": "OUTPUT0"}] * 5
    status, answer = raw(running, INFER, json.dumps(body).encode())
    assert status == 400 and "--http-max-outputs" in answer["error"], answer
    body["outputs"] = [{"name": "OUTPUT0"}, {"name": "OUTPUT1"}]
    status, answer = raw(running, INFER, json.dumps(body).encode())
    assert status == 200, answer


# --- decompression


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compression_bomb_is_413_without_inflating_it(
    serve: Callable[..., RunningServer], encoding: str
) -> None:
    """10 MB of zeros compressed to ~10 KB, with a 1 MB limit: 413, and the server never
    holds more than a few MB (measured in this process, where it runs)."""
    import zlib

    limit = 1 << 20
    running = serve(f"--http-max-input-size={limit}")
    zeros = b"\0" * (10 << 20)
    body = gzip.compress(zeros) if encoding == "gzip" else zlib.compress(zeros)
    del zeros
    assert len(body) < 20_000
    headers = {"Content-Encoding": encoding, "Inference-Header-Content-Length": "10"}
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        status, answer = raw(running, INFER, body, headers)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 413, answer
    assert "--http-max-input-size" in answer["error"]
    assert peak < 4 * limit, f"peak {peak} bytes while refusing a bomb"
    with httpclient.InferenceServerClient(running.http_url) as client:
        infer_ok(client)


# --- restricted groups


class _Host:
    """Enough of a FrontendHost to build the route tables."""


def test_every_route_has_a_known_group() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from despina_frontend_http.context import Context
    from despina_frontend_http.restricted import Restrictions

    ctx = Context(_Host(), 1 << 20, ThreadPoolExecutor(1), Restrictions({}), None)  # type: ignore[arg-type]
    table = v2_routes(ctx)
    for route in table:
        assert route.api in GROUPS, route
        if route.pattern.endswith(("/infer", "/generate", "/generate_stream")):
            assert route.api == "inference", route
    assert len([r for r in table if "generate" in r.pattern]) == 4
    ctx.executor.shutdown()


@pytest.mark.parametrize("path", ["generate", "generate_stream", "infer"])
def test_generate_is_restricted_with_inference(
    serve: Callable[..., RunningServer], path: str
) -> None:
    running = serve("--http-restricted-api=inference:infer-key=k")
    body = b'{"INPUT0": [1.0], "INPUT1": [2.0]}'
    if path == "infer":
        body = deep_infer_body(1)
    target = f"/v2/models/add_sub/{path}"
    status, answer = raw(running, target, body)
    assert (status, answer) == (
        403,
        {"error": "This API is restricted, expecting header 'infer-key'"},
    )
    connection = http.client.HTTPConnection("127.0.0.1", running.http_port, timeout=10)
    connection.request("POST", target, body=body, headers={"infer-key": "k"})
    assert connection.getresponse().status == 200
    connection.close()
