"""An ensemble's steps as a data-flow graph, checked the way Triton checks it.

:func:`build_graph` checks what the ensemble's own config says past
:func:`despina.repository.validation.validate_model` (every step names a model
and maps inputs and outputs, every output is written, no tensor is unused) and
:func:`check_composing` what needs the composing models' configs (mapped names exist,
every required input is mapped, batch sizes fit, no step mixes decoupled origins). Errors
are ConfigError with Triton's texts.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from despina.errors import ConfigError
from despina.repository.config import ModelConfig, mc


@dataclass(frozen=True)
class Step:
    """One step: the model it runs and how its tensors map to ensemble tensors."""

    index: int
    model_name: str
    #: "" for the version the model's policy serves (``model_version: -1``).
    model_version: str
    #: model input name -> ensemble tensor name
    inputs: dict[str, str]
    #: model output name -> ensemble tensor name
    outputs: dict[str, str]


@dataclass
class EnsembleGraph:
    """The steps of an ensemble, and its input and output tensor names."""

    name: str
    steps: list[Step]
    inputs: list[str]
    outputs: list[str]
    #: The ensemble inputs its config marks ``optional``.
    optional_inputs: frozenset[str] = frozenset()
    #: Each ensemble output's shape in the config (its ``reshape`` where given, else ``dims``).
    output_dims: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: Steps whose model is decoupled (filled by :func:`check_composing`).
    decoupled: set[int] = field(default_factory=set)
    #: Steps whose model batches (filled by :func:`check_composing`).
    batching: set[int] = field(default_factory=set)
    #: (step index, model input name) -> the input's config ``dims`` (filled by
    #: :func:`check_composing`).
    input_dims: dict[tuple[int, str], tuple[int, ...]] = field(default_factory=dict)

    @property
    def models(self) -> list[str]:
        """The composing model names, each once, in step order."""
        return list(dict.fromkeys(step.model_name for step in self.steps))


def needed_steps(graph: EnsembleGraph, wanted: Collection[str]) -> list[Step]:
    """The steps that feed the ensemble outputs ``wanted``, in step order: as Triton,
    a request asking for a subset of the outputs runs no step whose outputs reach none
    of them."""
    needed = set(wanted)
    steps: set[int] = set()
    grown = True
    while grown:
        grown = False
        for step in graph.steps:
            if step.index not in steps and needed.intersection(step.outputs.values()):
                steps.add(step.index)
                needed.update(step.inputs.values())
                grown = True
    return [step for step in graph.steps if step.index in steps]


def build_graph(config: ModelConfig) -> EnsembleGraph:
    """The graph of an ensemble config that passed
    :func:`despina.repository.validation.validate_model` (ensemble scheduling set, with
    steps); ConfigError when its steps do not make a valid graph."""
    name = config.name
    steps: list[Step] = []
    written: set[str] = set()
    for index, step in enumerate(config.ensemble_scheduling.step):
        where = f"in step {index} of ensemble '{name}'"
        for what, present in (
            ("model_name", step.model_name),
            ("input_map", step.input_map),
            ("output_map", step.output_map),
        ):
            if not present:
                raise ConfigError(f"must specify '{what}' {where}")
        for tensor in step.output_map.values():
            if tensor in written:
                raise ConfigError(
                    f"ensemble tensor '{tensor}' can appear in an output map only once for "
                    f"ensemble '{name}' step {index}"
                )
            written.add(tensor)
        version = str(step.model_version) if step.model_version >= 0 else ""
        steps.append(
            Step(index, step.model_name, version, dict(step.input_map), dict(step.output_map))
        )
    graph = EnsembleGraph(
        name,
        steps,
        [i.name for i in config.input],
        [o.name for o in config.output],
        frozenset(i.name for i in config.input if i.optional),
        {
            o.name: tuple(o.reshape.shape if o.HasField("reshape") else o.dims)
            for o in config.output
        },
    )
    _check_flow(graph)
    return graph


def _check_flow(graph: EnsembleGraph) -> None:
    """Every ensemble input is used, every output is written from the inputs, and every
    intermediate tensor is both written and read."""
    name = graph.name
    consumed = {t for step in graph.steps for t in step.inputs.values()}
    produced = {t for step in graph.steps for t in step.outputs.values()}
    for tensor in graph.inputs:
        if tensor not in consumed | produced:
            raise ConfigError(f"ensemble input '{tensor}' for ensemble {name}' is not used")
    ready = set(graph.inputs)
    pending = list(graph.steps)
    progressed = True
    while progressed:
        progressed = False
        for step in list(pending):
            if all(t in ready for t in step.inputs.values()):
                ready |= set(step.outputs.values())
                pending.remove(step)
                progressed = True
    for tensor in graph.outputs:
        if tensor not in consumed | produced:
            raise ConfigError(f"ensemble output '{tensor}' for ensemble {name}' is not used")
        if tensor not in ready:
            message = f"output '{tensor}' for ensemble '{name}' is not written"
            source = _unconnected_source(graph, tensor, ready)
            if source != tensor:
                message += f": at least one of its depending tensors, '{source}', is not connected"
            raise ConfigError(message)
    for tensor in sorted((consumed | produced) - set(graph.outputs)):
        if tensor not in ready or tensor not in consumed:
            raise ConfigError(f"ensemble tensor '{tensor}' is unused in ensemble '{name}'")


def _unconnected_source(graph: EnsembleGraph, tensor: str, ready: set[str]) -> str:
    """Walk back from a not-ready tensor to the first not-ready tensor with no writer."""
    writers = {t: step for step in graph.steps for t in step.outputs.values()}
    seen: set[str] = set()
    current = tensor
    while current in writers and current not in seen:
        seen.add(current)
        missing = [t for t in writers[current].inputs.values() if t not in ready and t not in seen]
        if not missing:
            break
        current = missing[0]
    return current


def check_composing(
    graph: EnsembleGraph, config: ModelConfig, composing: Mapping[str, ModelConfig]
) -> None:
    """Check the steps against their models' configs, in Triton's order: batch sizes, the
    mapped names, and every ensemble tensor's data type and shape the same wherever it is
    used; record the decoupled steps."""
    name = graph.name
    tensors = _ensemble_tensors(config)
    for step in graph.steps:
        model = composing[step.model_name]
        if 0 < model.max_batch_size < config.max_batch_size:
            raise ConfigError(
                f"ensemble {name} allows maximum batch size {config.max_batch_size}, but it "
                f"contains model {step.model_name} which only allows maximum batch size to "
                f"be {model.max_batch_size}"
            )
        inputs = {i.name: i for i in model.input}
        for model_input, tensor in step.inputs.items():
            if model_input not in inputs:
                raise ConfigError(
                    f"in ensemble {name}, ensemble tensor {tensor} is mapping to non-existing "
                    f"input {model_input} in model {step.model_name}"
                )
        for model_input in model.input:
            if model_input.name in step.inputs:
                graph.input_dims[step.index, model_input.name] = tuple(model_input.dims)
                tensor = step.inputs[model_input.name]
                _agree(tensors, name, tensor, _Tensor.of(step.model_name, model, model_input))
            elif not model_input.optional:
                raise ConfigError(
                    f"in ensemble {name}, input {model_input.name} in model {step.model_name} "
                    "is not mapped to any ensemble tensors"
                )
        outputs = {o.name: o for o in model.output}
        for model_output, tensor in step.outputs.items():
            if model_output not in outputs:
                raise ConfigError(
                    f"in ensemble {name}, ensemble tensor {tensor} is mapped from non-existing "
                    f"output {model_output} in model {step.model_name}"
                )
        for model_output, tensor in step.outputs.items():
            seen = _Tensor.of(step.model_name, model, outputs[model_output])
            _agree(tensors, name, tensor, seen)
        if model.model_transaction_policy.decoupled:
            graph.decoupled.add(step.index)
        if model.max_batch_size > 0:
            graph.batching.add(step.index)
    _check_decoupled_origins(graph)


@dataclass(frozen=True)
class _Tensor:
    """An ensemble tensor as one model sees it (Triton's ``TensorNode``)."""

    model: str
    data_type: int
    dims: tuple[int, ...]
    #: ``dims`` with the batch dimension (-1) in front where the model batches.
    full_dims: tuple[int, ...]

    @classmethod
    def of(cls, model: str, config: ModelConfig, tensor: Any, reshaped: bool = False) -> _Tensor:
        dims = tuple(tensor.reshape.shape if reshaped else tensor.dims)
        full = (-1, *dims) if config.max_batch_size > 0 else dims
        return cls(model, tensor.data_type, dims, full)


def _ensemble_tensors(config: ModelConfig) -> dict[str, _Tensor]:
    """The ensemble's inputs and outputs (their reshape where given), as it sees them."""
    return {
        tensor.name: _Tensor.of(config.name, config, tensor, tensor.HasField("reshape"))
        for tensor in (*config.input, *config.output)
    }


def _agree(tensors: dict[str, _Tensor], ensemble: str, name: str, new: _Tensor) -> None:
    """Record ensemble tensor ``name`` as a step's model sees it; ConfigError (Triton's
    text) when it was seen before with another data type, or another shape (but where
    one is -1, or where they agree once the batch dimension is counted)."""
    seen = tensors.get(name)
    if seen is None:
        tensors[name] = new
        return
    where = f"in ensemble {ensemble}, ensemble tensor {name}: "
    if seen.data_type != new.data_type:
        raise ConfigError(
            f"{where}inconsistent data type: {mc.DataType.Name(seen.data_type)} is inferred "
            f"from model {seen.model} while {mc.DataType.Name(new.data_type)} is inferred "
            f"from model {new.model}"
        )
    if not same_shape(seen.dims, new.dims) and not same_shape(seen.full_dims, new.full_dims):
        raise ConfigError(
            f"{where}inconsistent shape: {_dims_text(seen.full_dims)} is inferred from model "
            f"{seen.model} while {_dims_text(new.full_dims)} is inferred from model {new.model}"
        )


def same_shape(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Triton's ``CompareDimsWithWildcard``."""
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _dims_text(dims: tuple[int, ...]) -> str:
    return f"[{','.join(map(str, dims))}]"


def _check_decoupled_origins(graph: EnsembleGraph) -> None:
    """A step's inputs must all come from the same decoupled step (or none), and so must
    the ensemble's outputs (Triton checks them as the inputs of the response)."""
    origin: dict[str, int] = dict.fromkeys(graph.inputs, -1)
    pending = list(graph.steps)
    while pending:
        step = next((s for s in pending if all(t in origin for t in s.inputs.values())), None)
        if step is None:
            return
        pending.remove(step)
        origins = {origin[t] for t in step.inputs.values()}
        if len(origins) > 1:
            raise ConfigError(
                f"in ensemble {graph.name}, step of model '{step.model_name}' receives inputs "
                "originated from different decoupled models"
            )
        label = step.index if step.index in graph.decoupled else origins.pop()
        for tensor in step.outputs.values():
            origin[tensor] = label
    if len({origin.get(t) for t in graph.outputs}) > 1:  # the outputs meet in the response
        raise ConfigError(
            f"in ensemble {graph.name}, step of model '{graph.name}' receives inputs "
            "originated from different decoupled models"
        )
