"""Serving what is particular to PyTorch: TorchScript input naming, strings as lists,
model.py modules with state dicts, instances in parallel. The checks every backend shares
(auto-complete of torch.export programs, batching, instances, datatypes) run in
test_conformance.py."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]

ADD_SUB = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  {{ name: "{in0}" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "{in1}" data_type: TYPE_FP32 dims: [ 4 ] }}
]
output [
  {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] }}
]
{extra}
"""


def add_sub_config(in0: str = "INPUT__0", in1: str = "INPUT__1", extra: str = "") -> str:
    return ADD_SUB.format(in0=in0, in1=in1, extra=extra)


def pair(batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((batch, 4), dtype=np.float32),
        rng.standard_normal((batch, 4), dtype=np.float32),
    )


def direct(model: bytes, *args: np.ndarray) -> list[np.ndarray]:
    """What the TorchScript module returns when called directly."""
    module = torch.jit.load(io.BytesIO(model))
    with torch.inference_mode():
        return [t.numpy() for t in module(*(torch.from_numpy(a.copy()) for a in args))]


@pytest.mark.parametrize(
    ("in0", "in1"),
    [("INPUT__0", "INPUT__1"), ("a", "b"), ("b", "a")],
    ids=["indexed", "named", "swapped"],
)
def test_torchscript_input_naming(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    served,
    torch_models,
    in0: str,
    in1: str,
) -> None:
    model = torch_models["add_sub"]()
    model_repository.add("add_sub", add_sub_config(in0, in1), {"1/model.pt": model})
    client = served(despina_server(model_repository.root))
    x, y = pair(3)
    outputs = client.infer("add_sub", {in0: x, in1: y})
    # Named inputs bind by forward() parameter name (a, b), indexed ones by position.
    a, b = (y, x) if (in0, in1) == ("b", "a") else (x, y)
    expected = direct(model, a, b)
    np.testing.assert_array_equal(outputs["OUTPUT__0"], expected[0])
    np.testing.assert_array_equal(outputs["OUTPUT__1"], expected[1])


def test_torchscript_without_config_says_what_to_write(
    model_repository: RepositoryBuilder, despina_server: Start, served, torch_models
) -> None:
    model_repository.add("bare", None, {"1/model.pt": torch_models["add_sub"]()})
    row = served(despina_server(model_repository.root, ["--exit-on-error=false"])).index()["bare"]
    assert row["state"] == "UNAVAILABLE"
    assert (
        "model 'bare': '1/model.pt' declares no input/output data types or shapes" in row["reason"]
    )
    assert "INPUT__<i>" in row["reason"]


def test_strings_reach_forward_as_a_list(
    model_repository: RepositoryBuilder, despina_server: Start, served, torch_models
) -> None:
    strings = (
        'platform: "pytorch_libtorch"\n'
        'input [ { name: "words" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
    )
    model_repository.add("upper", strings, {"1/model.pt": torch_models["upper"]()})
    client = served(despina_server(model_repository.root))
    words = np.array([b"ab", b"h\xc3\xa9llo", b""], dtype=object)
    # TorchScript upper() changes ASCII letters only.
    assert client.infer("upper", {"words": words})["OUTPUT__0"].tolist() == [
        b"AB",
        "HéLLO".encode(),
        b"",
    ]


MODEL_PY = """
import torch


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, features):
        return {"scores": self.linear(features)}
"""


def test_model_py_with_state_dict(
    model_repository: RepositoryBuilder, despina_server: Start, served
) -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(4, 2)
    weights = io.BytesIO()
    torch.save({f"linear.{k}": v for k, v in linear.state_dict().items()}, weights)
    config = (
        'backend: "pytorch"\ndefault_model_filename: "model.py"\nmax_batch_size: 8\n'
        'input [ { name: "features" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "scores" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
    )
    files: dict[str, str | bytes] = {"1/model.py": MODEL_PY, "1/model.pt": weights.getvalue()}
    model_repository.add("module", config, files)
    client = served(despina_server(model_repository.root))
    x = pair(5)[0]
    with torch.inference_mode():
        expected = linear(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(
        client.infer("module", {"features": x})["scores"], expected, rtol=1e-6
    )


# Both calls must be inside forward() at once to pass the barrier: proof that two
# instances execute in parallel (weight sharing gives them one module, so one barrier).
MEET_PY = """
import threading

import torch


class Meet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.barrier = threading.Barrier(2)

    def forward(self, x):
        self.barrier.wait(timeout=30)
        return x * 2
"""


def test_two_instances_execute_in_parallel(
    model_repository: RepositoryBuilder, despina_server: Start, served
) -> None:
    config = (
        'backend: "pytorch"\ndefault_model_filename: "model.py"\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n'
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
        'parameters { key: "ENABLE_WEIGHT_SHARING" value: { string_value: "true" } }\n'
    )
    model_repository.add("meet", config, {"1/model.py": MEET_PY})
    client = served(despina_server(model_repository.root))
    requests = [{"x": np.full(2, i, np.float32)} for i in range(4)]
    for i, result in enumerate(client.infer_many("meet", requests)):
        assert result["OUTPUT__0"].tolist() == [2.0 * i] * 2


RUNNING_SUM = """
platform: "pytorch_libtorch"
max_batch_size: 2
input [ { name: "X__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "SUM__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  control_input [
    { name: "START__1" control { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } },
    { name: "CORRID__2" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT64 } }
  ]
  state {
    input_name: "STATE__3" output_name: "STATE_OUT__1" data_type: TYPE_FP32 dims: [ 1 ]
    initial_state { name: "zero" data_type: TYPE_FP32 dims: [ 1 ] zero_data: true }
  }
}
"""


def test_sequence_controls_and_implicit_state_are_forward_arguments(
    model_repository: RepositoryBuilder, despina_server: Start, torch_models
) -> None:
    """As Triton's PyTorch backend: forward() takes the config's inputs, then the sequence
    batcher's control inputs and implicit state inputs (qa/L0_request_cancellation's
    implicit-state model); the state output is kept by the server, not answered."""
    import tritonclient.http as httpclient

    model_repository.add("running_sum", RUNNING_SUM, {"1/model.pt": torch_models["running_sum"]()})
    running = despina_server(model_repository.root)
    with httpclient.InferenceServerClient(running.http_url) as client:

        def add(sequence: int, value: float, start: bool = False, end: bool = False) -> Any:
            x = httpclient.InferInput("X__0", [1, 1], "FP32")
            x.set_data_from_numpy(np.array([[value]], np.float32))
            result = client.infer(
                "running_sum", [x], sequence_id=sequence, sequence_start=start, sequence_end=end
            )
            names = [o["name"] for o in result.get_response()["outputs"]]
            return {name: result.as_numpy(name).ravel().tolist() for name in names}

        assert add(1, 1.0, start=True) == {"SUM__0": [1.0]}
        assert add(2, 10.0, start=True) == {"SUM__0": [10.0]}
        assert add(1, 2.0) == {"SUM__0": [3.0]}
        assert add(2, 20.0, end=True) == {"SUM__0": [30.0]}
        assert add(1, 3.0) == {"SUM__0": [6.0]}
        assert add(1, 5.0, start=True, end=True) == {"SUM__0": [5.0]}
