"""Inference requests: :class:`InferenceRequest` (Triton's dataclass) and the Despina
request it becomes."""

from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass, field
from typing import Any

import despina

from tritonserver._errors import InvalidArgumentError, TritonError
from tritonserver._model_ref import ModelRef
from tritonserver._tensor import DeviceOrMemoryType, Tensor, check_host

#: The request parameter types Triton takes (by exact type: a bool is not an int here).
_PARAMETER_TYPES = (str, int, float, bool)


@dataclass
class InferenceRequest:
    """A request to ``model``: ``inputs`` by name (Tensors, numpy arrays, lists, or any
    DLPack-exporting object), ``parameters`` (str, int, float or bool values),
    ``timeout`` in microseconds, ``flags`` (sequence start 1, end 2), and where responses
    also go (``response_queue``: a queue.SimpleQueue for ``infer``, an asyncio.Queue for
    ``async_infer``)."""

    model: ModelRef
    request_id: str | None = None
    flags: int = 0
    correlation_id: int | str | None = None
    priority: int = 0
    timeout: int = 0
    inputs: dict[str, Tensor | Any] = field(default_factory=dict)
    parameters: dict[str, str | int | bool | float] = field(default_factory=dict)
    output_memory_type: DeviceOrMemoryType | None = None
    response_queue: queue.SimpleQueue[Any] | asyncio.Queue[Any] | None = None

    def _to_despina(self) -> despina.InferenceRequest:
        """The Despina request (inputs without a copy where they are host arrays);
        InvalidArgumentError for a parameter, input or output memory type it cannot take."""
        for key, value in self.parameters.items():
            if type(value) not in _PARAMETER_TYPES:
                raise InvalidArgumentError(
                    f"Value type {type(value)} of request parameter '{key}' not supported"
                )
        if self.output_memory_type is not None:
            try:
                check_host(self.output_memory_type)
            except TritonError as exc:
                raise InvalidArgumentError(
                    f"Memory type {self.output_memory_type} not supported: {exc}"
                ) from None
        inputs = {
            name: Tensor._from_object(value)._to_numpy() for name, value in self.inputs.items()
        }
        version = self.model.version
        return despina.InferenceRequest(
            model_name=self.model.name,
            inputs=inputs,
            model_version="" if version < 0 else str(version),
            id=self.request_id or "",
            parameters=dict(self.parameters),
            priority=self.priority,
            timeout_us=self.timeout,
            correlation_id=0 if self.correlation_id is None else self.correlation_id,
            flags=despina.SequenceFlags(self.flags & 3),
        )
