"""A stateful test backend ("seqtoy") for the sequence batcher and ensembles.

OUTPUT = running sum of INPUT over a sequence. With an implicit state (input STATE_IN,
output STATE_OUT) the sum comes from the state the server keeps; without one the
instance keeps it itself, keyed by the CORRID control input. Every batch an instance
executes is recorded in ``SeqBackend.batches`` as (instance name, [inputs of each
request as lists]) so tests can see control tensors, padding and routing;
``SeqBackend.peak`` is the most executions that ran at once. ``model.seq``
holds optional JSON switches: ``delay_s`` (sleep per execution), ``fail_on`` (an INPUT
value answered with an error).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from despina.errors import InvalidArgument
from despina.inference.request import InferenceRequest, InferenceResponse
from despina.plugin.backend import Backend, InstanceSpec, ModelInstance
from despina.plugin.hookspecs import hookimpl


class SeqInstance(ModelInstance):
    def __init__(self, spec: InstanceSpec, behaviour: dict[str, Any]) -> None:
        self.spec = spec
        self.behaviour = behaviour
        self.sums: dict[Any, np.ndarray] = {}

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        SeqBackend.batches.append(
            (self.spec.name, [{k: _plain(v) for k, v in r.inputs.items()} for r in requests])
        )
        SeqBackend.running += 1
        SeqBackend.peak = max(SeqBackend.peak, SeqBackend.running)
        try:
            if self.behaviour.get("delay_s"):
                await asyncio.sleep(float(self.behaviour["delay_s"]))
        finally:
            SeqBackend.running -= 1
        responses = [self._one(request) for request in requests]
        for request, response in zip(requests, responses, strict=True):
            wanted = request.requested_output_names
            if wanted is not None:  # like real backends: only what was asked for
                response.outputs = {k: v for k, v in response.outputs.items() if k in wanted}
        return responses

    def _one(self, request: InferenceRequest) -> InferenceResponse:
        inputs = request.inputs
        value = inputs["INPUT"]
        if "fail_on" in self.behaviour and int(value.ravel()[0]) == self.behaviour["fail_on"]:
            return InferenceResponse(
                error=InvalidArgument(f"seqtoy refuses {self.behaviour['fail_on']}")
            )
        if "READY" in inputs and not bool(inputs["READY"].ravel()[0]):
            return InferenceResponse(outputs={"OUTPUT": np.zeros_like(value)})
        if "STATE_IN" in inputs:
            total = inputs["STATE_IN"] + value
            return InferenceResponse(outputs={"OUTPUT": total, "STATE_OUT": total})
        key = _plain(inputs["CORRID"]) if "CORRID" in inputs else request.correlation_id
        key = str(key)
        if "START" in inputs and float(inputs["START"].ravel()[0]) == 1.0:
            self.sums.pop(key, None)
        total = self.sums.get(key, np.zeros_like(value)) + value
        self.sums[key] = total
        return InferenceResponse(outputs={"OUTPUT": total})


def _plain(array: np.ndarray) -> Any:
    values = array.ravel().tolist()
    values = [v.decode() if isinstance(v, bytes) else v for v in values]
    return values[0] if len(values) == 1 else values


class SeqBackend(Backend):
    name = "seqtoy"
    default_model_filename = "model.seq"

    batches: list[tuple[str, list[dict[str, Any]]]] = []
    #: Executions running now, and the most that ever ran at once.
    running = 0
    peak = 0

    async def load(self) -> None:
        path = self.context.model_file
        text = path.read_text() if path.is_file() else ""
        self.behaviour = json.loads(text) if text.strip() else {}

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return SeqInstance(spec, self.behaviour)


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [SeqBackend]
