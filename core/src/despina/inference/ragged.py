"""Ragged batches for backends that run a batch as one framework call (Triton's rules).

Inputs with ``allow_ragged_batch`` are joined flat: every request's elements one after
the other in a 1-D tensor, whatever their shapes. The config's ``batch_input`` entries are
generated for the batch (element counts, accumulated counts, item shapes of a source
input), and ``batch_output`` entries of kind BATCH_SCATTER_WITH_INPUT_SHAPE are split back
per request by the shape the source input had in that request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from despina.inference.batching import batch_sizes, split_outputs
from despina.inference.request import InferenceRequest
from despina.inference.tensors import config_to_datatype, dtype_of
from despina.memory.device_arrays import concatenate
from despina.triton_proto import model_config as mc

Kind = mc.BatchInput.Kind


class RaggedBatch:
    """How one model's batches are joined and split when its config asks for ragged
    inputs, batch inputs or batch outputs (:meth:`of` returns None otherwise)."""

    def __init__(self, config: mc.ModelConfig) -> None:
        self.ragged = {i.name for i in config.input if i.allow_ragged_batch}
        self.batch_inputs = list(config.batch_input)
        #: Scattered output name -> the input whose per-request shapes split it.
        self.scatter = {
            name: out.source_input[0]
            for out in config.batch_output
            if out.kind == mc.BatchOutput.BATCH_SCATTER_WITH_INPUT_SHAPE and out.source_input
            for name in out.target_name
        }

    @classmethod
    def of(cls, config: mc.ModelConfig) -> RaggedBatch | None:
        """The model's ragged rules, or None when it has none (plain batching)."""
        batch = cls(config)
        return batch if batch.ragged or batch.batch_inputs or batch.scatter else None

    def join(self, requests: Sequence[InferenceRequest]) -> dict[str, np.ndarray]:
        """The framework's inputs: ragged ones flat, others along axis 0, plus the batch
        inputs (1-D, one value per request unless the kind says otherwise)."""
        joined: dict[str, np.ndarray] = {}
        for name in requests[0].inputs:
            parts = [r.inputs[name] for r in requests]
            if name in self.ragged:
                joined[name] = concatenate([p.reshape(-1) for p in parts])  # type: ignore[assignment]
            else:
                joined[name] = parts[0] if len(parts) == 1 else concatenate(parts)  # type: ignore[assignment]
        for entry in self.batch_inputs:
            value = batch_input(entry, requests)
            for target in entry.target_name:
                joined[target] = value
        return joined

    def split(
        self, outputs: Mapping[str, np.ndarray], requests: Sequence[InferenceRequest]
    ) -> list[dict[str, np.ndarray]]:
        """One dict of outputs per request: scattered outputs by their source input's
        shapes, the others along axis 0 by batch size (views, no copy)."""
        plain = {k: v for k, v in outputs.items() if k not in self.scatter}
        parts = split_outputs(plain, batch_sizes(requests))
        for name, source in self.scatter.items():
            if name not in outputs:
                continue
            array, start = outputs[name], 0
            inner = array.shape[1:]
            for part, request in zip(parts, requests, strict=True):
                shape = request.inputs[source].shape
                count = int(np.prod(shape))
                part[name] = array[start : start + count].reshape(*shape, *inner)
                start += count
        return parts


def batch_input(entry: mc.BatchInput, requests: Sequence[InferenceRequest]) -> np.ndarray:
    """The value of one ``batch_input`` entry for ``requests`` (Triton's semantics)."""
    dtype = dtype_of(config_to_datatype(mc.DataType.Name(entry.data_type)))
    shapes = [r.inputs[entry.source_input[0]].shape for r in requests]
    counts = np.array([int(np.prod(s)) for s in shapes], np.int64)
    kind = entry.kind
    if kind == Kind.BATCH_ELEMENT_COUNT:
        return counts.astype(dtype)
    if kind == Kind.BATCH_ACCUMULATED_ELEMENT_COUNT:
        return np.cumsum(counts).astype(dtype)
    if kind == Kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO:
        return np.concatenate([[0], np.cumsum(counts)]).astype(dtype)
    if kind == Kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE:
        return np.zeros(int(counts.max()), dtype)  # only its shape carries information
    # BATCH_ITEM_SHAPE(_FLATTEN): each batch item's shape (batch dimension excluded).
    items = np.array([s[1:] for s in shapes for _ in range(s[0] if s else 1)], dtype)
    return items.reshape(-1) if kind == Kind.BATCH_ITEM_SHAPE_FLATTEN else items
