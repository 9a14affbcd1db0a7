"""Load errors name the model, file and mismatch; run-time rejections fail one request."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from despina.testing import RepositoryBuilder, RunningServer
from tritonclient.utils import InferenceServerException

Start = Callable[..., RunningServer]
KEEP_GOING = ["--exit-on-error=false"]


def config(
    dims: str = "4", data_type: str = "TYPE_FP32", name: str = "INPUT0", extra: str = ""
) -> str:
    return (
        'backend: "openvino"\nmax_batch_size: 8\n'
        f'input [ {{ name: "{name}" data_type: {data_type} dims: [ {dims} ] }}, '
        '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n' + extra
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (config(dims="6"), "input 'INPUT0' has shape [-1,4] in the model but [-1,6] in the config"),
        (config(data_type="TYPE_INT32"), "TYPE_INT32 in the config but TYPE_FP32 in the model"),
        (config(name="IMAGE"), "config input 'IMAGE' is not an input of the model"),
        (
            config(
                extra='parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "YES" } }'
            ),
            "first dimension is not dynamic",
        ),
    ],
    ids=["dims", "data_type", "name", "static_batch_kept"],
)
def test_config_disagreeing_with_the_model(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    served,
    ov_models,
    text: str,
    fragment: str,
) -> None:
    model_repository.add("broken", text, ov_models["add_sub"](batch=1))
    model_repository.add("good", None, ov_models["add_sub"]())
    client = served(despina_server(model_repository.root, KEEP_GOING))
    index = client.index()
    assert index["good"]["state"] == "READY"
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "model 'broken', file '1/model.xml'" in index["broken"]["reason"]
    assert fragment in index["broken"]["reason"]


def test_corrupt_and_missing_files(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models
) -> None:
    files = ov_models["add_sub"]()
    model_repository.add(
        "corrupt_xml", config(), {"1/model.xml": b"<net", "1/model.bin": files["1/model.bin"]}
    )
    model_repository.add("no_bin", config(), {"1/model.xml": files["1/model.xml"]})
    model_repository.add("no_xml", config(), {"1/model.bin": files["1/model.bin"]})
    index = served(despina_server(model_repository.root, KEEP_GOING)).index()
    assert (
        "model 'corrupt_xml': OpenVINO cannot read '1/model.xml'" in index["corrupt_xml"]["reason"]
    )
    assert "model 'no_bin': OpenVINO cannot read '1/model.xml'" in index["no_bin"]["reason"]
    assert "model 'no_xml': model file '1/model.xml' not found" in index["no_xml"]["reason"]


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ({"PERFORMANCE_HINT": "FASTEST"}, "parameter 'PERFORMANCE_HINT' must be one of"),
        ({"NUM_STREAMS": "-2"}, "parameter 'NUM_STREAMS' must be a non-negative integer"),
        ({"RESHAPE_IO_LAYERS": "maybe"}, "parameter 'RESHAPE_IO_LAYERS' must be YES or NO"),
        (
            {"TARGET_DEVICE": "NOSUCHDEVICE"},
            "OpenVINO cannot compile '1/model.xml' for NOSUCHDEVICE",
        ),
    ],
    ids=["hint", "streams", "flag", "device"],
)
def test_bad_parameters_fail_the_load(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    served,
    ov_models,
    parameters: dict[str, str],
    fragment: str,
) -> None:
    extra = "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
        for k, v in parameters.items()
    )
    model_repository.add("bad", config(extra=extra), ov_models["add_sub"]())
    row = served(despina_server(model_repository.root, KEEP_GOING)).index()["bad"]
    assert row["state"] == "UNAVAILABLE"
    assert "model 'bad'" in row["reason"] and fragment in row["reason"]


def test_runtime_rejection_fails_only_that_request(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models
) -> None:
    model_repository.add("add", None, ov_models["add_dynamic"]())
    client = served(despina_server(model_repository.root))
    good = {"X": np.ones((1, 3), np.float32), "Y": np.ones((1, 3), np.float32)}
    bad = {"X": np.ones((1, 3), np.float32), "Y": np.ones((1, 2), np.float32)}
    results = client.infer_many("add", [good, bad, good])
    assert isinstance(results[1], InferenceServerException)
    assert "OpenVINO inference failed" in str(results[1])
    for result in (results[0], results[2]):
        assert result["OUT"].tolist() == [[2.0, 2.0, 2.0]]
