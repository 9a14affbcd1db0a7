"""BF16 tensors through onnxruntime's I/O binding: its numpy API has no bfloat16 type, so
BF16 inputs cross as their 16-bit patterns and BF16 outputs are read from ORT's memory.
(Binding cannot take string tensors, so a model may not mix BF16 and string I/O.)"""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np
from despina import dtype_of

#: ``onnx.TensorProto.BFLOAT16``.
ONNX_BFLOAT16 = 16


def run_bound(
    session: Any,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    bf16_inputs: set[str],
    run_opts: Any,
) -> list[np.ndarray]:
    """``session.run`` through an I/O binding; returns ``outputs`` in order."""
    import onnxruntime as ort

    binding = session.io_binding()
    for name, array in inputs.items():
        if name in bf16_inputs:
            bits = np.ascontiguousarray(array).view(np.uint16)
            value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, ONNX_BFLOAT16)
            binding.bind_ortvalue_input(name, value)
        else:
            binding.bind_cpu_input(name, np.ascontiguousarray(array))
    for name in outputs:
        binding.bind_output(name, "cpu")
    session.run_with_iobinding(binding, run_opts)
    return [_to_numpy(value) for value in binding.get_outputs()]


def _to_numpy(value: Any) -> np.ndarray:
    if value.data_type() != "tensor(bfloat16)":
        return np.asarray(value.numpy())
    shape = tuple(value.shape())
    raw = (ctypes.c_uint16 * math.prod(shape)).from_address(value.data_ptr())
    bits = np.frombuffer(raw, np.uint16).copy()
    out: np.ndarray = bits.view(dtype_of("BF16")).reshape(shape)
    return out
