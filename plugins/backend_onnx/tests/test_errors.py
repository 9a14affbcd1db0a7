"""Load errors name the model, file and mismatch; run-time rejections fail one request."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from despina.inference import InferenceRequest, InferenceResponse
from despina.placement import FIRST_STREAK
from despina.testing import RepositoryBuilder, RunningServer
from tritonclient.utils import InferenceServerException

Start = Callable[..., RunningServer]
#: Serve the models that load when others fail (tritonserver's default is to exit).
KEEP_GOING = ["--exit-on-error=false"]

CONFIG = """
backend: "onnxruntime"
max_batch_size: {mbs}
input [
  {{ name: "{in0}" data_type: {type0} dims: [ {dims0} ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }}
]
output [ {{ name: "{out0}" data_type: TYPE_FP32 dims: [ 4 ] }} ]
"""


def config(**overrides: object) -> str:
    values = {"mbs": 8, "in0": "INPUT0", "type0": "TYPE_FP32", "dims0": "4", "out0": "OUTPUT0"}
    values.update(overrides)
    return CONFIG.format(**values)


MISMATCHES = {
    "dims": (config(dims0="5"), ["input 'INPUT0'", "[-1,4] in the model", "[-1,5] in the config"]),
    "rank": (config(dims0="2, 2"), ["input 'INPUT0'", "[-1,4] in the model", "[-1,2,2]"]),
    "data_type": (
        config(type0="TYPE_FP64"),
        ["TYPE_FP64 in the config but TYPE_FP32 in the model"],
    ),
    "unknown_input": (config(in0="IMAGE"), ["config input 'IMAGE' is not an input of the model"]),
    "missing_input": (
        config()
        .replace('  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }\n', "")
        .replace("},\n]", "}\n]"),
        ["input(s) 'INPUT1' are missing from the config"],
    ),
    "unknown_output": (config(out0="SCORES"), ["config output 'SCORES' is not an output"]),
}


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_config_disagreeing_with_the_graph_fails_that_model_only(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models, case: str
) -> None:
    text, fragments = MISMATCHES[case]
    model_repository.add("broken", text, {"1/model.onnx": onnx_models["add_sub"]()})
    model_repository.add("good", None, {"1/model.onnx": onnx_models["add_sub"]()})
    client = served(despina_server(model_repository.root, KEEP_GOING))
    index = client.index()
    assert index["good"]["state"] == "READY"
    broken = index["broken"]
    assert broken["state"] == "UNAVAILABLE"
    reason = broken["reason"]
    assert "model 'broken', file '1/model.onnx'" in reason
    for fragment in fragments:
        assert fragment in reason
    ones = np.ones((1, 4), np.float32)
    assert client.infer("good", {"INPUT0": ones, "INPUT1": ones})["OUTPUT0"].tolist() == [[2.0] * 4]


def test_batching_config_on_a_fixed_batch_graph(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    model_repository.add("fixed", config(), {"1/model.onnx": onnx_models["add_sub"](batch=2)})
    reason = served(despina_server(model_repository.root, KEEP_GOING)).index()["fixed"]["reason"]
    assert "model 'fixed', file '1/model.onnx'" in reason
    assert "first dimension is not dynamic, so max_batch_size must be 0" in reason


@pytest.mark.parametrize("content", [b"", b"this is not an onnx graph"], ids=["empty", "garbage"])
def test_corrupt_model_file(
    model_repository: RepositoryBuilder, despina_server: Start, served, content: bytes
) -> None:
    model_repository.add("corrupt", config(), {"1/model.onnx": content})
    index = served(despina_server(model_repository.root, KEEP_GOING)).index()
    assert index["corrupt"]["state"] == "UNAVAILABLE"
    assert "model 'corrupt': onnxruntime cannot load '1/model.onnx'" in index["corrupt"]["reason"]


def test_missing_model_file(
    model_repository: RepositoryBuilder, despina_server: Start, served
) -> None:
    model_repository.add("empty", config(), {"1/README": "no model here"})
    reason = served(despina_server(model_repository.root, KEEP_GOING)).index()["empty"]["reason"]
    assert "model 'empty': model file '1/model.onnx' not found" in reason


def test_runtime_rejection_fails_only_that_request(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    text = 'backend: "onnxruntime"\nmax_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 50000 }\n'
    model_repository.add("gather", text, {"1/model.onnx": onnx_models["gather"]()})
    client = served(despina_server(model_repository.root, KEEP_GOING))
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    good = {"DATA": data, "INDEX": np.array([[0, 3], [1, 2]], np.int64)}
    bad = {"DATA": data, "INDEX": np.array([[0, 9], [1, 2]], np.int64)}
    with pytest.raises(InferenceServerException, match="onnx runtime error") as raised:
        client.infer("gather", bad)
    assert raised.value.status() in ("400", "500")
    results = client.infer_many("gather", [good, good, bad, good, bad, good])
    for position, result in enumerate(results):
        if position in (2, 4):
            assert isinstance(result, InferenceServerException)
            assert "Out of range value in index tensor" in str(result)
        else:
            assert result["OUT"].tolist() == [[0.0, 3.0], [5.0, 6.0]]
    stats = client.stats("gather")
    assert stats["inference_stats"]["success"]["count"] == 4
    assert stats["inference_stats"]["fail"]["count"] == 3


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
