"""numpy or DeviceArray <-> torch without copies where the memory is already where it must
be, Triton datatypes <-> torch dtypes.

BYTES tensors travel as Python lists of ``str`` (TorchScript's ``List[str]``), so they
must be 1-D, as in Triton. BF16 crosses as its 16-bit pattern (numpy's ``ml_dtypes``, imported when one does).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from despina import DeviceArray, Internal, InvalidArgument, dtype_of

#: Triton datatype -> name of the torch dtype.
TORCH_DTYPES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "BF16": "bfloat16",
}
_DATATYPES = {v: k for k, v in TORCH_DTYPES.items()}


def datatype_of_torch(dtype: Any) -> str:
    """Triton datatype of a torch dtype; Internal for one Triton has no name for."""
    name = str(dtype).removeprefix("torch.")
    if name not in _DATATYPES:
        raise Internal(f"torch dtype {name} has no Triton data type")
    return _DATATYPES[name]


def to_torch(array: np.ndarray | DeviceArray, datatype: str, device: str | None, name: str) -> Any:
    """An input as torch takes it: a tensor sharing ``array``'s memory (a host array on
    CPU, a DeviceArray on its GPU), copied to ``device`` where it is elsewhere; a list of
    ``str`` for BYTES."""
    import torch
    import torch.utils.dlpack

    if datatype == "BYTES":
        assert isinstance(array, np.ndarray)  # no device holds BYTES
        if array.ndim != 1:
            raise InvalidArgument(
                f"input '{name}': PyTorch takes BYTES only as a 1-D list of strings, got shape "
                f"{list(array.shape)}"
            )
        try:
            return [x.decode() if isinstance(x, bytes) else str(x) for x in array]
        except UnicodeDecodeError:
            raise InvalidArgument(f"input '{name}': PyTorch strings must be UTF-8 text") from None
    # DLPack shares a read-only array's memory without the "not writable" warning that
    # torch.from_numpy gives (inference never writes its inputs).
    if datatype == "BF16" and isinstance(array, np.ndarray):
        tensor = torch.utils.dlpack.from_dlpack(array.view(np.int16)).view(torch.bfloat16)
    else:
        tensor = torch.utils.dlpack.from_dlpack(array)
    return tensor if device in (None, "cpu") else tensor.to(device)


def from_torch(
    value: Any, datatype: str, name: str, on_device: bool = False
) -> np.ndarray | DeviceArray:
    """An output as numpy (a view of the CPU tensor), or, with ``on_device``, a GPU
    tensor as a DeviceArray sharing its memory (where cupy is installed and has the
    dtype: not BF16); Internal when its type is not the config's ``datatype``."""
    import torch

    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        if datatype != "BYTES":
            raise Internal(f"output '{name}' is a list of strings but the config says {datatype}")
        out = np.empty(len(value), dtype=np.object_)
        out[:] = [v.encode() for v in value]
        return out
    if not isinstance(value, torch.Tensor):
        raise Internal(f"output '{name}' is a {type(value).__name__}, not a tensor")
    got = datatype_of_torch(value.dtype)
    if got != datatype:
        raise Internal(f"output '{name}' has data type {got} but the config says {datatype}")
    tensor = value.detach()
    if tensor.device.type != "cpu":
        if on_device and datatype != "BF16":
            try:
                return DeviceArray.from_dlpack(tensor)
            except ImportError:  # no cupy: the host copy below
                pass
        tensor = tensor.cpu()
    if datatype == "BF16":
        tensor = tensor.view(torch.int16)
    host: np.ndarray = tensor.numpy()
    return host.view(dtype_of("BF16")) if datatype == "BF16" else host
