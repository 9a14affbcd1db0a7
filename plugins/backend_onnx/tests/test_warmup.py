"""The core's model warm-up runs on onnxruntime instances before the model is READY."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]

GATHER = """
backend: "onnxruntime"
max_batch_size: 4
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
model_warmup [ {{
  name: "{sample}"
  batch_size: 3
  inputs {{ key: "DATA" value: {{ data_type: TYPE_FP32 dims: [ 4 ] zero_data: true }} }}
  inputs {{ key: "INDEX" value: {{ data_type: TYPE_INT64 dims: [ 2 ] input_data_file: "index" }} }}
}} ]
"""


def test_warmup_runs_before_ready_and_a_failing_sample_fails_the_load(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    model = onnx_models["gather"]()
    in_range = np.array([0, 3], np.int64).tobytes()
    out_of_range = np.array([0, 9], np.int64).tobytes()
    model_repository.add(
        "warm", GATHER.format(sample="ok"), {"1/model.onnx": model, "warmup/index": in_range}
    )
    model_repository.add(
        "cold",
        GATHER.format(sample="bad_index"),
        {"1/model.onnx": model, "warmup/index": out_of_range},
    )
    client = served(despina_server(model_repository.root, ["--exit-on-error=false"]))
    index = client.index()
    assert index["warm"]["state"] == "READY"
    assert index["cold"]["state"] == "UNAVAILABLE"
    assert "warm-up 'bad_index' failed" in index["cold"]["reason"]
    assert "Out of range value in index tensor" in index["cold"]["reason"]
