"""What an engine declares, read once through TensorRT's name-based I/O API into plain
records, so the config rules (:mod:`despina_backend_trt.config_rules`) are functions of
data and testable without TensorRT."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: TensorRT data type names -> config data types (Triton's ConvertTrtTypeToConfigDataType).
TRT_TO_CONFIG = {
    "FLOAT": "TYPE_FP32",
    "HALF": "TYPE_FP16",
    "INT8": "TYPE_INT8",
    "UINT8": "TYPE_UINT8",
    "BF16": "TYPE_BF16",
    "INT32": "TYPE_INT32",
    "INT64": "TYPE_INT64",
    "BOOL": "TYPE_BOOL",
}

#: (min, opt, max) of one input under one optimization profile.
Bounds = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class EngineTensor:
    """One I/O tensor: ``data_type`` is the config name (TYPE_INVALID for a type Triton's
    backend cannot exchange), ``shape`` has -1 for dynamic dimensions."""

    name: str
    is_input: bool
    data_type: str
    shape: tuple[int, ...]
    is_shape_tensor: bool = False
    linear_format: bool = True


@dataclass(frozen=True)
class EngineInfo:
    """The I/O tensors in engine order, and per optimization profile each input's bounds:
    dimensions for execution tensors, values for shape tensors."""

    tensors: tuple[EngineTensor, ...]
    profiles: tuple[dict[str, Bounds], ...] = field(default=())

    @property
    def inputs(self) -> list[EngineTensor]:
        return [t for t in self.tensors if t.is_input]

    @property
    def outputs(self) -> list[EngineTensor]:
        return [t for t in self.tensors if not t.is_input]

    def tensor(self, name: str) -> EngineTensor | None:
        return next((t for t in self.tensors if t.name == name), None)


def read_engine(trt: Any, engine: Any) -> EngineInfo:
    """An :class:`EngineInfo` of a deserialized ``ICudaEngine``."""
    tensors = []
    for index in range(engine.num_io_tensors):
        name = engine.get_tensor_name(index)
        tensors.append(
            EngineTensor(
                name,
                engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT,
                TRT_TO_CONFIG.get(engine.get_tensor_dtype(name).name, "TYPE_INVALID"),
                tuple(int(d) for d in engine.get_tensor_shape(name)),
                bool(engine.is_shape_inference_io(name)),
                engine.get_tensor_format(name) == trt.TensorFormat.LINEAR,
            )
        )
    profiles = []
    for profile in range(engine.num_optimization_profiles):
        bounds: dict[str, Bounds] = {}
        for tensor in tensors:
            if not tensor.is_input:
                continue
            if tensor.is_shape_tensor:
                values = engine.get_tensor_profile_values(tensor.name, profile)
            else:
                values = engine.get_tensor_profile_shape(tensor.name, profile)
            low, opt, high = (tuple(int(d) for d in v) for v in values)
            bounds[tensor.name] = (low, opt, high)
        profiles.append(bounds)
    return EngineInfo(tuple(tensors), tuple(profiles))
