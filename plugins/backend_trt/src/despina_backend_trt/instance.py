"""A TensorRT model instance: one CUDA stream, and one execution context per optimization
profile its instance group names (profile 0 when none), as in Triton.

Each batch picks the profile whose optimum is nearest to the batch's input shapes (the
Manhattan distance, among the profiles whose bounds hold them), sets the input shapes
(``set_input_shape``) and tensor addresses (``set_tensor_address``), runs
``execute_async_v3`` on the instance's stream and copies the requested outputs back.
Outputs whose engine shape has a dynamic dimension go through an output allocator, so
data-dependent shapes (known only after execution) work. Shape tensors are set and read
in host memory (:mod:`despina_backend_trt.shape_tensors`). Ragged inputs reach the engine
flat and batch inputs are generated per batch, bound like any input (their shapes choose
the profile too); scattered batch outputs are split by the source input's shapes
(:mod:`despina_backend_trt.batching`). Under the ``DEVICE_BLOCKING``
execution policy the instances of a model on one GPU share a lock they enqueue under.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from despina import (
    ConfigError,
    DeviceArray,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    Internal,
    InvalidArgument,
    ThreadedInstance,
    config_to_datatype,
    dtype_of,
    mc,
    to_host,
)

from despina_backend_trt.batching import EngineBatch
from despina_backend_trt.config_rules import profile_index
from despina_backend_trt.device_memory import DeviceBuffer, DeviceMemory, DeviceStream
from despina_backend_trt.engine_info import Bounds, EngineInfo
from despina_backend_trt.shape_tensors import (
    check_values,
    group_by_values,
    input_values,
    output_values,
)


@dataclass
class ProfileContext:
    """The execution context bound to one optimization profile."""

    name: str
    index: int
    context: Any
    bounds: dict[str, Bounds] = field(default_factory=dict)


def choose_profile(
    profiles: list[ProfileContext], shapes: dict[str, tuple[int, ...]]
) -> ProfileContext:
    """The profile nearest to ``shapes`` (Triton's GetMostOptimizedProfile); a single
    profile is taken as is (TensorRT then refuses shapes outside it)."""
    if len(profiles) == 1:
        return profiles[0]
    best, distance = None, -1
    for profile in profiles:
        current = _distance(profile.bounds, shapes)
        if current is not None and (best is None or current < distance):
            best, distance = profile, current
    if best is None:
        listed = "".join(f" {p.name}[{p.index}]" for p in profiles)
        raise InvalidArgument(
            f"failed to find any Optimization Profile among [{listed}] to support the "
            "requested dimensions (or shape values)"
        )
    return best


def _distance(bounds: dict[str, Bounds], shapes: dict[str, tuple[int, ...]]) -> int | None:
    total = 0
    for name, shape in shapes.items():
        if name not in bounds:
            continue
        low, opt, high = bounds[name]
        if len(shape) != len(high) or any(
            not lo <= d <= hi for d, lo, hi in zip(shape, low, high, strict=True)
        ):
            return None
        total += sum(abs(o - d) for d, o in zip(shape, opt, strict=True))
    return total


def make_output_allocator(trt: Any, device_memory: DeviceMemory, device_id: int) -> Any:
    """An ``IOutputAllocator`` keeping one growing buffer per output and the shapes
    TensorRT reports (``shapes``, set during ``execute_async_v3``)."""

    class OutputAllocator(trt.IOutputAllocator):  # type: ignore[misc]
        def __init__(self) -> None:
            trt.IOutputAllocator.__init__(self)
            self.buffers: dict[str, DeviceBuffer] = {}
            self.shapes: dict[str, tuple[int, ...]] = {}

        def reallocate_output(
            self, tensor_name: str, memory: int, size: int, alignment: int
        ) -> int:
            buffer = self.buffers.get(tensor_name)
            if buffer is None or buffer.nbytes < size:
                buffer = device_memory.allocate(device_id, size)
                self.buffers[tensor_name] = buffer
            return buffer.ptr

        def reallocate_output_async(
            self, tensor_name: str, memory: int, size: int, alignment: int, stream: int
        ) -> int:
            return self.reallocate_output(tensor_name, memory, size, alignment)

        def notify_shape(self, tensor_name: str, shape: Any) -> None:
            self.shapes[tensor_name] = tuple(int(d) for d in shape)

    return OutputAllocator()


class TrtInstance(ThreadedInstance):
    """Runs batches in its own thread on its own stream; one batch at a time. ``lock``:
    the GPU's enqueue lock under ``DEVICE_BLOCKING`` (None: ``BLOCKING``). It takes device
    inputs (copied device to device into its bindings) and answers device outputs where
    the batch takes them (copied out of its bindings device to device)."""

    device_inputs = True

    def __init__(
        self,
        spec: InstanceSpec,
        trt: Any,
        memory: DeviceMemory,
        info: EngineInfo,
        config: mc.ModelConfig,
        strategy: str,
        engine: Any,
        lock: threading.Lock | None = None,
    ) -> None:
        super().__init__(
            f"trt-{spec.name}", config.max_batch_size > 0, [o.name for o in config.output]
        )
        self.spec, self.memory, self.info, self.model = spec, memory, info, config.name
        self.dtypes = {t.name: dtype_of(config_to_datatype(t.data_type)) for t in info.tensors}
        self.engine = engine  # kept alive as long as its contexts
        self.lock = lock
        self.buffers: dict[str, DeviceBuffer] = {}
        #: Shape tensors' host memory, kept until the next batch.
        self.host: dict[str, np.ndarray] = {}
        self.shape_inputs = [t.name for t in info.inputs if t.is_shape_tensor]
        self.shape_outputs = [t.name for t in info.outputs if t.is_shape_tensor]
        self.ragged = EngineBatch.for_engine(config, self.shape_inputs if self.batched else ())
        #: Inputs whose first dimension is not the batch size (flat or generated).
        self.unbatched_inputs = {i.name for i in config.input if i.allow_ragged_batch}
        self.unbatched_inputs.update(n for b in config.batch_input for n in b.target_name)
        self.unbatched_inputs.update(self.shape_inputs)
        #: Outputs whose shape may be known only after execution.
        self.allocated = [t.name for t in info.outputs if -1 in t.shape and not t.is_shape_tensor]
        with memory.on_device(spec.device_id):
            self.stream: DeviceStream = memory.stream(spec.device_id)
            self.allocator = make_output_allocator(trt, memory, spec.device_id)
            group = config.instance_group[spec.group_index]
            names = list(group.profile) or ["0"]
            self.profiles: list[ProfileContext] = []
            for name in dict.fromkeys(names):
                self.profiles.append(self._context(trt, engine, name, strategy))

    def _context(self, trt: Any, engine: Any, name: str, strategy: str) -> ProfileContext:
        index = profile_index(name)
        count = len(self.info.profiles)
        if not 0 <= index < count:
            raise ConfigError(
                f"Can not set the specified optimization profile {name}[{index}] for "
                f"{self.spec.name}. Expected optimization profile index range 0-{count - 1}"
            )
        context = engine.create_execution_context(
            getattr(trt.ExecutionContextAllocationStrategy, strategy)
        )
        if context is None:
            raise Internal(f"unable to create TensorRT context for '{self.model}'")
        if index != 0 and not context.set_optimization_profile_async(index, self.stream.handle):
            raise ConfigError(
                f"Can not set the specified optimization profile {name}[{index}] for "
                f"{self.spec.name}. Expected optimization profile index range 0-{count - 1}"
            )
        self.stream.synchronize()
        for output in self.allocated:
            context.set_output_allocator(output, self.allocator)
        return ProfileContext(name, index, context, self.info.profiles[index])

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        """As ThreadedInstance, each group of requests whose shape tensors agree run as one
        batch (one group unless a scheduler batched differing values)."""
        groups = group_by_values(requests, self.shape_inputs) if self.shape_inputs else []
        if len(groups) <= 1:
            return await super().execute(requests)
        answered: dict[int, InferenceResponse] = {}
        for group in groups:
            for request, response in zip(group, await super().execute(group), strict=True):
                answered[id(request)] = response
        return [answered[id(request)] for request in requests]

    def run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        with self.memory.on_device(self.spec.device_id):
            return self._run(inputs, outputs)

    def _run(self, inputs: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
        for name in self.shape_inputs:  # TensorRT reads shape tensors' values on the host
            if name in inputs:
                inputs[name] = to_host(inputs[name])
        batch = self._batch(inputs)
        keys: dict[str, tuple[int, ...]] = {}
        for name, array in inputs.items():
            if name in self.shape_inputs:
                self.host[name] = input_values(array, self.dtypes[name])
                keys[name] = tuple(self.host[name].tolist())
            else:
                keys[name] = tuple(array.shape)
        profile = choose_profile(self.profiles, keys)
        download = (
            self.memory.download_device
            if self.outputs_may_stay_on_device()
            else self.memory.download
        )
        with self.lock or contextlib.nullcontext():
            shapes = self._enqueue(profile, inputs)
            results: dict[str, Any] = {}  # DeviceArrays only where the batch takes them
            for name in outputs:
                if name in self.shape_outputs:
                    continue
                allocated = name in self.allocated
                buffer = self.allocator.buffers[name] if allocated else self.buffers[name]
                results[name] = download(buffer, shapes[name], self.dtypes[name], self.stream)
        self.stream.synchronize()
        for name in outputs:
            if name in self.shape_outputs:
                results[name] = output_values(name, self.host[name], batch)
        return results

    def _batch(self, inputs: dict[str, np.ndarray]) -> int | None:
        """The batch size of a batching model, else None: a joined shape tensor's first
        value, or the first dimension of an input joined along it."""
        if not self.batched:
            return None
        for name in self.shape_inputs:
            if name in inputs:
                return int(inputs[name].reshape(-1)[0])
        tensor = next((a for n, a in inputs.items() if n not in self.unbatched_inputs), None)
        return int(tensor.shape[0]) if tensor is not None and tensor.ndim else 1

    def _enqueue(
        self, profile: ProfileContext, inputs: dict[str, np.ndarray]
    ) -> dict[str, tuple[int, ...]]:
        """Set the inputs and output addresses on ``profile``'s context and queue the
        execution; the output shapes known before it runs, then those it reported."""
        context = profile.context
        for name, array in inputs.items():
            if name in self.shape_inputs:
                self._set_shape_input(profile, name)
                continue
            if not context.set_input_shape(name, tuple(array.shape)):
                low, _, high = profile.bounds.get(name, ((), (), ()))
                raise InvalidArgument(
                    f"input '{name}' shape {list(array.shape)} is outside optimization profile "
                    f"{profile.name}[{profile.index}] (min {list(low)}, max {list(high)}) of "
                    f"model '{self.model}'"
                )
            if isinstance(array, DeviceArray):  # the core checked its dtype
                buffer = self._buffer(name, array.nbytes)
                self.memory.copy_in(buffer, array, self.stream)
            else:
                host = np.ascontiguousarray(array, dtype=self.dtypes[name])
                buffer = self._buffer(name, host.nbytes)
                self.memory.upload(buffer, host, self.stream)
            context.set_tensor_address(name, buffer.ptr)
        shapes: dict[str, tuple[int, ...]] = {}
        for tensor in self.info.outputs:
            if tensor.name in self.allocated:
                continue
            shape = tuple(int(d) for d in context.get_tensor_shape(tensor.name))
            if any(d < 0 for d in shape):
                raise Internal(
                    f"unable to get the shape of output '{tensor.name}' for {self.spec.name}"
                )
            shapes[tensor.name] = shape
            if tensor.is_shape_tensor:
                self.host[tensor.name] = np.zeros(shape, self.dtypes[tensor.name])
                address = self.host[tensor.name].ctypes.data
            else:
                nbytes = int(np.prod(shape, dtype=np.int64)) * self.dtypes[tensor.name].itemsize
                address = self._buffer(tensor.name, nbytes).ptr
            if not context.set_tensor_address(tensor.name, address):
                raise Internal(f"unable to set the address of output '{tensor.name}'")
        self.allocator.shapes.clear()
        self.mark_infer_start()
        if not context.execute_async_v3(self.stream.handle):
            raise Internal(f"unable to enqueue for inference {self.spec.name}")
        self.mark_infer_end()
        shapes.update(self.allocator.shapes)
        return shapes

    def _set_shape_input(self, profile: ProfileContext, name: str) -> None:
        """Give TensorRT a shape-tensor input: its own shape, and the host address of its
        values once they are checked against the profile's range."""
        values = self.host[name]
        check_values(name, values, profile.bounds[name])
        context = profile.context
        if not context.set_input_shape(name, values.shape) or not context.set_tensor_address(
            name, values.ctypes.data
        ):
            raise Internal(f"unable to set the values of shape tensor '{name}'")

    def _buffer(self, name: str, nbytes: int) -> DeviceBuffer:
        """The tensor's buffer, grown (reallocated) when ``nbytes`` exceeds it."""
        buffer = self.buffers.get(name)
        if buffer is None or buffer.nbytes < nbytes:
            buffer = self.memory.allocate(self.spec.device_id, nbytes)
            self.buffers[name] = buffer
        return buffer
