"""A test backend ("enstoy") of small FP32 models to compose into ensembles.

``model.ens`` holds JSON ``{"op": ..., "delay_s": seconds to sleep per execution}``:
- ``double``: OUT = 2 * IN;  ``neg``: OUT = -IN;  ``check``: OUT = IN, or the error
  "negative input" when IN has a negative element;
- ``add``: SUM = A + B, DIFF = A - B;
- ``pass``: OUTPUT<n> = INPUT<n> for each INPUT<n> the request carries (its inputs are
  optional; an output whose input was left out is left out too);
- ``split`` (a decoupled model): one response per element x of IN, OUT = [x, x, x, x].

Every execution records (model, inputs, outputs) with the very array objects in
``EnsBackend.calls`` so tests can check that tensors travel between steps uncopied.
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


class EnsInstance(ModelInstance):
    def __init__(self, model: str, op: str, delay_s: float) -> None:
        self.model = model
        self.op = op
        self.delay_s = delay_s

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse] | None:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.op == "split":
            for request in requests:
                for x in request.inputs["IN"].ravel():
                    request.respond(
                        InferenceResponse(outputs={"OUT": np.full(4, x, np.float32)}), final=False
                    )
                assert request.stream is not None
                request.stream.send(None, final=True)
            return None
        return [self._one(request) for request in requests]

    def _one(self, request: InferenceRequest) -> InferenceResponse:
        inputs = request.inputs
        outputs: dict[str, np.ndarray]
        if self.op == "add":
            outputs = {"SUM": inputs["A"] + inputs["B"], "DIFF": inputs["A"] - inputs["B"]}
        elif self.op == "pass":
            outputs = {name.replace("INPUT", "OUTPUT"): array for name, array in inputs.items()}
        elif self.op == "check" and np.any(inputs["IN"] < 0):
            return InferenceResponse(error=InvalidArgument("negative input"))
        else:
            factor = {"double": 2, "neg": -1, "check": 1}[self.op]
            outputs = {"OUT": inputs["IN"] * np.float32(factor)}
        EnsBackend.calls.append((self.model, dict(inputs), outputs))
        return InferenceResponse(outputs=outputs)


class EnsBackend(Backend):
    name = "enstoy"
    default_model_filename = "model.ens"

    calls: list[tuple[str, dict[str, np.ndarray], dict[str, Any]]] = []

    async def load(self) -> None:
        settings = json.loads(self.context.model_file.read_text())
        self.op = str(settings["op"])
        self.delay_s = float(settings.get("delay_s", 0))

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return EnsInstance(self.context.name, self.op, self.delay_s)


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [EnsBackend]
