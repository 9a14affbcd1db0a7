"""``tritonserver.Tensor``: DLPack round trips with numpy and torch (CPU) without copies,
BYTES tensors, memory types; GPU memory refused."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
import tritonserver


@pytest.mark.parametrize(
    "dtype", [np.bool_, np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]
)
def test_numpy_round_trip_shares_memory(dtype: Any) -> None:
    array = (np.arange(24) % 3).astype(dtype).reshape(2, 3, 4)
    tensor = tritonserver.Tensor.from_dlpack(array)
    assert tensor.data_type == tritonserver.DataType[_triton_name(array)]
    assert tensor.shape == [2, 3, 4] and tensor.size == array.nbytes
    assert tensor.memory_type == tritonserver.MemoryType.CPU
    assert tensor.__dlpack_device__() == (tritonserver.DLDeviceType.kDLCPU, 0)
    back = np.from_dlpack(tensor)
    assert back.ctypes.data == array.ctypes.data
    np.testing.assert_array_equal(back, array)


def _triton_name(array: np.ndarray) -> str:
    names = {"b": "BOOL", "f": "FP", "i": "INT", "u": "UINT"}
    kind = names[array.dtype.kind]
    return kind if kind == "BOOL" else f"{kind}{array.dtype.itemsize * 8}"


def test_tensor_keeps_its_owner_and_a_view_keeps_the_tensor() -> None:
    owner = np.ones(1024)
    tensor = tritonserver.Tensor.from_dlpack(owner)
    assert sys.getrefcount(owner) - 1 == 2  # the name and the tensor's buffer
    view = np.from_dlpack(tensor)
    assert sys.getrefcount(tensor) - 1 == 2  # the name and the view
    tensor.shape = [2, 512]  # a view made later sees the new shape
    assert view.shape == (1024,) and np.from_dlpack(tensor).shape == (2, 512)


def test_torch_cpu_round_trip_shares_memory() -> None:
    torch = pytest.importorskip("torch")
    source = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    tensor = tritonserver.Tensor.from_dlpack(source)
    assert tensor.data_type == tritonserver.DataType.FP32 and tensor.data_ptr == source.data_ptr()
    back = torch.from_dlpack(tensor)
    assert back.data_ptr() == source.data_ptr() and torch.equal(back, source)
    array = np.arange(6, dtype=np.int64)
    assert torch.from_dlpack(tritonserver.Tensor.from_dlpack(array)).data_ptr() == array.ctypes.data


def test_bytes_tensors() -> None:
    tensor = tritonserver.Tensor.from_string_array([["hello", "wörld"], ["", "x"]])
    assert tensor.data_type == tritonserver.DataType.BYTES and tensor.shape == [2, 2]
    assert tensor.to_string_array().tolist() == [["hello", "wörld"], ["", "x"]]
    assert tensor.to_bytes_array()[0, 1] == "wörld".encode()
    raw = tritonserver.Tensor.from_bytes_array(np.array([b"\x00\xff"], dtype=object))
    assert raw.size == 4 + 2 and raw.to_bytes_array().tolist() == [b"\x00\xff"]
    with pytest.raises(tritonserver.InvalidArgumentError, match="BYTES"):
        np.from_dlpack(tensor)
    with pytest.raises(tritonserver.InvalidArgumentError):
        tritonserver.Tensor.from_dlpack(np.ones(3)).to_string_array()


def test_memory_types() -> None:
    tensor = tritonserver.Tensor.from_dlpack(np.ones(3, dtype=np.float32))
    for host in (
        "cpu",
        "cpu:0",
        tritonserver.MemoryType.CPU,
        (tritonserver.DLDeviceType.kDLCPU, 0),
    ):
        assert tensor.to_device(host) is tensor
    assert tensor.to_host() is tensor
    with pytest.raises(tritonserver.UnsupportedError, match="GPU memory"):
        tensor.to_device("gpu:0")
    with pytest.raises(tritonserver.InvalidArgumentError):
        tensor.to_device("unsupported")


class _DeviceArray:
    """What a DLPack producer on a CUDA device says of itself (no GPU here to make one)."""

    def __dlpack__(self, stream: Any = None) -> Any:
        raise AssertionError("a device tensor must be refused before its capsule is taken")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)  # kDLCUDA


def test_device_memory_is_refused() -> None:
    with pytest.raises(tritonserver.UnsupportedError, match="kDLCUDA"):
        tritonserver.Tensor.from_dlpack(_DeviceArray())


def test_non_contiguous_inputs() -> None:
    strided = np.arange(16, dtype=np.int32).reshape(4, 4)[:, ::2]
    with pytest.raises(tritonserver.InvalidArgumentError, match="contiguous"):
        tritonserver.Tensor.from_dlpack(strided)
    copied = tritonserver.Tensor._from_object(strided)  # inputs are made contiguous
    np.testing.assert_array_equal(np.from_dlpack(copied), strided)
