"""Triton's PyTorch parameters reach torch: grad mode, thread counts, weight sharing, GPUs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]

# forward() reports the torch state it runs in: inference mode, grad mode, thread count.
PROBE = """
import torch


class Probe(torch.nn.Module):
    def forward(self, x):
        state = [torch.is_inference_mode_enabled(), torch.is_grad_enabled(), torch.get_num_threads()]
        return torch.tensor(state, dtype=torch.int64) + x.sum().to(torch.int64) * 0
"""


def probe_config(**parameters: str) -> str:
    text = (
        'backend: "pytorch"\ndefault_model_filename: "model.py"\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_INT64 dims: [ 3 ] } ]\n'
    )
    return text + "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
        for k, v in parameters.items()
    )


def probe(client, model: str) -> list[int]:
    return client.infer(model, {"x": np.zeros(1, np.float32)})["OUTPUT__0"].tolist()


def test_inference_mode_and_thread_count(
    model_repository: RepositoryBuilder, despina_server: Start, served
) -> None:
    model_repository.add("default", probe_config(), {"1/model.py": PROBE})
    model_repository.add(
        "tuned",
        probe_config(
            INFERENCE_MODE="false", INTRA_OP_THREAD_COUNT="1", DISABLE_OPTIMIZED_EXECUTION="true"
        ),
        {"1/model.py": PROBE},
    )
    client = served(despina_server(model_repository.root))
    assert probe(client, "tuned") == [0, 0, 1]  # no_grad instead of inference mode; one thread
    # The other model keeps torch's default, though the tuned one set its thread first.
    assert probe(client, "default") == [1, 0, torch.get_num_threads()]


def test_weight_sharing(
    model_repository: RepositoryBuilder, despina_server: Start, served, torch_models
) -> None:
    base = (
        'platform: "pytorch_libtorch"\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        "instance_group [ { count: 3 kind: KIND_CPU } ]\n"
    )
    shared = base + 'parameters { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }\n'
    model_repository.add("own", base, {"1/model.pt": torch_models["identity"]()})
    model_repository.add("shared", shared, {"1/model.pt": torch_models["identity"]()})
    client = served(despina_server(model_repository.root))
    modules = lambda name: {id(i.loaded.module) for i in client.server.models.get(name).instances}  # noqa: E731
    assert len(modules("own")) == 3
    assert len(modules("shared")) == 1
    assert client.infer("shared", {"x": np.ones(2, np.float32)})["OUTPUT__0"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ({"INFERENCE_MODE": "perhaps"}, "parameter 'INFERENCE_MODE' must be true or false"),
        ({"NUM_THREADS": "lots"}, "parameter 'NUM_THREADS' must be an integer"),
    ],
)
def test_bad_parameters_fail_the_load(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    served,
    parameters: dict[str, str],
    fragment: str,
) -> None:
    model_repository.add("bad", probe_config(**parameters), {"1/model.py": PROBE})
    row = served(despina_server(model_repository.root, ["--exit-on-error=false"])).index()["bad"]
    assert row["state"] == "UNAVAILABLE"
    assert f"model 'bad': {fragment}" in row["reason"]


def _has_gpu() -> bool:
    return any(p.name[len("nvidia") :].isdigit() for p in Path("/dev").glob("nvidia*"))


@pytest.mark.gpu
@pytest.mark.skipif(not _has_gpu(), reason="no NVIDIA GPU on this machine")
def test_kind_gpu_runs_on_cuda(
    model_repository: RepositoryBuilder, despina_server: Start, served, torch_models
) -> None:
    import torch

    text = (
        'platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
        'input [ { name: "a" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "b" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        "instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ] } ]\n"
    )
    model_repository.add("on_gpu", text, {"1/model.pt": torch_models["add_sub"]()})
    client = served(despina_server(model_repository.root, ["--exit-on-error=false"]))
    row = client.index()["on_gpu"]
    if not torch.cuda.is_available():
        assert "sees 0 CUDA device(s)" in row["reason"]
        return
    assert client.server.models.get("on_gpu").instances[0].device == "cuda:0"
    ones = np.ones((3, 4), np.float32)
    assert client.infer("on_gpu", {"a": ones, "b": ones})["OUTPUT__0"].sum() == 24
