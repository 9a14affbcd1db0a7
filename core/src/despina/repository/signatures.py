"""Model-file signatures: auto-complete a config from them and check a config against them.

Backends whose model files declare their inputs and outputs (ONNX, OpenVINO, TensorRT)
describe them as :class:`TensorSpec` lists; :func:`complete_config` then fills a config as
Triton's backends do, and :func:`check_config` refuses a config that disagrees with the
file, naming the model, the file and the mismatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from despina.errors import ConfigError
from despina.inference.tensors import config_to_datatype, datatype_to_config
from despina.repository.config import ModelConfig, mc

#: Triton's ``default-max-batch-size`` backend setting (``--backend-config``).
DEFAULT_MAX_BATCH_SIZE = 4


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as the model file declares it.

    ``datatype`` is the wire name ("FP32", "BYTES"); ``shape`` uses -1 for dynamic
    dimensions and is ``()`` for a scalar.
    """

    name: str
    datatype: str
    shape: tuple[int, ...]


def backend_setting(backend_config: Sequence[str], backend: str, key: str) -> str | None:
    """The last ``--backend-config=[<backend>,]<key>=<value>`` value for ``backend`` (an
    entry without a backend applies to every backend), or None."""
    found = None
    for entry in backend_config:
        scope, _, setting = str(entry).rpartition(",")
        name, _, value = setting.partition("=")
        if name.strip() == key and scope in ("", backend):
            found = value.strip()
    return found


def default_max_batch_size(backend_config: Sequence[str], backend: str) -> int:
    """``default-max-batch-size`` from ``--backend-config=<backend>,default-max-batch-size=N``
    (or without the backend prefix), else :data:`DEFAULT_MAX_BATCH_SIZE`."""
    raw = backend_setting(backend_config, backend, "default-max-batch-size")
    if raw is None:
        return DEFAULT_MAX_BATCH_SIZE
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(
            f"--backend-config={backend},default-max-batch-size={raw}: not an integer"
        ) from None


def supports_batching(
    config: ModelConfig, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]
) -> bool:
    """True when every model tensor has a dynamic first dimension and the tensors the
    config already lists leave that dimension out of their dims."""
    listed = {t.name: t for t in [*config.input, *config.output]}
    for spec in [*inputs, *outputs]:
        if not spec.shape or spec.shape[0] != -1:
            return False
        tensor = listed.get(spec.name)
        if tensor is not None and len(_config_shape(tensor)) != len(spec.shape) - 1:
            return False
    return bool(inputs)


def complete_config(
    config: ModelConfig,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    default_max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> None:
    """Fill ``config`` in place as Triton's auto-complete does.

    ``max_batch_size`` 0 becomes ``default_max_batch_size`` when the model can batch
    (then, above 1 and with no scheduler configured, dynamic batching is enabled).
    Inputs (outputs) are added from the file when the config lists none; a batched
    rank-1 tensor gets dims ``[1]`` with ``reshape { shape: [] }``.
    """
    if config.max_batch_size == 0 and supports_batching(config, inputs, outputs):
        config.max_batch_size = default_max_batch_size
        scheduled = any(
            config.HasField(f)
            for f in ("dynamic_batching", "sequence_batching", "ensemble_scheduling")
        )
        if config.max_batch_size > 1 and not scheduled:
            config.dynamic_batching.SetInParent()
    batched = config.max_batch_size > 0
    for specs, tensors in ((inputs, config.input), (outputs, config.output)):
        if len(tensors):
            continue
        for spec in specs:
            tensor = tensors.add(name=spec.name)
            tensor.data_type = mc.DataType.Value(datatype_to_config(spec.datatype))
            dims = spec.shape[1:] if batched else spec.shape
            if batched and not dims:
                tensor.dims.append(1)
                tensor.reshape.SetInParent()
            else:
                tensor.dims.extend(dims)


def check_config(
    config: ModelConfig,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    model: str,
    file: str,
) -> None:
    """Raise ConfigError when the config's tensors disagree with the model file's.

    Every model input must be in the config (and the reverse) or be one the server
    provides (batch inputs, sequence control and implicit state inputs); config outputs
    must exist in the model; data types must be equal; each fixed model dimension must
    equal the config's (batch dimension included: it must be dynamic when
    ``max_batch_size > 0``).
    """
    where = f"model '{model}', file '{file}'"
    # Ragged inputs and scattered batch outputs are 1-D in the model; batch inputs,
    # sequence controls and implicit states are model inputs the server generates (not
    # in the config's inputs).
    flat = {t.name for t in config.input if t.allow_ragged_batch}
    flat.update(name for out in config.batch_output for name in out.target_name)
    generated = {name for entry in config.batch_input for name in entry.target_name}
    generated.update(control.name for control in config.sequence_batching.control_input)
    generated.update(state.input_name for state in config.sequence_batching.state)
    model_inputs = {s.name: s for s in inputs}
    model_outputs = {s.name: s for s in outputs}
    config_inputs = {t.name for t in config.input}
    for kind, tensors, specs in (
        ("input", config.input, model_inputs),
        ("output", config.output, model_outputs),
    ):
        for tensor in tensors:
            spec = specs.get(tensor.name)
            if spec is None:
                raise ConfigError(
                    f"{where}: config {kind} '{tensor.name}' is not an {kind} of the model; "
                    f"the model's {kind}s are {_names(specs)}"
                )
            if tensor.name in flat and len(spec.shape) == 1:
                continue
            _check_tensor(where, kind, tensor, spec, config.max_batch_size > 0)
    missing = [n for n in model_inputs if n not in config_inputs and n not in generated]
    if missing:
        raise ConfigError(
            f"{where}: the model's input(s) {_names(missing)} are missing from the config "
            f"(configuration expects {len(config_inputs | generated)} inputs, model provides "
            f"{len(model_inputs)})"
        )


def _check_tensor(where: str, kind: str, tensor: Any, spec: TensorSpec, batched: bool) -> None:
    config_type = mc.DataType.Name(tensor.data_type)
    if config_to_datatype(config_type) != spec.datatype:
        raise ConfigError(
            f"{where}: {kind} '{tensor.name}' has data type {config_type} in the config "
            f"but {datatype_to_config(spec.datatype)} in the model"
        )
    expected = ([-1] if batched else []) + list(_config_shape(tensor))
    if batched and (not spec.shape or spec.shape[0] != -1):
        raise ConfigError(
            f"{where}: {kind} '{tensor.name}' has shape {_shape(spec.shape)} in the model, whose "
            f"first dimension is not dynamic, so max_batch_size must be 0 (config shape "
            f"{_shape(expected)})"
        )
    same_rank = len(expected) == len(spec.shape)
    if not same_rank or any(m not in (-1, c) for m, c in zip(spec.shape, expected, strict=True)):
        batch_note = " (batch dimension included)" if batched else ""
        raise ConfigError(
            f"{where}: {kind} '{tensor.name}' has shape {_shape(spec.shape)} in the model but "
            f"{_shape(expected)} in the config{batch_note}"
        )


def _config_shape(tensor: Any) -> tuple[int, ...]:
    """The shape a tensor has inside the model: ``reshape`` when set, else ``dims``."""
    dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
    return tuple(int(d) for d in dims)


def _names(names: Any) -> str:
    return ", ".join(f"'{n}'" for n in names)


def _shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"
