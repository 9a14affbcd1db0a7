"""Serving real ONNX models, what is particular to onnxruntime: a fixed batch dimension,
instance threads, every datatype in one unbatched model, BF16 with strings. The checks
every backend shares run in test_conformance.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]


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


@pytest.mark.parametrize("intra_op_threads", ["1", None])
def test_each_instance_runs_sessions_on_its_own_thread(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    served,
    onnx_models,
    intra_op_threads: str | None,
) -> None:
    """Each instance runs its batches in a thread of its own. Without a thread count the
    CPU instances share one session (onnxruntime's pool of a thread per core); with one,
    each instance opens its own session with that pool, as Triton does."""
    config = 'backend: "onnxruntime"\nmax_batch_size: 8\ninstance_group [ { count: 3 kind: KIND_CPU } ]\n'
    if intra_op_threads is not None:
        config += (
            'parameters { key: "intra_op_thread_count" '
            f'value: {{ string_value: "{intra_op_threads}" }} }}\n'
        )
    model_repository.add("wide", config, {"1/model.onnx": onnx_models["add_sub"](width=4096)})
    client = served(despina_server(model_repository.root))
    version = client.server.models.get("wide")
    threads = {i.executor._thread_name_prefix for i in version.instances}
    assert len(threads) == 3
    sessions = {id(i.session) for i in version.instances}
    assert len(sessions) == (1 if intra_op_threads is None else 3)
    rng = np.random.default_rng(0)
    requests = [
        {n: rng.standard_normal((2, 4096), dtype=np.float32) for n in ("INPUT0", "INPUT1")}
        for _ in range(12)
    ]
    for inputs, outputs in zip(requests, client.infer_many("wide", requests), strict=True):
        np.testing.assert_array_equal(outputs["OUTPUT0"], inputs["INPUT0"] + inputs["INPUT1"])


def test_every_datatype_in_one_unbatched_model(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    served,
    onnx_models,
    onnx_datatypes: list[str],
) -> None:
    datatypes = onnx_datatypes
    model = onnx_models["identity"](datatypes)
    # Inputs listed with their full shape tell auto-complete the model does not batch.
    listed = ", ".join(
        f'{{ name: "IN_{t}" data_type: TYPE_{t} dims: [-1, -1] }}' for t in datatypes
    )
    config = f"input [ {listed.replace('TYPE_BYTES', 'TYPE_STRING')} ]"
    model_repository.add("identity", config, {"1/model.onnx": model})
    client = served(despina_server(model_repository.root))
    assert client.config("identity")["max_batch_size"] == 0
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


def test_bf16_with_strings_in_one_model_is_refused(
    model_repository: RepositoryBuilder, despina_server: Start, served, onnx_models
) -> None:
    """BF16 goes through I/O binding, which cannot carry strings."""
    import ml_dtypes

    model_repository.add("bf16", None, {"1/model.onnx": onnx_models["identity"](["BF16", "FP32"])})
    model_repository.add(
        "mixed", None, {"1/model.onnx": onnx_models["identity"](["BF16", "BYTES"])}
    )
    client = served(despina_server(model_repository.root, ["--exit-on-error=false"]))
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
