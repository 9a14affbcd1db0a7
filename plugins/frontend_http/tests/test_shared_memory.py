"""System shared memory through tritonclient: registration opt-in, inputs and outputs in
regions, windows enforced, internal keys refused, CUDA shared memory refused."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from despina.testing import RunningServer

from .helpers import expect_error, infer_ok

SIZE = 64  # 16 FP32


@pytest.fixture
def region() -> Iterator[Any]:
    """A 256-byte client region: INPUT0, INPUT1, OUTPUT0, OUTPUT1 at 0, 64, 128, 192."""
    key = f"/despina_http_test_{os.getpid()}"
    handle = shm.create_shared_memory_region("data", key, 4 * SIZE)
    shm.set_shared_memory_region(handle, [np.arange(16, dtype=np.float32), np.ones(16, np.float32)])
    yield handle, key
    shm.destroy_shared_memory_region(handle)


def shm_inputs(offsets: tuple[int, int] = (0, SIZE), size: int = SIZE) -> list[Any]:
    inputs = [httpclient.InferInput(f"INPUT{i}", [16], "FP32") for i in range(2)]
    for tensor, offset in zip(inputs, offsets, strict=True):
        tensor.set_shared_memory("data", size, offset)
    return inputs


def test_inputs_and_outputs_in_a_region(
    serve: Callable[..., RunningServer], http_client: Callable[..., Any], region: Any
) -> None:
    handle, key = region
    client = http_client(serve("--allow-client-shm=true"))
    client.register_system_shared_memory("data", key, 4 * SIZE)
    assert client.get_system_shared_memory_status() == [
        {"name": "data", "key": key, "offset": 0, "byte_size": 4 * SIZE}
    ]
    assert client.get_system_shared_memory_status("data")[0]["byte_size"] == 4 * SIZE
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
    outputs[0].set_shared_memory("data", SIZE, 2 * SIZE)
    result = client.infer("add_sub", shm_inputs(), outputs=outputs)
    written_output = result.get_output("OUTPUT0")
    assert "data" not in written_output and "parameters" not in written_output  # as Triton
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.arange(16) - 1)
    written = shm.get_contents_as_numpy(handle, np.float32, [16], offset=2 * SIZE)
    np.testing.assert_array_equal(written, np.arange(16) + 1)
    client.unregister_system_shared_memory("data")
    assert client.get_system_shared_memory_status() == []


def test_windows_are_enforced(
    serve: Callable[..., RunningServer], http_client: Callable[..., Any], region: Any
) -> None:
    _, key = region
    client = http_client(serve("--allow-client-shm=true"))
    expect_error(
        lambda: client.register_system_shared_memory("big", key, 4 * SIZE + 1),
        400,
        "exceeds the region size",
    )
    expect_error(
        lambda: client.register_system_shared_memory("far", key, SIZE, offset=4 * SIZE),
        400,
        "exceeds",
    )
    client.register_system_shared_memory("data", key, 2 * SIZE, offset=SIZE)  # window [64, 192)
    expect_error(
        lambda: client.register_system_shared_memory("data", key, SIZE), 400, "already in manager"
    )
    expect_error(
        lambda: client.infer("add_sub", shm_inputs(offsets=(0, 2 * SIZE))),
        400,
        "Invalid offset + byte size for shared memory region: 'data'",
    )
    expect_error(
        lambda: client.infer("add_sub", shm_inputs(offsets=(0, 1 << 40))),
        400,
        "Invalid offset + byte size",
    )
    expect_error(
        lambda: client.infer("add_sub", shm_inputs(size=SIZE - 4)), 400, "input byte size mismatch"
    )
    outputs = [httpclient.InferRequestedOutput("OUTPUT0")]
    outputs[0].set_shared_memory("data", SIZE, 2 * SIZE)
    expect_error(
        lambda: client.infer("add_sub", shm_inputs(offsets=(0, 0)), outputs=outputs),
        400,
        "Invalid offset + byte size",
    )
    outputs = [httpclient.InferRequestedOutput("OUTPUT0")]
    outputs[0].set_shared_memory("data", 8, 0)
    expect_error(
        lambda: client.infer("add_sub", shm_inputs(offsets=(0, 0)), outputs=outputs),
        400,
        "should be at least 64 bytes",
    )
    expect_error(
        lambda: client.infer("add_sub", [*shm_inputs()[:1], _unknown_region()]),
        404,
        "Unable to find shared memory region: 'missing'",
    )
    expect_error(
        lambda: client.get_system_shared_memory_status("missing"),
        404,
        "Unable to find system shared memory region: 'missing'",
    )
    infer_ok(client)


def _unknown_region() -> Any:
    tensor = httpclient.InferInput("INPUT1", [16], "FP32")
    tensor.set_shared_memory("missing", SIZE)
    return tensor


def test_registration_is_opt_in_and_internal_keys_are_refused(
    server: RunningServer,
    serve: Callable[..., RunningServer],
    http_client: Callable[..., Any],
    region: Any,
) -> None:
    _, key = region
    client = http_client(server)
    expect_error(
        lambda: client.register_system_shared_memory("data", key, SIZE), 403, "--allow-client-shm"
    )
    allowed_server = serve("--allow-client-shm=true")
    allowed = http_client(allowed_server)
    error = expect_error(
        lambda: allowed.register_system_shared_memory("x", "/despina_internal_0", SIZE),
        400,
        "Invalid shared memory region: 'x'",
    )
    assert "despina_internal" not in error.message()
    error = expect_error(
        lambda: allowed.register_system_shared_memory("y", "/no_such_key_here", SIZE),
        400,
        "Unable to open",
    )
    assert "no_such_key" not in error.message()
    expect_error(
        lambda: allowed.register_system_shared_memory("z", "../etc/passwd", SIZE),
        400,
        "invalid key",
    )
    expect_error(
        lambda: allowed.register_cuda_shared_memory("g", b"AAAA", 0, SIZE),
        400,
        "'raw_handle' must be a cudaIpcMemHandle_t"  # cupy sees a device: the handle's checked
        if allowed_server.server.shared_memory.cuda_support().available
        else "failed to register CUDA shared memory region: 'g', GPUs not supported",
    )
    assert allowed.get_cuda_shared_memory_status() == []
    allowed.unregister_cuda_shared_memory()
    infer_ok(allowed)
