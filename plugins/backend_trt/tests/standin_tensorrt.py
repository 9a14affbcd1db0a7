"""TEST-ONLY stand-in for the ``tensorrt`` module, backed by numpy, with host memory as
"device" memory. Never installed: fixtures put it in ``sys.modules["tensorrt"]``.

It has the names the backend uses, with the real bindings' parameter names (checked by
test_tensorrt_api.py against the published bindings wheel), and enforces the real API's
rules that matter to a caller: ``set_input_shape`` refuses a shape outside the context's
optimization profile (returns False and logs an error); an output's shape is unknown (-1)
until every input shape is set, and a data-dependent output's stays unknown until
execution; ``execute_async_v3`` fails (False) when an input shape or any tensor address
(or an output allocator) is missing. Addresses are real host addresses: the engine reads
and writes them with ctypes, as TensorRT reads and writes device pointers.

A "plan" is :func:`plan` JSON: tensors, optimization profiles and one operation.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import itertools
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from despina import Gpu, GpuInventory, hookimpl

MAGIC = b"DESPINA-STANDIN-PLAN\n"
NUMPY = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "UINT8": np.uint8,
         "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_}  # fmt: skip


def plan(tensors: Sequence[dict[str, Any]], profiles: Sequence[dict[str, Any]], op: str) -> bytes:
    """A serialized stand-in engine. tensors: {name, mode INPUT|OUTPUT, dtype, shape,
    data_dependent?}; profiles: {input name: [min, opt, max]}; op: add_sub | nonzero."""
    return (
        MAGIC
        + json.dumps({"tensors": list(tensors), "profiles": list(profiles), "op": op}).encode()
    )


class DataType(enum.Enum):
    FLOAT, HALF, INT8, INT32, BOOL, UINT8, FP8, BF16, INT64, INT4 = range(10)


class TensorIOMode(enum.Enum):
    NONE, INPUT, OUTPUT = range(3)


class TensorFormat(enum.Enum):
    LINEAR, CHW2, HWC8 = range(3)


class ExecutionContextAllocationStrategy(enum.Enum):
    STATIC, ON_PROFILE_CHANGE, USER_MANAGED = range(3)


class ILogger:
    class Severity(enum.IntEnum):
        INTERNAL_ERROR, ERROR, WARNING, INFO, VERBOSE = range(5)

    def log(self, severity: ILogger.Severity, msg: str) -> None:
        raise NotImplementedError


class Logger(ILogger):
    def __init__(self, min_severity: ILogger.Severity = ILogger.Severity.WARNING) -> None:
        self.min_severity = min_severity

    def log(self, severity: ILogger.Severity, msg: str) -> None:
        pass


class IOutputAllocator:
    def __init__(self) -> None:
        pass


class Runtime:
    def __init__(self, logger: ILogger) -> None:
        self.logger = logger

    def deserialize_cuda_engine(self, serialized_engine: bytes) -> ICudaEngine | None:
        if not bytes(serialized_engine).startswith(MAGIC):
            self.logger.log(ILogger.Severity.ERROR, "Serialization assertion failed: magic tag")
            return None
        return ICudaEngine(json.loads(bytes(serialized_engine)[len(MAGIC) :]), self.logger)


class ICudaEngine:
    def __init__(self, spec: dict[str, Any], logger: ILogger) -> None:
        self.spec, self.logger = spec, logger
        self.tensors = {t["name"]: t for t in spec["tensors"]}

    @property
    def num_io_tensors(self) -> int:
        return len(self.tensors)

    @property
    def num_optimization_profiles(self) -> int:
        return len(self.spec["profiles"])

    def get_tensor_name(self, index: int) -> str:
        return str(self.spec["tensors"][index]["name"])

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        return TensorIOMode[self.tensors[name]["mode"]]

    def get_tensor_dtype(self, name: str) -> DataType:
        return DataType[self.tensors[name]["dtype"]]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.tensors[name]["shape"])

    def is_shape_inference_io(self, name: str) -> bool:
        return False

    def get_tensor_format(self, name: str) -> TensorFormat:
        return TensorFormat.LINEAR

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[tuple[int, ...]]:
        return [tuple(s) for s in self.spec["profiles"][profile_index][name]]

    def get_tensor_profile_values(self, name: str, profile_index: int) -> list[list[int]]:
        raise RuntimeError(f"'{name}' is not a shape tensor")

    def create_execution_context(
        self,
        strategy: ExecutionContextAllocationStrategy = ExecutionContextAllocationStrategy.STATIC,
    ) -> IExecutionContext:
        assert isinstance(strategy, ExecutionContextAllocationStrategy)
        return IExecutionContext(self, strategy)


class IExecutionContext:
    def __init__(self, engine: ICudaEngine, strategy: ExecutionContextAllocationStrategy) -> None:
        self.engine, self.strategy = engine, strategy
        self.active_optimization_profile = 0
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.addresses: dict[str, int] = {}
        self.allocators: dict[str, IOutputAllocator] = {}

    def set_optimization_profile_async(self, profile_index: int, stream_handle: int) -> bool:
        if not 0 <= profile_index < self.engine.num_optimization_profiles:
            return False
        self.active_optimization_profile = profile_index
        self.shapes.clear()
        return True

    def set_input_shape(self, name: str, shape: Sequence[int]) -> bool:
        low, _, high = self.engine.get_tensor_profile_shape(name, self.active_optimization_profile)
        shape = tuple(int(d) for d in shape)
        if len(shape) != len(low) or any(
            not lo <= d <= hi for d, lo, hi in zip(shape, low, high, strict=True)
        ):
            self.engine.logger.log(
                ILogger.Severity.ERROR,
                f"IExecutionContext::setInputShape: Error Code 3: API Usage Error ({name} "
                f"{shape} is outside profile {self.active_optimization_profile} [{low}, {high}])",
            )
            return False
        self.shapes[name] = shape
        return True

    def _inputs(self) -> list[str]:
        return [n for n, t in self.engine.tensors.items() if t["mode"] == "INPUT"]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        tensor = self.engine.tensors[name]
        if tensor["mode"] == "INPUT":
            return self.shapes.get(name, tuple(tensor["shape"]))
        if tensor.get("data_dependent") or any(n not in self.shapes for n in self._inputs()):
            return tuple(tensor["shape"])
        return self.shapes[self._inputs()[0]]  # add_sub: outputs shaped as the inputs

    def set_tensor_address(self, name: str, memory: int) -> bool:
        self.addresses[name] = int(memory)
        return True

    def set_output_allocator(self, name: str, output_allocator: IOutputAllocator) -> bool:
        self.allocators[name] = output_allocator
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        engine = self.engine
        if any(n not in self.shapes or n not in self.addresses for n in self._inputs()):
            engine.logger.log(ILogger.Severity.ERROR, "execute: input shape or address not set")
            return False
        outputs = [n for n in engine.tensors if n not in self._inputs()]
        if any(n not in self.addresses and n not in self.allocators for n in outputs):
            engine.logger.log(ILogger.Severity.ERROR, "execute: output address not set")
            return False
        values = {n: self._read(n, self.shapes[n]) for n in self._inputs()}
        for name, value in _compute(engine.spec["op"], values).items():
            value = np.ascontiguousarray(value, NUMPY[engine.tensors[name]["dtype"]])
            if name in self.allocators:
                allocator: Any = self.allocators[name]
                address = allocator.reallocate_output_async(
                    name, 0, max(value.nbytes, 1), 256, stream_handle
                )
                allocator.notify_shape(name, value.shape)
            else:
                address = self.addresses[name]
            ctypes.memmove(address, value.ctypes.data, value.nbytes)
        return True

    def _read(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        dtype = np.dtype(NUMPY[self.engine.tensors[name]["dtype"]])
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        raw = (ctypes.c_char * max(nbytes, 1)).from_address(self.addresses[name])
        return np.frombuffer(raw, dtype, count=nbytes // dtype.itemsize).reshape(shape).copy()


def _compute(op: str, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if op == "add_sub":
        a, b = values["INPUT0"], values["INPUT1"]
        return {"OUTPUT0": a + b, "OUTPUT1": a - b}
    if op == "nonzero":
        return {"INDICES": np.flatnonzero(values["X"]).astype(np.int64)}
    raise ValueError(f"unknown stand-in op {op}")


def add_sub_plan(profiles: list[tuple[int, int, int]] | None = None, width: int = 4) -> bytes:
    """A stand-in add/sub engine: FP32 [-1, width] tensors, one profile per (min, opt, max)
    batch triple (default one profile, batch 1..8)."""
    tensors = [
        {"name": n, "mode": mode, "dtype": "FLOAT", "shape": [-1, width]}
        for n, mode in (
            ("INPUT0", "INPUT"),
            ("INPUT1", "INPUT"),
            ("OUTPUT0", "OUTPUT"),
            ("OUTPUT1", "OUTPUT"),
        )
    ]
    triples = profiles or [(1, 4, 8)]
    bounds = [
        {n: [[lo, width], [opt, width], [hi, width]] for n in ("INPUT0", "INPUT1")}
        for lo, opt, hi in triples
    ]
    return bytes(plan(tensors, bounds, "add_sub"))


def nonzero_plan() -> bytes:
    """A stand-in engine with a data-dependent output: INDICES = nonzero(X), X FP32 [-1]."""
    tensors = [
        {"name": "X", "mode": "INPUT", "dtype": "FLOAT", "shape": [-1]},
        {
            "name": "INDICES",
            "mode": "OUTPUT",
            "dtype": "INT64",
            "shape": [-1],
            "data_dependent": True,
        },
    ]
    return bytes(plan(tensors, [{"X": [[1], [8], [16]]}], "nonzero"))


class SimulatedGpu:
    """One simulated GPU of compute capability 8.0 (TEST-ONLY inventory)."""

    @hookimpl
    def despina_gpu_inventory(self, min_compute_capability: float) -> GpuInventory:
        gpus = (Gpu(0, "sim0", "GPU-sim-0", (8, 0)),)
        return GpuInventory(gpus, "simulated", min_compute_capability=min_compute_capability)


class HostMemory:
    """TEST-ONLY DeviceMemory: host buffers, streams that are already synchronous."""

    _handles = itertools.count(1)

    def __init__(self, capability: tuple[int, int] = (8, 0)) -> None:
        self.capability = capability
        self.allocations = 0
        #: device id -> streams made on it (one per instance).
        self.streams: dict[int, int] = {}

    def compute_capability(self, device_id: int) -> tuple[int, int]:
        return self.capability

    def on_device(self, device_id: int) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def stream(self, device_id: int) -> HostStream:
        self.streams[device_id] = self.streams.get(device_id, 0) + 1
        return HostStream(next(self._handles))

    def allocate(self, device_id: int, nbytes: int) -> HostBuffer:
        self.allocations += 1
        return HostBuffer(np.zeros(max(nbytes, 1), np.uint8))

    def upload(self, buffer: HostBuffer, array: np.ndarray, stream: HostStream) -> None:
        assert array.nbytes <= buffer.nbytes
        ctypes.memmove(buffer.ptr, array.ctypes.data, array.nbytes)

    def download(
        self, buffer: HostBuffer, shape: tuple[int, ...], dtype: Any, stream: HostStream
    ) -> np.ndarray:
        out = np.empty(shape, dtype)
        ctypes.memmove(out.ctypes.data, buffer.ptr, out.nbytes)
        return out


class HostStream:
    def __init__(self, handle: int) -> None:
        self.handle = handle

    def synchronize(self) -> None:
        pass


class HostBuffer:
    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.ptr = int(data.ctypes.data)
        self.nbytes = int(data.nbytes)


@contextlib.contextmanager
def installed(memory: HostMemory | None = None) -> Iterator[Any]:
    """This module as ``tensorrt`` (with ``memory`` as its device layer) while inside."""
    import sys

    module = sys.modules[__name__]
    module.despina_device_memory = memory or HostMemory()  # type: ignore[attr-defined]
    saved = sys.modules.get("tensorrt")
    sys.modules["tensorrt"] = module
    try:
        yield module
    finally:
        if saved is None:
            sys.modules.pop("tensorrt", None)
        else:
            sys.modules["tensorrt"] = saved
        del module.despina_device_memory  # type: ignore[attr-defined]
