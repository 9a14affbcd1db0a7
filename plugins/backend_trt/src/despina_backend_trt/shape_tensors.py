"""Shape tensors (``is_shape_inference_io``) as Triton's tensorrt backend serves them.

A shape-tensor input lives in host memory and gives TensorRT *values* (the shapes the
engine computes with), not data. For a batching model a request's shape tensor carries no
batch dimension: it holds the values past the first, and the batch's total size is put
before them when the batch is joined (Triton's ShapeTensor;
:class:`~despina_backend_trt.batching.EngineBatch`). A batch therefore runs with one set
of values: the dynamic batcher never batches requests whose shape tensors differ, and
:func:`group_by_values` splits any batch that another scheduler formed. A shape-tensor
output (INT64, host memory) gives each request its values past the first, one row per
batch item.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from despina import InferenceRequest, Internal, InvalidArgument

from despina_backend_trt.engine_info import Bounds


def group_by_values(
    requests: Sequence[InferenceRequest], shape_inputs: Sequence[str]
) -> list[list[InferenceRequest]]:
    """The requests in groups whose shape tensors hold the same values, in first-seen order."""
    groups: dict[tuple[bytes, ...], list[InferenceRequest]] = {}
    for request in requests:
        key = tuple(
            np.ascontiguousarray(request.inputs[n]).tobytes() if n in request.inputs else b""
            for n in shape_inputs
        )
        groups.setdefault(key, []).append(request)
    return list(groups.values())


def input_values(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The values TensorRT reads for a joined shape-tensor input (led by the batch size
    for a batching model, :class:`~despina_backend_trt.batching.EngineBatch`), as
    C-contiguous host memory of ``dtype``."""
    return np.ascontiguousarray(array.reshape(-1), dtype)


def check_values(name: str, values: np.ndarray, bounds: Bounds) -> None:
    """Raise InvalidArgument (Triton's text) when a value lies outside the profile's range."""
    low, _, high = bounds
    for index, (value, lo, hi) in enumerate(zip(values.tolist(), low, high, strict=True)):
        if not lo <= value <= hi:
            raise InvalidArgument(
                f"shape tensor '{name}': The shape value at index {index} is expected to be "
                f"in range from {lo} to {hi}, Got: {value}"
            )


def output_values(name: str, values: np.ndarray, batch: int | None) -> np.ndarray:
    """What a shape-tensor output answers: its values, or for a batching model the values
    past the first (which must be the batch size) repeated once per batch item."""
    if batch is None:
        return values.copy()
    if not len(values) or int(values[0]) != batch:
        raise Internal(f"failed to retrieve the output shape values from binding '{name}'")
    return np.tile(values[1:], (batch, 1))
