"""The config rules of Triton's tensorrt backend, as functions of a config and an
:class:`~despina_backend_trt.engine_info.EngineInfo` (its ``model_state.cc`` auto-complete
and ``instance_state.cc`` validation, with their texts).

- :func:`auto_complete`: ``max_batch_size`` from the optimization profiles the instance
  groups use (profile 0 when none is named): per profile, the smallest maximum first
  dimension over the inputs (first value for shape tensors); over profiles, the largest.
  The config's dims hint whether batching is meant; inputs and outputs are filled from the
  engine (``is_shape_tensor``, ``is_non_linear_format_io`` included), dynamic batching is
  turned on above 1.
- :func:`validate`: what an instance checks before it serves (names, data types, dims
  within the engine's, shape-tensor and I/O-format marks).
- :func:`model_filename`, :func:`allocation_strategy`, :func:`profile_index`: the
  ``cc_model_filenames``, ``execution_context_allocation_strategy`` and ``profile`` settings.

Every function raises ConfigError with Triton's text where Triton has one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from despina import ConfigError, ModelConfig, mc

from despina_backend_trt.engine_info import EngineInfo, EngineTensor

#: ``execution_context_allocation_strategy`` values (Triton's, TensorRT's enum members).
ALLOCATION_STRATEGIES = {"STATIC": "STATIC", "ON_PROFILE_CHANGE": "ON_PROFILE_CHANGE"}


def profile_index(name: str) -> int:
    """The index an instance group's ``profile`` entry names."""
    if not name:
        raise ConfigError("profile name must not be empty")
    try:
        return int(name)
    except ValueError:
        raise ConfigError(f"unable to parse '{name}': not an integer") from None


def profile_indices(config: ModelConfig, num_profiles: int, model: str) -> list[int]:
    """The profiles the instance groups name (``[0]`` when none), each checked to exist."""
    indices: set[int] = set()
    for group in config.instance_group:
        for name in group.profile:
            index = profile_index(name)
            if not 0 <= index < num_profiles:
                raise ConfigError(
                    f"unable to autofill for '{model}', configuration specified invalid profile "
                    f"{name} . Number of profiles supported by TensorRT engine: {num_profiles}"
                )
            indices.add(index)
    return sorted(indices) or [0]


def max_batch_size(info: EngineInfo, profiles: Iterable[int]) -> int:
    """The largest batch the named profiles support (0: the engine cannot batch)."""
    best = 0
    for profile in profiles:
        bounds = info.profiles[profile] if profile < len(info.profiles) else {}
        firsts = [high[0] if high else 0 for _, _, high in bounds.values()]
        best = max(best, min(firsts, default=0))
    return best


def auto_complete(config: ModelConfig, info: EngineInfo, model: str) -> None:
    """Fill ``config`` from the engine in place, as Triton's tensorrt backend does."""
    hint, shaped = _batch_hint(config, info, model)
    supported = max_batch_size(info, profile_indices(config, len(info.profiles), model))
    if hint and supported == 0:
        raise ConfigError(
            f"autofill failed for model '{model}': model tensor shape configuration hints for "
            "dynamic batching but the underlying engine doesn't support batching."
        )
    if shaped and not hint:
        supported = 0  # the config's dims say the model does not batch
    if config.max_batch_size == 0:
        config.max_batch_size = supported
    elif config.max_batch_size > supported:
        raise ConfigError(
            f"autofill failed for model '{model}': configuration specified max-batch "
            f"{config.max_batch_size} but TensorRT engine only supports max-batch {supported}"
        )
    if supported > 1 and not (
        config.HasField("sequence_batching") or config.HasField("dynamic_batching")
    ):
        config.dynamic_batching.SetInParent()
    for tensors, specs in ((config.input, info.inputs), (config.output, info.outputs)):
        _fill(tensors, specs, config.max_batch_size > 0)


def _batch_hint(config: ModelConfig, info: EngineInfo, model: str) -> tuple[bool, bool]:
    """(whether the config's tensors hint at batching, whether any lists dims); checks
    that every listed tensor is one of the engine's."""
    hint = shaped = False
    for kind, tensors, specs in (
        ("input", config.input, info.inputs),
        ("output", config.output, info.outputs),
    ):
        for tensor in tensors:
            if getattr(tensor, "allow_ragged_batch", False):
                return True, shaped
            _check_allowed(kind, tensor.name, specs)
            dims = config_dims(tensor)
            if not dims:
                continue
            shaped = True
            spec = info.tensor(tensor.name)
            assert spec is not None
            if spec.is_shape_tensor:
                batches = bool(spec.shape) and spec.shape[0] == dims[0] + 1
            else:
                batches = len(spec.shape) == len(dims) + 1
            hint = hint or batches
            if hint and not batches:
                raise ConfigError(
                    f"unable to autofill for '{model}', model tensor configurations are "
                    "contradicting each other in terms of whether batching is supported"
                )
    return hint, shaped


def _fill(tensors: Any, specs: Sequence[EngineTensor], batched: bool) -> None:
    """Add the engine's tensors to an empty list; complete listed ones (type, dims, marks)."""
    if not len(tensors):
        for spec in specs:
            tensor = tensors.add(name=spec.name.split(" ")[0])
            tensor.data_type = mc.DataType.Value(spec.data_type)
            _set_dims(tensor, spec, batched)
            tensor.is_shape_tensor = spec.is_shape_tensor
            tensor.is_non_linear_format_io = not spec.linear_format
        return
    by_name = {s.name: s for s in specs}
    for tensor in tensors:
        found = by_name.get(tensor.name)
        if found is None:
            continue
        spec = found
        if tensor.data_type == mc.TYPE_INVALID:
            tensor.data_type = mc.DataType.Value(spec.data_type)
        if not len(tensor.dims):
            _set_dims(tensor, spec, batched)
        if tensor.is_shape_tensor and not spec.is_shape_tensor:
            raise ConfigError(f"'{tensor.name}' is incorrectly specified as a shape tensor.")
        tensor.is_shape_tensor = spec.is_shape_tensor
        if tensor.is_non_linear_format_io and spec.linear_format:
            raise ConfigError(
                f"'{tensor.name}' uses a linear IO format, but 'is_non_linear_format_io' is "
                "incorrectly set to true in the model configuration."
            )
        tensor.is_non_linear_format_io = not spec.linear_format


def _set_dims(tensor: Any, spec: EngineTensor, batched: bool) -> None:
    """Triton's InitIODims: the engine shape less the batch dimension; a shape tensor's
    dims are its value count; empty dims become ``[1]`` with an empty reshape."""
    del tensor.dims[:]
    if spec.is_shape_tensor:
        if spec.shape:
            tensor.dims.append(spec.shape[0] - 1 if batched else spec.shape[0])
        return
    dims = spec.shape[1:] if batched else spec.shape
    if dims:
        tensor.dims.extend(dims)
    else:
        tensor.dims.append(1)
        tensor.reshape.SetInParent()


def _check_allowed(kind: str, name: str, specs: Sequence[EngineTensor]) -> None:
    names = [s.name for s in specs]
    if name not in names:
        raise ConfigError(
            f"unexpected inference {kind} '{name}', allowed {kind}s are: {', '.join(names)}"
        )


def validate(config: ModelConfig, info: EngineInfo, model: str) -> None:
    """Raise ConfigError when the config cannot serve this engine (Triton's ValidateIO).

    Ragged inputs and scattered batch outputs are not compared by dims here, and batch
    inputs need no config input: :mod:`despina_backend_trt.ragged_rules` checks them."""
    inputs, outputs = info.inputs, info.outputs
    if len(config.input) > len(inputs):
        raise ConfigError(
            f"unable to load model '{model}', configuration expects {len(config.input)} "
            f"inputs, model provides at most {len(inputs)}"
        )
    batched = config.max_batch_size > 0
    flat = {t.name for t in config.input if t.allow_ragged_batch}
    flat.update(name for entry in config.batch_output for name in entry.target_name)
    for kind, tensors, specs in (
        ("input", config.input, inputs),
        ("output", config.output, outputs),
    ):
        for tensor in tensors:
            _check_allowed(kind, tensor.name, specs)
            spec = info.tensor(tensor.name)
            assert spec is not None
            _check_tensor(kind, tensor, spec, batched, model, tensor.name not in flat)
    listed = {t.name for t in config.input}
    listed.update(name for entry in config.batch_input for name in entry.target_name)
    for spec in inputs:
        if spec.name not in listed:
            raise ConfigError(f"expected configuration for input '{spec.name}' for {model}")
    if batched:
        supported = max_batch_size(info, range(len(info.profiles)))
        if config.max_batch_size > supported:
            raise ConfigError(
                f"unable to load model '{model}': configuration specified max-batch "
                f"{config.max_batch_size} but TensorRT engine only supports max-batch {supported}"
            )


def _check_tensor(
    kind: str, tensor: Any, spec: EngineTensor, batched: bool, model: str, shaped: bool = True
) -> None:
    """Data type, marks and (``shaped``) dims of one config tensor against the engine's."""
    config_type = mc.DataType.Name(tensor.data_type)
    where = f"{kind} '{tensor.name}' for model '{model}'"
    if config_type not in ALLOWED_TYPES:
        raise ConfigError(
            f"unsupported datatype {config_type} for {kind} '{tensor.name}' for model '{model}'"
        )
    if config_type != spec.data_type:
        raise ConfigError(
            f"{where} has data type {config_type} in the configuration but {spec.data_type} "
            "in the engine"
        )
    if spec.is_shape_tensor and not tensor.is_shape_tensor:
        raise ConfigError(
            f"{where} is a shape tensor but the model configuration doesn't mark it as a "
            "shape tensor."
        )
    if tensor.is_shape_tensor and not spec.is_shape_tensor:
        raise ConfigError(
            f"{where} is incorrectly marked as a shape tensor in the model configuration."
        )
    if not spec.linear_format and not tensor.is_non_linear_format_io:
        raise ConfigError(
            f"{where} uses a non-linear IO format, but 'is_non_linear_format_io' is "
            "incorrectly set to false in the model configuration."
        )
    if spec.linear_format and tensor.is_non_linear_format_io:
        raise ConfigError(
            f"{where} uses a linear IO format, but 'is_non_linear_format_io' is incorrectly "
            "set to true in the model configuration."
        )
    if spec.is_shape_tensor:
        _check_shape_tensor(kind, tensor, spec, batched, model)
    elif shaped:
        check_dims(where, config_dims(tensor), spec, batched)


def config_dims(tensor: Any) -> list[int]:
    """A config tensor's dims as the model sees them (its reshape when it has one)."""
    return [int(d) for d in (tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims)]


def check_dims(where: str, dims: Sequence[int], spec: EngineTensor, batched: bool) -> None:
    """Raise ConfigError unless the engine's shape is ``dims`` (after any batch dimension
    when ``batched``); an engine's -1 matches any size."""
    expected = ([-1] if batched else []) + list(dims)
    engine = list(spec.shape)
    fits = len(engine) == len(expected) and all(
        e == -1 or (i == 0 and batched) or e == c
        for i, (e, c) in enumerate(zip(engine, expected, strict=True))
    )
    if not fits:
        raise ConfigError(
            f"{where}: model configuration specifies dims {shape_text(expected)}"
            f"{' (batch dimension included)' if batched else ''} that do not match the engine's "
            f"dims {shape_text(engine)}"
        )


def _check_shape_tensor(
    kind: str, tensor: Any, spec: EngineTensor, batched: bool, model: str
) -> None:
    """Triton's shape-tensor rules: inputs INT32 or INT64, outputs INT64; a 0-d or 1-D
    engine tensor whose value count is the config's dims (plus one, the batch size, for a
    batching model)."""
    config_type = mc.DataType.Name(tensor.data_type)
    allowed = ("TYPE_INT32", "TYPE_INT64") if kind == "input" else ("TYPE_INT64",)
    if config_type not in allowed:
        raise ConfigError(
            f"unexpected datatype {config_type} in model configuration for shape {kind} "
            f"'{tensor.name}', expecting {' or '.join(allowed)} for {model}"
        )
    if len(spec.shape) > 1:
        raise ConfigError(
            f"unable to load model '{model}', shape binding '{tensor.name}' can only be 0-d "
            f"or 1-D tensor, got {shape_text(spec.shape)}"
        )
    dims = [int(d) for d in tensor.dims]
    count = dims[0] + (1 if batched else 0) if len(dims) == 1 and dims[0] != -1 else None
    if spec.shape and count != spec.shape[0]:
        raise ConfigError(
            f"unable to load model '{model}', binding '{tensor.name}' shape expected by "
            f"framework {shape_text(spec.shape)} doesn't match model configuration shape "
            f"{shape_text(dims)}"
        )


#: The config data types the backend exchanges (Triton's ConvertDataTypeToTrtType).
ALLOWED_TYPES = frozenset(
    ("TYPE_FP32", "TYPE_FP16", "TYPE_INT8", "TYPE_UINT8", "TYPE_BF16", "TYPE_INT32",
     "TYPE_INT64", "TYPE_BOOL")
)  # fmt: skip


def model_filename(config: ModelConfig, capability: tuple[int, int]) -> str:
    """The plan to load on a GPU of ``capability``: ``cc_model_filenames["<major>.<minor>"]``
    when listed, else ``default_model_filename``, else ``model.plan``."""
    chosen = config.cc_model_filenames.get(f"{capability[0]}.{capability[1]}")
    return chosen or config.default_model_filename or "model.plan"


def allocation_strategy(parameters: dict[str, str], model: str) -> str:
    """``execution_context_allocation_strategy``: the TensorRT enum member's name."""
    value = parameters.get("execution_context_allocation_strategy", "STATIC")
    if value not in ALLOCATION_STRATEGIES:
        raise ConfigError(
            f"Invalid value for 'execution_context_allocation_strategy': '{value}' for model "
            f"instance '{model}'. Supported values are 'STATIC' and 'ON_PROFILE_CHANGE'."
        )
    return ALLOCATION_STRATEGIES[value]


def shape_text(shape: Sequence[int]) -> str:
    """A shape as Triton writes it in its messages: ``[-1,4]``."""
    return "[" + ",".join(str(d) for d in shape) + "]"
