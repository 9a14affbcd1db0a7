"""Unregistering a system shared-memory region while a request uses it is deferred, as
newer Triton does (server #7743), over HTTP and gRPC on a real server: the unregister
succeeds at once; the region stays registered (listed, and usable by new requests) until
the last request holding it has written its answer there; then it is unmapped, and a new
request naming it fails as unregistered."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import toy_backend
from despina.testing import RepositoryBuilder, RunningServer

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")
shm = pytest.importorskip("tritonclient.utils.shared_memory")

#: The toy model's one execution, in seconds: long enough to unregister during it.
DELAY = 1.0
SIZE = 16  # one FP32 [4] tensor; INPUT0, INPUT1, OUTPUT0, OUTPUT1 at 0, 16, 32, 48


@pytest.fixture
def region() -> Iterator[Any]:
    key = f"/despina_deferred_{time.monotonic_ns()}"
    handle = shm.create_shared_memory_region("io", key, 4 * SIZE)
    shm.set_shared_memory_region(handle, [np.arange(4, dtype=np.float32)])
    shm.set_shared_memory_region(handle, [np.full(4, 10, np.float32)], offset=SIZE)
    yield key, handle
    shm.destroy_shared_memory_region(handle)


def _mappings(key: str) -> int:
    """How many mappings of the key's /dev/shm file this process (client and server) has."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if line.rstrip().endswith(f"/dev/shm{key}"))


def _io(module: Any) -> tuple[list[Any], list[Any]]:
    inputs = [module.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
    outputs = [module.InferRequestedOutput(name) for name in ("OUTPUT0", "OUTPUT1")]
    for index, tensor in enumerate(inputs + outputs):
        tensor.set_shared_memory("io", SIZE, offset=index * SIZE)
    return inputs, outputs


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unregister_during_inference_is_deferred(
    protocol: str,
    region: tuple[str, Any],
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Callable[..., Any],
    grpc_client: Callable[..., Any],
) -> None:
    import importlib

    from tritonclient.utils import InferenceServerException

    key, handle = region
    model_repository.add(
        "slow", toy_backend.toy_config(), {"1/model.toy": f'{{"delay_s": {DELAY}}}'}
    )
    running = despina_server(
        model_repository.root, args=["--allow-client-shm=true"], plugins=[toy_backend]
    )
    module = importlib.import_module(f"tritonclient.{protocol}")
    factory = http_client if protocol == "http" else grpc_client
    client, control = factory(running), factory(running)  # control: while client waits
    control.register_system_shared_memory("io", key, 4 * SIZE)
    assert _mappings(key) == 2  # the client's and the server's
    inputs, outputs = _io(module)

    finished: list[Any] = []
    if protocol == "http":
        pending = client.async_infer("slow", inputs, outputs=outputs)
        result = lambda: pending.get_result()  # noqa: E731
    else:
        client.async_infer(
            "slow", inputs, lambda result, error: finished.append((result, error)), outputs=outputs
        )
        result = lambda: _wait_for(finished)  # noqa: E731
    _until_running()
    control.unregister_system_shared_memory("io")
    assert toy_backend.ToyBackend.active == 1  # answered at once, not after the request
    listed = control.get_system_shared_memory_status()
    names = [r["name"] for r in listed] if protocol == "http" else [*listed.regions]
    assert names == ["io"]  # still registered while held
    assert _mappings(key) == 2

    result()
    expected = np.arange(4, dtype=np.float32) + 10
    got = shm.get_contents_as_numpy(handle, np.float32, [4], offset=2 * SIZE)
    assert got.tolist() == expected.tolist()
    assert _mappings(key) == 1  # the server's mapping is gone
    with pytest.raises(InferenceServerException) as gone:
        client.get_system_shared_memory_status("io")
    assert gone.value.message() == "Unable to find system shared memory region: 'io'"
    with pytest.raises(InferenceServerException) as refused:
        again, wanted = _io(module)
        client.infer("slow", again, outputs=wanted)
    assert refused.value.message() == "Unable to find shared memory region: 'io'"
    expected_status = "404" if protocol == "http" else "StatusCode.NOT_FOUND"
    assert refused.value.status() == expected_status


def test_a_request_during_the_deferral_keeps_the_region(
    region: tuple[str, Any],
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    http_client: Callable[..., Any],
) -> None:
    """As Triton: a request admitted after the unregister, while the region is still held,
    uses it; the region goes when the last of them is answered."""
    import tritonclient.http as httpclient

    key, _ = region
    two = toy_backend.toy_config(extra="instance_group [ { count: 2 kind: KIND_CPU } ]")
    model_repository.add("slow", two, {"1/model.toy": f'{{"delay_s": {DELAY}}}'})
    running = despina_server(
        model_repository.root, args=["--allow-client-shm=true"], plugins=[toy_backend]
    )
    client = http_client(running, concurrency=3)
    client.register_system_shared_memory("io", key, 4 * SIZE)
    inputs, outputs = _io(httpclient)
    first = client.async_infer("slow", inputs, outputs=outputs)
    _until_running()
    client.unregister_system_shared_memory()
    second = client.async_infer("slow", inputs, outputs=outputs)
    _until_running(2)
    first.get_result()
    assert [r["name"] for r in client.get_system_shared_memory_status()] == ["io"]
    second.get_result()
    assert client.get_system_shared_memory_status() == []
    assert _mappings(key) == 1


def _until_running(count: int = 1) -> None:
    """Wait until ``count`` toy executions run (the requests were admitted)."""
    deadline = time.monotonic() + 30
    while toy_backend.ToyBackend.active < count and time.monotonic() < deadline:
        time.sleep(0.005)
    assert toy_backend.ToyBackend.active == count


def _wait_for(finished: list[Any]) -> Any:
    """The gRPC callback's result, once it came; its error raised."""
    deadline = time.monotonic() + 30
    while not finished and time.monotonic() < deadline:
        time.sleep(0.01)
    result, error = finished[0]
    if error is not None:
        raise error
    return result
