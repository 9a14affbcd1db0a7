"""Request validation against a model's config, with Triton's error texts.

:func:`validate_request` checks requested outputs (each named once, as newer Triton
refuses a name given twice), inputs (names, data types, shapes, batch size) and the
outputs' names, and applies ``reshape`` to inputs (a view, no copy). It runs once per
request before the request is queued. Shape-tensor inputs (``is_shape_tensor``) of a batching
model have no batch dimension, as in Triton: a request gives the values, or (the form
Triton's documentation shows) its batch size and then the values; the batch size is
dropped, since the backend puts the batch's total first. They move after the other
inputs, so the first input gives the batch size.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np

from despina.errors import InvalidArgument
from despina.inference.classification import classification_count
from despina.inference.request import InferenceRequest, RequestedOutput
from despina.inference.tensors import config_to_datatype, datatype_of, find_dtype
from despina.repository.config import ModelConfig, mc


class DimsPattern:
    """Config dims (-1: any size) that a shape is checked against with C-level calls: the
    fixed dims are picked out of the shape by one ``itemgetter`` and compared at once."""

    __slots__ = ("dims", "fixed", "pick")

    def __init__(self, dims: Iterable[int]) -> None:
        self.dims = tuple(int(d) for d in dims)
        positions = [i for i, d in enumerate(self.dims) if d != -1]
        self.pick = operator.itemgetter(*positions) if positions else None
        self.fixed = self.pick(self.dims) if self.pick is not None else None

    def matches(self, shape: tuple[int, ...]) -> bool:
        if len(shape) != len(self.dims):
            # Triton treats a [1] tensor as matching a scalar-shaped config
            return not self.dims and shape == (1,)
        return self.pick is None or self.pick(shape) == self.fixed


class ModelSignature:
    """The config's inputs and outputs, indexed once per model load."""

    def __init__(self, name: str, config: ModelConfig) -> None:
        self.name = name
        self.max_batch_size = int(config.max_batch_size)
        self.inputs: dict[str, Any] = {i.name: i for i in config.input}
        self.outputs: dict[str, Any] = {o.name: o for o in config.output}
        self.required = [i.name for i in config.input if not i.optional]
        self.input_dtypes = {
            i.name: find_dtype(config_to_datatype(mc.DataType.Name(i.data_type)))
            for i in config.input
        }
        self.input_datatypes = {
            i.name: config_to_datatype(mc.DataType.Name(i.data_type)) for i in config.input
        }
        self.required_names = frozenset(self.required)
        #: Each input's dims (without the batch dimension) and, where set, its reshape.
        self.input_dims = {i.name: DimsPattern(i.dims) for i in config.input}
        self.input_reshapes = {
            i.name: DimsPattern(i.reshape.shape) for i in config.input if i.HasField("reshape")
        }
        self.ensemble = config.platform == "ensemble"
        #: Shape-tensor inputs of a batching model: checked without a batch dimension.
        self.shape_tensors = frozenset(
            i.name for i in config.input if i.is_shape_tensor and self.max_batch_size > 0
        )


def repeated_tensor(
    kind: Literal["input", "output"], name: str, request_id: str | None
) -> InvalidArgument:
    """Triton's error for a request naming the ``kind`` (input or output) ``name`` twice;
    the decoders raise it for inputs, which reach the core as a dict (the repeat lost)."""
    return InvalidArgument(
        f"[request id: {request_id or '<id_unknown>'}] {kind} '{name}' already exists in request"
    )


def validate_request(request: InferenceRequest, sig: ModelSignature) -> None:
    """Raise InvalidArgument (Triton's message) for a request the model cannot take."""
    model = sig.name
    outputs = request.outputs
    if outputs is not None and len(outputs) > 1:
        _check_unique_outputs(request, outputs)
    if not request.inputs.keys() <= sig.inputs.keys():
        name = next(n for n in request.inputs if n not in sig.inputs)
        raise InvalidArgument(f"unexpected inference input '{name}' for model '{model}'")
    if not sig.required_names <= request.inputs.keys():
        missing = [n for n in sig.required if n not in request.inputs]
        raise InvalidArgument(
            f"[request id: {request.id or '<id_unknown>'}] expected {len(sig.inputs)} inputs but got {len(request.inputs)} inputs for model "
            f"'{model}'. Got input(s) {_names(request.inputs)}, but missing required input(s) "
            f"{_names(missing)}. Please provide all required input(s)."
        )
    batch: int | None = None
    for name, array in request.inputs.items():
        expected = sig.input_dtypes[name]
        if array.dtype != expected and not (expected == np.object_ and array.dtype.kind in "SU"):
            raise InvalidArgument(
                f"[request id: {request.id or '<id_unknown>'}] inference input '{name}' "
                f"data-type is '{datatype_of(array)}', but model '{model}' expects "
                f"'{sig.input_datatypes[name]}'"
            )
        batch = _check_shape(request, sig, name, array, batch)
    _check_outputs(request, sig)
    _apply_reshapes(request, sig)
    if sig.shape_tensors:
        for name in sig.shape_tensors & request.inputs.keys():
            values = request.inputs.pop(name)
            if not sig.input_dims[name].matches(values.shape):  # led by its batch size
                values = values[1:]
            request.inputs[name] = values


def _check_shape(
    request: InferenceRequest, sig: ModelSignature, name: str, array: np.ndarray, batch: int | None
) -> int | None:
    shape = array.shape
    dims = sig.input_dims[name]
    if sig.max_batch_size > 0 and name not in sig.shape_tensors:
        if not shape:
            raise InvalidArgument(
                f"[request id: {request.id or '<id_unknown>'}] inference input '{name}' for "
                f"model '{sig.name}' must have a batch dimension"
            )
        if batch is not None and shape[0] != batch:
            raise InvalidArgument(
                f"[request id: {request.id or '<id_unknown>'}] input '{name}' batch size does "
                f"not match other inputs for '{sig.name}'"
            )
        batch = shape[0]
        if batch > sig.max_batch_size:
            raise InvalidArgument(
                f"[request id: {request.id or '<id_unknown>'}] inference request batch-size "
                f"must be <= {sig.max_batch_size} for '{sig.name}'"
            )
        shape = shape[1:]
    if name in sig.shape_tensors and len(shape) == 1 and dims.matches((shape[0] - 1,)):
        return batch  # Triton's documented form: the request's batch size, then the values
    if not dims.matches(shape):
        reshape = sig.input_reshapes.get(name)
        if reshape is not None and reshape.matches(shape):
            return batch
        expected = ([-1] if sig.max_batch_size > 0 else []) + list(dims.dims)
        raise InvalidArgument(
            f"[request id: {request.id or '<id_unknown>'}] unexpected shape for input '{name}' "
            f"for model '{sig.name}'. Expected {_shape(expected)}, got {_shape(array.shape)}. "
        )
    return batch


def _check_outputs(request: InferenceRequest, sig: ModelSignature) -> None:
    if request.outputs is None or (sig.ensemble and not sig.outputs):
        return
    if len(request.outputs) > max(len(sig.outputs), 1):
        raise InvalidArgument(
            f"request for model '{sig.name}' names {len(request.outputs)} outputs; "
            f"the model has {len(sig.outputs)}"
        )
    for output in request.outputs:
        if output.name not in sig.outputs:
            raise InvalidArgument(
                f"unexpected inference output '{output.name}' for model '{sig.name}'"
            )
        classification_count(output.name, output.parameters)


def _check_unique_outputs(request: InferenceRequest, outputs: list[RequestedOutput]) -> None:
    """Refuse a request naming an output twice, as newer Triton does (2.51 answers it)."""
    seen: set[str] = set()
    for output in outputs:
        if output.name in seen:
            raise repeated_tensor("output", output.name, request.id)
        seen.add(output.name)


def _apply_reshapes(request: InferenceRequest, sig: ModelSignature) -> None:
    if not sig.input_reshapes:
        return
    for name, array in request.inputs.items():
        reshape = sig.input_reshapes.get(name)
        if reshape is None:
            continue
        target = list(reshape.dims)
        lead = list(array.shape[:1]) if sig.max_batch_size > 0 else []
        if -1 not in target or target.count(-1) == 1:
            request.inputs[name] = array.reshape(lead + target)


def _names(names: Any) -> str:
    return "[" + ",".join(f"'{n}'" for n in names) + "]"


def _shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"
