"""CUDA shared memory where it cannot work (no cupy, or cupy without a device): the
registry and both protocols refuse it clearly, server metadata leaves the extension out,
the one name space with system regions holds, and importing Despina loads no CUDA.
The working path is tests/test_cuda_shared_memory.py (marked gpu, for a GPU machine)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from despina import SharedMemoryRegistry
from despina.errors import InvalidArgument, NotFound, PermissionDenied
from despina.memory.cuda_memory import IPC_HANDLE_SIZE, probe_cuda
from despina.testing import RunningServer, http_post

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as system_shm
from tritonclient.utils import InferenceServerException

SUPPORT = probe_cuda()
needs_no_cuda = pytest.mark.skipif(
    SUPPORT.available, reason="cupy sees a CUDA device here: tests/test_cuda_shared_memory.py"
)
HANDLE = bytes(IPC_HANDLE_SIZE)
GPUS_NOT_SUPPORTED = "failed to register CUDA shared memory region: 'g', GPUs not supported"


@pytest.fixture
def system_region() -> Iterator[str]:
    """A 64-byte POSIX region; yields its key."""
    key = f"/despina_cuda_test_{os.getpid()}"
    handle = system_shm.create_shared_memory_region("sys", key, 64)
    yield key
    system_shm.destroy_shared_memory_region(handle)


@pytest.fixture
def running(despina_server: Callable[..., RunningServer]) -> RunningServer:
    return despina_server(None, args=["--allow-client-shm=true"])


def test_cuda_registration_is_refused_unless_client_shm_is_allowed() -> None:
    with pytest.raises(PermissionDenied, match="--allow-client-shm=true"):
        SharedMemoryRegistry(allow_register=False).register_cuda("g", HANDLE, 0, 64)


@needs_no_cuda
def test_cuda_registration_without_cuda_names_why_and_how_to_install() -> None:
    with pytest.raises(InvalidArgument) as refused:
        SharedMemoryRegistry().register_cuda("g", HANDLE, 0, 64)
    message = str(refused.value)
    assert message.startswith(GPUS_NOT_SUPPORTED)
    assert SUPPORT.reason in message
    if "not installed" in SUPPORT.reason or "cannot be imported" in SUPPORT.reason:
        assert "pip install 'despina[cuda]'" in message


def test_cupy_without_a_device_is_reported_as_such() -> None:
    """Runs where cupy imports but sees no device (a CPU machine with cupy-cuda12x)."""
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - any import failure means: not this case
        pytest.skip(f"cupy does not import here ({type(exc).__name__})")
    if SUPPORT.available:
        pytest.skip("cupy sees a CUDA device here")
    assert SUPPORT.reason.startswith(f"cupy {cupy.__version__} sees no CUDA device")


def test_one_name_space_with_system_regions(system_region: str) -> None:
    registry = SharedMemoryRegistry()
    registry.register("sys", system_region, 0, 64)
    assert registry.status(kind="cuda") == []
    with pytest.raises(NotFound) as wrong_kind:
        registry.status("sys", kind="cuda")
    assert str(wrong_kind.value) == (
        "The region named 'sys' is registered as system shared memory, not CUDA shared memory"
    )
    with pytest.raises(NotFound, match="Unable to find cuda shared memory region: 'nope'"):
        registry.status("nope", kind="cuda")
    registry.unregister("sys", kind="cuda")  # the other kind: left alone, as Triton
    registry.unregister(kind="cuda")
    assert [r["name"] for r in registry.status()] == ["sys"]
    registry.unregister("sys")
    assert registry.status() == []


def test_system_regions_through_the_kind_agnostic_window(system_region: str) -> None:
    registry = SharedMemoryRegistry()
    registry.register("sys", system_region, 16, 32)
    window = registry.window("sys", 8, 24)
    window.write(b"\x07" * 24)
    assert bytes(registry.window("sys", 0, 32).read()) == bytes(8) + b"\x07" * 24
    with pytest.raises(InvalidArgument, match=r"Invalid offset \+ byte size .* 'sys'"):
        registry.window("sys", 8, 25)
    with pytest.raises(NotFound, match="Unable to find shared memory region: 'gpu'"):
        registry.window("gpu", 0, 4)
    registry.unregister_all()


@needs_no_cuda
def test_http_refusals_and_metadata(running: RunningServer, system_region: str) -> None:
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(running.http_url)
    try:
        assert "cuda_shared_memory" not in client.get_server_metadata()["extensions"]
        b64 = base64.b64encode(HANDLE)
        with pytest.raises(InferenceServerException) as refused:
            client.register_cuda_shared_memory("g", b64, 0, 64)
        assert refused.value.status() == "400"
        assert refused.value.message().startswith(GPUS_NOT_SUPPORTED)
        assert client.get_cuda_shared_memory_status() == []
        client.unregister_cuda_shared_memory("never_registered")
        client.unregister_cuda_shared_memory()
        with pytest.raises(InferenceServerException) as unknown:
            client.get_cuda_shared_memory_status("nope")
        assert (unknown.value.status(), unknown.value.message()) == (
            "404",
            "Unable to find cuda shared memory region: 'nope'",
        )
        client.register_system_shared_memory("sys", system_region, 64)
        with pytest.raises(InferenceServerException) as wrong_kind:
            client.get_cuda_shared_memory_status("sys")
        assert "registered as system shared memory, not CUDA" in wrong_kind.value.message()
        client.unregister_cuda_shared_memory("sys")
        assert [r["name"] for r in client.get_system_shared_memory_status()] == ["sys"]
        client.unregister_system_shared_memory()
    finally:
        client.close()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"device_id": 0, "byte_size": 64}, "has no 'raw_handle' field"),
        ({"raw_handle": "AAAA", "device_id": 0, "byte_size": 64}, "expected 'raw_handle'"),
        ({"raw_handle": {"b64": "AAAA"}, "byte_size": 64}, "'device_id' and 'byte_size'"),
        ({"raw_handle": {"b64": "A*A"}, "device_id": 0, "byte_size": 64}, "valid base64"),
    ],
)
def test_http_registration_body_errors(
    running: RunningServer, body: dict[str, Any], message: str
) -> None:
    assert running.http_port is not None
    status, _, answer = http_post(
        running.http_port, "/v2/cudasharedmemory/region/g/register", json.dumps(body)
    )
    assert status == 400
    assert message in json.loads(answer)["error"]


@needs_no_cuda
def test_grpc_refusals(running: RunningServer) -> None:
    client = grpcclient.InferenceServerClient(running.grpc_url)
    try:
        with pytest.raises(InferenceServerException) as refused:
            client.register_cuda_shared_memory("g", base64.b64encode(HANDLE), 0, 64)
        assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert refused.value.message().startswith(GPUS_NOT_SUPPORTED)
        assert "cuda_shared_memory" not in client.get_server_metadata(as_json=True)["extensions"]
        assert client.get_cuda_shared_memory_status(as_json=True) == {}
        client.unregister_cuda_shared_memory("never_registered")
    finally:
        client.close()


def test_importing_despina_and_its_frontends_loads_no_cuda() -> None:
    code = (
        "import sys, despina, despina.memory.shared_memory, despina.memory.cuda_memory, despina.serving.server\n"
        "import despina_frontend_http.plugin, despina_frontend_grpc.plugin\n"
        "maps = open('/proc/self/maps').read()\n"
        "loaded = [m for m in ('cupy', 'cuda') if m in sys.modules]\n"
        "libs = [lib for lib in ('libcuda.so', 'libcudart') if lib in maps]\n"
        "print(loaded + libs)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
