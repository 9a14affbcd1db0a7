"""``square`` (decoupled): ``IN`` = [n] INT32 is answered by n responses, each holding
``OUT`` = [n] (Triton's square test backend).

Parameters (integers): ``CUSTOM_INFER_DELAY_NS`` before each response,
``CUSTOM_OUTPUT_DELAY_NS`` after each output is made, ``CUSTOM_CANCEL_DELAY_NS`` instead
of the infer delay once the request is cancelled (no response follows, only the final
flag), ``CUSTOM_FAIL_COUNT`` (the last responses before the empty ones are errors,
"simulated failure") and ``CUSTOM_EMPTY_COUNT`` (the last responses are not sent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from despina import (
    Backend,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    InvalidArgument,
    ModelConfig,
    ModelInstance,
    Unknown,
)

from despina_backend_qa.config_rules import data_type, int_parameter, require, shape_text
from despina_backend_qa.responders import Responders


@dataclass(frozen=True)
class SquareParameters:
    """The config parameters, delays in seconds."""

    infer_delay_s: float
    output_delay_s: float
    cancel_delay_s: float
    fail_count: int
    empty_count: int

    @classmethod
    def of(cls, config: ModelConfig) -> SquareParameters:
        def seconds(key: str) -> float:
            return int_parameter(config, key) / 1e9

        return cls(
            seconds("CUSTOM_INFER_DELAY_NS"),
            seconds("CUSTOM_OUTPUT_DELAY_NS"),
            seconds("CUSTOM_CANCEL_DELAY_NS"),
            int_parameter(config, "CUSTOM_FAIL_COUNT"),
            int_parameter(config, "CUSTOM_EMPTY_COUNT"),
        )


class SquareBackend(Backend):
    """Checks the config as Triton's square backend does."""

    name = "square"

    async def load(self) -> None:
        config = self.context.config
        require(len(config.input) == 1, f"expected 1 input, got {len(config.input)}")
        require(len(config.output) == 1, f"expected 1 output, got {len(config.output)}")
        for tensor, name, place in (
            (config.input[0], "IN", "input"),
            (config.output[0], "OUT", "output"),
        ):
            require(
                tensor.name == name,
                f"expected first {place} tensor name to be {name}, got {tensor.name}",
            )
            require(
                list(tensor.dims) == [1],
                f"expected {name} shape to be [1], got {shape_text(tensor.dims)}",
            )
            require(
                data_type(tensor) == "TYPE_INT32",
                f"expected {name} datatype to be INT32, got {data_type(tensor)}",
            )
        self.parameters = SquareParameters.of(config)

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return SquareInstance(self.parameters)


class SquareInstance(Responders):
    def __init__(self, parameters: SquareParameters) -> None:
        super().__init__()
        self.parameters = parameters

    async def execute(self, requests: Sequence[InferenceRequest]) -> None:
        for request in requests:
            value = request.inputs["IN"]
            if value.ndim == 2 and value.shape[0] != 1:
                request.fail(InvalidArgument("unexpected shape for IN input"))
                continue
            self.start(_respond(request, int(value.ravel()[0]), value.ndim, self.parameters))
        return None


async def _respond(
    request: InferenceRequest, count: int, rank: int, parameters: SquareParameters
) -> None:
    for index in range(count):
        cancelled = request.cancelled
        delay = parameters.cancel_delay_s if cancelled else parameters.infer_delay_s
        await asyncio.sleep(delay)
        if cancelled:
            break
        left = count - index
        if left <= parameters.empty_count:
            continue
        response = InferenceResponse(outputs={"OUT": np.full((1,) * rank, count, np.int32)})
        await asyncio.sleep(parameters.output_delay_s)
        if left <= parameters.empty_count + parameters.fail_count:
            response = InferenceResponse(error=Unknown("simulated failure"))
        request.respond(response, final=False)
    assert request.stream is not None  # a submitted request
    request.stream.send(None, final=True)
