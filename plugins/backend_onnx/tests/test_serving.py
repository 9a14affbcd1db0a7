"""Serving real ONNX models: auto-complete, explicit configs, batching, instances, types."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]

ADD_SUB_CONFIG = """
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""


def direct(model: bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The outputs onnxruntime gives when called directly."""
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, inputs), strict=True))


def add_sub_inputs(batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "INPUT0": rng.standard_normal((batch, 4), dtype=np.float32),
        "INPUT1": rng.standard_normal((batch, 4), dtype=np.float32),
    }


def test_autocomplete_without_config(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    model = onnx_models["add_sub"]()
    model_repository.add("add_sub", None, {"1/model.onnx": model})
    client = served(despina_server(model_repository.root))
    config = client.config("add_sub")
    assert config["backend"] == "onnxruntime"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]),
        ("INPUT1", "TYPE_FP32", [4]),
    ]
    assert [o["name"] for o in config["output"]] == ["OUTPUT0", "OUTPUT1"]
    inputs = add_sub_inputs(3)
    outputs = client.infer("add_sub", inputs)
    expected = direct(model, inputs)
    for name in ("OUTPUT0", "OUTPUT1"):
        np.testing.assert_array_equal(outputs[name], expected[name])


def test_autocomplete_fixed_batch_dimension_means_no_batching(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    model_repository.add("fixed", None, {"1/model.onnx": onnx_models["add_sub"](batch=2)})
    client = served(despina_server(model_repository.root))
    config = client.config("fixed")
    assert config["max_batch_size"] == 0
    assert config["input"][0]["dims"] == [2, 4]
    ones = np.ones((2, 4), np.float32)
    outputs = client.infer("fixed", {"INPUT0": ones, "INPUT1": ones})
    np.testing.assert_array_equal(outputs["OUTPUT0"], ones * 2)


def test_backend_config_default_max_batch_size(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    model_repository.add("add_sub", None, {"1/model.onnx": onnx_models["add_sub"]()})
    running = despina_server(
        model_repository.root, ["--backend-config=onnxruntime,default-max-batch-size=16"]
    )
    assert served(running).config("add_sub")["max_batch_size"] == 16


def test_explicit_config_and_requested_outputs(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    model = onnx_models["add_sub"]()
    model_repository.add("add_sub", ADD_SUB_CONFIG, {"1/model.onnx": model})
    client = served(despina_server(model_repository.root, ["--disable-auto-complete-config"]))
    inputs = add_sub_inputs(8)
    outputs = client.infer("add_sub", inputs, outputs=["OUTPUT1"])
    assert list(outputs) == ["OUTPUT1"]
    np.testing.assert_array_equal(outputs["OUTPUT1"], direct(model, inputs)["OUTPUT1"])


def test_config_listing_a_subset_of_outputs(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    config = ADD_SUB_CONFIG.replace('  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },\n', "")
    model_repository.add("only_sub", config, {"1/model.onnx": onnx_models["add_sub"]()})
    client = served(despina_server(model_repository.root))
    outputs = client.infer("only_sub", add_sub_inputs(1))
    assert list(outputs) == ["OUTPUT1"]


def test_dynamic_batching_under_concurrency(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    model = onnx_models["add_sub"]()
    config = ADD_SUB_CONFIG + "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
    model_repository.add("batched", config, {"1/model.onnx": model})
    client = served(despina_server(model_repository.root))
    requests = [add_sub_inputs(1 + i % 3, seed=i) for i in range(24)]

    results = client.infer_many("batched", requests)
    for inputs, outputs in zip(requests, results, strict=True):
        expected = direct(model, inputs)
        assert outputs["OUTPUT0"].shape == inputs["INPUT0"].shape
        np.testing.assert_array_equal(outputs["OUTPUT0"], expected["OUTPUT0"])
        np.testing.assert_array_equal(outputs["OUTPUT1"], expected["OUTPUT1"])
    stats = client.stats("batched")
    assert stats["inference_count"] == sum(r["INPUT0"].shape[0] for r in requests)
    assert stats["execution_count"] < len(requests)


def test_instance_group_count_runs_instances_concurrently(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    model = onnx_models["add_sub"](width=4096)
    config = ADD_SUB_CONFIG.replace("[ 4 ]", "[ 4096 ]") + (
        "instance_group [ { count: 3 kind: KIND_CPU } ]\n"
        'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
    )
    model_repository.add("wide", config, {"1/model.onnx": model})
    client = served(despina_server(model_repository.root))
    version = client.server.models.get("wide")
    assert [i.spec.name for i in version.instances] == ["wide_0_0", "wide_0_1", "wide_0_2"]
    threads = {i.executor._thread_name_prefix for i in version.instances}
    assert len(threads) == 3
    requests = [
        {k: np.tile(v, (1, 1024)) for k, v in add_sub_inputs(2, seed=i).items()} for i in range(12)
    ]

    for inputs, outputs in zip(requests, client.infer_many("wide", requests), strict=True):
        np.testing.assert_array_equal(outputs["OUTPUT0"], inputs["INPUT0"] + inputs["INPUT1"])


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "unbatched"])
def test_every_onnxruntime_datatype(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    served,
    onnx_models,
    onnx_datatypes: list[str],
    batched: bool,
) -> None:
    datatypes = onnx_datatypes
    model = onnx_models["identity"](datatypes)
    # Inputs listed with their full shape tell auto-complete the model does not batch.
    listed = ", ".join(
        f'{{ name: "IN_{t}" data_type: TYPE_{t} dims: [-1, -1] }}' for t in datatypes
    )
    config = None if batched else f"input [ {listed.replace('TYPE_BYTES', 'TYPE_STRING')} ]"
    model_repository.add("identity", config, {"1/model.onnx": model})
    client = served(despina_server(model_repository.root))
    assert client.config("identity")["max_batch_size"] == (4 if batched else 0)
    rng = np.random.default_rng(7)
    inputs: dict[str, np.ndarray] = {}
    for datatype in datatypes:
        if datatype == "BYTES":
            words = ["ab", "", "héllo", "z" * 40, "x", "yy"]
            inputs["IN_BYTES"] = np.array([w.encode() for w in words], dtype=object).reshape(2, 3)
        elif datatype == "BOOL":
            inputs["IN_BOOL"] = rng.integers(0, 2, (2, 3)).astype(bool)
        else:
            dtype = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(datatype)
            dtype = dtype or np.dtype(datatype.lower())
            inputs[f"IN_{datatype}"] = (rng.random((2, 3)) * 100).astype(dtype)
    outputs = client.infer("identity", inputs)
    for datatype in datatypes:
        got, sent = outputs[f"OUT_{datatype}"], inputs[f"IN_{datatype}"]
        assert got.shape == sent.shape
        if datatype == "BYTES":
            assert list(got.flat) == list(sent.flat)
        else:
            assert got.dtype == sent.dtype
            np.testing.assert_array_equal(got, sent)


def test_version_folder_without_config_picks_onnxruntime(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models, tmp_path: Path
) -> None:
    model_repository.add("first", None, {"1/model.onnx": onnx_models["add_sub"]()})
    model_repository.add("second", None, {"3/model.onnx": onnx_models["add_sub"]()})
    client = served(despina_server(model_repository.root))
    assert client.index()["second"]["version"] == "3"
    assert client.config("second")["backend"] == "onnxruntime"


def test_served_over_grpc_too(
    model_repository: RepositoryBuilder, despina_server: Start, grpc_client, onnx_models
) -> None:
    import tritonclient.grpc as grpcclient

    model = onnx_models["add_sub"]()
    model_repository.add("add_sub", None, {"1/model.onnx": model})
    client = grpc_client(despina_server(model_repository.root))
    inputs = add_sub_inputs(2)
    infer_inputs = []
    for name, array in inputs.items():
        item = grpcclient.InferInput(name, list(array.shape), "FP32")
        item.set_data_from_numpy(array)
        infer_inputs.append(item)
    result = client.infer("add_sub", infer_inputs)
    expected = direct(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), expected["OUTPUT0"])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), expected["OUTPUT1"])


def test_bf16_through_io_binding(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    import ml_dtypes

    model_repository.add("bf16", None, {"1/model.onnx": onnx_models["identity"](["BF16", "FP32"])})
    model_repository.add(
        "mixed", None, {"1/model.onnx": onnx_models["identity"](["BF16", "BYTES"])}
    )
    client = served(despina_server(model_repository.root, ["--exit-on-error=false"]))
    assert client.config("bf16")["input"][0]["data_type"] == "TYPE_BF16"
    requests = [
        {
            "IN_BF16": np.array([[i, -1.5, 2.25]], dtype=ml_dtypes.bfloat16),
            "IN_FP32": np.full((1, 3), i, np.float32),
        }
        for i in range(6)
    ]
    for sent, got in zip(requests, client.infer_many("bf16", requests), strict=True):
        assert got["OUT_BF16"].dtype == sent["IN_BF16"].dtype
        np.testing.assert_array_equal(got["OUT_BF16"], sent["IN_BF16"])
        np.testing.assert_array_equal(got["OUT_FP32"], sent["IN_FP32"])
    reason = client.index()["mixed"]["reason"]
    assert "cannot serve a model with both BF16 and string inputs/outputs" in reason
