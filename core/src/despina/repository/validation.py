"""Triton's checks of a model config that need neither its backend nor its files.

:func:`validate_model` is Triton's ``ValidateModelConfig`` (batch sizes, the dynamic and
sequence batchers' settings, ensemble scheduling, the response cache) and
:func:`validate_io` its ``ValidateModelIOConfig`` (each input's and output's shape and
reshape, batch inputs and outputs). Triton runs both when it polls the repository, before
it looks for version folders or a backend (``validate_io`` only with auto-complete off),
and again once the backend completed the config (:func:`validate_completed`);
:mod:`despina.repository.config_pipeline` does the same. Errors are ConfigError with
Triton's texts. The sequence batcher's control lookups are shared with
:mod:`despina.scheduling.sequence_controls`, which builds the control tensors.
"""

from __future__ import annotations

from typing import Any

from despina.errors import ConfigError
from despina.repository.config import ENSEMBLE_PLATFORM, ModelConfig, mc

Control = mc.ModelSequenceBatching.Control
#: The data types a CONTROL_SEQUENCE_CORRID tensor may have.
CORRID_TYPES = ("TYPE_UINT64", "TYPE_INT64", "TYPE_UINT32", "TYPE_INT32", "TYPE_STRING")
#: The encodings of a boolean (START, END, READY) control, in Triton's order.
BOOL_ENCODINGS = ("int32_false_true", "fp32_false_true", "bool_false_true")
_BATCH_INPUT_KINDS = (
    "BATCH_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
    "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
    "BATCH_ITEM_SHAPE",
    "BATCH_ITEM_SHAPE_FLATTEN",
)
_TENSORRT_PLATFORM = "tensorrt_plan"


def validate_model(config: ModelConfig) -> None:
    """Triton's ``ValidateModelConfig`` but for the backend and platform, which Despina
    resolves from the installed backends later (:mod:`despina.repository.backend_resolution`)."""
    name = config.name
    if config.backend and config.platform == ENSEMBLE_PLATFORM:
        raise ConfigError(
            f"Ensemble model '{name}' must have platform type 'ensemble' and empty backend type"
        )
    if config.max_batch_size < 0:
        raise ConfigError(f"'max_batch_size' must be non-negative value for {name}")
    if config.HasField("dynamic_batching"):
        _validate_dynamic_batching(config)
    if config.HasField("sequence_batching"):
        _validate_sequence_batching(config)
    if config.HasField("ensemble_scheduling"):
        _validate_ensemble_scheduling(config)
    elif config.platform == ENSEMBLE_PLATFORM:
        raise ConfigError(
            f"ensemble scheduling must be set for ensemble {name} whose platform is ensemble"
        )
    if config.model_transaction_policy.decoupled and config.response_cache.enable:
        raise decoupled_cache_error(name)


def decoupled_cache_error(name: str) -> ConfigError:
    """Triton's refusal of a response cache on a decoupled model (an ensemble is
    decoupled when a composing model is)."""
    return ConfigError(
        f"Response Cache does not currently support model {name} with 'decoupled' "
        "transaction policy. Please disable the response cache."
    )


def _validate_dynamic_batching(config: ModelConfig) -> None:
    name, batching = config.name, config.dynamic_batching
    for size in batching.preferred_batch_size:
        if size <= 0:
            raise ConfigError(f"dynamic batching preferred size must be positive for {name}")
        if size > config.max_batch_size:
            raise ConfigError(
                f"dynamic batching preferred size must be <= max batch size for {name}"
            )
    levels = batching.priority_levels
    if levels:
        if not 1 <= batching.default_priority_level <= levels:
            raise ConfigError(f"default priority level must be in range [1, {levels}] for {name}")
        if any(not 1 <= level <= levels for level in batching.priority_queue_policy):
            raise ConfigError(
                f"priority queue policy must have priority level in range [1, {levels}] for {name}"
            )
    if not batching.preserve_ordering:
        return
    if levels > 1:
        raise ConfigError(
            f"Only one priority level is allowed when 'preserve_ordering' is true for {name}"
        )
    policies = [batching.default_queue_policy, *batching.priority_queue_policy.values()]
    for policy in policies:
        if policy.default_timeout_microseconds and policy.timeout_action == policy.DELAY:
            raise ConfigError(
                "Queue policy can not have DELAY as timeout action when 'preserve_ordering' "
                f"is true for {name}"
            )


def _validate_sequence_batching(config: ModelConfig) -> None:
    name, batching = config.name, config.sequence_batching
    if config.response_cache.enable:
        raise ConfigError(
            f"Response Cache does not currently support model {name} with sequence batching "
            "scheduler. Please disable the response cache."
        )
    for kind in (
        Control.CONTROL_SEQUENCE_START,
        Control.CONTROL_SEQUENCE_END,
        Control.CONTROL_SEQUENCE_READY,
    ):
        found = find_control(batching, name, kind)
        if found is not None:
            bool_encoding(found[1], name)
    corrid = find_control(batching, name, Control.CONTROL_SEQUENCE_CORRID)
    if corrid is not None:
        check_corrid(corrid[1], name)
    if batching.WhichOneof("strategy_choice") == "oldest":
        for size in batching.oldest.preferred_batch_size:
            if size <= 0:
                raise ConfigError(
                    f"sequence batching preferred batch size must be positive for {name}"
                )
            if size > config.max_batch_size:
                raise ConfigError(
                    f"sequence batching preferred batch size must be <= max batch size for {name}"
                )
    utilization = batching.direct.minimum_slot_utilization
    if not 0.0 <= utilization <= 1.0:
        raise ConfigError(
            f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for {name}"
        )


def find_control(batching: Any, model: str, kind: int) -> tuple[str, Any] | None:
    """(tensor name, control) of the sequence batcher's one control of ``kind``, or None;
    ConfigError for a control tensor without a name or named twice, or a kind given twice."""
    seen: set[str] = set()
    found: tuple[str, Any] | None = None
    for control_input in batching.control_input:
        if not control_input.name:
            raise ConfigError(f"sequence batching control tensor must have a name for {model}")
        if control_input.name in seen:
            raise ConfigError(
                f"sequence batching control tensor '{control_input.name}' is specified for "
                f"multiple control kinds for {model}"
            )
        seen.add(control_input.name)
        for control in control_input.control:
            if control.kind != kind:
                continue
            if found is not None:
                raise ConfigError(
                    f"sequence batching specifies multiple {Control.Kind.Name(kind)} tensors "
                    f"for {model}"
                )
            found = (control_input.name, control)
    return found


def bool_encoding(control: Any, model: str) -> str:
    """The one ``*_false_true`` field a START/END/READY control gives, with its 2 values."""
    kind = Control.Kind.Name(control.kind)
    given = [field for field in BOOL_ENCODINGS if len(getattr(control, field))]
    if not given:
        raise ConfigError(
            "sequence batching must specify either 'int32_false_true', 'fp32_false_true' "
            f"or 'bool_false_true' for {kind} for {model}"
        )
    if len(given) > 1:
        raise ConfigError(
            "sequence batching specifies more than one from 'int32_false_true', "
            f"'fp32_false_true' and 'bool_false_true' for {kind} for {model}"
        )
    if len(getattr(control, given[0])) != 2:
        raise ConfigError(
            f"sequence batching control '{given[0]}' must have exactly 2 entries for "
            f"{kind} for {model}"
        )
    return given[0]


def check_corrid(control: Any, model: str) -> None:
    """ConfigError for a CONTROL_SEQUENCE_CORRID control with a boolean encoding or a data
    type Triton does not allow."""
    if any(len(getattr(control, field)) for field in BOOL_ENCODINGS):
        raise ConfigError(
            "sequence batching must not specify either 'int32_false_true', "
            "'fp32_false_true' or 'bool_false_true' for CONTROL_SEQUENCE_CORRID for "
            f"{model}"
        )
    if mc.DataType.Name(control.data_type) not in CORRID_TYPES:
        raise ConfigError(
            f"unexpected data type for control CONTROL_SEQUENCE_CORRID for {model}. "
            "Allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 "
            "and TYPE_STRING"
        )


def _validate_ensemble_scheduling(config: ModelConfig) -> None:
    """The part of Triton's ``ValidateEnsembleSchedulingConfig`` before the steps' graph
    (:mod:`despina.scheduling.ensemble_graph` checks that)."""
    name = config.name
    if config.platform != ENSEMBLE_PLATFORM:
        raise ConfigError(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not ensemble"
        )
    if config.instance_group:
        raise ConfigError(f"instance group should not be specified for ensemble '{name}'")
    if config.HasField("optimization"):
        raise ConfigError(f"optimization should not be specified for ensemble '{name}'")
    if config.model_warmup:
        raise ConfigError(f"model_warmup can not be specified for ensemble '{name}'")
    if not config.ensemble_scheduling.step:
        raise ConfigError(f"must specify 'step' for ensemble '{name}'")


def validate_io(config: ModelConfig) -> None:
    """Triton's ``ValidateModelIOConfig``: every input's and output's name, data type,
    dims and reshape, then the batch inputs and outputs."""
    try:
        for tensor in config.input:
            _validate_tensor(tensor, config, "model input ")
            if tensor.format in (tensor.FORMAT_NHWC, tensor.FORMAT_NCHW) and len(tensor.dims) != 3:
                raise ConfigError("model input NHWC/NCHW require 3 dims")
            _validate_tensor_kind(tensor, config, "input")
        for tensor in config.output:
            _validate_tensor(tensor, config, "model output ")
            _validate_tensor_kind(tensor, config, "output")
        _validate_batch_io(config)
    except ConfigError as exc:
        raise ConfigError(f"{exc} for {config.name}") from None


def _validate_tensor(tensor: Any, config: ModelConfig, prefix: str) -> None:
    """Triton's ``ValidateIOShape``."""
    if not tensor.name:
        raise ConfigError(f"{prefix}must specify 'name'")
    prefix += f"'{tensor.name}' "
    if tensor.data_type == mc.TYPE_INVALID:
        raise ConfigError(f"{prefix}must specify 'data_type'")
    if not tensor.dims:
        raise ConfigError(f"{prefix}must specify 'dims'")
    reshaped = tensor.HasField("reshape")
    shape = list(tensor.reshape.shape)
    if reshaped and not shape and config.max_batch_size == 0:
        raise ConfigError(
            f"{prefix}cannot have empty reshape for non-batching model as scalar tensors are "
            "not supported"
        )
    if any(d < 1 and d != -1 for d in tensor.dims):
        raise ConfigError(
            f"{prefix}dimension must be integer >= 1, or -1 to indicate a variable-size dimension"
        )
    if not reshaped:
        return
    if any(d < 1 and d != -1 for d in shape):
        raise ConfigError(
            f"{prefix}reshape dimensions must be integer >= 1, or -1 to indicate a "
            "variable-size dimension"
        )
    dims_size, reshape_size = _element_count(tensor.dims), _element_count(shape)
    if dims_size != reshape_size and (reshape_size != 0 or dims_size != 1):
        raise ConfigError(f"{prefix}has different size for dims and reshape")
    if dims_size == -1:
        dims_chunks, reshape_chunks = _chunks(tensor.dims), _chunks(shape)
        if len(dims_chunks) != len(reshape_chunks):
            raise ConfigError(
                f"{prefix}has different number of variable-size dimensions for dims and reshape"
            )
        if dims_chunks != reshape_chunks:
            raise ConfigError(f"{prefix}has different size for dims and reshape")


def _element_count(dims: Any) -> int:
    """Triton's ``GetElementCount``: -1 when a dimension is variable, 0 for no dims."""
    if not len(dims):
        return 0
    count = 1
    for dim in dims:
        if dim == -1:
            return -1
        count *= int(dim)
    return count


def _chunks(dims: Any) -> list[int]:
    """The element counts between the variable-size dimensions of ``dims``."""
    chunks, current = [], 1
    for dim in dims:
        if dim == -1:
            chunks.append(current)
            current = 1
        else:
            current *= int(dim)
    return [*chunks, current]


def _validate_tensor_kind(tensor: Any, config: ModelConfig, kind: str) -> None:
    """Shape tensors and non-linear formats are TensorRT's alone."""
    platform = config.platform
    if platform != _TENSORRT_PLATFORM and tensor.is_shape_tensor:
        raise ConfigError("shape tensors are only supported for TensorRT platform")
    if not tensor.is_non_linear_format_io:
        return
    if platform != _TENSORRT_PLATFORM:
        raise ConfigError("Non-linear IO format is only supported for the TensorRT platform")
    if len(tensor.dims) != 3:
        raise ConfigError(f"Non-linear IO format {kind} requires 3 dims")


def _validate_batch_io(config: ModelConfig) -> None:
    """Triton's ``ValidateBatchIO``."""
    inputs = {tensor.name for tensor in config.input}
    outputs = {tensor.name for tensor in config.output}
    for batch_input in config.batch_input:
        kind = mc.BatchInput.Kind.Name(batch_input.kind)
        if kind not in _BATCH_INPUT_KINDS:
            raise ConfigError(f"unknown batch input kind '{kind}'")
        _one_source("batch input", kind, batch_input.source_input)
        if batch_input.data_type not in (mc.TYPE_INT32, mc.TYPE_FP32):
            raise ConfigError("batch input data type must be TYPE_INT32 or TYPE_FP32")
        _known_sources(batch_input.source_input, inputs)
    for batch_output in config.batch_output:
        kind = mc.BatchOutput.Kind.Name(batch_output.kind)
        if batch_output.kind != mc.BatchOutput.BATCH_SCATTER_WITH_INPUT_SHAPE:
            raise ConfigError(f"unknown batch output kind '{kind}'")
        _one_source("batch output", kind, batch_output.source_input)
        _known_sources(batch_output.source_input, inputs)
        targets: set[str] = set()
        for target in batch_output.target_name:
            if target not in outputs:
                raise ConfigError(f"unknown target output name '{target}'")
            if target in targets:
                raise ConfigError(f"target output name '{target}' can only be specified once")
            targets.add(target)


def _one_source(what: str, kind: str, sources: Any) -> None:
    if len(sources) != 1:
        raise ConfigError(f"{what} kind '{kind}' expects 1 source input, got {len(sources)}")


def _known_sources(sources: Any, inputs: set[str]) -> None:
    for source in sources:
        if source not in inputs:
            raise ConfigError(f"unknown source input name '{source}'")


def validate_completed(config: ModelConfig, model_name: str) -> None:
    """ConfigError for what Triton refuses of a completed config before loading the model:
    a name other than ``model_name``, :func:`validate_model` and :func:`validate_io` again,
    a tensor named twice. A config without inputs or outputs is accepted, as Triton's core
    accepts it (a backend may refuse it)."""
    where = f"model '{model_name}'"
    if config.name != model_name:
        raise ConfigError(
            f"{where}: config name '{config.name}' does not match the folder name '{model_name}'"
        )
    validate_model(config)
    validate_io(config)
    for kind, tensors in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for tensor in tensors:
            if tensor.name in seen:
                raise ConfigError(f"{where}: {kind} '{tensor.name}' is specified more than once")
            seen.add(tensor.name)
