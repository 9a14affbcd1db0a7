"""The core's model warm-up runs on OpenVINO instances before the model is READY."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]

WARM = """
backend: "openvino"
max_batch_size: 4
instance_group [ { count: 2 kind: KIND_CPU } ]
model_warmup [ {
  name: "zeros"
  batch_size: 4
  inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [ 4 ] zero_data: true } }
  inputs { key: "INPUT1" value: { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } }
} ]
"""


def test_warmup_runs_before_ready(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models
) -> None:
    model_repository.add("warm", WARM, ov_models["add_sub"]())
    client = served(despina_server(model_repository.root))
    assert client.index()["warm"]["state"] == "READY"
    ones = np.ones((1, 4), np.float32)
    assert client.infer("warm", {"INPUT0": ones, "INPUT1": ones})["OUTPUT0"].tolist() == [[2.0] * 4]
