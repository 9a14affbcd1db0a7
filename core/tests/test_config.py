"""config.pbtxt parsing, Triton's JSON form, defaults and validation."""

from __future__ import annotations

import re

import pytest
from despina.errors import ConfigError
from despina.repository import config as cfg, instance_groups
from despina.repository.config_pipeline import normalize
from despina.repository.validation import validate_completed

VALID = """
name: "m"
backend: "toy"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1, 4 ] optional: true } ]
output [ { name: "Y" data_type: TYPE_STRING dims: [ 2 ] reshape: { shape: [ 1, 2 ] } } ]
parameters { key: "k" value: { string_value: "v" } }
version_policy: { specific: { versions: [ 1, 3 ] } }
"""


def test_valid_config_parses_with_every_field() -> None:
    config = cfg.parse_text(VALID)
    assert config.max_batch_size == 8
    assert list(config.input[0].dims) == [-1, 4]
    assert config.input[0].optional
    assert list(config.output[0].reshape.shape) == [1, 2]
    assert cfg.parameters_of(config) == {"k": "v"}
    assert list(config.version_policy.specific.versions) == [1, 3]


def test_unknown_field_names_file_line_and_field() -> None:
    with pytest.raises(ConfigError) as info:
        cfg.parse_text('name: "m"\nmax_batch_sise: 4\n', "m/config.pbtxt")
    message = str(info.value)
    assert message.startswith("m/config.pbtxt:2:")
    assert "max_batch_sise" in message


def test_bad_enum_value_is_an_error() -> None:
    with pytest.raises(ConfigError, match="TYPE_FLOAT99"):
        cfg.parse_text('input [ { name: "X" data_type: TYPE_FLOAT99 dims: [1] } ]')


def test_enum_number_out_of_range_is_a_config_error() -> None:
    """Found by the fuzzer: protobuf raises ValueError (was a 500), text and JSON alike."""
    with pytest.raises(ConfigError, match="Value out of range"):
        cfg.parse_text('input [ { name: "X" data_type: 999999999999999999999999999999 } ]', "m")
    with pytest.raises(ConfigError, match="m"):
        cfg.parse_json('{"input": [{"name": "X", "data_type": 99999999999999999999999}]}', "m")


def test_json_form_uses_field_names_and_numbers_for_int64() -> None:
    config = cfg.parse_text(VALID)
    normalize(config)
    config.instance_group.extend(instance_groups.complete(config, gpus=[], gpu_support=None))
    data = cfg.to_json_dict(config)
    assert data["input"][0]["dims"] == [-1, 4]
    assert data["input"][0]["data_type"] == "TYPE_FP32"
    assert data["output"][0]["reshape"]["shape"] == [1, 2]
    assert data["version_policy"]["specific"]["versions"] == [1, 3]
    assert data["instance_group"][0]["kind"] == "KIND_CPU"
    assert data["instance_group"][0]["count"] == 1
    assert data["parameters"] == {"k": {"string_value": "v"}}
    assert cfg.parse_json(cfg.config_json(config)) == config


def test_normalize_fills_triton_defaults() -> None:
    config = cfg.parse_text('backend: "onnxruntime"')
    normalize(config)
    assert config.platform == "onnxruntime_onnx"
    assert config.version_policy.latest.num_versions == 1


def test_normalize_fills_batching_and_pinned_memory_defaults_as_triton() -> None:
    config = cfg.parse_text("max_batch_size: 8 dynamic_batching { }")
    normalize(config)
    assert list(config.dynamic_batching.preferred_batch_size) == [8]
    optimization = cfg.to_json_dict(config)["optimization"]
    assert optimization["input_pinned_memory"] == {"enable": True}
    assert optimization["output_pinned_memory"] == {"enable": True}
    # what the config says stays
    config = cfg.parse_text(
        "max_batch_size: 8 dynamic_batching { preferred_batch_size: [ 2, 4 ] } "
        "optimization { input_pinned_memory { enable: false } }"
    )
    normalize(config)
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 4]
    assert config.optimization.input_pinned_memory.enable is False
    assert config.optimization.output_pinned_memory.enable is True
    ensemble = cfg.parse_text('platform: "ensemble"')
    normalize(ensemble)
    assert not ensemble.HasField("optimization")


def test_normalize_fills_the_sequence_batchers_defaults_as_triton() -> None:
    config = cfg.parse_text("max_batch_size: 4 sequence_batching { oldest { } }")
    normalize(config)
    assert config.sequence_batching.max_sequence_idle_microseconds == 1_000_000
    assert list(config.sequence_batching.oldest.preferred_batch_size) == [4]
    given = "max_sequence_idle_microseconds: 5 oldest { preferred_batch_size: [ 2 ] }"
    config = cfg.parse_text(f"max_batch_size: 4 sequence_batching {{ {given} }}")
    normalize(config)
    assert config.sequence_batching.max_sequence_idle_microseconds == 5
    assert list(config.sequence_batching.oldest.preferred_batch_size) == [2]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name: "other"', "does not match the folder name"),
        ("max_batch_size: -1", "'max_batch_size' must be non-negative value for m"),
        ('input [ { name: "X" dims: [1] } ]', "model input 'X' must specify 'data_type' for m"),
        (
            'input [ { name: "X" data_type: TYPE_FP32 dims: [0] } ]',
            "model input 'X' dimension must be integer >= 1, or -1 to indicate a variable-size "
            "dimension for m",
        ),
        (
            'input [ { name: "X" data_type: TYPE_FP32 dims: [1] }, { name: "X" data_type: TYPE_FP32 dims: [1] } ]',
            "specified more than once",
        ),
        (
            'input [ { name: "X" data_type: TYPE_FP32 dims: [4] reshape: { shape: [3] } } ]',
            "model input 'X' has different size for dims and reshape for m",
        ),
        (
            'input [ { name: "X" data_type: TYPE_FP32 dims: [-1, -1] reshape: { shape: [-1] } } ]',
            "model input 'X' has different number of variable-size dimensions for dims and "
            "reshape for m",
        ),
    ],
)
def test_invalid_configs_are_refused_with_a_reason(text: str, message: str) -> None:
    config = cfg.parse_text(text)
    config.name = config.name or "m"
    normalize(config)
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_completed(config, "m")


@pytest.mark.parametrize("text", ["", 'input [ { name: "X" data_type: TYPE_FP32 dims: [4] } ]'])
def test_a_config_without_inputs_or_outputs_is_valid(text: str) -> None:
    """As Triton's core: no input or output is required (a backend may refuse it)."""
    config = cfg.parse_text(f'name: "m" backend: "python" {text}')
    normalize(config)
    validate_completed(config, "m")


def test_backend_name_comes_from_backend_or_platform() -> None:
    assert cfg.backend_name(cfg.parse_text('platform: "pytorch_libtorch"')) == "pytorch"
    assert cfg.backend_name(cfg.parse_text('platform: "tensorrt_plan"')) == "tensorrt"
    assert cfg.backend_name(cfg.parse_text('backend: "python"')) == "python"
    assert cfg.backend_name(cfg.parse_text("")) == ""
