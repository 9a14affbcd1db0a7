"""What the test backends read of a model config: tensors by position, their data types
and shapes, and integer parameters; the checks fail a load with Triton's texts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from despina import InvalidArgument, ModelConfig, mc


def data_type(tensor: Any) -> str:
    """The config data type name of an input or output (``TYPE_INT32``)."""
    return str(mc.DataType.Name(tensor.data_type))


def shape(tensor: Any) -> list[int]:
    """An input's or output's shape as the backend sees it: ``reshape`` if given, else
    ``dims`` (without the batch dimension)."""
    if tensor.HasField("reshape"):
        return list(tensor.reshape.shape)
    return list(tensor.dims)


def shape_text(dims: Sequence[int]) -> str:
    """A shape as Triton's backend utilities print it: ``[1,2]``."""
    return "[" + ",".join(str(d) for d in dims) + "]"


def require(condition: bool, message: str) -> None:
    """Raise InvalidArgument(message) unless ``condition``."""
    if not condition:
        raise InvalidArgument(message)


def int_parameter(config: ModelConfig, key: str, default: int = 0) -> int:
    """The config parameter ``key`` as an integer (``default`` when absent)."""
    if key not in config.parameters:
        return default
    return int(config.parameters[key].string_value)
