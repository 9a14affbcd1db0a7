"""The config rules of ragged inputs, ``batch_input`` and ``batch_output`` against an
engine, with the texts of Triton's tensorrt backend (``instance_state.cc``) and of its
core's ``ValidateBatchIO`` where the core here has no such check.

- A ragged input (``allow_ragged_batch``) reaches the engine as one flat tensor: the
  engine's input is 1-D, without a batch dimension, of the config's first dim.
- A batch input is an engine input the server generates per batch: INT32 or FP32, the
  engine's data type, one source input of the config. Its dims, as Triton computes them,
  are empty for a batching model (the engine's shape is the batch dimension alone) but
  for BATCH_ITEM_SHAPE (``[rank]`` of the source, giving ``[-1, rank]``); for a model that
  does not batch the shape is fixed by the kind.
- A batch output (BATCH_SCATTER_WITH_INPUT_SHAPE) targets config outputs that are not
  shape tensors; its dims are not compared (the engine's output is flat).
"""

from __future__ import annotations

from typing import Any

from despina import ConfigError, ModelConfig, mc

from despina_backend_trt.config_rules import check_dims, config_dims, shape_text
from despina_backend_trt.engine_info import EngineInfo, EngineTensor

Kind = mc.BatchInput.Kind


def validate(config: ModelConfig, info: EngineInfo, model: str) -> None:
    """Raise ConfigError when the config's ragged inputs, batch inputs or batch outputs
    cannot be served by this engine."""
    inputs = {t.name: t for t in config.input}
    for tensor in config.input:
        if tensor.allow_ragged_batch:
            _check_ragged(tensor, _engine_tensor(info, tensor.name, "input", model), model)
    for entry in config.batch_input:
        source = _source(entry, "input", inputs, model)
        if entry.data_type not in (mc.TYPE_INT32, mc.TYPE_FP32):
            raise ConfigError(f"batch input data type must be TYPE_INT32 or TYPE_FP32 for {model}")
        for name in entry.target_name:
            if name in inputs:
                raise ConfigError(  # two spaces after the name, as Triton's text
                    f"input '{name}'  has already appeared as an input or output for {model}"
                )
            spec = _engine_tensor(info, name, "input", model)
            _check_batch_input(entry, spec, source, config.max_batch_size > 0, model)
    outputs = {t.name for t in config.output}
    for out in config.batch_output:
        _source(out, "output", inputs, model)
        for name in out.target_name:
            if name not in outputs:
                raise ConfigError(f"unknown target output name '{name}' for {model}")
            spec = _engine_tensor(info, name, "output", model)
            if spec.is_shape_tensor:
                raise ConfigError(f"batch output '{name}' can not be shape binding")
            if not spec.linear_format:
                raise ConfigError(
                    f"unexpected allow-ragged for non-linear output '{name}' for {model}"
                )


def _item_rank(source: Any) -> list[int]:
    """``[rank]`` of a source input's config shape, or ``[]`` when it has no dims."""
    dims = config_dims(source)
    return [len(dims)] if dims else []


def batch_input_dims(kind: int, source: Any, batched: bool) -> list[int]:
    """The config dims Triton gives a batch input of ``kind`` (batch dimension excluded)."""
    if batched:
        return _item_rank(source) if kind == Kind.BATCH_ITEM_SHAPE else []
    fixed = {
        Kind.BATCH_ELEMENT_COUNT: [1],
        Kind.BATCH_ACCUMULATED_ELEMENT_COUNT: [1],
        Kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO: [2],
        Kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE: [-1],
        Kind.BATCH_ITEM_SHAPE: [1, *_item_rank(source)],
    }
    return fixed.get(kind, _item_rank(source))  # BATCH_ITEM_SHAPE_FLATTEN: [rank]


def _check_ragged(tensor: Any, spec: EngineTensor, model: str) -> None:
    dims = config_dims(tensor)
    if len(spec.shape) != 1 or not dims or spec.shape[0] != dims[0]:
        raise ConfigError(
            f"model '{model}', tensor '{tensor.name}': for the model to support ragged input, "
            f"the engine shape is: {shape_text(spec.shape)} while the model config shape is: "
            f"{shape_text(dims)}"
        )
    if not spec.linear_format:
        raise ConfigError(
            f"unexpected allow-ragged for non-linear input '{tensor.name}' for {model}"
        )


def _check_batch_input(
    entry: mc.BatchInput, spec: EngineTensor, source: Any, batched: bool, model: str
) -> None:
    config_type = mc.DataType.Name(entry.data_type)
    if spec.data_type != config_type:
        raise ConfigError(
            f"unexpected datatype {spec.data_type} for inference input '{spec.name}', "
            f"expecting {config_type} for {model}"
        )
    if spec.is_shape_tensor:
        raise ConfigError(f"batch input '{spec.name}' can not be shape binding")
    where = f"batch input '{spec.name}' ({Kind.Name(entry.kind)}) for model '{model}'"
    check_dims(where, batch_input_dims(entry.kind, source, batched), spec, batched)


def _source(entry: Any, kind: str, inputs: dict[str, Any], model: str) -> Any:
    """The one config input a batch input or output is computed from."""
    kind_name = type(entry).Kind.Name(entry.kind)
    if len(entry.source_input) != 1:
        raise ConfigError(
            f"batch {kind} kind '{kind_name}' expects 1 source input, got "
            f"{len(entry.source_input)} for {model}"
        )
    name = entry.source_input[0]
    if name not in inputs:
        raise ConfigError(f"unknown source input name '{name}' for {model}")
    return inputs[name]


def _engine_tensor(info: EngineInfo, name: str, kind: str, model: str) -> EngineTensor:
    spec = info.tensor(name)
    if spec is None:
        raise ConfigError(f"{kind} '{name}' not found for {model}")
    if spec.is_input != (kind == "input"):
        raise ConfigError(f"{kind} '{name}' is expected to be an {kind} in model for {model}")
    return spec
