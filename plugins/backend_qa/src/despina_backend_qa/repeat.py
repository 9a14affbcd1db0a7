"""``repeat`` (decoupled): ``IN`` [n] INT32 is answered by n responses, response ``e``
holding ``OUT`` = [IN[e]] and ``IDX`` = [e], sent ``DELAY[e]`` ms after the one before;
``execute`` returns ``WAIT`` ms after it was called (Triton's repeat test backend). The
final flag follows the last response; an empty ``IN`` gives the final flag alone.
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
    InvalidArgument,
    ModelInstance,
)

from despina_backend_qa.config_rules import data_type, require, shape_text
from despina_backend_qa.responders import Responders

#: (name, config data type) of the inputs and outputs, in config order.
INPUTS = (("IN", "TYPE_INT32"), ("DELAY", "TYPE_UINT32"), ("WAIT", "TYPE_UINT32"))
OUTPUTS = (("OUT", "TYPE_INT32"), ("IDX", "TYPE_UINT32"))


class RepeatBackend(Backend):
    """Checks the config as Triton's repeat backend does."""

    name = "repeat"

    async def load(self) -> None:
        config = self.context.config
        require(
            config.max_batch_size == 0,
            "repeat backend only supports models with max_batch_size == 0",
        )
        require(len(config.input) == 3, f"expected 3 inputs, got {len(config.input)}")
        require(len(config.output) == 2, f"expected 2 outputs, got {len(config.output)}")
        tensors = [
            *zip(config.input, INPUTS, strict=True),
            *zip(config.output, OUTPUTS, strict=True),
        ]
        places = ("first input", "second input", "third input", "first output", "second output")
        for (tensor, (name, _)), place in zip(tensors, places, strict=True):
            require(
                tensor.name == name,
                f"expected {place} tensor name to be {name}, got {tensor.name}",
            )
        dims = {tensor.name: list(tensor.dims) for tensor, _ in tensors}
        require(
            len(dims["IN"]) == 1,
            f"expected IN shape to have one dimension, got {shape_text(dims['IN'])}",
        )
        require(
            dims["IN"] == dims["DELAY"],
            "expected IN and DELAY shape to match, got "
            f"{shape_text(dims['IN'])} and {shape_text(dims['DELAY'])}",
        )
        for name in ("WAIT", "OUT", "IDX"):
            require(
                dims[name] == [1],
                f"expected {name} shape to be [1], got {shape_text(dims[name])}",
            )
        for tensor, (name, wanted) in tensors:
            require(
                data_type(tensor) == wanted,
                f"expected {name} datatype to be {wanted.removeprefix('TYPE_')}, "
                f"got {data_type(tensor)}",
            )

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return RepeatInstance()


class RepeatInstance(Responders):
    async def execute(self, requests: Sequence[InferenceRequest]) -> None:
        if len(requests) > 1:
            raise InvalidArgument("repeat backend does not support batched request execution")
        wait_ms = 0
        for request in requests:
            wait_ms = self._process(request)
        await asyncio.sleep(wait_ms / 1000)
        return None

    def _process(self, request: InferenceRequest) -> int:
        """Start the request's responses; its WAIT in ms."""
        wait = request.inputs["WAIT"].ravel()
        if wait.size != 1:
            request.fail(InvalidArgument("unexpected size for WAIT input"))
            return 0
        values, delays = request.inputs["IN"], request.inputs["DELAY"]
        if values.shape != delays.shape:
            request.fail(
                InvalidArgument(
                    "expected IN and DELAY shape to match, got "
                    f"{shape_text(values.shape)} and {shape_text(delays.shape)}"
                )
            )
            return int(wait[0])
        self.start(_respond(request, values.ravel().tolist(), delays.ravel().tolist()))
        return int(wait[0])


async def _respond(request: InferenceRequest, values: list[int], delays: list[int]) -> None:
    for index, (value, delay_ms) in enumerate(zip(values, delays, strict=True)):
        await asyncio.sleep(delay_ms / 1000)
        outputs = {
            "OUT": np.array([value], np.int32),
            "IDX": np.array([index], np.uint32),
        }
        request.respond(InferenceResponse(outputs=outputs), final=False)
    assert request.stream is not None  # a submitted request
    request.stream.send(None, final=True)
