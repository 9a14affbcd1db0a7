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

Shape tensors (``is_shape_inference_io``) follow TensorRT 10's rules: their addresses must
be host memory and execution tensors' device memory (``set_tensor_address`` refuses the
other, telling them apart by the device layer's allocations); an input's values are read
from its address, so output shapes stay unknown until they are set; values outside the
active profile's ``get_tensor_profile_values`` range leave the output shapes unknown and
fail execution; shape-tensor outputs are written to their host address.

Deserialization fails for a plan that names plugin libraries not loaded in the process
(``/proc/self/maps``), and for a version-compatible plan unless the runtime's
``engine_host_code_allowed`` is set.

A "plan" is :func:`plan` JSON: tensors, optimization profiles, one operation and options.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import enum
import itertools
import json
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from despina import Gpu, GpuInventory, dtype_of, hookimpl

MAGIC = b"DESPINA-STANDIN-PLAN\n"
NUMPY = {"FLOAT": np.float32, "HALF": np.float16, "INT8": np.int8, "UINT8": np.uint8,
         "INT32": np.int32, "INT64": np.int64, "BOOL": np.bool_,
         "BF16": dtype_of("BF16")}  # fmt: skip


def plan(
    tensors: Sequence[dict[str, Any]],
    profiles: Sequence[dict[str, Any]],
    op: str,
    **options: Any,
) -> bytes:
    """A serialized stand-in engine. tensors: {name, mode INPUT|OUTPUT, dtype, shape,
    data_dependent?, shape_tensor?}; profiles: {input name: [min, opt, max]} (values for
    shape tensors); op: add_sub | nonzero | identity | resize | resize_items | ragged. options: plugins (library
    file names the engine needs loaded), version_compatible, execute_delay_s (how long an
    execution takes, to let executions overlap)."""
    spec = {"tensors": list(tensors), "profiles": list(profiles), "op": op, **options}
    return MAGIC + json.dumps(spec).encode()


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
        self.engine_host_code_allowed = False

    def deserialize_cuda_engine(self, serialized_engine: bytes) -> ICudaEngine | None:
        if not bytes(serialized_engine).startswith(MAGIC):
            self.logger.log(ILogger.Severity.ERROR, "Serialization assertion failed: magic tag")
            return None
        spec = json.loads(bytes(serialized_engine)[len(MAGIC) :])
        mapped = {Path(line.split()[-1]).name for line in _maps() if "/" in line}
        for library in spec.get("plugins", []):
            if library not in mapped:
                self.logger.log(
                    ILogger.Severity.ERROR,
                    f"getPluginCreator could not find plugin of library {library}",
                )
                return None
        if spec.get("version_compatible") and not self.engine_host_code_allowed:
            self.logger.log(
                ILogger.Severity.ERROR,
                "Cannot deserialize a version-compatible engine: engine host code is not allowed",
            )
            return None
        return ICudaEngine(spec, self.logger)


def _maps() -> list[str]:
    return Path("/proc/self/maps").read_text().splitlines()


class ICudaEngine:
    def __init__(self, spec: dict[str, Any], logger: ILogger) -> None:
        self.spec, self.logger = spec, logger
        self.tensors = {t["name"]: t for t in spec["tensors"]}
        #: Executions running now, and the most that ever ran at once.
        self.running = self.most_running = 0
        self.counting = threading.Lock()

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
        return bool(self.tensors[name].get("shape_tensor"))

    def get_tensor_format(self, name: str) -> TensorFormat:
        return TensorFormat.LINEAR

    def get_tensor_profile_shape(self, name: str, profile_index: int) -> list[tuple[int, ...]]:
        if self.is_shape_inference_io(name):  # its own shape: fixed
            return [self.get_tensor_shape(name)] * 3
        return [tuple(s) for s in self.spec["profiles"][profile_index][name]]

    def get_tensor_profile_values(self, name: str, profile_index: int) -> list[list[int]]:
        if not self.is_shape_inference_io(name):
            raise RuntimeError(f"'{name}' is not a shape tensor")
        return [list(v) for v in self.spec["profiles"][profile_index][name]]

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

    def _error(self, msg: str) -> None:
        self.engine.logger.log(ILogger.Severity.ERROR, msg)

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
            self._error(
                f"IExecutionContext::setInputShape: Error Code 3: API Usage Error ({name} "
                f"{shape} is outside profile {self.active_optimization_profile} [{low}, {high}])",
            )
            return False
        self.shapes[name] = shape
        return True

    def _inputs(self) -> list[str]:
        return [n for n, t in self.engine.tensors.items() if t["mode"] == "INPUT"]

    def _shape_of(self, name: str) -> tuple[int, ...] | None:
        """An input's runtime shape: set, or fixed by the engine (None: unknown)."""
        declared = tuple(self.engine.tensors[name]["shape"])
        return self.shapes.get(name, None if -1 in declared else declared)

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        tensor = self.engine.tensors[name]
        if tensor["mode"] == "INPUT":
            return self._shape_of(name) or tuple(tensor["shape"])
        values = self._shape_values()
        if tensor.get("data_dependent") or values is None:
            return tuple(tensor["shape"])
        zeros = {}
        for n in self._inputs():
            if n not in values:
                dtype = NUMPY[self.engine.tensors[n]["dtype"]]
                zeros[n] = np.zeros(self._shape_of(n) or (), dtype)
        return tuple(_compute(self.engine.spec["op"], {**zeros, **values})[name].shape)

    def _shape_values(self) -> dict[str, np.ndarray] | None:
        """The shape-tensor inputs' values, read from their host addresses; None while an
        input shape or a shape tensor's address is unset, or a value is out of range."""
        if any(self._shape_of(n) is None for n in self._inputs()):
            return None
        profile = self.engine.spec["profiles"][self.active_optimization_profile]
        values = {}
        for name in self._inputs():
            if not self.engine.is_shape_inference_io(name):
                continue
            if name not in self.addresses:
                return None
            value = self._read(name, self._shape_of(name) or ())
            low, _, high = profile[name]
            if any(not lo <= v <= hi for v, lo, hi in zip(value.ravel(), low, high, strict=True)):
                self._error(
                    f"IExecutionContext::getTensorShape: Error Code 7: Internal Error (shape "
                    f"tensor {name} values {value.tolist()} outside profile range [{low}, {high}])"
                )
                return None
            values[name] = value
        return values

    def set_tensor_address(self, name: str, memory: int) -> bool:
        on_device = _on_device(int(memory))
        if on_device is not None and on_device == self.engine.is_shape_inference_io(name):
            where = "host" if on_device else "device"
            self._error(
                f"IExecutionContext::setTensorAddress: Error Code 3: API Usage Error (tensor "
                f"{name} must be in {where} memory)"
            )
            return False
        self.addresses[name] = int(memory)
        return True

    def set_output_allocator(self, name: str, output_allocator: IOutputAllocator) -> bool:
        self.allocators[name] = output_allocator
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        engine = self.engine
        if any(n not in self.addresses for n in self._inputs()):
            self._error("execute: input shape or address not set")
            return False
        outputs = [n for n in engine.tensors if n not in self._inputs()]
        if any(n not in self.addresses and n not in self.allocators for n in outputs):
            self._error("execute: output address not set")
            return False
        values = self._shape_values()
        if values is None:
            self._error("execute: input shapes or shape-tensor values not set, or not valid")
            return False
        for name in self._inputs():
            if name not in values:
                values[name] = self._read(name, self._shape_of(name) or ())
        with engine.counting:
            engine.running += 1
            engine.most_running = max(engine.most_running, engine.running)
        time.sleep(float(engine.spec.get("execute_delay_s", 0)))
        with engine.counting:
            engine.running -= 1
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


def _on_device(address: int) -> bool | None:
    """Whether ``address`` lies in a buffer of the installed device layer (None: no layer
    installed, nothing to tell)."""
    memory = globals().get("despina_device_memory")
    if memory is None:
        return None
    return any(b.ptr <= address < b.ptr + b.nbytes for b in memory.buffers)


def _compute(op: str, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if op == "add_sub":
        a, b = values["INPUT0"], values["INPUT1"]
        return {"OUTPUT0": a + b, "OUTPUT1": a - b}
    if op == "nonzero":
        return {"INDICES": np.flatnonzero(values["X"]).astype(np.int64)}
    if op == "identity":  # IN_<x> -> OUT_<x>
        return {"OUT" + n[2:]: v for n, v in values.items()}
    if op in ("resize", "resize_items"):  # DUMMY_INPUT0 resized to INPUT0's values
        shape = values["INPUT0"].astype(np.int64)
        dims, dummy = tuple(int(d) for d in shape), values["DUMMY_INPUT0"]
        if op == "resize":
            resized = np.resize(dummy, dims)
        else:  # each batch item alone, to the values past the first (the batch size)
            items = [np.resize(item, dims[1:]) for item in dummy[: dims[0]]]
            resized = np.stack(items) if items else np.zeros(dims, dummy.dtype)
        return {"DUMMY_OUTPUT0": resized, "OUTPUT0": shape}
    if op == "ragged":
        return _ragged(values)
    raise ValueError(f"unknown stand-in op {op}")


def _ragged(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """:func:`ragged_plan`'s engine: per request (segments of the flat INPUT), outputs
    computed from each batch input, and DOUBLE = 2 * INPUT (flat)."""
    flat, count = values["INPUT"], values["COUNT"]
    bounds, ends = values["ACC0"].astype(np.int64), values["ACC"].astype(np.int64)
    starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
    width = len(values["MAX"])  # only its shape counts
    padded = np.zeros((len(count), width), np.float32)
    for row, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        padded[row, : hi - lo] = flat[lo:hi]
    by_ends = [flat[lo:hi].sum() for lo, hi in zip(starts, ends, strict=True)]
    sums = padded.sum(axis=1)
    return {
        "SUM": sums.reshape(-1, 1),
        "SUM_ACC": np.array(by_ends, np.float32).reshape(-1, 1),
        "MEAN": np.divide(sums, count, out=np.zeros_like(sums), where=count != 0).reshape(-1, 1),
        "PADDED": padded,
        "LENGTH": values["SHAPE"],
        "LENGTH_FLAT": values["FLAT"].reshape(-1, 1),
        "DOUBLE": flat * 2,
    }


def add_sub_plan(
    profiles: list[tuple[int, int, int]] | None = None, width: int = 4, **options: Any
) -> bytes:
    """A stand-in add/sub engine: FP32 [-1, width] tensors, one profile per (min, opt, max)
    batch triple (default one profile, batch 1..8). ``width`` -1: a dynamic second
    dimension the profiles bound to 1..4. ``options`` as :func:`plan` takes them."""
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
    low, high = (1, 4) if width == -1 else (width, width)
    bounds = [
        {n: [[lo, low], [opt, high], [hi, high]] for n in ("INPUT0", "INPUT1")}
        for lo, opt, hi in triples
    ]
    return bytes(plan(tensors, bounds, "add_sub", **options))


def identity_plan(dtype: str, rank: int = 2) -> bytes:
    """OUT_<dtype> = IN_<dtype>, a TensorRT data type name, dims all dynamic (1..16)."""
    tensors = [
        {"name": f"{kind}_{dtype}", "mode": mode, "dtype": dtype, "shape": [-1] * rank}
        for kind, mode in (("IN", "INPUT"), ("OUT", "OUTPUT"))
    ]
    bounds = [[1] * rank, [4] * rank, [16] * rank]
    return bytes(plan(tensors, [{f"IN_{dtype}": bounds}], "identity"))


def resize_plan(batched: bool, low: int = 1, high: int = 8, output: str = "INT64") -> bytes:
    """Triton's shape-tensor test model: DUMMY_INPUT0 (FP32 [-1, -1]) resized to the values
    of the shape tensor INPUT0 (INT32 [2]) as DUMMY_OUTPUT0, and those values given back
    by the shape-tensor output OUTPUT0 (``output``, INT64 [2]). Batched: INPUT0's first value is the
    batch size (1..8), the second in low..high, and each batch item is resized alone;
    else both values in low..high."""
    tensors = [
        {"name": "DUMMY_INPUT0", "mode": "INPUT", "dtype": "FLOAT", "shape": [-1, -1]},
        {"name": "INPUT0", "mode": "INPUT", "dtype": "INT32", "shape": [2], "shape_tensor": True},
        {"name": "DUMMY_OUTPUT0", "mode": "OUTPUT", "dtype": "FLOAT", "shape": [-1, -1]},
        {"name": "OUTPUT0", "mode": "OUTPUT", "dtype": output, "shape": [2], "shape_tensor": True},
    ]
    first = (1, 4, 8) if batched else (low, low, high)
    profile = {
        "DUMMY_INPUT0": [[1, 1], [4, 4], [8, 16]],
        "INPUT0": [[first[0], low], [first[1], low], [first[2], high]],
    }
    return bytes(plan(tensors, [profile], "resize_items" if batched else "resize"))


#: :func:`ragged_plan`'s batch inputs: name -> (kind, data type, engine shape, bounds).
RAGGED_BATCH_INPUTS = {
    "COUNT": ("BATCH_ELEMENT_COUNT", "FLOAT", [-1], [[1], [4], [16]]),
    "ACC": ("BATCH_ACCUMULATED_ELEMENT_COUNT", "INT32", [-1], [[1], [4], [16]]),
    "ACC0": ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "INT32", [-1], [[2], [5], [17]]),
    "MAX": ("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", "FLOAT", [-1], [[1], [8], [64]]),
    "SHAPE": ("BATCH_ITEM_SHAPE", "INT32", [-1, 1], [[1, 1], [4, 1], [16, 1]]),
    "FLAT": ("BATCH_ITEM_SHAPE_FLATTEN", "INT32", [-1], [[1], [4], [16]]),
}


def ragged_plan(input_shape: Sequence[int] = (-1,), **options: Any) -> bytes:
    """Triton's ragged-batch example as an engine: INPUT (FP32, ``input_shape``, the flat
    ragged input, 1..256 elements) and the :data:`RAGGED_BATCH_INPUTS`; outputs per
    request (one row each): SUM (INPUT's segment by ACC0), SUM_ACC (by ACC), MEAN (SUM /
    COUNT), PADDED (the segment padded to MAX's length), LENGTH (SHAPE), LENGTH_FLAT
    (FLAT); DOUBLE = 2 * INPUT, flat (a batch output to scatter)."""
    rank = len(input_shape)
    tensors = [{"name": "INPUT", "mode": "INPUT", "dtype": "FLOAT", "shape": list(input_shape)}]
    profile = {"INPUT": [[1] * rank, [16] * rank, [256] * rank]}
    for name, (_, dtype, shape, bounds) in RAGGED_BATCH_INPUTS.items():
        tensors.append({"name": name, "mode": "INPUT", "dtype": dtype, "shape": shape})
        profile[name] = bounds
    for name, dtype, shape in (
        ("SUM", "FLOAT", [-1, 1]), ("SUM_ACC", "FLOAT", [-1, 1]), ("MEAN", "FLOAT", [-1, 1]),
        ("PADDED", "FLOAT", [-1, -1]), ("LENGTH", "INT32", [-1, 1]),
        ("LENGTH_FLAT", "INT32", [-1, 1]), ("DOUBLE", "FLOAT", [-1]),
    ):  # fmt: skip
        tensors.append({"name": name, "mode": "OUTPUT", "dtype": dtype, "shape": shape})
    return bytes(plan(tensors, [profile], "ragged", **options))


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
        #: Every buffer allocated ("device" memory, as the stand-in engine tells it apart).
        self.buffers: list[HostBuffer] = []
        #: device id -> streams made on it (one per instance).
        self.streams: dict[int, int] = {}
        #: Copies made, by kind: "upload" / "download" (host), "copy_in" /
        #: "download_device" (device to device, with DeviceArrays of the cupy stand-in).
        self.copies: collections.Counter[str] = collections.Counter()

    def compute_capability(self, device_id: int) -> tuple[int, int]:
        return self.capability

    def on_device(self, device_id: int) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def stream(self, device_id: int) -> HostStream:
        self.streams[device_id] = self.streams.get(device_id, 0) + 1
        return HostStream(next(self._handles))

    def allocate(self, device_id: int, nbytes: int) -> HostBuffer:
        self.allocations += 1
        self.buffers.append(HostBuffer(np.zeros(max(nbytes, 1), np.uint8)))
        return self.buffers[-1]

    def upload(self, buffer: HostBuffer, array: np.ndarray, stream: HostStream) -> None:
        assert array.nbytes <= buffer.nbytes
        self.copies["upload"] += 1
        ctypes.memmove(buffer.ptr, array.ctypes.data, array.nbytes)

    def download(
        self, buffer: HostBuffer, shape: tuple[int, ...], dtype: Any, stream: HostStream
    ) -> np.ndarray:
        self.copies["download"] += 1
        out = np.empty(shape, dtype)
        ctypes.memmove(out.ctypes.data, buffer.ptr, out.nbytes)
        return out

    def copy_in(self, buffer: HostBuffer, source: Any, stream: HostStream) -> None:
        """From a DeviceArray of the cupy stand-in, whose pointers are host addresses."""
        assert source.nbytes <= buffer.nbytes
        self.copies["copy_in"] += 1
        ctypes.memmove(buffer.ptr, source.pointer, source.nbytes)

    def download_device(
        self, buffer: HostBuffer, shape: tuple[int, ...], dtype: Any, stream: HostStream
    ) -> Any:
        """Into a DeviceArray of the cupy stand-in (which must be installed)."""
        from despina import DeviceArray

        self.copies["download_device"] += 1
        out = DeviceArray.from_host(np.empty(shape, dtype), device_id=0)
        ctypes.memmove(out.pointer, buffer.ptr, out.nbytes)
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
