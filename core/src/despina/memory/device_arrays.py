"""Tensors in GPU memory (:class:`DeviceArray`), and the places they become host arrays.

Requests and responses hold numpy arrays, or DeviceArrays where a tensor is on a GPU: an
output a GPU backend kept on its device, a Python model's DLPack tensor from torch or
cupy, a CUDA shared-memory input. A DeviceArray wraps a cupy array (``pip install
'despina[cuda]'``); nothing here imports cupy until a DeviceArray is made, so importing
Despina or a plugin loads no CUDA library.

A DeviceArray stays on its device while device consumers pass it along (ensemble steps,
BLS callers, backends whose instances set :attr:`~despina.plugin.backend.ModelInstance.device_inputs`,
CUDA shared-memory outputs) and is copied to host memory once, by :func:`to_host`, where a
host consumer reads it: the wire encoders (through
:meth:`~despina.inference.request.InferenceRequest.selected_outputs`), classification, the response
cache, trace tensor dumps, and the inputs of every other backend (:func:`host_inputs`, at
submission). ``InferenceRequest.inputs`` and ``InferenceResponse.outputs`` stay annotated as
numpy arrays: code that has not opted in never sees anything else.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

#: DLPack's device type of CUDA memory (kDLCUDA); kDLCPU is 1.
DLPACK_CUDA = 2
#: How to get cupy, in the errors that say it is missing.
CUPY_HINT = "pip install 'despina[cuda]'"
#: Whether this process made a DeviceArray yet: until it does, every tensor is a host
#: array and :func:`holds_device_arrays` answers without looking (the host path's one test).
_made = False


class DeviceArray:
    """A C-contiguous tensor on one CUDA device: a cupy array with the numpy-like surface the
    core reads (``shape``, ``dtype``, ``nbytes``), DLPack and the CUDA array interface for
    frameworks (``torch.from_dlpack``, ``cupy.asarray``), and :meth:`to_host`.

    Converting it to numpy implicitly (``np.asarray``) raises TypeError: a host copy is
    always explicit. Its data is ready when it is handed over: whoever makes one from
    device work (a backend's output) waits for that work first, so a consumer may read it
    on any stream."""

    __slots__ = ("data",)

    def __init__(self, data: Any) -> None:
        """``data``: a C-contiguous cupy array (see :meth:`from_dlpack` for anything else)."""
        global _made
        _made = True
        self.data = data

    @classmethod
    def from_dlpack(cls, source: Any) -> DeviceArray:
        """The tensor of ``source`` (an object with ``__dlpack__`` on a CUDA device, or a
        DLPack capsule), sharing its memory where it is C-contiguous, else a contiguous copy
        on the same device. ImportError without cupy."""
        import cupy

        array = cupy.from_dlpack(source)
        if not array.flags.c_contiguous:
            with array.device:
                array = cupy.ascontiguousarray(array)
        return cls(array)

    @classmethod
    def from_host(cls, array: np.ndarray, device_id: int) -> DeviceArray:
        """A copy of host ``array`` on device ``device_id`` (returns once it is there)."""
        import cupy

        with cupy.cuda.Device(device_id):
            return cls(cupy.ascontiguousarray(cupy.asarray(array)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.data.shape)

    @property
    def dtype(self) -> np.dtype[Any]:
        dtype: np.dtype[Any] = np.dtype(self.data.dtype)
        return dtype

    @property
    def ndim(self) -> int:
        return int(self.data.ndim)

    @property
    def size(self) -> int:
        return int(self.data.size)

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def device_id(self) -> int:
        return int(self.data.device.id)

    @property
    def pointer(self) -> int:
        """The device address of the first element."""
        return int(self.data.data.ptr)

    def to_host(self) -> np.ndarray:
        """A host copy (waits for the copy, and so for the work queued before it)."""
        with self.data.device:
            host: np.ndarray = self.data.get()
        return host

    def reshape(self, *shape: Any) -> DeviceArray:
        return DeviceArray(self.data.reshape(*shape))

    def __getitem__(self, key: Any) -> DeviceArray:
        return DeviceArray(self.data[key])

    def __len__(self) -> int:
        return len(self.data)

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self.data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        device: tuple[int, int] = self.data.__dlpack_device__()
        return device

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        interface: dict[str, Any] = self.data.__cuda_array_interface__
        return interface

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            "a DeviceArray is in GPU memory: copy it with to_host() (no implicit conversion)"
        )

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype}, device={self.device_id})"


def is_on_device(source: Any) -> bool:
    """Whether ``source`` (anything with ``__dlpack_device__``) is in CUDA memory."""
    if isinstance(source, DeviceArray):
        return True
    where = getattr(source, "__dlpack_device__", None)
    return where is not None and int(where()[0]) == DLPACK_CUDA


def to_host(array: np.ndarray | DeviceArray) -> np.ndarray:
    """``array`` itself when it is a numpy array, else a host copy of it."""
    if type(array) is DeviceArray:
        return array.to_host()
    return array  # type: ignore[return-value]


def holds_device_arrays(tensors: Mapping[str, Any]) -> bool:
    """Whether any value of ``tensors`` is a DeviceArray."""
    return _made and any(type(array) is DeviceArray for array in tensors.values())


def host_inputs(inputs: MutableMapping[str, Any]) -> None:
    """Replace every DeviceArray of ``inputs`` with a host copy, in place."""
    for name, array in inputs.items():
        if type(array) is DeviceArray:
            inputs[name] = array.to_host()


def concatenate(arrays: Sequence[np.ndarray | DeviceArray]) -> np.ndarray | DeviceArray:
    """``arrays`` joined along axis 0 (a batch): on the host when all are host arrays, else
    on the device of the first DeviceArray (host parts copied there)."""
    first = next((a for a in arrays if type(a) is DeviceArray), None)
    if first is None:
        return np.concatenate(arrays, axis=0)
    import cupy

    with first.data.device:
        parts = [a.data if type(a) is DeviceArray else cupy.asarray(a) for a in arrays]
        return DeviceArray(cupy.concatenate(parts, axis=0))
