"""Serving OpenVINO IR and ONNX-on-OpenVINO: auto-complete, batching, instances, types."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from despina.tensors import DATATYPE_TO_DTYPE
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]


def pair(batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "INPUT0": rng.standard_normal((batch, 4), dtype=np.float32),
        "INPUT1": rng.standard_normal((batch, 4), dtype=np.float32),
    }


def direct(
    files: dict[str, bytes], inputs: dict[str, np.ndarray], tmp_path
) -> dict[str, np.ndarray]:
    """What OpenVINO returns when called directly on the same files."""
    import openvino as ov

    for name, data in files.items():
        (tmp_path / name.split("/")[-1]).write_bytes(data)
    compiled = ov.Core().compile_model(str(tmp_path / "model.xml"), "CPU")
    result = compiled.create_infer_request().infer(inputs)
    return {port.get_any_name(): value for port, value in result.items()}


def test_ir_without_config_is_auto_completed(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models, tmp_path
) -> None:
    files = ov_models["add_sub"]()
    model_repository.add("add_sub", None, files)
    client = served(despina_server(model_repository.root))
    config = client.config("add_sub")
    assert config["backend"] == "openvino"
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_FP32", [4]),
        ("INPUT1", "TYPE_FP32", [4]),
    ]
    inputs = pair(3)
    outputs = client.infer("add_sub", inputs)
    expected = direct(files, inputs, tmp_path)
    for name in ("OUTPUT0", "OUTPUT1"):
        np.testing.assert_array_equal(outputs[name], expected[name])


def test_static_batch_dimension_is_made_dynamic(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models
) -> None:
    text = (
        'backend: "openvino"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, '
        '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    )
    model_repository.add("static", text, ov_models["add_sub"](batch=1))
    client = served(despina_server(model_repository.root))
    inputs = pair(6)
    np.testing.assert_allclose(
        client.infer("static", inputs)["OUTPUT0"], inputs["INPUT0"] + inputs["INPUT1"]
    )


def test_onnx_file_on_openvino(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models
) -> None:
    text = 'backend: "openvino"\ndefault_model_filename: "model.onnx"\n'
    model_repository.add("onnx_ov", text, {"1/model.onnx": ov_models["add_sub_onnx"]()})
    client = served(despina_server(model_repository.root))
    assert client.config("onnx_ov")["max_batch_size"] == 4
    inputs = pair(2)
    outputs = client.infer("onnx_ov", inputs)
    np.testing.assert_allclose(outputs["OUTPUT1"], inputs["INPUT0"] - inputs["INPUT1"])


def test_dynamic_batching_with_instances_under_concurrency(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models, tmp_path
) -> None:
    files = ov_models["add_sub"]()
    text = (
        'backend: "openvino"\nmax_batch_size: 8\n'
        "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
        'parameters { key: "NUM_STREAMS" value: { string_value: "2" } }\n'
        'parameters { key: "PERFORMANCE_HINT" value: { string_value: "THROUGHPUT" } }\n'
        'parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "2" } }\n'
    )
    model_repository.add("batched", text, files)
    client = served(despina_server(model_repository.root))
    version = client.server.models.get("batched")
    assert len(version.instances) == 2
    compiled = version.backend.compiled
    assert compiled.get_property("NUM_STREAMS") == 2
    assert compiled.get_property("INFERENCE_NUM_THREADS") == 2
    requests = [pair(1 + i % 3, i) for i in range(24)]
    for inputs, outputs in zip(requests, client.infer_many("batched", requests), strict=True):
        expected = direct(files, inputs, tmp_path)
        np.testing.assert_array_equal(outputs["OUTPUT0"], expected["OUTPUT0"])
        np.testing.assert_array_equal(outputs["OUTPUT1"], expected["OUTPUT1"])
    assert client.stats("batched")["execution_count"] < len(requests)


@pytest.mark.parametrize("datatype", [d for d in DATATYPE_TO_DTYPE if d != "BF16"])
def test_every_openvino_datatype(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models, datatype: str
) -> None:
    model_repository.add("identity", None, ov_models["identity"]([datatype]))
    client = served(despina_server(model_repository.root))
    rng = np.random.default_rng(5)
    if datatype == "BYTES":
        sent = np.array([b"ab", b"h\xc3\xa9", b"", b"xyz"], dtype=object).reshape(2, 2)
    elif datatype == "BOOL":
        sent = rng.integers(0, 2, (2, 3)).astype(bool)
    else:
        dtype = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(datatype)
        sent = (rng.random((2, 3)) * 100).astype(dtype or np.dtype(datatype.lower()))
    got = client.infer("identity", {f"IN_{datatype}": sent})[f"OUT_{datatype}"]
    if datatype == "FP64":
        sent = sent.astype(np.float32).astype(
            np.float64
        )  # OpenVINO's CPU plugin computes f64 as f32
    expected = np.concatenate([sent, sent], axis=-1)
    assert got.shape == expected.shape
    assert got.tolist() == expected.tolist()


def test_reshape_io_layers_to_config_dims(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models
) -> None:
    text = (
        'backend: "openvino"\nmax_batch_size: 4\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'parameters { key: "RESHAPE_IO_LAYERS" value: { string_value: "YES" } }\n'
    )
    model_repository.add("reshaped", text, ov_models["add_dynamic"]())
    client = served(despina_server(model_repository.root))
    port = client.server.models.get("reshaped").backend.compiled.inputs[0]
    assert str(port.get_partial_shape()) == "[?,3]"
    ones = np.ones((2, 3), np.float32)
    assert client.infer("reshaped", {"X": ones, "Y": ones})["OUT"].tolist() == [[2.0] * 3] * 2


def test_kind_gpu_is_refused(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models
) -> None:
    text = 'backend: "openvino"\ninstance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]\n'
    model_repository.add("gpu", text, ov_models["add_sub"]())
    row = served(despina_server(model_repository.root, ["--exit-on-error=false"])).index()["gpu"]
    assert row["state"] == "UNAVAILABLE"
    assert "KIND_GPU" in row["reason"] or "TARGET_DEVICE" in row["reason"]
