"""How a TensorRT instance joins a batch and splits its outputs: the core's
:class:`~despina.inference.ragged.RaggedBatch` (Triton's ragged inputs, batch inputs and scattered
batch outputs) with the shape-tensor rule of a batching model on top.

A shape-tensor input of a batching model is joined as the batch's total size followed by
the first request's values (the batch's requests hold the same values, see
:func:`despina_backend_trt.shape_tensors.group_by_values`): the values TensorRT reads.
Ragged inputs are flat, batch inputs generated and other inputs joined along the first
dimension, all by the core's rules; the batch size counts each request's first
dimension (Triton's total batch size), ragged inputs included.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from despina import InferenceRequest, RaggedBatch, batch_sizes, mc, to_host


class EngineBatch(RaggedBatch):
    """The core's ragged rules plus the shape-tensor inputs ``shape_inputs``."""

    def __init__(self, config: mc.ModelConfig, shape_inputs: Sequence[str]) -> None:
        super().__init__(config)
        self.shape_inputs = tuple(shape_inputs)

    @classmethod
    def for_engine(cls, config: mc.ModelConfig, shape_inputs: Sequence[str]) -> EngineBatch | None:
        """The rules of a model with shape-tensor inputs (of a batching model) or ragged
        rules; None when neither applies (plain batching along the first dimension)."""
        if not shape_inputs and RaggedBatch.of(config) is None:
            return None
        return cls(config, shape_inputs)

    def join(self, requests: Sequence[InferenceRequest]) -> dict[str, np.ndarray]:
        joined = super().join(requests)
        if self.shape_inputs:
            total = sum(batch_sizes(requests))
            for name in self.shape_inputs:
                if name in joined:
                    values = to_host(requests[0].inputs[name]).reshape(-1)
                    joined[name] = np.concatenate([np.array([total], values.dtype), values])
        return joined
