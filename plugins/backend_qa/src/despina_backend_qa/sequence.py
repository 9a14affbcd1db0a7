"""``sequence``: an accumulator per batch slot (Triton's sequence test backend).

Config: one INT32 vector input ``INPUT``, one INT32 output ``OUTPUT`` of the same shape,
and exactly the control inputs ``START`` and ``READY`` (checked at load); parameter
``execute_delay_ms``. Each instance keeps ``max(1, max_batch_size)`` accumulators; the
request at position r of a batch uses accumulator r. A ready request with START sets it
to the sum of ``INPUT``, without START adds that sum; ``OUTPUT`` is ``INPUT``'s shape
filled with the accumulator. A request that is not ready (a padding slot) gets a response
with no output. A batched request must hold one timestep (batch dimension 1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
from despina import (
    Backend,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelInstance,
    Unsupported,
)

from despina_backend_qa.config_rules import data_type, int_parameter, require

CONTROLS = "'START' and 'READY' must be configured as the control inputs"


class SequenceBackend(Backend):
    """Checks the config as Triton's sequence backend does."""

    name = "sequence"

    async def load(self) -> None:
        config = self.context.config
        self.delay_s = int_parameter(config, "execute_delay_ms") / 1000
        self.slots = max(1, config.max_batch_size)
        self.batched = config.max_batch_size > 0
        controls = sorted(c.name for c in config.sequence_batching.control_input)
        require(controls == ["READY", "START"], CONTROLS)
        require(
            len(config.input) == 1,
            "model must have input 'INPUT' with vector shape, any length",
        )
        tensor = config.input[0]
        require(
            len(tensor.dims) == 1,
            "model must have one input 'INPUT' with vector shape, any length",
        )
        require(data_type(tensor) == "TYPE_INT32", "model input must have TYPE_INT32 data-type")
        require(tensor.name == "INPUT", "model input must be named 'INPUT'")
        require(
            len(config.output) == 1,
            "model must have one output 'OUTPUT' with vector shape, any length",
        )
        output = config.output[0]
        require(
            list(output.dims) == list(tensor.dims),
            "model must have output 'OUTPUT' with shape matching 'INPUT'",
        )
        require(data_type(output) == "TYPE_INT32", "model output must have TYPE_INT32 data-type")
        require(output.name == "OUTPUT", "model output must be named 'OUTPUT'")

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return SequenceInstance(self)


class SequenceInstance(ModelInstance):
    def __init__(self, backend: SequenceBackend) -> None:
        self.backend = backend
        self.accumulators = [0] * backend.slots

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        if len(requests) > self.backend.slots:
            raise Unsupported("unable to execute batch larger than max-batch-size")
        if self.backend.delay_s:
            await asyncio.sleep(self.backend.delay_s)
        return [self._step(slot, request) for slot, request in enumerate(requests)]

    def _step(self, slot: int, request: InferenceRequest) -> InferenceResponse:
        values = request.inputs["INPUT"]
        if self.backend.batched and values.ndim > 0 and values.shape[0] != 1:
            return InferenceResponse(
                error=Unsupported("unable to execute more than one timestep at a time")
            )
        if not _flag(request, "READY"):
            return InferenceResponse()
        total = int(values.astype(np.int64).sum())
        base = 0 if _flag(request, "START") else self.accumulators[slot]
        self.accumulators[slot] = _int32(base + total)
        return InferenceResponse(
            outputs={"OUTPUT": np.full(values.shape, self.accumulators[slot], np.int32)}
        )


def _flag(request: InferenceRequest, name: str) -> bool:
    return bool(request.inputs[name].ravel()[0])


def _int32(value: int) -> int:
    """``value`` wrapped to int32, as the C++ accumulator wraps."""
    return (value + 2**31) % 2**32 - 2**31
