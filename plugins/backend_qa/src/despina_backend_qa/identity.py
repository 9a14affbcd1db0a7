"""``identity``: every ``OUTPUT<i>`` is a copy of ``INPUT<i>`` (Triton's identity test
backend).

Config: inputs and outputs pair by index (``INPUT<i>`` / ``OUTPUT<i>``, same data type
and shape, checked at load). Parameters: ``execute_delay_ms`` (each execution sleeps that
long, holding its instance), ``instance_wise_delay_multiplier`` (with it, instance ``k``
in creation order sleeps ``execute_delay_ms * max(k * multiplier, 1)``) and
``creation_delay_sec`` (the load sleeps that long). An optional ``INPUT<i>`` left out of
a request gives a zero ``OUTPUT<i>`` of the config's shape (-1 as 1, batch dimension
prepended). Each response carries the parameters ``param0`` to ``param3`` that Triton's
identity backend attaches.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
from despina import (
    Backend,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelInstance,
    Unsupported,
    config_to_datatype,
    dtype_of,
)

from despina_backend_qa.config_rules import data_type, int_parameter, require, shape, shape_text

#: The response parameters Triton's identity backend sets on every response.
RESPONSE_PARAMETERS: dict[str, Any] = {
    "param0": "an example string parameter",
    "param1": 42,
    "param2": False,
    "param3": 123.123,
}


class IdentityBackend(Backend):
    """Loads after checking the INPUT<i>/OUTPUT<i> pairs; instances copy inputs."""

    name = "identity"

    async def load(self) -> None:
        config = self.context.config
        self.optional_zeros = _check_pairs(config.input, config.output)
        self.delay_ms = int_parameter(config, "execute_delay_ms")
        self.multiplier = (
            int_parameter(config, "instance_wise_delay_multiplier") if self.delay_ms else 0
        )
        self.batched = config.max_batch_size > 0
        self.outputs = [o.name for o in config.output]
        self._instance_ids = itertools.count()
        await asyncio.sleep(int_parameter(config, "creation_delay_sec"))

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        multiplier = self.multiplier * next(self._instance_ids) if self.multiplier else 0
        return IdentityInstance(self, self.delay_ms * max(multiplier, 1) / 1000)


class IdentityInstance(ModelInstance):
    """Sleeps the configured delay, then answers each request on its own."""

    def __init__(self, backend: IdentityBackend, delay_s: float) -> None:
        self.backend = backend
        self.delay_s = delay_s

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return [self._answer(request) for request in requests]

    def _answer(self, request: InferenceRequest) -> InferenceResponse:
        backend = self.backend
        names = request.requested_output_names or backend.outputs
        first = next(iter(request.inputs.values()), None)
        batch = first.shape[:1] if backend.batched and first is not None else ()
        outputs: dict[str, np.ndarray] = {}
        for name in names:
            index = name.removeprefix("OUTPUT")
            source = request.inputs.get(f"INPUT{index}")
            if source is not None:
                outputs[name] = source.copy()
            elif index in backend.optional_zeros:
                dtype, dims = backend.optional_zeros[index]
                outputs[name] = np.zeros((*batch, *dims), dtype)
            else:
                return InferenceResponse(error=Unsupported(f"failed to get input 'INPUT{index}'"))
        return InferenceResponse(outputs=outputs, parameters=dict(RESPONSE_PARAMETERS))


def _check_pairs(inputs: Sequence[Any], outputs: Sequence[Any]) -> dict[str, tuple[Any, list[int]]]:
    """Triton's checks of the pairs; returns the optional inputs' zero outputs by index
    (numpy dtype, dims with -1 as 1)."""
    require(
        len(inputs) == len(outputs),
        "model configuration must have equal input/output pairs",
    )
    by_index: dict[str, Any] = {}
    optional: dict[str, tuple[Any, list[int]]] = {}
    for tensor in inputs:
        require(
            tensor.name.startswith("INPUT"),
            f"expected input name to follow INPUT<index> pattern, got '{tensor.name}'",
        )
        index = tensor.name.removeprefix("INPUT")
        by_index[index] = tensor
        if tensor.optional:
            dtype = dtype_of(config_to_datatype(data_type(tensor)))
            optional[index] = (dtype, [1 if d == -1 else d for d in shape(tensor)])
    for tensor in outputs:
        require(
            tensor.name.startswith("OUTPUT"),
            f"expected output name to follow OUTPUT<index> pattern, got '{tensor.name}'",
        )
    for tensor in outputs:
        source = by_index.get(tensor.name.removeprefix("OUTPUT"))
        require(source is not None, "expected input and output indices to match")
        require(
            data_type(source) == data_type(tensor),
            "expected input and output datatype to match, got "
            f"{data_type(source)} and {data_type(tensor)}",
        )
        require(
            shape(source) == shape(tensor),
            "expected input and output shape to match, got "
            f"{shape_text(shape(source))} and {shape_text(shape(tensor))}",
        )
    return optional
