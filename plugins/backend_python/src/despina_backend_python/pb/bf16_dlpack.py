"""BF16 tensors through DLPack, which numpy cannot do (it has no bfloat16 DLPack code).

A BF16 tensor's data is an ``ml_dtypes.bfloat16`` array; DLPack export and import go
through torch, imported here only when a BF16 tensor crosses (never by ``pb_utils``
itself), as Triton's own BF16 example uses torch for the same.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from despina_backend_python.pb.errors import TritonModelException


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise TritonModelException(
            "BF16 tensors cross DLPack through torch, which is not installed in this environment"
        ) from None
    return torch


def to_dlpack(array: np.ndarray) -> Any:
    """A DLPack capsule (kDLBfloat, 16 bits) sharing ``array``'s memory, or a copy's when
    it is read-only (a request's tensor): torch shares only writable memory."""
    torch = _torch()
    bits = np.ascontiguousarray(array).view(np.int16)
    if not bits.flags.writeable:
        bits = bits.copy()
    return torch.utils.dlpack.to_dlpack(torch.from_numpy(bits).view(torch.bfloat16))


def from_dlpack(source: Any, bf16: Any) -> np.ndarray | None:
    """The data of a DLPack capsule or ``__dlpack__`` object as a ``bf16`` numpy array
    (sharing memory), or None when it is not a CPU BF16 tensor."""
    torch = _torch()
    tensor = torch.utils.dlpack.from_dlpack(source)
    if tensor.dtype != torch.bfloat16 or tensor.device.type != "cpu":
        return None
    result: np.ndarray = tensor.view(torch.int16).numpy().view(bf16)
    return result
