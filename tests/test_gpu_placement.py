"""Placement on a simulated two-GPU host (issue 22, item 1): a plugin answers
``despina_gpu_inventory`` with two GPUs, and real servers load real models. No CUDA runs
here: the Python model is told its kind and device (as Triton tells it) and never touches
a GPU, and the framework backends installed here are CPU builds, which keep their models on
the CPU. What runs on a real GPU is tested by the ``gpu``-marked tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from despina import Gpu, GpuInventory, hookimpl
from despina.testing import RepositoryBuilder, RunningServer
from tritonclient.utils import InferenceServerException

pytest.importorskip("despina_backend_python")
pytest.importorskip("despina_backend_onnx")

Start = Callable[..., RunningServer]
ROOT = Path(__file__).resolve().parents[1]
ONNX = (ROOT / "examples/model_repository/onnx_add_sub/1/model.onnx").read_bytes()

WHERE_AM_I = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        keys = ("model_instance_name", "model_instance_kind", "model_instance_device_id")
        self.where = json.dumps({k: args[k] for k in keys})

    def execute(self, requests):
        out = np.array([self.where.encode()], dtype=object)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("WHERE", out)]) for _ in requests]
"""
IO = """
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "WHERE" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


class TwoGpus:
    """Two simulated GPUs of compute capability 8.0."""

    @hookimpl
    def despina_gpu_inventory(self, min_compute_capability: float) -> GpuInventory:
        gpus = (Gpu(0, "sim0", "GPU-sim-0", (8, 0)), Gpu(1, "sim1", "GPU-sim-1", (8, 0)))
        return GpuInventory(gpus, "simulated", min_compute_capability=min_compute_capability)


def where(client: httpclient.InferenceServerClient, model: str, calls: int) -> set[str]:
    """The distinct (name, kind, device) answers of ``calls`` requests."""
    seen = set()
    for _ in range(calls):
        x = httpclient.InferInput("X", [1], "FP32")
        x.set_data_from_numpy(np.zeros(1, np.float32))
        answer = client.infer(model, [x]).as_numpy("WHERE")[0]
        seen.add(json.dumps(json.loads(answer), sort_keys=True))
    return seen


def test_default_group_runs_one_instance_per_gpu_with_tritons_names(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("py", IO, {"1/model.py": WHERE_AM_I})
    running = despina_server(model_repository.root, plugins=[TwoGpus()])
    client = httpclient.InferenceServerClient(running.http_url)
    group = client.get_model_config("py")["instance_group"]
    assert [(g["name"], g["kind"], g["count"], g["gpus"]) for g in group] == [
        ("py", "KIND_GPU", 1, [0, 1])
    ]
    version = running.server.models.get("py")
    instances = [(i.spec.name, i.spec.kind, i.spec.device_id) for i in version.instances]
    assert instances == [("py_0", "KIND_GPU", 0), ("py_0", "KIND_GPU", 1)]
    answers = where(client, "py", 8)
    assert answers <= {
        json.dumps({"model_instance_device_id": d, "model_instance_kind": "GPU",
                    "model_instance_name": "py_0"}, sort_keys=True)
        for d in ("0", "1")
    }  # fmt: skip


def test_cpu_only_frameworks_stay_on_the_cpu_of_a_gpu_host(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """onnxruntime here has no CUDA provider: the default group and a KIND_AUTO group
    are CPU groups."""
    model_repository.add("onnx_default", None, {"1/model.onnx": ONNX})
    model_repository.add(
        "onnx_auto", "instance_group [ { kind: KIND_AUTO } ]", {"1/model.onnx": ONNX}
    )
    running = despina_server(model_repository.root, plugins=[TwoGpus()])
    client = httpclient.InferenceServerClient(running.http_url)
    default = client.get_model_config("onnx_default")["instance_group"]
    assert [(g["kind"], g["count"]) for g in default] == [("KIND_CPU", 1)]
    auto = client.get_model_config("onnx_auto")["instance_group"]
    assert [(g["kind"], g["count"]) for g in auto] == [("KIND_CPU", 1)]


def test_unknown_gpu_id_is_refused_with_tritons_text_and_the_server_serves_on(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("ok", IO, {"1/model.py": WHERE_AM_I})
    bad = IO + "instance_group [ { kind: KIND_GPU gpus: [ 0, 3 ] } ]\n"
    model_repository.add("bad", bad, {"1/model.py": WHERE_AM_I})
    running = despina_server(
        model_repository.root, ["--model-control-mode=explicit"], plugins=[TwoGpus()]
    )
    client = httpclient.InferenceServerClient(running.http_url)
    with pytest.raises(InferenceServerException) as failed:
        client.load_model("bad")
    assert str(failed.value.status()) == "400"
    assert (
        "instance group bad_0 of model bad specifies invalid or unsupported gpu id 3. GPUs "
        "with at least the minimum required CUDA compute compatibility of 7.500000 are: 0, 1"
    ) in failed.value.message()
    client.load_model("ok")
    assert client.is_model_ready("ok")


def test_gpus_below_the_minimum_capability_get_no_instances(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    model_repository.add("py", IO, {"1/model.py": WHERE_AM_I})
    running = despina_server(
        model_repository.root, ["--min-supported-compute-capability=9.0"], plugins=[TwoGpus()]
    )
    client = httpclient.InferenceServerClient(running.http_url)
    group = client.get_model_config("py")["instance_group"]
    assert [(g["kind"], g.get("gpus", [])) for g in group] == [("KIND_CPU", [])]
