"""The core's model warm-up runs on PyTorch instances before the model is READY."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]

PICKY = """
platform: "pytorch_libtorch"
max_batch_size: 4
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
model_warmup [ {{
  name: "{sample}"
  batch_size: 2
  inputs {{ key: "x" value: {{ data_type: TYPE_FP32 dims: [ 4 ] input_data_file: "x" }} }}
}} ]
"""


def test_warmup_runs_before_ready_and_a_failing_sample_fails_the_load(
    model_repository: RepositoryBuilder, despina_server: Start, served, torch_models
) -> None:
    model = torch_models["picky"]()
    positive = np.ones(4, np.float32).tobytes()
    negative = (-np.ones(4, np.float32)).tobytes()
    model_repository.add(
        "warm", PICKY.format(sample="ok"), {"1/model.pt": model, "warmup/x": positive}
    )
    model_repository.add(
        "cold", PICKY.format(sample="negative"), {"1/model.pt": model, "warmup/x": negative}
    )
    client = served(despina_server(model_repository.root, ["--exit-on-error=false"]))
    index = client.index()
    assert index["warm"]["state"] == "READY"
    assert index["cold"]["state"] == "UNAVAILABLE"
    assert "warm-up 'negative' failed: PyTorch execute failure" in index["cold"]["reason"]
