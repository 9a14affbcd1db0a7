"""PyTorch on a GPU (issue 22): each KIND_GPU instance runs in its own thread with the
instance's device current and its own CUDA stream, and answers stay correct. Skipped
where torch sees no CUDA device (this runs on a GPU machine: ../shared/GPU.md)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from despina.testing import RepositoryBuilder, RunningServer

from .conftest import AddSub, scripted

pytestmark = pytest.mark.gpu

Start = Callable[..., RunningServer]

CONFIG = """
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 2 kind: KIND_GPU } ]
"""


@pytest.fixture
def cuda() -> int:
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} sees no CUDA device")
    return torch.cuda.device_count()


def test_gpu_instances_have_their_own_streams_and_devices(
    cuda: int, model_repository: RepositoryBuilder, despina_server: Start, served
) -> None:
    model_repository.add("add_sub", CONFIG, {"1/model.pt": scripted(AddSub())})
    client = served(despina_server(model_repository.root))
    instances = client.server.models.get("add_sub").instances
    assert len(instances) == 2 * cuda
    assert {i.device for i in instances} == {f"cuda:{d}" for d in range(cuda)}
    streams = [i.stream for i in instances]
    assert all(s is not None for s in streams)
    assert len({s.cuda_stream for s in streams}) == len(streams)  # none is the default
    assert all(s.cuda_stream != torch.cuda.default_stream(s.device).cuda_stream for s in streams)
    rng = np.random.default_rng(0)
    requests = [
        {n: rng.standard_normal((3, 4), dtype=np.float32) for n in ("INPUT__0", "INPUT__1")}
        for _ in range(32)
    ]
    for inputs, outputs in zip(requests, client.infer_many("add_sub", requests), strict=True):
        np.testing.assert_allclose(outputs["OUTPUT__0"], inputs["INPUT__0"] + inputs["INPUT__1"])
        np.testing.assert_allclose(outputs["OUTPUT__1"], inputs["INPUT__0"] - inputs["INPUT__1"])
    devices = set()
    for instance in instances:
        devices.add(instance.executor.submit(torch.cuda.current_device).result())
    assert devices == set(range(cuda))  # each thread has its instance's device current


def test_gpu_outputs_stay_on_the_device_only_where_asked(cuda: int) -> None:
    """A CUDA output becomes a DeviceArray sharing the tensor's memory when the batch takes
    device outputs (needs cupy), else a host copy."""
    pytest.importorskip("cupy", reason="cupy (despina[cuda]) keeps outputs on the device")
    from despina import DeviceArray
    from despina_backend_torch.convert import from_torch

    tensor = torch.arange(8, dtype=torch.float32, device="cuda:0")
    kept = from_torch(tensor, "FP32", "OUT", on_device=True)
    assert isinstance(kept, DeviceArray) and kept.pointer == tensor.data_ptr()
    np.testing.assert_array_equal(kept.to_host(), np.arange(8, dtype=np.float32))
    host = from_torch(tensor, "FP32", "OUT", on_device=False)
    assert isinstance(host, np.ndarray)


ENSEMBLE = """
platform: "ensemble"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "P" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "Q" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "first" model_version: -1
    input_map { key: "INPUT__0" value: "A" } input_map { key: "INPUT__1" value: "B" }
    output_map { key: "OUTPUT__0" value: "s" } output_map { key: "OUTPUT__1" value: "d" } },
  { model_name: "second" model_version: -1
    input_map { key: "INPUT__0" value: "s" } input_map { key: "INPUT__1" value: "d" }
    output_map { key: "OUTPUT__0" value: "P" } output_map { key: "OUTPUT__1" value: "Q" } }
] }
"""


def test_ensemble_of_gpu_models_passes_device_tensors(
    cuda: int, model_repository: RepositoryBuilder, despina_server: Start, served
) -> None:
    """Two KIND_GPU models in an ensemble: the first answers on the device for the second,
    which takes DeviceArray inputs; (a + b) + (a - b) = 2a and (a + b) - (a - b) = 2b."""
    for name in ("first", "second"):
        model_repository.add(name, CONFIG, {"1/model.pt": scripted(AddSub())})
    model_repository.add("pair", ENSEMBLE)
    client = served(despina_server(model_repository.root))
    assert all(i.device_inputs for i in client.server.models.get("second").instances)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.full((3, 4), 5, np.float32)
    outputs = client.infer("pair", {"A": a, "B": b})
    np.testing.assert_allclose(outputs["P"], 2 * a)
    np.testing.assert_allclose(outputs["Q"], 2 * b)
