"""``pb_utils.Tensor``: a named numpy array (CPU) or, as :class:`DeviceTensor`, a named
cupy array (GPU: made by ``from_dlpack`` of a CUDA tensor, or given by the server), with
DLPack interchange."""

from __future__ import annotations

from typing import Any

import numpy as np

from despina_backend_python.pb import bf16_dlpack, device
from despina_backend_python.pb.errors import TritonModelException, require
from despina_backend_python.pb.types import bf16, is_bf16, wire_datatype


class _Capsule:
    """Adapts a bare DLPack capsule to the ``__dlpack__`` protocol numpy expects."""

    def __init__(self, capsule: Any) -> None:
        self.capsule = capsule

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU


class Tensor:
    """A tensor of an inference request or response: ``Tensor(name, numpy_array)``."""

    __slots__ = ("_array", "_name")

    def __init__(self, name: str, array: Any) -> None:
        if type(name) is not str:  # the usual argument passes without a call
            require(name, str, "Tensor(): name")
        if not isinstance(array, np.ndarray):
            raise TypeError(f"Tensor '{name}' expects a numpy array, got {type(array).__name__}")
        wire_datatype(array)  # refuses unsupported dtypes up front
        self._name = str(name)
        self._array = array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The data as a numpy array (BYTES: an object array of ``bytes``); raises
        TritonModelException for BF16, as Triton (use :meth:`to_dlpack`)."""
        if is_bf16(self._array.dtype):
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and "
                "from_dlpack() instead."
            )
        return self._array

    def shape(self) -> list[int]:
        return [int(d) for d in self._array.shape]

    def triton_dtype(self) -> str:
        """The wire datatype ("FP32", "BYTES", ...)."""
        return wire_datatype(self._array)

    def is_cpu(self) -> bool:
        return True

    def __dlpack__(self, stream: Any = None) -> Any:
        """DLPack protocol: :meth:`to_dlpack` (so ``torch.from_dlpack(tensor)`` works)."""
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (device.DLPACK_CPU, 0)

    def to_dlpack(self) -> Any:
        """A DLPack capsule sharing this tensor's memory, or a copy's where it is
        read-only (a request's tensor in-process); not for BYTES tensors."""
        if self._array.dtype == np.object_:
            raise TypeError("DLPack does not support BYTES tensors")
        if is_bf16(self._array.dtype):
            return bf16_dlpack.to_dlpack(self._array)
        if not self._array.flags.writeable:  # DLPack 0.x cannot mark memory read-only
            return self._array.copy().__dlpack__()
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, dlpack: Any) -> Tensor:
        """A Tensor sharing the memory of a DLPack capsule or ``__dlpack__`` object
        (C-contiguous); one in CUDA memory stays there (a :class:`DeviceTensor`)."""
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if dlpack is None:
            raise TritonModelException("from_dlpack() expects a DLPack capsule, got None")
        gpu = device.cuda_device(dlpack)
        if gpu is not None:
            return DeviceTensor._trusted(name, device.from_dlpack(dlpack, gpu))
        source = dlpack if hasattr(dlpack, "__dlpack__") else _Capsule(dlpack)
        try:
            array = np.from_dlpack(source)
        except (BufferError, RuntimeError, TypeError):  # numpy has no BF16 DLPack type
            dtype = bf16()
            bf16_array = None if dtype is None else bf16_dlpack.from_dlpack(dlpack, dtype)
            if bf16_array is None:
                raise
            array = bf16_array
        if not array.flags.c_contiguous:
            raise ValueError(f"Tensor '{name}': DLPack tensor must be C-contiguous")
        return Tensor(name, array)

    @classmethod
    def _trusted(cls, name: str, array: np.ndarray) -> Tensor:
        """A tensor over an array the server built (a supported dtype): no checks."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        return tensor

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"


class DeviceTensor(Tensor):
    """A tensor in GPU memory: ``_array`` is a C-contiguous cupy array. ``as_numpy``
    refuses (Triton's text); DLPack shares the device memory."""

    __slots__ = ()

    def as_numpy(self) -> np.ndarray:
        raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")

    def is_cpu(self) -> bool:
        return False

    def to_dlpack(self) -> Any:
        """A DLPack capsule of the device memory (it keeps the tensor's memory alive)."""
        return self._array.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (device.DLPACK_CUDA, device.device_id(self._array))

    def __repr__(self) -> str:
        where = device.device_id(self._array)
        return (
            f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype}, gpu={where})"
        )


def any_tensor(name: str, array: Any) -> Tensor:
    """A tensor over ``array`` the server or the channel built: a numpy array (Tensor) or
    a cupy array (DeviceTensor)."""
    if isinstance(array, np.ndarray):
        return Tensor._trusted(name, array)
    return DeviceTensor._trusted(name, array)
