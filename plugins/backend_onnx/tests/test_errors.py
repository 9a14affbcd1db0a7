"""Errors particular to onnxruntime: a batching config on a fixed-batch graph, strings that
are not UTF-8, failures of a model running inline. Load errors and run-time rejections
every backend shares run in test_conformance.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.models.call_placement import FIRST_STREAK
from despina.testing import RepositoryBuilder, RunningServer
from tritonclient.utils import InferenceServerException

Start = Callable[..., RunningServer]
#: Serve the models that load when others fail (tritonserver's default is to exit).
KEEP_GOING = ["--exit-on-error=false"]

ADD_SUB_CONFIG = """
backend: "onnxruntime"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def test_batching_config_on_a_fixed_batch_graph(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    model_repository.add("fixed", ADD_SUB_CONFIG, {"1/model.onnx": onnx_models["add_sub"](batch=2)})
    reason = served(despina_server(model_repository.root, KEEP_GOING)).index()["fixed"]["reason"]
    assert "model 'fixed', file '1/model.onnx'" in reason
    assert "first dimension is not dynamic, so max_batch_size must be 0" in reason


def test_bytes_that_are_not_utf8_are_rejected(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    model_repository.add("text", None, {"1/model.onnx": onnx_models["identity"](["BYTES"])})
    client = served(despina_server(model_repository.root, KEEP_GOING))
    bad = np.array([[b"\xff\xfe"]], dtype=object)
    with pytest.raises(InferenceServerException, match="must hold UTF-8 text"):
        client.infer("text", {"IN_BYTES": bad})
    ok = np.array([[b"fine"]], dtype=object)
    assert client.infer("text", {"IN_BYTES": ok})["OUT_BYTES"].tolist() == [[b"fine"]]


def test_failures_of_a_model_running_inline_answer_within_submit(
    model_repository: RepositoryBuilder, despina_server: Start, onnx_models
) -> None:
    """A cheap model whose calls moved inline runs a request that finds it idle within
    ``submit``; onnxruntime's error for bad data is that request's answer, and the
    next request is served."""
    text = """backend: "onnxruntime"
input [ { name: "DATA" data_type: TYPE_FP32 dims: [ -1, 4 ] },
        { name: "INDEX" data_type: TYPE_INT64 dims: [ -1, 2 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]
parameters { key: "DESPINA_INLINE_EXECUTE_US" value { string_value: "1e6" } }
"""
    model_repository.add("gather", text, {"1/model.onnx": onnx_models["gather"]()})
    running = despina_server(model_repository.root, [*KEEP_GOING, "--disable-auto-complete-config"])
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    good = {"DATA": data, "INDEX": np.array([[0, 3], [1, 2]], np.int64)}
    bad = {"DATA": data, "INDEX": np.array([[0, 9], [1, 2]], np.int64)}

    async def scenario() -> list[tuple[bool, InferenceResponse | None]]:
        for _ in range(FIRST_STREAK):  # the streak after which calls move inline
            await running.server.infer(InferenceRequest("gather", dict(good)))
        answers = []
        for inputs in (bad, good):
            _, stream = running.server.submit(InferenceRequest("gather", dict(inputs)))
            answers.append((stream.done, await stream.last()))
        return answers

    (bad_at_once, failed), (good_at_once, served) = running.call(scenario())
    assert bad_at_once and good_at_once
    assert failed is not None and "Out of range value in index tensor" in str(failed.error)
    assert served is not None and served.outputs["OUT"].tolist() == [[0.0, 3.0], [5.0, 6.0]]


def test_auto_complete_reads_a_version_the_policy_loads(
    model_repository: RepositoryBuilder, despina_server: Start, onnx_models
) -> None:
    """As Triton's L0_lifecycle test_config_override: versions 1 and 3 are empty folders,
    the config override names only version 2, and the config is completed from 2's file
    (not from the newest folder, which has none)."""
    import json

    import tritonclient.http as httpclient

    model = onnx_models["add_sub"]()
    model_repository.add("m", None, {"1/.keep": "", "2/model.onnx": model, "3/.keep": ""})
    running = despina_server(
        model_repository.root, ["--model-control-mode=explicit", "--http-address=127.0.0.1"]
    )
    with httpclient.InferenceServerClient(running.http_url) as client:
        with pytest.raises(InferenceServerException, match="load failed for model 'm'"):
            client.load_model("m")  # latest 1: version 3, which has no model file
        policy = {"backend": "onnxruntime", "version_policy": {"specific": {"versions": [2]}}}
        client.load_model("m", config=json.dumps(policy))
        assert client.is_model_ready("m", "2") and not client.is_model_ready("m", "3")
