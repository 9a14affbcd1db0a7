"""The engine-to-config rules as plain functions, with the cases of Triton's tensorrt
backend (model_state.cc AutoCompleteConfigHelper / GetMaxSupportedBatchSize, and
instance_state.cc ValidateIO), on engines described as data."""

from __future__ import annotations

import pytest
from despina import ConfigError, ModelConfig, mc
from despina_backend_trt import config_rules
from despina_backend_trt.engine_info import EngineInfo, EngineTensor
from google.protobuf import text_format


def engine(batch_max: tuple[int, ...] = (8,), dims: tuple[int, ...] = (-1, 4)) -> EngineInfo:
    tensors = (
        EngineTensor("IN", True, "TYPE_FP32", dims),
        EngineTensor("OUT", False, "TYPE_FP32", dims),
    )
    profiles = tuple({"IN": ((1, 4), (1, 4), (high, 4))} for high in batch_max)
    return EngineInfo(tensors, profiles)


def config(text: str = "") -> ModelConfig:
    return text_format.Parse('name: "m"\n' + text, mc.ModelConfig())


def test_max_batch_size_is_the_largest_over_the_groups_profiles() -> None:
    info = engine((4, 16))
    assert config_rules.max_batch_size(info, [0]) == 4
    assert config_rules.max_batch_size(info, [0, 1]) == 16
    filled = config('instance_group [ { profile: ["0"] } ]')
    config_rules.auto_complete(filled, info, "m")
    assert filled.max_batch_size == 4
    filled = config()
    config_rules.auto_complete(filled, info, "m")
    assert filled.max_batch_size == 4  # no profile named: profile 0, as Triton
    assert filled.HasField("dynamic_batching")
    assert [(t.name, list(t.dims), t.is_shape_tensor) for t in filled.input] == [("IN", [4], False)]


def test_config_max_batch_above_the_engine_fails_with_tritons_text() -> None:
    with pytest.raises(
        ConfigError,
        match="configuration specified max-batch 32 but TensorRT engine only supports max-batch 8",
    ):
        config_rules.auto_complete(config("max_batch_size: 32"), engine(), "m")


def test_dims_in_the_config_hint_at_batching() -> None:
    unbatched = config('input [ { name: "IN" dims: [ -1, 4 ] } ]')
    config_rules.auto_complete(unbatched, engine(), "m")
    assert unbatched.max_batch_size == 0  # full-rank dims: the model does not batch
    assert not unbatched.HasField("dynamic_batching")
    with pytest.raises(
        ConfigError,
        match="hints for dynamic batching but the underlying engine doesn't support batching",
    ):
        config_rules.auto_complete(
            config('input [ { name: "IN" dims: [ 4 ] } ]'), engine((0,)), "m"
        )


def test_invalid_profile_and_unknown_tensor_are_refused() -> None:
    with pytest.raises(
        ConfigError,
        match=r"configuration specified invalid profile 3 \. Number of profiles supported by TensorRT engine: 1",
    ):
        config_rules.auto_complete(config('instance_group [ { profile: ["3"] } ]'), engine(), "m")
    with pytest.raises(ConfigError, match="unexpected inference input 'X', allowed inputs are: IN"):
        config_rules.auto_complete(config('input [ { name: "X" dims: [ 4 ] } ]'), engine(), "m")


def test_scalar_tensors_get_dims_1_with_an_empty_reshape() -> None:
    filled = config()
    config_rules.auto_complete(filled, engine(dims=(-1,)), "m")
    assert list(filled.input[0].dims) == [1] and filled.input[0].HasField("reshape")


def test_validate_names_what_disagrees() -> None:
    ok = config(
        'max_batch_size: 8 input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ] output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]'
    )
    config_rules.validate(ok, engine(), "m")
    wrong_type = config(
        'max_batch_size: 8 input [ { name: "IN" data_type: TYPE_FP16 dims: [ 4 ] } ]'
    )
    with pytest.raises(ConfigError, match="input 'IN' for model 'm' has data type TYPE_FP16"):
        config_rules.validate(wrong_type, engine(), "m")
    wrong_dims = config(
        'max_batch_size: 8 input [ { name: "IN" data_type: TYPE_FP32 dims: [ 5 ] } ]'
    )
    with pytest.raises(ConfigError, match=r"specifies dims \[-1,5\] .* engine's dims \[-1,4\]"):
        config_rules.validate(wrong_dims, engine(), "m")
    strings = config('input [ { name: "IN" data_type: TYPE_STRING dims: [ -1, 4 ] } ]')
    with pytest.raises(
        ConfigError, match="unsupported datatype TYPE_STRING for input 'IN' for model 'm'"
    ):
        config_rules.validate(strings, engine(), "m")
    with pytest.raises(ConfigError, match="expected configuration for input 'IN' for m"):
        config_rules.validate(
            config('output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]'), engine(), "m"
        )


def test_cc_model_filenames_and_allocation_strategy() -> None:
    chosen = config(
        'default_model_filename: "any.plan" cc_model_filenames { key: "8.6" value: "ampere.plan" }'
    )
    assert config_rules.model_filename(chosen, (8, 6)) == "ampere.plan"
    assert config_rules.model_filename(chosen, (9, 0)) == "any.plan"
    assert config_rules.model_filename(config(), (9, 0)) == "model.plan"
    assert config_rules.allocation_strategy({}, "m") == "STATIC"
    assert (
        config_rules.allocation_strategy(
            {"execution_context_allocation_strategy": "ON_PROFILE_CHANGE"}, "m"
        )
        == "ON_PROFILE_CHANGE"
    )
    with pytest.raises(ConfigError, match="Supported values are 'STATIC' and 'ON_PROFILE_CHANGE'"):
        config_rules.allocation_strategy({"execution_context_allocation_strategy": "LAZY"}, "m")
