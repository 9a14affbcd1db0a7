"""GPU tensors of ``pb_utils``: how a DLPack source is found to be in CUDA memory, cupy
(imported only when a CUDA tensor appears), and device copies.

A GPU tensor of ``pb_utils.Tensor`` is a C-contiguous cupy array; the server side wraps it
in ``despina.DeviceArray`` where it meets the core. Server-independent: the child process
uses it too.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from despina_backend_python.pb.errors import TritonModelException

#: DLPack device types (``DLDeviceType``): host memory, CUDA memory, pinned host memory.
DLPACK_CPU, DLPACK_CUDA, DLPACK_CUDA_HOST = 1, 2, 3
#: How to get cupy, in the error that says it is missing.
CUPY_HINT = "pip install 'despina[cuda]'"

_CAPSULE_NAME = b"dltensor"


class _DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


def _capsule_api() -> tuple[Any, Any]:
    api = ctypes.pythonapi
    api.PyCapsule_IsValid.restype = ctypes.c_int
    api.PyCapsule_IsValid.argtypes = (ctypes.py_object, ctypes.c_char_p)
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
    return api.PyCapsule_IsValid, api.PyCapsule_GetPointer


def capsule_device(capsule: Any) -> tuple[int, int] | None:
    """(device type, device id) of an unconsumed DLPack capsule (``"dltensor"``: a
    ``DLManagedTensor`` whose ``DLTensor`` starts with the data pointer, then the device),
    or None for anything else."""
    if type(capsule).__name__ != "PyCapsule":
        return None
    is_valid, get_pointer = _capsule_api()
    if not is_valid(capsule, _CAPSULE_NAME):
        return None
    device = _DLDevice.from_address(
        get_pointer(capsule, _CAPSULE_NAME) + ctypes.sizeof(ctypes.c_void_p)
    )
    return int(device.device_type), int(device.device_id)


def cuda_device(source: Any) -> int | None:
    """The CUDA device id of ``source`` (an object with ``__dlpack_device__``, or a DLPack
    capsule) when its memory is on a GPU, else None. Imports no CUDA library."""
    where = getattr(source, "__dlpack_device__", None)
    device = where() if where is not None else capsule_device(source)
    if device is None or int(device[0]) != DLPACK_CUDA:
        return None
    return int(device[1])


def cupy() -> Any:
    """The cupy module; TritonModelException naming how to install it when it is absent."""
    try:
        import cupy
    except ImportError:
        raise TritonModelException(
            f"GPU tensors need cupy, which is not installed in this environment: {CUPY_HINT}"
        ) from None
    return cupy


def from_dlpack(source: Any, device_id: int) -> Any:
    """The cupy array of CUDA tensor ``source`` on ``device_id``, sharing its memory (it
    must be C-contiguous: Triton's error otherwise). Waits for the work queued on it."""
    cp = cupy()
    with cp.cuda.Device(device_id) as device:
        array = cp.from_dlpack(source)
        if not array.flags.c_contiguous:
            raise TritonModelException(
                "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are "
                "stored in C-Order are supported."
            )
        device.synchronize()
    return array


def to_device(array: Any, device_id: int) -> Any:
    """A cupy copy of ``array`` (numpy, or cupy on any device) on ``device_id``."""
    cp = cupy()
    with cp.cuda.Device(device_id) as device:
        if isinstance(array, np.ndarray):
            return cp.ascontiguousarray(cp.asarray(array))
        copy = cp.empty(array.shape, array.dtype)
        if array.nbytes:
            runtime = cp.cuda.runtime
            runtime.memcpy(copy.data.ptr, array.data.ptr, array.nbytes, runtime.memcpyDefault)
            device.synchronize()
        return copy


def device_id(array: Any) -> int:
    """The device of a cupy array."""
    return int(array.device.id)
