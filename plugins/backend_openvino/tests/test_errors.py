"""Errors particular to OpenVINO: a static batch dimension kept, bad compile parameters.
Load errors and run-time rejections every backend shares run in test_conformance.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from despina.testing import RepositoryBuilder, RunningServer

Start = Callable[..., RunningServer]
KEEP_GOING = ["--exit-on-error=false"]


def config(extra: str = "") -> str:
    return (
        'backend: "openvino"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, '
        '{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n' + extra
    )


def test_static_batch_kept_by_skip_ov_dynamic_batchsize(
    model_repository: RepositoryBuilder, despina_server: Start, served, ov_models
) -> None:
    skip = 'parameters { key: "SKIP_OV_DYNAMIC_BATCHSIZE" value: { string_value: "YES" } }'
    model_repository.add("broken", config(extra=skip), ov_models["add_sub"](batch=1))
    model_repository.add("good", None, ov_models["add_sub"]())
    index = served(despina_server(model_repository.root, KEEP_GOING)).index()
    assert index["good"]["state"] == "READY"
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "model 'broken', file '1/model.xml'" in index["broken"]["reason"]
    assert "first dimension is not dynamic" in index["broken"]["reason"]


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
