"""A broken config is reported before what the model folder lacks, in Triton's order
(qa/L0_model_config): Triton validates config.pbtxt when it polls the repository
(``ValidateModelConfig``; ``ValidateModelIOConfig`` too with auto-complete off), before it
looks for version folders, and checks the instance groups before the model file. Real
server, explicit model control, loads over HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from despina.testing import RepositoryBuilder, RunningServer, http_post

LOCAL = ["--grpc-address=127.0.0.1", "--http-address=127.0.0.1", "--allow-metrics=false"]
IO = """
input [ { name: "input" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""
CONTROLS = """
sequence_batching { control_input [
  { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
  { name: "START2" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] }
] }
"""
PRIORITY = """
dynamic_batching { priority_levels: 2 default_priority_level: 1 preserve_ordering: true }
"""
BATCH_INPUT = """
batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "B" data_type: TYPE_FP32 } ]
"""
ENSEMBLE_STEP = """
ensemble_scheduling { step [ { model_name: "a" model_version: -1
  input_map { key: "x" value: "input" } output_map { key: "y" value: "output" } } ] }
"""
WARMUP = 'model_warmup [ { name: "w" batch_size: 1 } ]'

Start = Callable[..., RunningServer]


def load_error(running: RunningServer, name: str) -> str:
    """The error text of a load of ``name`` that must fail."""
    assert running.http_port is not None
    status, _, raw = http_post(running.http_port, f"/v2/repository/models/{name}/load", "{}")
    assert status == 400, raw
    return str(json.loads(raw)["error"])


def serve(builder: RepositoryBuilder, start: Start, *flags: str) -> RunningServer:
    builder.root.mkdir(parents=True, exist_ok=True)
    return start(builder.root, [*LOCAL, "--model-control-mode=explicit", *flags])


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            f'platform: "onnxruntime_onnx" max_batch_size: -1 {IO}',
            "'max_batch_size' must be non-negative value for m",
        ),
        (
            f'platform: "pytorch_libtorch" max_batch_size: 8 {CONTROLS} {IO}',
            "sequence batching specifies multiple CONTROL_SEQUENCE_START tensors for m",
        ),
        (
            f'platform: "onnxruntime_onnx" max_batch_size: 8 {PRIORITY} {IO}',
            "Only one priority level is allowed when 'preserve_ordering' is true for m",
        ),
        (
            f'platform: "onnxruntime_onnx" {ENSEMBLE_STEP} {IO}',
            "ensemble scheduling cannot be set for model 'm' whose platform is not ensemble",
        ),
        (
            f'platform: "ensemble" {IO}',
            "ensemble scheduling must be set for ensemble m whose platform is ensemble",
        ),
        (
            f'platform: "ensemble" backend: "python" {ENSEMBLE_STEP} {IO}',
            "Ensemble model 'm' must have platform type 'ensemble' and empty backend type",
        ),
    ],
)
def test_config_errors_come_before_the_missing_version_folder(
    model_repository: RepositoryBuilder, despina_server: Start, config: str, expected: str
) -> None:
    model_repository.add("m", config, {"expected": "a file, no version folder"})
    text = load_error(serve(model_repository, despina_server), "m")
    assert expected in text
    assert "at least one version must be available" not in text


def test_ensemble_config_errors_come_before_the_name_check(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """Triton compares the config's name with the folder's only after validating it."""
    config = f'name: "other" platform: "ensemble" {ENSEMBLE_STEP} {WARMUP} {IO}'
    model_repository.add("m", config, {"1/.keep": ""})
    text = load_error(serve(model_repository, despina_server), "m")
    assert "model_warmup can not be specified for ensemble 'other'" in text


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            'input [ { name: "input" data_type: TYPE_FP32 dims: [ 0 ] } ]',
            "model input 'input' dimension must be integer >= 1, or -1 to indicate a "
            "variable-size dimension for m",
        ),
        (
            'input [ { name: "input" dims: [ 16 ] } ]',
            "model input 'input' must specify 'data_type' for m",
        ),
        (
            f'input [ {{ name: "input" data_type: TYPE_FP32 dims: [ 16 ] }} ] {BATCH_INPUT}',
            "batch input kind 'BATCH_ELEMENT_COUNT' expects 1 source input, got 0 for m",
        ),
        (
            'input [ { name: "input" data_type: TYPE_FP32 dims: [ 4 ] reshape { shape: [ 3 ] } } ]',
            "model input 'input' has different size for dims and reshape for m",
        ),
    ],
)
def test_tensor_errors_come_first_with_auto_complete_off(
    model_repository: RepositoryBuilder, despina_server: Start, config: str, expected: str
) -> None:
    output = 'output [ { name: "output" data_type: TYPE_FP32 dims: [ 16 ] } ]'
    model_repository.add("m", f'platform: "onnxruntime_onnx" {config} {output}', {})
    running = serve(model_repository, despina_server, "--disable-auto-complete-config")
    assert expected in load_error(running, "m")


def test_tensor_errors_wait_for_auto_complete(
    model_repository: RepositoryBuilder, despina_server: Start
) -> None:
    """With auto-complete on, the backend may still fill the tensors: as Triton, they are
    checked once it has, after the version folders."""
    config = 'platform: "onnxruntime_onnx" input [ { name: "input" dims: [ 16 ] } ]'
    model_repository.add("m", config, {})
    text = load_error(serve(model_repository, despina_server), "m")
    assert "at least one version must be available under the version policy of model 'm'" in text


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        (
            "[ { kind: KIND_CPU gpus: [ 0 ] } ]",
            "instance group m_0 of model m has kind KIND_CPU but specifies one or more GPUs",
        ),
        (
            "[ { kind: KIND_GPU gpus: [ 42 ] } ]",
            "instance group m_0 of model m specifies invalid or unsupported gpu id 42. GPUs "
            "with at least the minimum required CUDA compute compatibility",
        ),
        (
            '[ { name: "g" kind: KIND_GPU gpus: [ -1 ] } ]',
            "instance group g of model m specifies invalid or unsupported gpu id -1.",
        ),
    ],
)
@pytest.mark.parametrize("platform", ["tensorflow_savedmodel", "onnxruntime_onnx"])
def test_instance_groups_are_checked_before_the_backend_and_model_file(
    model_repository: RepositoryBuilder,
    despina_server: Start,
    platform: str,
    groups: str,
    expected: str,
) -> None:
    """Whether the platform's backend is installed (TensorFlow: not) or its model file is
    there (an empty version folder): the misplaced group is what is reported."""
    config = f'platform: "{platform}" max_batch_size: 8 {IO} instance_group {groups}'
    model_repository.add("m", config, {"1/.keep": ""})
    assert expected in load_error(serve(model_repository, despina_server), "m")
