"""Device tensors through the core (issue 22), ON THE CUPY STAND-IN: ``core/tests/standin_cuda``
keeps "device" memory in host memory, so these tests prove where Despina keeps a
DeviceArray and where it copies one to the host, not anything about CUDA. A GPU model
("devtoy", device_backend.py) answers DeviceArrays; the wire, an ensemble's CPU step, the
response cache, classification and system shared memory must get host arrays, and a GPU
step of an ensemble the DeviceArrays themselves.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator
from typing import Any

import device_backend
import numpy as np
import pytest
import toy_backend
from cuda_standin import installed
from despina import DeviceArray, is_on_device, to_host
from despina.memory import device_arrays
from despina.memory.device_arrays import concatenate
from despina.testing import RepositoryBuilder, RunningServer
from test_ensemble import ensemble, step
from toy_backend import toy_config

pytest.importorskip("despina_frontend_http")
pytest.importorskip("despina_frontend_grpc")

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

A = np.array([1, 2, 3, 4], np.float32)
B = np.array([10, 20, 30, 40], np.float32)

#: devtoy then the CPU toy: the toy gets (a + b, a - b) and answers (2a, 2b).
DEV_THEN_CPU = ensemble(
    [
        step("dev", {"INPUT0": "X", "INPUT1": "Y"}, {"OUTPUT0": "s", "OUTPUT1": "d"}),
        step("cpu", {"INPUT0": "s", "INPUT1": "d"}, {"OUTPUT0": "P", "OUTPUT1": "Q"}),
    ],
    ["X", "Y"],
    ["P", "Q"],
)
#: devtoy twice: the second step gets the first's DeviceArrays; its outputs go to the wire.
DEV_THEN_DEV = ensemble(
    [
        step("dev", {"INPUT0": "X", "INPUT1": "Y"}, {"OUTPUT0": "s", "OUTPUT1": "d"}),
        step("dev", {"INPUT0": "s", "INPUT1": "d"}, {"OUTPUT0": "P", "OUTPUT1": "Q"}),
    ],
    ["X", "Y"],
    ["P", "Q"],
)


@pytest.fixture
def cupy_standin() -> Iterator[Any]:
    with installed() as cupy:
        yield cupy


@pytest.fixture
def running(
    cupy_standin: Any,
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
) -> RunningServer:
    cache = "response_cache { enable: true }"
    model_repository.add("dev", device_backend.devtoy_config(), {"1/model.devtoy": ""})
    model_repository.add(
        "dev_cached", device_backend.devtoy_config(extra=cache), {"1/model.devtoy": ""}
    )
    model_repository.add("cpu", toy_config(), {"1/model.toy": ""})
    model_repository.add("dev_then_cpu", DEV_THEN_CPU)
    model_repository.add("dev_then_dev", DEV_THEN_DEV)
    device_backend.DevToyBackend.seen.clear()
    return despina_server(
        model_repository.root,
        args=["--cache-config=local,size=1048576", "--allow-client-shm=true"],
        plugins=[toy_backend, device_backend],
    )


def _inputs(module: Any, names: tuple[str, str], binary: bool = True) -> list[Any]:
    tensors = []
    for name, values in zip(names, (A, B), strict=True):
        tensor = module.InferInput(name, [4], "FP32")
        if module is httpclient:
            tensor.set_data_from_numpy(values, binary_data=binary)
        else:
            tensor.set_data_from_numpy(values)
        tensors.append(tensor)
    return tensors


@pytest.mark.parametrize("wire", ["http-json", "http-binary", "grpc"])
def test_device_outputs_leave_as_host_bytes_standin(
    running: RunningServer, http_client: Any, grpc_client: Any, wire: str
) -> None:
    """A GPU model's DeviceArray outputs reach every encoding as their values."""
    module = grpcclient if wire == "grpc" else httpclient
    client = grpc_client(running) if wire == "grpc" else http_client(running)
    outputs = None
    if wire != "grpc":
        binary = wire == "http-binary"
        outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0",)]
    result = client.infer(
        "dev", _inputs(module, ("INPUT0", "INPUT1"), wire != "http-json"), outputs=outputs
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    if outputs is None:
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    assert device_backend.DevToyBackend.seen == [("ndarray", "ndarray", False)]


def test_ensemble_keeps_device_tensors_between_gpu_steps_standin(
    running: RunningServer, http_client: Any
) -> None:
    """Between two GPU steps the tensors stay DeviceArrays (the first step is asked for
    device outputs, the last, whose outputs go to the wire, is not); a CPU step gets host
    copies (the toy adds numpy arrays: a DeviceArray would fail it), and the GPU step
    before it is asked for host outputs."""
    client = http_client(running)
    result = client.infer("dev_then_dev", _inputs(httpclient, ("X", "Y")))
    np.testing.assert_array_equal(result.as_numpy("P"), 2 * A)
    np.testing.assert_array_equal(result.as_numpy("Q"), 2 * B)
    assert device_backend.DevToyBackend.seen == [
        ("ndarray", "ndarray", True),
        ("DeviceArray", "DeviceArray", False),
    ]
    device_backend.DevToyBackend.seen.clear()
    result = client.infer("dev_then_cpu", _inputs(httpclient, ("X", "Y")))
    np.testing.assert_array_equal(result.as_numpy("P"), 2 * A)
    np.testing.assert_array_equal(result.as_numpy("Q"), 2 * B)
    assert device_backend.DevToyBackend.seen == [("ndarray", "ndarray", False)]


def test_cache_and_classification_read_device_outputs_standin(
    running: RunningServer, http_client: Any
) -> None:
    """The response cache keeps host copies of device outputs (a hit answers the same
    values) and classification ranks a device output."""
    client = http_client(running)
    for _ in range(2):
        result = client.infer("dev_cached", _inputs(httpclient, ("INPUT0", "INPUT1")))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    stats = client.get_inference_statistics("dev_cached")["model_stats"][0]["inference_stats"]
    assert int(stats["cache_hit"]["count"]) == 1
    assert device_backend.DevToyBackend.seen == [("ndarray", "ndarray", False)]
    ranked = client.infer(
        "dev_cached",
        _inputs(httpclient, ("INPUT0", "INPUT1")),
        outputs=[httpclient.InferRequestedOutput("OUTPUT0", class_count=2)],
    )
    assert ranked.as_numpy("OUTPUT0").tolist() == [b"44.000000:3", b"33.000000:2"]


def test_device_output_into_system_shared_memory_standin(
    running: RunningServer, http_client: Any
) -> None:
    """A DeviceArray output bound to a system region is written there through one host copy."""
    key = f"despina_test_dev_{os.getpid()}"
    fd = os.open(f"/dev/shm/{key}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, 16)
        mapping = mmap.mmap(fd, 16)
        client = http_client(running)
        client.register_system_shared_memory("out", f"/{key}", 16)
        output = httpclient.InferRequestedOutput("OUTPUT1")
        output.set_shared_memory("out", 16)
        result = client.infer("dev", _inputs(httpclient, ("INPUT0", "INPUT1")), outputs=[output])
        assert "data" not in result.get_output("OUTPUT1")  # it is in the region
        np.testing.assert_array_equal(np.frombuffer(mapping, np.float32).copy(), A - B)
        client.unregister_system_shared_memory("out")
        mapping.close()
    finally:
        os.close(fd)
        os.unlink(f"/dev/shm/{key}")


def test_device_array_surface_standin(cupy_standin: Any) -> None:
    """A DeviceArray: numpy-like metadata, explicit host copies only, DLPack sharing, and
    contiguous copies of strided sources on their device."""
    array = DeviceArray.from_host(np.arange(6, dtype=np.float32).reshape(2, 3), device_id=1)
    assert (array.shape, array.dtype, array.nbytes, array.device_id) == ((2, 3), "float32", 24, 1)
    assert is_on_device(array) and not is_on_device(np.zeros(1))
    with pytest.raises(TypeError, match="to_host"):
        np.asarray(array)
    np.testing.assert_array_equal(to_host(array), np.arange(6).reshape(2, 3))
    shared = DeviceArray.from_dlpack(array)
    assert shared.pointer == array.pointer
    column = DeviceArray.from_dlpack(cupy_standin.asarray(np.arange(6).reshape(2, 3))[:, 1])
    assert column.data.flags.c_contiguous
    np.testing.assert_array_equal(to_host(column), [1, 4])
    joined = concatenate([array, np.ones((1, 3), np.float32)])  # a batch of mixed parts
    assert isinstance(joined, DeviceArray) and joined.device_id == 1
    np.testing.assert_array_equal(to_host(joined), [[0, 1, 2], [3, 4, 5], [1, 1, 1]])


def test_holds_device_arrays_from_the_first_one_made(
    cupy_standin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host tensors are told at once in a process that never made a DeviceArray, and a
    DeviceArray is found in any process that did, the first one included."""
    monkeypatch.setattr(device_arrays, "_made", False)
    assert not device_arrays.holds_device_arrays({"a": A, "b": B})
    found = DeviceArray.from_host(A, device_id=0)
    assert device_arrays.holds_device_arrays({"a": A, "b": found})
    assert not device_arrays.holds_device_arrays({"a": A, "b": B})
