"""Helpers for backends that run a batch of requests as one framework call.

:func:`concat_inputs` joins each input along the batch dimension (one copy, the only
one); :func:`split_outputs` slices batched outputs back per request (views, no copy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from despina.inference.request import InferenceRequest
from despina.memory.device_arrays import concatenate


def batch_sizes(requests: Sequence[InferenceRequest]) -> list[int]:
    """Each request's first-dimension size (1 for inputs without dimensions)."""
    sizes = []
    for request in requests:
        first = next(iter(request.inputs.values()), None)
        sizes.append(int(first.shape[0]) if first is not None and first.ndim else 1)
    return sizes


def concat_inputs(requests: Sequence[InferenceRequest]) -> dict[str, np.ndarray]:
    """Inputs of all requests joined along axis 0; a single request's arrays as they are."""
    if len(requests) == 1:
        return dict(requests[0].inputs)
    names = requests[0].inputs.keys()
    joined = {name: concatenate([r.inputs[name] for r in requests]) for name in names}
    return joined  # type: ignore[return-value] # DeviceArrays only for device_inputs


def split_outputs(
    outputs: Mapping[str, np.ndarray], sizes: Sequence[int]
) -> list[dict[str, np.ndarray]]:
    """Slice batched outputs into one dict per request (views of ``outputs``)."""
    if len(sizes) == 1:
        return [dict(outputs)]
    parts: list[dict[str, np.ndarray]] = [{} for _ in sizes]
    for name, array in outputs.items():
        start = 0
        for index, size in enumerate(sizes):
            parts[index][name] = array[start : start + size]
            start += size
    return parts


def select_outputs(
    outputs: Mapping[str, np.ndarray], request: InferenceRequest
) -> dict[str, np.ndarray]:
    """Only the outputs the request asked for (all when it named none)."""
    wanted = request.requested_output_names
    if wanted is None:
        return dict(outputs)
    return {name: outputs[name] for name in wanted if name in outputs}
