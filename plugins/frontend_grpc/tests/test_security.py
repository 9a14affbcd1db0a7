"""Restricted protocols, TLS and mutual TLS, shared-memory bounds, message size limits,
compression and header forwarding; errors never name internals."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from despina.testing import RunningServer
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException


def add_sub_inputs(value: float = 1.0, width: int = 16) -> list[grpcclient.InferInput]:
    data = np.full((1, width), value, np.float32)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, width], "FP32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs


def refused(call: Callable[[], Any]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def test_restricted_protocols(serve: Callable[..., RunningServer]) -> None:
    running = serve(
        "--grpc-restricted-protocol=model-repository,shared-memory:admin-key=secret",
        "--grpc-restricted-protocol=health:probe=yes",
    )
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        error = refused(client.get_model_repository_index)
        assert error.status() == "StatusCode.UNAVAILABLE"
        assert (
            error.message()
            == "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'"
        )
        wrong = {"triton-grpc-protocol-admin-key": "guess"}
        assert (
            refused(lambda: client.get_system_shared_memory_status(headers=wrong)).status()
            == "StatusCode.UNAVAILABLE"
        )
        right = {"triton-grpc-protocol-admin-key": "secret"}
        assert client.get_model_repository_index(headers=right, as_json=True)["models"]
        assert client.get_system_shared_memory_status(headers=right, as_json=True) == {}
        assert refused(client.is_server_live).status() == "StatusCode.UNAVAILABLE"
        assert client.is_server_live(headers={"triton-grpc-protocol-probe": "yes"})
        assert client.get_server_metadata().name == "triton"  # metadata is not restricted
        assert client.infer("add_sub", add_sub_inputs()).as_numpy("OUTPUT0") is not None
    with grpc.insecure_channel(running.grpc_url) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            health.Check(health_pb2.HealthCheckRequest())
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        reply = health.Check(
            health_pb2.HealthCheckRequest(), metadata=[("triton-grpc-protocol-probe", "yes")]
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("value", ["metadata", "bogus:k=v", "health:k"])
def test_malformed_restriction_refuses_to_start(
    serve: Callable[..., RunningServer], value: str
) -> None:
    from despina.serving.server import StartupError

    with pytest.raises(StartupError, match="grpc-restricted-protocol"):
        serve(f"--grpc-restricted-protocol={value}")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certificates(folder: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate."""
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req",
        "-x509",
        *key,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=despina-test-ca",
        cwd=folder,
    )
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name in ("server", "client"):
        _openssl(
            "req",
            *key,
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            "-subj",
            f"/CN={name}",
            cwd=folder,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "1",
            "-extfile",
            "san.ext",
            cwd=folder,
        )
    return {
        name: folder / name
        for name in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key")
    }


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def test_tls(serve: Callable[..., RunningServer], certificates: dict[str, Path]) -> None:
    running = serve(
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={certificates['server.crt']}",
        f"--grpc-server-key={certificates['server.key']}",
    )
    root = str(certificates["ca.crt"])
    with grpcclient.InferenceServerClient(
        running.grpc_url, ssl=True, root_certificates=root
    ) as client:
        assert client.is_server_live()
        assert client.infer("add_sub", add_sub_inputs(2.0)).as_numpy("OUTPUT0")[0, 0] == 4.0
    with grpcclient.InferenceServerClient(running.grpc_url) as plaintext:
        assert refused(plaintext.is_server_live).status() == "StatusCode.UNAVAILABLE"


def test_mutual_tls(serve: Callable[..., RunningServer], certificates: dict[str, Path]) -> None:
    running = serve(
        "--grpc-use-ssl-mutual=true",
        f"--grpc-server-cert={certificates['server.crt']}",
        f"--grpc-server-key={certificates['server.key']}",
        f"--grpc-root-cert={certificates['ca.crt']}",
    )
    root = str(certificates["ca.crt"])
    with grpcclient.InferenceServerClient(
        running.grpc_url,
        ssl=True,
        root_certificates=root,
        private_key=str(certificates["client.key"]),
        certificate_chain=str(certificates["client.crt"]),
    ) as client:
        assert client.is_server_ready()
    with grpcclient.InferenceServerClient(
        running.grpc_url, ssl=True, root_certificates=root
    ) as anonymous:
        assert refused(anonymous.is_server_live).status() == "StatusCode.UNAVAILABLE"


def test_tls_flags_need_files(serve: Callable[..., RunningServer]) -> None:
    from despina.serving.server import StartupError

    with pytest.raises(StartupError, match="--grpc-server-cert"):
        serve("--grpc-use-ssl=true")


def test_shared_memory_bounds_and_internal_keys(client: Any) -> None:
    key = "/despina_grpc_test_bounds"
    region = shm.create_shared_memory_region("bounds", key, 64)
    try:
        client.unregister_system_shared_memory()
        error = refused(lambda: client.register_system_shared_memory("big", key, 128))
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        assert key not in error.message()
        error = refused(
            lambda: client.register_system_shared_memory("hidden", "/despina_internal_x", 8)
        )
        assert (
            error.status() == "StatusCode.INVALID_ARGUMENT"
            and "despina_internal" not in error.message()
        )
        error = refused(
            lambda: client.register_system_shared_memory("absent", "/despina_grpc_no_such_key", 8)
        )
        assert "despina_grpc_no_such_key" not in error.message()
        client.register_system_shared_memory("bounds", key, 32, offset=16)
        inputs = add_sub_inputs()
        inputs[0].set_shared_memory("bounds", 64)
        error = refused(lambda: client.infer("add_sub", inputs))
        assert error.status() == "StatusCode.INVALID_ARGUMENT"
        assert error.message() == "Invalid offset + byte size for shared memory region: 'bounds'"
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("bounds", 64, offset=8)
        error = refused(lambda: client.infer("add_sub", add_sub_inputs(), outputs=[output]))
        assert error.message() == "Invalid offset + byte size for shared memory region: 'bounds'"
        small = grpcclient.InferRequestedOutput("OUTPUT0")
        small.set_shared_memory("bounds", 32)
        error = refused(lambda: client.infer("add_sub", add_sub_inputs(), outputs=[small]))
        assert "should be at least 64 bytes" in error.message()
        assert client.infer("add_sub", add_sub_inputs()).as_numpy("OUTPUT1") is not None
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(region)


def test_max_message_size(serve: Callable[..., RunningServer]) -> None:
    running = serve("--grpc-max-message-size=4096")
    options = [("grpc.max_receive_message_length", 2**30), ("grpc.max_send_message_length", 2**30)]
    with grpcclient.InferenceServerClient(running.grpc_url, channel_args=options) as client:
        error = refused(lambda: client.infer("echo_fp32", [_echo(np.zeros((1, 2048), np.float32))]))
        assert error.status() == "StatusCode.RESOURCE_EXHAUSTED"
        assert client.infer("echo_fp32", [_echo(np.zeros((1, 16), np.float32))]).as_numpy(
            "OUT"
        ).shape == (1, 16)


def _echo(data: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("IN", list(data.shape), "FP32")
    tensor.set_data_from_numpy(data)
    return tensor


def test_large_tensor_by_default(server: RunningServer) -> None:
    data = np.arange(2 * 1024 * 1024, dtype=np.float32).reshape(
        1, -1
    )  # 8 MiB, over grpc's 4 MiB default
    options = [("grpc.max_receive_message_length", 2**30), ("grpc.max_send_message_length", 2**30)]
    with grpcclient.InferenceServerClient(server.grpc_url, channel_args=options) as big:
        np.testing.assert_array_equal(big.infer("echo_fp32", [_echo(data)]).as_numpy("OUT"), data)


class CountingProxy:
    """A TCP proxy on 127.0.0.1 that counts the bytes the server sends to the client."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.from_server = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
                threading.Thread(
                    target=self._pipe, args=(client, upstream, False), daemon=True
                ).start()
                threading.Thread(
                    target=self._pipe, args=(upstream, client, True), daemon=True
                ).start()

    def _pipe(self, source: socket.socket, target: socket.socket, count: bool) -> None:
        with contextlib.suppress(OSError), source, target:
            while data := source.recv(65536):
                if count:
                    self.from_server += len(data)
                target.sendall(data)

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize(("level", "compressed"), [("none", False), ("high", True)])
def test_response_compression(
    serve: Callable[..., RunningServer], level: str, compressed: bool
) -> None:
    running = serve(f"--grpc-infer-response-compression-level={level}")
    assert running.grpc_port is not None
    proxy = CountingProxy(running.grpc_port)
    try:
        with grpcclient.InferenceServerClient(f"127.0.0.1:{proxy.port}") as client:
            data = np.zeros((1, 65536), np.float32)  # 256 KiB of zeros each way
            result = client.infer("echo_fp32", [_echo(data)], compression_algorithm="gzip")
            np.testing.assert_array_equal(result.as_numpy("OUT"), data)
        assert (proxy.from_server < 64 * 1024) is compressed
    finally:
        proxy.close()


def test_header_forwarding(serve: Callable[..., RunningServer]) -> None:
    running = serve("--grpc-header-forward-pattern=^x-fwd-")
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        result = client.infer(
            "echo_fp32",
            [_echo(np.ones((1, 1), np.float32))],
            headers={"x-fwd-user": "ada", "x-other": "no"},
        )
        parameters = result.get_response().parameters
        assert parameters["x-fwd-user"].string_param == "ada"
        assert "x-other" not in parameters


@pytest.mark.parametrize(
    ("pattern", "forwarded"), [("X-FWD-.*", True), ("(?-i)X-FWD-.*", False), ("(?-i)x-f", True)]
)
def test_header_forward_pattern_is_re2_and_case_insensitive(
    serve: Callable[..., RunningServer], pattern: str, forwarded: bool
) -> None:
    """As Triton (L0_parameters): RE2 syntax, case-insensitive unless ``(?-i)`` says not."""
    running = serve(f"--grpc-header-forward-pattern={pattern}")
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        result = client.infer(
            "echo_fp32", [_echo(np.ones((1, 1), np.float32))], headers={"x-fwd-user": "ada"}
        )
        assert ("x-fwd-user" in result.get_response().parameters) is forwarded


def test_header_forward_pattern_re2_refuses_fails_start(
    serve: Callable[..., RunningServer],
) -> None:
    from despina.serving.server import StartupError

    refusal = r"--grpc-header-forward-pattern: invalid header forward pattern 'x\(': missing \)"
    with pytest.raises(StartupError, match=refusal):
        serve("--grpc-header-forward-pattern=x(")


def test_allow_grpc_false_listens_nowhere(serve: Callable[..., RunningServer]) -> None:
    running = serve("--allow-grpc=false")
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        assert refused(client.is_server_live).status() == "StatusCode.UNAVAILABLE"


def test_busy_port_fails_start_clearly(
    serve: Callable[..., RunningServer], server: RunningServer
) -> None:
    from despina.serving.server import StartupError

    with pytest.raises(
        StartupError, match=r"failed to start GRPC service: Unavailable - Socket .* already in use"
    ):
        serve(f"--grpc-port={server.grpc_port}")


def test_keepalive_flags(serve: Callable[..., RunningServer]) -> None:
    running = serve(
        "--grpc-keepalive-time=10000",
        "--grpc-keepalive-timeout=5000",
        "--grpc-keepalive-permit-without-calls=true",
        "--grpc-http2-max-pings-without-data=0",
        "--grpc-http2-min-recv-ping-interval-without-data=1000",
        "--grpc-http2-max-ping-strikes=0",
        "--grpc-max-connection-age=60000",
        "--grpc-max-connection-age-grace=1000",
    )
    with grpcclient.InferenceServerClient(running.grpc_url) as client:
        assert client.is_server_live()


def test_client_shared_memory_is_opt_in(serve: Callable[..., RunningServer]) -> None:
    running = serve("--allow-client-shm=false")
    key = "/despina_grpc_test_opt_in"
    region = shm.create_shared_memory_region("opt_in", key, 64)
    try:
        with grpcclient.InferenceServerClient(running.grpc_url) as client:
            error = refused(lambda: client.register_system_shared_memory("opt_in", key, 64))
            assert error.status() == "StatusCode.PERMISSION_DENIED"
            assert "--allow-client-shm=true" in error.message()
            assert client.get_system_shared_memory_status(as_json=True) == {}
            client.unregister_system_shared_memory()
    finally:
        shm.destroy_shared_memory_region(region)


def test_unbindable_address_fails_start_clearly(serve: Callable[..., RunningServer]) -> None:
    from despina.serving.server import StartupError

    with pytest.raises(StartupError, match=r"cannot bind gRPC to 192\.0\.2\.1"):
        serve("--grpc-address=192.0.2.1")
