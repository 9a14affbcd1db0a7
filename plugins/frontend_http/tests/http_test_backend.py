"""An in-test backend ("httptest") for the HTTP frontend's tests.

Model parameter ``mode``: ``echo`` (default) answers ``OUTPUTn = INPUTn`` for every input,
``add_sub`` answers ``OUTPUT0 = INPUT0 + INPUT1`` and ``OUTPUT1 = INPUT0 - INPUT1``.
Parameter ``now: "true"`` makes the instance run requests at once (``runs_now``).
Request parameters whose names start with ``echo`` or ``x-`` come back as response
parameters, so tests can see what reached the model.
"""

from __future__ import annotations

from collections.abc import Sequence

from despina.inference.request import InferenceRequest, InferenceResponse
from despina.plugin.backend import Backend, InstanceSpec, ModelInstance
from despina.plugin.hookspecs import hookimpl


class HttpTestInstance(ModelInstance):
    def __init__(self, mode: str, now: bool) -> None:
        self.mode = mode
        self.now = now

    async def execute(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        return [self._one(r) for r in requests]

    @property
    def runs_now(self) -> bool:
        return self.now

    def execute_now(self, requests: Sequence[InferenceRequest]) -> list[InferenceResponse]:
        return [self._one(r) for r in requests]

    def _one(self, request: InferenceRequest) -> InferenceResponse:
        inputs = request.inputs
        if self.mode == "add_sub":
            a, b = inputs["INPUT0"], inputs["INPUT1"]
            outputs = {"OUTPUT0": a + b, "OUTPUT1": a - b}
        else:
            outputs = {name.replace("INPUT", "OUTPUT"): array for name, array in inputs.items()}
        params = {k: v for k, v in request.parameters.items() if k.startswith(("echo", "x-"))}
        return InferenceResponse(outputs=outputs, parameters=params)


class HttpTestBackend(Backend):
    name = "httptest"
    default_model_filename = "model.httptest"

    async def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        parameters = self.context.parameters
        return HttpTestInstance(parameters.get("mode", "echo"), parameters.get("now") == "true")


@hookimpl
def despina_backends() -> list[type[Backend]]:
    return [HttpTestBackend]


def config(
    dtype: str = "FP32",
    dims: str = "-1",
    max_batch_size: int = 0,
    mode: str = "echo",
    count: int = 2,
    extra: str = "",
) -> str:
    """A config.pbtxt text for the httptest backend: ``count`` inputs and outputs."""
    config_type = "TYPE_STRING" if dtype == "BYTES" else f"TYPE_{dtype}"
    tensors = {
        kind: ",".join(
            f'{{ name: "{kind.upper()}{i}" data_type: {config_type} dims: [ {dims} ] }}'
            for i in range(count)
        )
        for kind in ("input", "output")
    }
    return (
        f'backend: "httptest"\nmax_batch_size: {max_batch_size}\n'
        f"input [ {tensors['input']} ]\noutput [ {tensors['output']} ]\n"
        f'parameters {{ key: "mode" value {{ string_value: "{mode}" }} }}\n{extra}'
    )
