"""Serving what is particular to OpenVINO: static batch dimensions made dynamic, ONNX files
on OpenVINO, compile parameters, reshaped I/O, KIND_GPU. The checks every backend shares
(auto-complete, batching, instances, datatypes, warm-up) run in test_conformance.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]


def pair(batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "INPUT0": rng.standard_normal((batch, 4), dtype=np.float32),
        "INPUT1": rng.standard_normal((batch, 4), dtype=np.float32),
    }


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


def test_stream_and_thread_parameters_reach_the_compiled_model(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models
) -> None:
    text = (
        'backend: "openvino"\nmax_batch_size: 8\n'
        "dynamic_batching { max_queue_delay_microseconds: 20000 }\n"
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
        'parameters { key: "NUM_STREAMS" value: { string_value: "2" } }\n'
        'parameters { key: "PERFORMANCE_HINT" value: { string_value: "THROUGHPUT" } }\n'
        'parameters { key: "INFERENCE_NUM_THREADS" value: { string_value: "2" } }\n'
    )
    model_repository.add("batched", text, ov_models["add_sub"]())
    client = served(despina_server(model_repository.root))
    version = client.server.models.get("batched")
    assert len(version.instances) == 2
    compiled = version.backend.compiled
    assert compiled.get_property("NUM_STREAMS") == 2
    assert compiled.get_property("INFERENCE_NUM_THREADS") == 2
    requests = [pair(1 + i % 3, i) for i in range(8)]
    for inputs, outputs in zip(requests, client.infer_many("batched", requests), strict=True):
        np.testing.assert_array_equal(outputs["OUTPUT0"], inputs["INPUT0"] + inputs["INPUT1"])


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
    # Without a GPU, GPU 0 is unknown (checked before the backend, as Triton checks it).
    reasons = ("KIND_GPU", "TARGET_DEVICE", "invalid or unsupported gpu id 0")
    assert any(reason in row["reason"] for reason in reasons)


def test_instances_share_one_stream_by_default(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models
) -> None:
    """Without a stream or thread parameter the instances are infer requests of one model
    compiled with OpenVINO's CPU default (one stream), so a lone request gets every core."""
    text = (
        'backend: "openvino"\nmax_batch_size: 8\ninstance_group [ { count: 4 kind: KIND_CPU } ]\n'
    )
    model_repository.add("four", text, ov_models["add_sub"]())
    client = served(despina_server(model_repository.root))
    version = client.server.models.get("four")
    assert len(version.instances) == 4
    assert version.backend.compiled.get_property("NUM_STREAMS") == 1
    requests = [pair(1 + i % 3, i) for i in range(8)]
    for inputs, outputs in zip(requests, client.infer_many("four", requests), strict=True):
        np.testing.assert_array_equal(outputs["OUTPUT0"], inputs["INPUT0"] + inputs["INPUT1"])
