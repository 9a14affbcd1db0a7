"""CUDA shared memory (issue 22), over HTTP and gRPC: a client process makes a device
allocation, registers its CUDA IPC handle, infers with inputs and outputs in the region,
and checks the results, status, bounds and unregister. Two models: a Python-backend
add_sub (host tensors: inputs copied to the host, outputs to the device) and the tests'
GPU model "devtoy" (device tensors: inputs and outputs copied device to device).

A CUDA IPC handle cannot be opened by the process that made it, so the client runs in a
child process (this file run as a script) while the server runs in the test's.

Each case runs twice: on the TEST-ONLY cupy stand-in (``core/tests/standin_cuda``, "device"
memory in host memory: it proves Despina's logic and bounds, not CUDA), and on a real GPU
(marked ``gpu``, skipped where cupy sees no CUDA device; it has not run on a GPU yet).
"""

from __future__ import annotations

import base64
import contextlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from despina.testing import ADD_SUB_MODEL_PY, RepositoryBuilder, RunningServer

N = 16
SIZE = N * 4  # one FP32 [16] tensor
REGION = 4 * SIZE  # INPUT0, INPUT1, OUTPUT0, OUTPUT1 at 0, 64, 128, 192

CONFIG = f"""
backend: "python"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ {N} ] }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ {N} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ {N} ] }},
         {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ {N} ] }} ]
instance_group [ {{ kind: KIND_CPU }} ]
"""


@pytest.mark.parametrize("model", ["add_sub", "devtoy"])
@pytest.mark.parametrize("cuda", ["standin", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_cuda_regions_over_http_and_grpc(
    model_repository: RepositoryBuilder,
    despina_server: Callable[..., RunningServer],
    cuda: str,
    model: str,
) -> None:
    pytest.importorskip("despina_backend_python")
    pytest.importorskip("despina_frontend_http")
    pytest.importorskip("despina_frontend_grpc")
    import device_backend
    from cuda_standin import installed
    from despina.memory.cuda_memory import probe_cuda

    with installed() if cuda == "standin" else contextlib.nullcontext():
        support = probe_cuda()
        if not support.available:
            pytest.skip(f"no CUDA shared memory here: {support.reason}")
        model_repository.add("add_sub", CONFIG, {"1/model.py": ADD_SUB_MODEL_PY})
        model_repository.add("devtoy", device_backend.devtoy_config(N), {"1/model.devtoy": ""})
        device_backend.DevToyBackend.seen.clear()
        running = despina_server(
            model_repository.root, args=["--allow-client-shm=true"], plugins=[device_backend]
        )
        done = subprocess.run(
            [sys.executable, __file__, running.http_url, running.grpc_url, model],
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["http", "ok", "grpc", "ok"]
    if model == "devtoy":  # the region's bytes reached the model on the device, and it
        # was asked for device outputs (both are bound to the CUDA region)
        assert set(device_backend.DevToyBackend.seen) == {("DeviceArray", "DeviceArray", True)}


@pytest.mark.gpu
def test_tritonclient_cuda_shared_memory_utilities(
    model_repository: RepositoryBuilder, despina_server: Callable[..., RunningServer]
) -> None:
    """What users write: ``tritonclient.utils.cuda_shared_memory`` (cuda-python underneath)
    makes the regions, sets the inputs, gives the raw handles and reads the outputs, over
    HTTP and gRPC, with the GPU model devtoy. Real GPU only (no stand-in for cuda-python)."""
    pytest.importorskip("despina_frontend_http")
    pytest.importorskip("despina_frontend_grpc")
    import device_backend
    from despina.memory.cuda_memory import probe_cuda

    support = probe_cuda()
    if not support.available or getattr(sys.modules.get("cupy"), "DESPINA_STANDIN", False):
        pytest.skip(f"no CUDA device here: {support.reason or 'cupy is the stand-in'}")
    pytest.importorskip("cuda.bindings", reason="tritonclient's CUDA utilities need cuda-python")
    model_repository.add("devtoy", device_backend.devtoy_config(N), {"1/model.devtoy": ""})
    running = despina_server(
        model_repository.root, args=["--allow-client-shm=true"], plugins=[device_backend]
    )
    done = subprocess.run(
        [sys.executable, __file__, running.http_url, running.grpc_url, "utils"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split() == ["http", "ok", "grpc", "ok"]


# The client: runs in a child process (python tests/test_cuda_shared_memory.py HTTP GRPC MODEL).


class DeviceRegion:
    """A raw cudaMalloc allocation (its IPC handle names its base) with host copies."""

    def __init__(self, byte_size: int) -> None:
        import cupy

        self.runtime = cupy.cuda.runtime
        self.pointer = int(self.runtime.malloc(byte_size))
        self.b64 = base64.b64encode(self.runtime.ipcGetMemHandle(self.pointer))

    def put(self, offset: int, array: np.ndarray) -> None:
        host = np.ascontiguousarray(array)
        self.runtime.memcpy(
            self.pointer + offset, host.ctypes.data, host.nbytes, self.runtime.memcpyHostToDevice
        )

    def get(self, offset: int, count: int) -> np.ndarray:
        host = np.empty(count, np.float32)
        self.runtime.memcpy(
            host.ctypes.data, self.pointer + offset, host.nbytes, self.runtime.memcpyDeviceToHost
        )
        return host

    def free(self) -> None:
        self.runtime.free(self.pointer)


def _refused(call: Callable[[], Any], text: str) -> str:
    from tritonclient.utils import InferenceServerException

    try:
        call()
    except InferenceServerException as exc:
        assert text in exc.message(), (text, exc.message())
        return str(exc.status())
    raise AssertionError(f"not refused: expected {text!r}")


def _check_protocol(module: Any, url: str, region: DeviceRegion, name: str, model: str) -> None:
    """Register, status, infer in the region, bounds, name clashes, unregister."""
    client = module.InferenceServerClient(url)
    grpc = module.__name__.endswith("grpc")

    def status(region_name: str = "") -> Any:
        if grpc:
            answer = client.get_cuda_shared_memory_status(region_name, as_json=True)
            return sorted(answer.get("regions", {}).values(), key=lambda r: r["name"])
        return client.get_cuda_shared_memory_status(region_name)

    def inputs(offsets: tuple[int, int] = (0, SIZE)) -> list[Any]:
        tensors = [module.InferInput(f"INPUT{i}", [N], "FP32") for i in range(2)]
        for tensor, offset in zip(tensors, offsets, strict=True):
            tensor.set_shared_memory(name, SIZE, offset)
        return tensors

    outputs = [module.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
    for i, output in enumerate(outputs):
        output.set_shared_memory(name, SIZE, (2 + i) * SIZE)
    try:
        _refused(
            lambda: client.register_cuda_shared_memory(name, region.b64, 0, 1 << 40),
            "invalid args",
        )
        client.register_cuda_shared_memory(name, region.b64, 0, REGION)
        got = status()
        # protobuf's JSON (gRPC) leaves out a device_id of 0
        rows = [(r["name"], int(r.get("device_id", 0)), int(r["byte_size"])) for r in got]
        assert rows == [(name, 0, REGION)], got
        _refused(
            lambda: client.register_cuda_shared_memory(name, region.b64, 0, REGION),
            "already in manager",
        )
        _refused(lambda: client.get_system_shared_memory_status(name), "not system shared memory")
        a, b = np.arange(N, dtype=np.float32), np.full(N, 3, np.float32)
        region.put(0, a)
        region.put(SIZE, b)
        client.infer(model, inputs(), outputs=outputs)
        np.testing.assert_array_equal(region.get(2 * SIZE, N), a + b)
        np.testing.assert_array_equal(region.get(3 * SIZE, N), a - b)
        _refused(
            lambda: client.infer(model, inputs((0, 3 * SIZE + 4))),
            f"Invalid offset + byte size for shared memory region: '{name}'",
        )
        client.unregister_system_shared_memory(name)  # the other kind: left alone
        assert len(status()) == 1
        client.unregister_cuda_shared_memory(name)
        assert status() == []
        _refused(
            lambda: client.infer(model, inputs(), outputs=outputs),
            f"Unable to find shared memory region: '{name}'",
        )
    finally:
        client.unregister_cuda_shared_memory()
        client.close()


def _client_main(http_url: str, grpc_url: str, model: str) -> None:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    region = DeviceRegion(REGION)
    try:
        for label, module, url in (("http", httpclient, http_url), ("grpc", grpcclient, grpc_url)):
            _check_protocol(module, url, region, f"cuda_{label}", model)
            print(label, "ok", flush=True)
    finally:
        region.free()


def _utils_main(http_url: str, grpc_url: str) -> None:
    """Inputs in one region, outputs in another, all through tritonclient's utilities."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    import tritonclient.utils.cuda_shared_memory as cudashm

    a, b = np.arange(N, dtype=np.float32), np.full(N, 3, np.float32)
    for label, module, url in (("http", httpclient, http_url), ("grpc", grpcclient, grpc_url)):
        client = module.InferenceServerClient(url)
        ins = cudashm.create_shared_memory_region(f"in_{label}", 2 * SIZE, 0)
        outs = cudashm.create_shared_memory_region(f"out_{label}", 2 * SIZE, 0)
        try:
            cudashm.set_shared_memory_region(ins, [a, b])
            for name, region in ((f"in_{label}", ins), (f"out_{label}", outs)):
                client.register_cuda_shared_memory(
                    name, cudashm.get_raw_handle(region), 0, 2 * SIZE
                )
            inputs = [module.InferInput(f"INPUT{i}", [N], "FP32") for i in range(2)]
            outputs = [module.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
            for i in range(2):
                inputs[i].set_shared_memory(f"in_{label}", SIZE, i * SIZE)
                outputs[i].set_shared_memory(f"out_{label}", SIZE, i * SIZE)
            client.infer("devtoy", inputs, outputs=outputs)
            got = cudashm.get_contents_as_numpy(outs, "FP32", [2, N])
            np.testing.assert_array_equal(got[0], a + b)
            np.testing.assert_array_equal(got[1], a - b)
            client.unregister_cuda_shared_memory()
        finally:
            cudashm.destroy_shared_memory_region(ins)
            cudashm.destroy_shared_memory_region(outs)
            client.close()
        print(label, "ok", flush=True)


if __name__ == "__main__":
    if sys.argv[3] == "utils":
        _utils_main(sys.argv[1], sys.argv[2])
    else:
        _client_main(sys.argv[1], sys.argv[2], sys.argv[3])
