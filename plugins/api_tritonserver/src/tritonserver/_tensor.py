"""Tensors in host memory, exchanged by DLPack: :class:`MemoryBuffer` and :class:`Tensor`.

A tensor is a data type, a shape and a buffer (address, size, and the object owning the
memory, kept alive by the buffer). ``numpy.from_dlpack(tensor)`` and
``torch.from_dlpack(tensor)`` see the memory without copying: :meth:`Tensor.__dlpack__`
exports a numpy view of it whose base holds the tensor. BYTES tensors hold Triton's
serialized form (each element a 4-byte length, then its bytes), read back with
:meth:`Tensor.to_bytes_array` / :meth:`Tensor.to_string_array`. Only host memory is
held: a GPU object is refused (UnsupportedError), not copied behind the caller's back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from despina import deserialize_bytes, dtype_of, serialize_bytes

from tritonserver._enums import DataType, DLDeviceType, MemoryType
from tritonserver._errors import InvalidArgumentError, UnsupportedError

#: numpy dtype of each data type (BYTES: object arrays of ``bytes``).
_DTYPES: dict[DataType, np.dtype[Any]] = {
    data_type: dtype_of(data_type.name) for data_type in DataType if data_type != DataType.INVALID
}
_DATA_TYPES: dict[np.dtype[Any], DataType] = {
    dtype: data_type for data_type, dtype in _DTYPES.items()
}
#: DLPack device types whose memory the host can address.
_HOST_DEVICES = frozenset({DLDeviceType.kDLCPU, DLDeviceType.kDLCUDAHost})
#: What output_memory_type / to_device accept as names.
_MEMORY_NAMES = {"cpu": MemoryType.CPU, "cpu_pinned": MemoryType.CPU_PINNED, "gpu": MemoryType.GPU}

DeviceOrMemoryType = (
    tuple[MemoryType, int] | MemoryType | tuple[DLDeviceType, int] | DLDeviceType | str
)


def parse_memory_type(device: DeviceOrMemoryType) -> tuple[MemoryType, int]:
    """(memory type, device id) of a name (``"cpu"``, ``"gpu:0"``), MemoryType,
    DLDeviceType or a (type, id) pair; InvalidArgumentError for anything else."""
    memory_id = 0
    if isinstance(device, tuple) and len(device) == 2:
        device, memory_id = device
    if isinstance(device, str):
        name, _, number = device.lower().partition(":")
        if name not in _MEMORY_NAMES or (number and not number.isdigit()):
            raise InvalidArgumentError(f"Invalid memory type: {device}")
        return _MEMORY_NAMES[name], int(number or memory_id)
    if isinstance(device, MemoryType):
        return device, int(memory_id)
    if isinstance(device, DLDeviceType):
        if device in _HOST_DEVICES:
            return MemoryType.CPU, int(memory_id)
        if device == DLDeviceType.kDLCUDA:
            return MemoryType.GPU, int(memory_id)
    raise InvalidArgumentError(f"Invalid memory type: {device}")


def check_host(device: DeviceOrMemoryType) -> MemoryType:
    """The host memory type ``device`` names; UnsupportedError for GPU memory."""
    memory_type, _ = parse_memory_type(device)
    if memory_type == MemoryType.GPU:
        raise UnsupportedError(
            "GPU memory is not supported by Despina's tritonserver API: tensors are held "
            "in host memory"
        )
    return memory_type


@dataclass
class MemoryBuffer:
    """A span of memory and its owner (kept alive as long as the buffer is)."""

    data_ptr: int
    memory_type: MemoryType
    memory_type_id: int
    size: int
    owner: Any

    @staticmethod
    def from_dlpack(owner: Any) -> MemoryBuffer:
        """The memory of a DLPack-exporting host object (contiguous), owned by it."""
        return MemoryBuffer._of_array(_host_array(owner), owner)

    @staticmethod
    def _of_array(array: np.ndarray, owner: Any) -> MemoryBuffer:
        return MemoryBuffer(array.ctypes.data, MemoryType.CPU, 0, array.nbytes, owner)


class _HostView:
    """Exposes a tensor's memory to numpy (``__array_interface__``), holding the tensor."""

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor
        self.__array_interface__ = {
            "data": (tensor.data_ptr, False),
            "shape": (tensor.size,),
            "typestr": "|u1",
            "version": 3,
        }


@dataclass
class Tensor:
    """A tensor: ``data_type``, ``shape`` and the ``memory_buffer`` holding its data."""

    data_type: DataType
    shape: list[int]
    memory_buffer: MemoryBuffer

    @property
    def data_ptr(self) -> int:
        return self.memory_buffer.data_ptr

    @property
    def memory_type(self) -> MemoryType:
        return self.memory_buffer.memory_type

    @property
    def memory_type_id(self) -> int:
        return self.memory_buffer.memory_type_id

    @property
    def size(self) -> int:
        """Size of the data in bytes."""
        return self.memory_buffer.size

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: Any = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule of the data, without a copy (host memory: ``stream`` unused).
        The capsule keeps this tensor alive. InvalidArgumentError for BYTES tensors."""
        view = self._host_view()
        if max_version is None:
            return view.__dlpack__()
        return view.__dlpack__(max_version=max_version)

    def __dlpack_device__(self) -> tuple[DLDeviceType, int]:
        return DLDeviceType.kDLCPU, self.memory_type_id

    def _host_view(self) -> np.ndarray:
        """A numpy array over this tensor's memory, in its current shape."""
        if self.data_type == DataType.BYTES:
            raise InvalidArgumentError(
                "BYTES tensors have no DLPack form: use to_bytes_array() or to_string_array()"
            )
        raw = np.asarray(_HostView(self))
        return raw.view(_DTYPES[self.data_type]).reshape([int(d) for d in self.shape])

    def to_bytes_array(self) -> np.ndarray:
        """A BYTES tensor's elements: an object array of ``bytes`` in its shape."""
        if self.data_type != DataType.BYTES:
            raise InvalidArgumentError(f"Tensor has data type {self.data_type.name}, not BYTES")
        buffer = np.asarray(self.memory_buffer.owner, dtype=np.uint8).reshape(-1)
        return deserialize_bytes(buffer.tobytes()).reshape(self.shape)

    def to_string_array(self) -> np.ndarray:
        """A BYTES tensor's elements decoded as UTF-8: an object array of ``str``."""
        decoded = [item.decode("utf-8") for item in self.to_bytes_array().reshape(-1)]
        out = np.empty(len(decoded), dtype=np.object_)
        out[:] = decoded
        return out.reshape(self.shape)

    @staticmethod
    def from_bytes_array(array: list[Any] | np.ndarray) -> Tensor:
        """A BYTES tensor of ``bytes`` (or ``str``, encoded as UTF-8) elements."""
        values = np.asarray(array, dtype=np.object_)
        buffer = np.frombuffer(serialize_bytes(values), dtype=np.uint8)
        memory = MemoryBuffer._of_array(buffer, buffer)
        return Tensor(DataType.BYTES, list(values.shape), memory)

    @staticmethod
    def from_string_array(array: list[str] | np.ndarray) -> Tensor:
        """A BYTES tensor of strings (encoded as UTF-8)."""
        return Tensor.from_bytes_array(array)

    @staticmethod
    def from_dlpack(obj: Any) -> Tensor:
        """A tensor over the memory of a DLPack-exporting host object (numpy, torch CPU,
        ...), without a copy; the tensor holds the object. UnsupportedError for device
        memory, InvalidArgumentError for data types and layouts Triton has no form for."""
        array = _host_array(obj)
        return Tensor(
            _data_type(array.dtype), list(array.shape), MemoryBuffer._of_array(array, obj)
        )

    @staticmethod
    def _from_object(obj: Any) -> Tensor:
        """A tensor from a Tensor, a numpy array or scalar, a (nested) list, or any
        DLPack-exporting object; str and bytes arrays become BYTES tensors."""
        if isinstance(obj, Tensor):
            return obj
        if isinstance(obj, np.ndarray | np.generic):
            return Tensor._from_numpy(np.asarray(obj))
        if hasattr(obj, "__dlpack__"):
            return Tensor.from_dlpack(obj)
        if isinstance(obj, list | tuple):
            return Tensor._from_numpy(np.asarray(obj))
        raise InvalidArgumentError(f"Input type {type(obj)} not supported")

    @staticmethod
    def _from_numpy(array: np.ndarray) -> Tensor:
        if array.dtype.kind in "OSU":
            return Tensor.from_bytes_array(array)
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        return Tensor.from_dlpack(array)

    def to_host(self) -> Tensor:
        """This tensor: its memory is host memory."""
        return self

    def to_device(self, device: DeviceOrMemoryType) -> Tensor:
        """This tensor when ``device`` is host memory (``"cpu"``, MemoryType.CPU, ...);
        UnsupportedError for GPU memory, InvalidArgumentError for an unknown name."""
        check_host(device)
        return self

    def _to_numpy(self) -> np.ndarray:
        """The tensor's elements as a numpy array (BYTES: object array of ``bytes``)."""
        if self.data_type == DataType.BYTES:
            return self.to_bytes_array()
        return self._host_view()

    @staticmethod
    def _from_output(array: np.ndarray) -> Tensor:
        """A tensor of a model's output array (BYTES: object arrays of bytes or str)."""
        if array.dtype == np.object_:
            return Tensor.from_bytes_array(array)
        return Tensor._from_numpy(array)


def _data_type(dtype: np.dtype[Any]) -> DataType:
    try:
        return _DATA_TYPES[dtype]
    except KeyError:
        raise InvalidArgumentError(f"Unsupported data type: {dtype}") from None


def _host_array(obj: Any) -> np.ndarray:
    """A C-contiguous numpy view of a DLPack-exporting host object (the object itself for
    a numpy array)."""
    if isinstance(obj, np.ndarray):
        array = obj
    else:
        device_type, _ = obj.__dlpack_device__()
        if device_type not in _HOST_DEVICES:
            raise UnsupportedError(
                f"DLPack device {DLDeviceType(device_type).name} is not supported by "
                "Despina's tritonserver API: tensors are held in host memory"
            )
        array = np.from_dlpack(obj)
    if not array.flags.c_contiguous:
        raise InvalidArgumentError("Only contiguous tensors are supported")
    return array
