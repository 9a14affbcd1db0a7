"""Config ``parameters`` / ``optimization`` reach onnxruntime as Triton's backend maps them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]
KEEP_GOING = ["--exit-on-error=false"]


def parameters(**values: str) -> str:
    return "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in values.items()
    )


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (-1, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
        (1, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
        (2, ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
        (0, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
    ],
)
def test_threads_execution_mode_and_graph_level(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    served,
    onnx_models,
    level: int,
    expected: object,
) -> None:
    text = (
        'backend: "onnxruntime"\n'
        + parameters(
            intra_op_thread_count="2",
            inter_op_thread_count="2",
            execution_mode="1",
            enable_mem_arena="1",
            **{"memory.enable_memory_arena_shrinkage": "cpu:0"},
        )
        + f"optimization {{ graph {{ level: {level} }} }}\n"
    )
    model_repository.add("tuned", text, {"1/model.onnx": onnx_models["add_sub"]()})
    client = served(despina_server(model_repository.root))
    instance = client.server.models.get("tuned").instances[0]
    options = instance.session.get_session_options()
    assert options.intra_op_num_threads == 2
    assert options.inter_op_num_threads == 2
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.enable_cpu_mem_arena is True
    assert options.graph_optimization_level == expected
    ones = np.ones((2, 4), np.float32)
    assert client.infer("tuned", {"INPUT0": ones, "INPUT1": ones})["OUTPUT1"].sum() == 0


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (
            parameters(intra_op_thread_count="many"),
            "parameter 'intra_op_thread_count' must be an integer",
        ),
        (parameters(enable_mem_pattern="maybe"), "parameter 'enable_mem_pattern' must be 0/1"),
        (
            'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "mkl" } ] } }',
            "unknown CPU execution accelerator 'mkl'",
        ),
    ],
    ids=["thread_count", "bool", "accelerator"],
)
def test_bad_settings_fail_the_load(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    served,
    onnx_models,
    extra: str,
    fragment: str,
) -> None:
    text = 'backend: "onnxruntime"\n' + extra
    model_repository.add("bad", text, {"1/model.onnx": onnx_models["add_sub"]()})
    row = served(despina_server(model_repository.root, KEEP_GOING)).index()["bad"]
    assert row["state"] == "UNAVAILABLE"
    assert "model 'bad'" in row["reason"] and fragment in row["reason"]


@pytest.mark.skipif(
    "OpenVINOExecutionProvider" in ort.get_available_providers(),
    reason="this onnxruntime build has the OpenVINO execution provider",
)
def test_openvino_accelerator_needs_its_provider(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    text = (
        'backend: "onnxruntime"\n'
        'optimization { execution_accelerators { cpu_execution_accelerator [ { name: "openvino" } ] } }'
    )
    model_repository.add("ov", text, {"1/model.onnx": onnx_models["add_sub"]()})
    reason = served(despina_server(model_repository.root, KEEP_GOING)).index()["ov"]["reason"]
    assert "needs onnxruntime's OpenVINOExecutionProvider" in reason
    assert "CPUExecutionProvider" in reason


def _has_gpu() -> bool:
    return any(p.name[len("nvidia") :].isdigit() for p in Path("/dev").glob("nvidia*"))


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="no NVIDIA GPU on this machine")
def test_kind_gpu_runs_on_cuda_provider(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    text = 'backend: "onnxruntime"\ninstance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ] } ]\n'
    model_repository.add("on_gpu", text, {"1/model.onnx": onnx_models["add_sub"]()})
    client = served(despina_server(model_repository.root, KEEP_GOING))
    row = client.index()["on_gpu"]
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert "needs onnxruntime's CUDAExecutionProvider" in row["reason"]
        return
    assert row["state"] == "READY"
    instance = client.server.models.get("on_gpu").instances[0]
    assert instance.session.get_providers()[0] == "CUDAExecutionProvider"
    ones = np.ones((3, 4), np.float32)
    assert client.infer("on_gpu", {"INPUT0": ones, "INPUT1": ones})["OUTPUT0"].sum() == 24


def test_kind_gpu_without_a_gpu_fails_the_load(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    if _has_gpu():
        pytest.skip("this machine has a GPU")
    text = 'backend: "onnxruntime"\ninstance_group [ { kind: KIND_GPU } ]\n'
    model_repository.add("on_gpu", text, {"1/model.onnx": onnx_models["add_sub"]()})
    row = served(despina_server(model_repository.root, KEEP_GOING)).index()["on_gpu"]
    assert row["state"] == "UNAVAILABLE"
    assert "KIND_GPU" in row["reason"]
