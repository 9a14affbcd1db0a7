"""A tiny backend defined in the tests ("toy"), with config and request builders: OUTPUT0 = INPUT0 + INPUT1,
OUTPUT1 = INPUT0 - INPUT1. Files ``model.toy`` hold optional JSON behaviour switches
(delay_s, delay_by_value, raise, reject_negative, fail_load)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import numpy as np
from despina.errors import InvalidArgument
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.plugin.backend import Backend, InstanceSpec, ModelInstance
from despina.plugin.hookspecs import hookimpl


class ToyInstance(ModelInstance):
    def __init__(
        self, spec: InstanceSpec, behaviour: dict[str, object], log: list[tuple[str, int]]
    ) -> None:
        self.spec = spec
        self.behaviour = behaviour
        self.log = log

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        self.log.append((self.spec.name, len(requests)))
        ToyBackend.order.extend(r.id for r in requests)
        delay = float(self.behaviour.get("delay_s", 0))  # type: ignore[arg-type]
        if self.behaviour.get("delay_by_value"):  # sleep INPUT0's first value, in seconds
            delay = float(requests[0].inputs["INPUT0"].reshape(-1)[0])
        ToyBackend.active += 1
        ToyBackend.max_active = max(ToyBackend.max_active, ToyBackend.active)
        try:
            if delay:
                await asyncio.sleep(delay)
        finally:
            ToyBackend.active -= 1
        if self.behaviour.get("raise"):
            raise RuntimeError("toy model exploded")
        responses = []
        for request in requests:
            a, b = request.inputs["INPUT0"], request.inputs["INPUT1"]
            if a.dtype == np.object_:
                responses.append(InferenceResponse(outputs={"OUTPUT0": a, "OUTPUT1": b}))
                continue
            if np.any(a < 0) and self.behaviour.get("reject_negative"):
                responses.append(InferenceResponse(error=InvalidArgument("negative input")))
                continue
            with np.errstate(all="ignore"):  # inf - inf is nan, as a model computes it
                outputs = {"OUTPUT0": a + b, "OUTPUT1": a - b}
            responses.append(InferenceResponse(outputs=outputs))
        return responses


class ToyBackend(Backend):
    name = "toy"
    default_model_filename = "model.toy"

    executions: list[tuple[str, int]] = []
    #: Request ids in the order they were executed (all toy models of the process).
    order: list[str] = []
    #: Executions running now, and the most seen at once (reset by tests).
    active = 0
    max_active = 0

    async def auto_complete(self) -> None:
        config = self.context.config
        if not config.input:
            for name in ("INPUT0", "INPUT1"):
                tensor = config.input.add(name=name, data_type=11)  # TYPE_FP32
                tensor.dims.append(4)
        if not config.output:
            for name in ("OUTPUT0", "OUTPUT1"):
                tensor = config.output.add(name=name, data_type=11)
                tensor.dims.append(4)

    async def load(self) -> None:
        path = self.context.model_file
        text = path.read_text() if path.is_file() else ""
        self.behaviour = json.loads(text) if text.strip() else {}
        if self.behaviour.get("fail_load"):
            raise RuntimeError("toy model refuses to load")

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return ToyInstance(spec, self.behaviour, ToyBackend.executions)


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [ToyBackend]


TOY_CONFIG = """
backend: "toy"
max_batch_size: {mbs}
input [
  {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }}
]
{extra}
"""


def toy_config(mbs: int = 0, extra: str = "") -> str:
    """A toy model's config.pbtxt text."""
    return TOY_CONFIG.format(mbs=mbs, extra=extra)


def toy_request(
    model: str, batch: int | None = None, value: float = 1.0, **kwargs: object
) -> InferenceRequest:
    """INPUT0 = value, INPUT1 = 1, shape [4] or [batch, 4]."""
    shape = (4,) if batch is None else (batch, 4)
    return InferenceRequest(
        model,
        {
            "INPUT0": np.full(shape, value, np.float32),
            "INPUT1": np.ones(shape, np.float32),
        },
        **kwargs,  # type: ignore[arg-type]
    )
